// The stats files (collectives/nccl/src/stats_writer.h): their record of how the plugin was set up
// (the "settings" line of the .jsonl and the info metrics of the .prom, from a known configuration, and
// settings_of's reading of a PluginConfig); the textfile as Prometheus reads it (one prefix, counters
// ending in _total, histograms with cumulative buckets); the files' names and the .prom's removal.
#include "stats_writer.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "config.h"
#include "transport.h"

namespace megascale::nccl {
namespace {

const char* const kAutoWhy =
    "6 usable CPUs / 1 local rank = 6 each, 2 left to NCCL: 4 wires x (1 + 0 I/O threads)";

// A configuration as load_plugin_config leaves it with nothing set but MEGASCALE_TC.
PluginConfig known_config() {
  PluginConfig c;
  c.layout.wires = 4;
  c.layout.io_threads = 0;
  c.layout.lanes = 4;
  c.layout.stripes = 2;
  c.layout.stripe_bytes = 524288;
  c.settings = {{"MEGASCALE_CC", "hybrid", "default", "preset hybrid"},
                {"MEGASCALE_LAYOUT", c.layout.text(), "default", std::string("auto: ") + kAutoWhy},
                {"MEGASCALE_TC", "say \"hi\" \\ now", "environment", ""}};
  return c;
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// One sample line of a Prometheus textfile: its name, labels in order, and value.
struct Sample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;
  std::string label(const std::string& key) const {
    for (const auto& [k, v] : labels)
      if (k == key) return v;
    return "";
  }
  // The labels other than `le`, as one text (the series a histogram's buckets belong to).
  std::string series() const {
    std::string out;
    for (const auto& [k, v] : labels)
      if (k != "le") out += k + "=" + v + ",";
    return out;
  }
};

struct PromText {
  std::map<std::string, std::string> types;  // family -> counter, gauge, histogram
  std::vector<Sample> samples;
};

// Parses the text exposition format as node_exporter's textfile collector reads it; a line it cannot
// read fails the test naming it.
PromText parse_prom(const std::string& path) {
  PromText p;
  for (const std::string& line : lines_of(path)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream in(line.substr(7));
      std::string name, type;
      in >> name >> type;
      EXPECT_TRUE(p.types.emplace(name, type).second) << "two TYPE lines for " << name;
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    Sample s;
    size_t i = line.find_first_of("{ ");
    s.name = line.substr(0, i);
    if (i != std::string::npos && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        const size_t eq = line.find('=', i);
        EXPECT_NE(eq, std::string::npos) << line;
        if (eq == std::string::npos) return p;
        std::string key = line.substr(i, eq - i), value;
        i = eq + 2;  // past ="
        for (; i < line.size() && line[i] != '"'; ++i) {
          if (line[i] == '\\' && i + 1 < line.size()) ++i;
          value.push_back(line[i]);
        }
        s.labels.emplace_back(key, value);
        i += 1;  // past the closing quote
        if (i < line.size() && line[i] == ',') ++i;
      }
      ++i;  // past }
    }
    char* end = nullptr;
    const std::string number = line.substr(i + 1);
    s.value = std::strtod(number.c_str(), &end);
    EXPECT_TRUE(end != number.c_str() && *end == '\0') << "not a sample line: " << line;
    p.samples.push_back(std::move(s));
  }
  return p;
}

size_t count_of(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// What every textfile must be: each name carries the prefix once; each sample belongs to a family with a
// TYPE (a histogram's as _bucket, _sum, _count); counters end in _total; and each histogram series has
// the fixed buckets in order, counts that never decrease, and le="+Inf" equal to its _count.
void expect_well_formed(const PromText& p) {
  for (const auto& [name, type] : p.types) {
    EXPECT_EQ(name.rfind("megascale_nccl_", 0), 0u) << name;
    EXPECT_EQ(count_of(name, "megascale_"), 1u) << name;
    EXPECT_EQ(count_of(name, "nccl_"), 1u) << name;
    EXPECT_EQ(name.ends_with("_total"), type == "counter") << name << " is a " << type;
  }
  const std::vector<TimeNs>& edges = prom_bucket_edges_ns();
  std::map<std::string, std::vector<const Sample*>> buckets;  // family + series -> its _bucket lines
  std::map<std::string, double> counts, sums;
  for (const Sample& s : p.samples) {
    std::string family = s.name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      if (s.name.ends_with(suffix) && p.types.count(s.name.substr(0, s.name.size() - std::strlen(suffix))))
        family = s.name.substr(0, s.name.size() - std::strlen(suffix));
    }
    ASSERT_TRUE(p.types.count(family)) << "no TYPE for " << s.name;
    if (p.types.at(family) != "histogram") continue;
    const std::string key = family + "|" + s.series();
    if (s.name.ends_with("_bucket")) buckets[key].push_back(&s);
    if (s.name.ends_with("_count")) counts[key] = s.value;
    if (s.name.ends_with("_sum")) sums[key] = s.value;
  }
  for (const auto& [key, lines] : buckets) {
    ASSERT_EQ(lines.size(), edges.size() + 1) << key;
    for (size_t i = 0; i < edges.size(); ++i) {
      EXPECT_DOUBLE_EQ(std::strtod(lines[i]->label("le").c_str(), nullptr),
                       static_cast<double>(edges[i]) / 1e9)
          << key;
      if (i > 0) {
        EXPECT_GE(lines[i]->value, lines[i - 1]->value) << key << " le " << lines[i]->label("le");
      }
    }
    EXPECT_EQ(lines.back()->label("le"), "+Inf") << key;
    EXPECT_GE(lines.back()->value, lines[edges.size() - 1]->value) << key;
    ASSERT_TRUE(counts.count(key)) << "no _count for " << key;
    EXPECT_EQ(lines.back()->value, counts[key]) << key;
    EXPECT_TRUE(sums.count(key)) << "no _sum for " << key;
  }
  EXPECT_EQ(buckets.size(), counts.size());
}

// The value of the sample `name` whose labels include every (key, value) of `with`; NaN when none.
double value_of(const PromText& p, const std::string& name,
                const std::vector<std::pair<std::string, std::string>>& with) {
  for (const Sample& s : p.samples) {
    if (s.name != name) continue;
    bool all = true;
    for (const auto& [k, v] : with) all = all && s.label(k) == v;
    if (all) return s.value;
  }
  return std::nan("");
}

class StatsDir : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/stats_writer_test.XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST(SettingsOf, KeepsEachSettingInTableOrder) {
  const PluginSettings p = settings_of(known_config());
  ASSERT_EQ(p.settings.size(), 3u);
  EXPECT_EQ(p.settings[0].name, "MEGASCALE_CC");
  EXPECT_EQ(p.settings[0].value, "hybrid");
  EXPECT_EQ(p.settings[0].source, "default");
  EXPECT_EQ(p.settings[1].value, "wires=4,io_threads=0,lanes=4,stripes=2,stripe_bytes=524288");
  EXPECT_EQ(p.settings[2].name, "MEGASCALE_TC");
  EXPECT_EQ(p.settings[2].value, "say \"hi\" \\ now");
  EXPECT_EQ(p.settings[2].source, "environment");
}

TEST(SettingsOf, LayoutFromTheFieldsAndTheRuleWhenNothingWasSet) {
  const LayoutRecord l = settings_of(known_config()).layout;
  EXPECT_EQ(l.wires, 4u);
  EXPECT_EQ(l.io_threads, 0u);
  EXPECT_EQ(l.lanes, 4u);
  EXPECT_EQ(l.stripes, 2u);
  EXPECT_EQ(l.stripe_bytes, 524288u);
  EXPECT_EQ(l.source, std::string("auto: ") + kAutoWhy);
}

TEST(SettingsOf, LayoutTheUserSetIsFromTheEnvironment) {
  const std::map<std::string, std::string> vars = {{"MEGASCALE_LAYOUT", "wires=2,io_threads=3,lanes=3"}};
  auto c = load_plugin_config([&](const char* n) -> const char* {
    auto it = vars.find(n);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
  ASSERT_TRUE(c) << c.error().message;
  const PluginSettings p = settings_of(*c);
  EXPECT_EQ(p.layout.wires, 2u);
  EXPECT_EQ(p.layout.io_threads, 3u);
  EXPECT_EQ(p.layout.lanes, 3u);
  EXPECT_EQ(p.layout.source, "environment");
  // Every knob the plugin echoes is a setting, each with a source.
  ASSERT_EQ(p.settings.size(), c->settings.size());
  for (const Setting& r : p.settings) {
    EXPECT_EQ(r.name.rfind("MEGASCALE_", 0), 0u) << r.name;
    EXPECT_TRUE(r.source == "environment" || r.source == "default") << r.name << ": " << r.source;
  }
}

TEST_F(StatsDir, JsonlOpensWithTheSettingsRecord) {
  StatsWriter w;
  w.configure(dir_, 1'000'000'000, settings_of(known_config()));
  const std::vector<std::string> lines = lines_of(w.jsonl_path());
  ASSERT_EQ(lines.size(), 1u);
  const nlohmann::json j = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(j["event"], "settings");
  EXPECT_EQ(j["host"], host_name());
  EXPECT_EQ(j["pid"], static_cast<int64_t>(::getpid()));
  EXPECT_EQ(j["settings"]["MEGASCALE_CC"],
            nlohmann::json({{"value", "hybrid"}, {"source", "default"}, {"note", "preset hybrid"}}));
  EXPECT_EQ(j["settings"]["MEGASCALE_TC"],
            nlohmann::json({{"value", "say \"hi\" \\ now"}, {"source", "environment"}}));
  EXPECT_EQ(j["settings"].size(), 3u);
  const nlohmann::json layout = {
      {"wires", 4},   {"io_threads", 0},        {"lanes", 4},
      {"stripes", 2}, {"stripe_bytes", 524288}, {"source", std::string("auto: ") + kAutoWhy}};
  EXPECT_EQ(j["layout"], layout);
}

TEST_F(StatsDir, PromCarriesTheSettingsAndTheLayoutAsInfoMetrics) {
  StatsWriter w;
  w.configure(dir_, 1'000'000'000, settings_of(known_config()));
  std::vector<std::string> samples;  // the info metrics' sample lines, in order
  for (const std::string& line : lines_of(w.prom_path())) {
    if (line.rfind("megascale_nccl_setting_info", 0) == 0 || line.rfind("megascale_nccl_layout_info", 0) == 0)
      samples.push_back(line);
  }
  const std::vector<std::string> want = {
      R"x(megascale_nccl_setting_info{name="MEGASCALE_CC",value="hybrid",source="default"} 1)x",
      R"x(megascale_nccl_setting_info{name="MEGASCALE_LAYOUT",value="wires=4,io_threads=0,lanes=4,stripes=2,stripe_bytes=524288",source="default"} 1)x",
      R"x(megascale_nccl_setting_info{name="MEGASCALE_TC",value="say \"hi\" \\ now",source="environment"} 1)x",
      R"x(megascale_nccl_layout_info{wires="4",io_threads="0",lanes="4",stripes="2",stripe_bytes="524288",source="auto"} 1)x",
  };
  EXPECT_EQ(samples, want);
  const std::string text = [&] {
    std::ifstream in(w.prom_path());
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }();
  EXPECT_NE(text.find("# TYPE megascale_nccl_setting_info gauge\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE megascale_nccl_layout_info gauge\n"), std::string::npos);
}

TEST_F(StatsDir, EmptyDirWritesNothing) {
  StatsWriter w;
  w.configure("", 1'000'000'000, settings_of(known_config()));
  EXPECT_FALSE(w.enabled());
  EXPECT_TRUE(std::filesystem::is_empty(dir_));
}

// A wire on loopback that carries no connection: enough for a comm's snapshot (the engine no longer
// knows its connection) and for the wire counters.
std::unique_ptr<DeviceWire> loopback_wire() {
  wire::UdpConfig cfg;
  cfg.bind_host = "127.0.0.1";
  auto udp = wire::UdpWire::create(cfg);
  EXPECT_TRUE(udp) << udp.error().message;
  if (!udp) return nullptr;
  return std::make_unique<DeviceWire>(0, 0, 0, std::move(*udp), kNsPerSec, 0);
}

// A send comm on `wire` whose requests took these times, each split into four equal phases.
std::unique_ptr<CommBase> send_comm(DeviceWire* wire, const std::vector<TimeNs>& latencies_ns) {
  auto c = std::make_unique<CommBase>(kSendMagic, Role::kSend, 4, std::vector<Stripe>{{wire, 0}}, 0);
  c->ifname = "lo";
  c->peer = "127.0.0.1:9";
  c->update([&](CommBase::Counters& n) {
    for (TimeNs t : latencies_ns) {
      n.request_latency.add(t);
      for (int p = 0; p < CommBase::kPhases; ++p) n.phases[p].add(t / 4);
      ++n.completed;
    }
  });
  return c;
}

TEST(PromBuckets, EachEdgeEndsAnEngineBucketSoTheCountsAreExact) {
  const std::vector<TimeNs>& edges = prom_bucket_edges_ns();
  ASSERT_EQ(edges.size(), 28u);
  EXPECT_EQ(edges.front(), 127);
  EXPECT_EQ(edges.back(), (TimeNs{1} << 34) - 1);  // 17.2 s
  for (size_t i = 0; i < edges.size(); ++i) {
    if (i > 0) {
      EXPECT_GT(edges[i], edges[i - 1]);
    }
    const int b = engine::RttHistogram::bucket_of(edges[i]);
    EXPECT_EQ(engine::RttHistogram::bucket_upper_ns(b), edges[i]) << edges[i];
  }
}

TEST(StatsIdentity, TheLaunchersRankElseProc) {
  const auto from = [](std::map<std::string, std::string> vars) {
    return stats_identity([&](const char* n) -> const char* {
      auto it = vars.find(n);
      return it == vars.end() ? nullptr : it->second.c_str();
    });
  };
  EXPECT_EQ(from({}), "proc");
  EXPECT_EQ(from({{"RANK", "5"}}), "rank5");
  EXPECT_EQ(from({{"OMPI_COMM_WORLD_RANK", "12"}}), "rank12");
  EXPECT_EQ(from({{"PMI_RANK", "3"}, {"SLURM_PROCID", "9"}}), "rank3");
  EXPECT_EQ(from({{"RANK", "x"}, {"SLURM_PROCID", "7"}}), "rank7");  // not a number: the next
  EXPECT_EQ(from({{"RANK", "-1"}, {"PMIX_RANK", ""}}), "proc");
}

TEST_F(StatsDir, FilesAreNamedByRankWithoutThePidAndTheTextfileGoesWithTheWriter) {
  const std::string stem = dir_ + "/megascale-nccl-" + host_name() + "-";
  std::string jsonl, prom;
  {
    StatsWriter w;
    w.configure(dir_, kNsPerSec, settings_of(known_config()), "rank3");
    jsonl = w.jsonl_path();
    prom = w.prom_path();
    EXPECT_EQ(jsonl, stem + "rank3.jsonl");
    EXPECT_EQ(prom, stem + "rank3.prom");
    EXPECT_TRUE(std::filesystem::exists(prom));
    // A second live process of the same rank (a second writer here: its lock is its own) takes the
    // next name.
    StatsWriter again;
    again.configure(dir_, kNsPerSec, settings_of(known_config()), "rank3");
    EXPECT_EQ(again.prom_path(), stem + "rank3-1.prom");
  }
  EXPECT_FALSE(std::filesystem::exists(prom)) << "the textfile outlived its writer";
  EXPECT_FALSE(std::filesystem::exists(stem + "rank3-1.prom"));
  EXPECT_FALSE(std::filesystem::exists(prom + ".tmp"));
  // The JSON lines are a log: they stay, and the next process of the rank appends its part.
  ASSERT_TRUE(std::filesystem::exists(jsonl));
  {
    StatsWriter next;
    next.configure(dir_, kNsPerSec, settings_of(known_config()), "rank3");
    EXPECT_EQ(next.jsonl_path(), jsonl);
  }
  size_t settings = 0;
  for (const std::string& line : lines_of(jsonl))
    settings += nlohmann::json::parse(line)["event"] == "settings";
  EXPECT_EQ(settings, 2u);
  for (const auto& e : std::filesystem::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(std::to_string(::getpid())), std::string::npos) << e.path();
}

TEST_F(StatsDir, KeptTextfileIsTheLastOneMarkedNotUp) {
  std::string prom;
  {
    StatsWriter w;
    w.configure(dir_, kNsPerSec, settings_of(known_config()), "rank1", /*keep_prom=*/true);
    prom = w.prom_path();
    EXPECT_EQ(value_of(parse_prom(prom), "megascale_nccl_up", {}), 1);
  }
  ASSERT_TRUE(std::filesystem::exists(prom));
  const PromText p = parse_prom(prom);
  expect_well_formed(p);
  EXPECT_EQ(value_of(p, "megascale_nccl_up", {}), 0);
  EXPECT_FALSE(std::isnan(value_of(p, "megascale_nccl_layout_info", {{"source", "auto"}})));
}

TEST_F(StatsDir, WithoutARankProcessesTakeTheLowestFreeNumber) {
  const std::string stem = dir_ + "/megascale-nccl-" + host_name() + "-";
  auto a = std::make_unique<StatsWriter>(), b = std::make_unique<StatsWriter>();
  a->configure(dir_, kNsPerSec, {}, "proc");
  b->configure(dir_, kNsPerSec, {}, "proc");
  EXPECT_EQ(a->prom_path(), stem + "proc0.prom");
  EXPECT_EQ(b->prom_path(), stem + "proc1.prom");
  a.reset();
  StatsWriter c;
  c.configure(dir_, kNsPerSec, {}, "proc");
  EXPECT_EQ(c.prom_path(), stem + "proc0.prom");
}

TEST_F(StatsDir, AForkedChildLeavesItsParentsTextfile) {
  auto w = std::make_unique<StatsWriter>();
  w->configure(dir_, kNsPerSec, {}, "rank0");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    w.reset();
    std::_Exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(std::filesystem::exists(w->prom_path()));
}

TEST_F(StatsDir, TextfileHasOnePrefixCountersTotalAndCumulativeHistograms) {
  std::unique_ptr<DeviceWire> wire = loopback_wire();
  ASSERT_NE(wire, nullptr);
  StatsWriter w;
  w.configure(dir_, kNsPerSec, settings_of(known_config()), "rank0");
  w.add_wire(wire.get(), "lo");
  // Message times of 500 ns, 20 us, 3 ms and 2 s.
  std::unique_ptr<CommBase> comm = send_comm(wire.get(), {500, 20'000, 3'000'000, 2'000'000'000});
  w.add(comm.get());
  w.flush(1);
  PromText p = parse_prom(w.prom_path());
  expect_well_formed(p);
  EXPECT_EQ(p.types["megascale_nccl_request_latency_seconds"], "histogram");
  EXPECT_EQ(p.types["megascale_nccl_request_phase_seconds"], "histogram");
  EXPECT_EQ(p.types["megascale_nccl_rtt_seconds"], "histogram");
  EXPECT_EQ(p.types["megascale_nccl_wire_send_syscalls_total"], "counter");
  EXPECT_EQ(p.types["megascale_nccl_snapshot_timestamp_seconds"], "gauge");
  EXPECT_EQ(p.types.count("megascale_nccl_requests_completed_total"), 1u);
  EXPECT_EQ(p.types.count("megascale_nccl_post_call_seconds_total"), 1u);
  for (const auto& [name, type] : p.types) EXPECT_EQ(name.find("_p50"), std::string::npos) << name;
  const std::string hist = "megascale_nccl_request_latency_seconds";
  const std::vector<std::pair<std::string, std::string>> send = {{"ifname", "lo"}, {"role", "send"}};
  const auto bucket = [&](const PromText& t, const char* le) {
    auto labels = send;
    labels.emplace_back("le", le);
    return value_of(t, hist + "_bucket", labels);
  };
  EXPECT_EQ(bucket(p, "1.27e-07"), 0);
  EXPECT_EQ(bucket(p, "5.11e-07"), 1);    // 500 ns
  EXPECT_EQ(bucket(p, "3.2767e-05"), 2);  // and 20 us
  EXPECT_EQ(bucket(p, "0.004194303"), 3);
  EXPECT_EQ(bucket(p, "2.147483647"), 4);
  EXPECT_EQ(bucket(p, "+Inf"), 4);
  EXPECT_NEAR(value_of(p, hist + "_sum", send), 2.0030205, 1e-9);
  EXPECT_EQ(value_of(p, "megascale_nccl_request_phase_seconds_count",
                     {{"ifname", "lo"}, {"role", "send"}, {"phase", "ack"}}),
            4);
  // Once the comm closes, its samples stay in the histogram: its counts never go down.
  w.remove(comm.get());
  p = parse_prom(w.prom_path());
  expect_well_formed(p);
  EXPECT_EQ(bucket(p, "+Inf"), 4);
  EXPECT_EQ(bucket(p, "5.11e-07"), 1);
  std::unique_ptr<CommBase> later = send_comm(wire.get(), {1'000});
  w.add(later.get());
  w.flush(2);
  p = parse_prom(w.prom_path());
  expect_well_formed(p);
  EXPECT_EQ(bucket(p, "+Inf"), 5);
  EXPECT_EQ(bucket(p, "1.023e-06"), 2);
  w.remove(later.get());
  w.remove_wire(wire.get());
}

}  // namespace
}  // namespace megascale::nccl
