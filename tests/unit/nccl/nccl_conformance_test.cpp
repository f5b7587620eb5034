// The MegaScale NCCL net plugin through the conformance harness (tools/plugin-conformance): the
// built libnccl-net-megascale.so is loaded with dlopen as NCCL loads it and driven through NCCL's call
// patterns on loopback, one test per harness case; the older ABI tables (v8..v11) through the basic
// cases; and, in fresh processes (the plugin reads its environment once), a bad MEGASCALE_* value
// failing init with a message naming it, the stats files MEGASCALE_STATS_DIR asks for, and the request
// timeline MEGASCALE_TRACE_FILE asks for, and a stuck GPU buffer copy failing a transfer rather than
// hanging it; and that the harness fails a net that moves no bytes and refuses GPU buffers on a device
// that does not advertise them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "megascale/nccl/conformance.h"

namespace megascale::nccl::conformance {
namespace {

Options plugin_options() {
  // Loopback: present on every CI machine, and a device the plugin must support (single-host runs).
  ::setenv("MEGASCALE_IFNAME", "lo", /*overwrite=*/0);
  Options o;
  o.plugin_path = MEGASCALE_NCCL_PLUGIN_PATH;
  o.retry_budget_s = 2.0;
  // Each case's process is killed past this. The deadlines inside the cases grow with a sanitizer
  // build's slowness (Options::time_scale); so does this, within ctest's 300 s.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  o.case_timeout_s = 240.0;
#else
  o.case_timeout_s = 90.0;
#endif
  o.threads = 4;
  o.comms_per_thread = 3;
  // With the plugin's GPU-buffer path emulated on the CPU, every buffer is registered as NCCL_PTR_CUDA:
  // the cases then run through the host shadows and their copies (the GdrEmulate. entries).
  const char* gdr = std::getenv("MEGASCALE_GDR_COPY");
  if (gdr != nullptr && std::string(gdr) == "emulate") o.mem_type = 2;
  return o;
}

std::string describe(const CaseResult& c) {
  std::string s = c.detail;
  for (const std::string& w : c.warnings) s += "\n  plugin: " + w;
  return s;
}

class NcclConformance : public ::testing::TestWithParam<std::string> {};

TEST_P(NcclConformance, Passes) {
  Options o = plugin_options();
  o.cases = {GetParam()};
  const Report r = run(o);
  ASSERT_TRUE(r.load_error.empty()) << r.load_error;
  EXPECT_EQ(r.plugin_name, "MegaScale");
  EXPECT_EQ(r.abi_version, 12);  // the newest the plugin exports, as NCCL 2.30 picks it
  ASSERT_EQ(r.cases.size(), 1u);
  const CaseResult& c = r.cases[0];
  // The MegaScale plugin implements everything the cases exercise: nothing may be skipped.
  EXPECT_FALSE(c.skipped) << c.detail;
  EXPECT_TRUE(c.passed) << describe(c);
  std::printf("    %s: %s (%.2f s)\n", c.name.c_str(), c.detail.c_str(), c.seconds);
}

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  for (const auto& [name, description] : case_list()) names.push_back(name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Cases, NcclConformance, ::testing::ValuesIn(case_names()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

// The v8..v11 tables are adapters over the same core: the basic cases through each, and through v12
// named explicitly.
class NcclConformanceAbi : public ::testing::TestWithParam<int> {};

TEST_P(NcclConformanceAbi, BasicCasesPass) {
  Options o = plugin_options();
  o.abi_version = GetParam();
  o.cases = {"load",         "connect_accept_one_thread", "message_sizes", "grouped_receive", "zero_byte",
             "max_requests", "close_with_requests"};
  const Report r = run(o);
  ASSERT_TRUE(r.load_error.empty()) << r.load_error;
  EXPECT_EQ(r.abi_version, GetParam());
  ASSERT_EQ(r.cases.size(), o.cases.size());
  for (const CaseResult& c : r.cases) EXPECT_TRUE(c.passed) << c.name << ": " << describe(c);
}

INSTANTIATE_TEST_SUITE_P(Versions, NcclConformanceAbi, ::testing::Values(8, 9, 10, 11, 12),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return std::string("v").append(std::to_string(p.param));
                         });

// The harness fails a net that gets the data wrong: the Null net (tools/null-net) completes
// every request with the right sizes and moves no bytes, so each of these cases must fail on the data.
TEST(NcclConformanceHarness, FailsANetThatMovesNoBytes) {
  Options o = plugin_options();
  o.plugin_path = MEGASCALE_NULL_NET_PATH;
  o.cases = {"load", "steps_in_flight", "message_sizes", "zero_byte", "max_requests", "throughput"};
  const Report r = run(o);
  ASSERT_TRUE(r.load_error.empty()) << r.load_error;
  EXPECT_EQ(r.plugin_name, "Null");
  ASSERT_EQ(r.cases.size(), o.cases.size());
  for (const CaseResult& c : r.cases) {
    EXPECT_FALSE(c.passed) << c.name;
    EXPECT_FALSE(c.skipped) << c.name;
    EXPECT_NE(c.detail.find("wrong data"), std::string::npos) << c.name << ": " << c.detail;
  }
}

// NCCL hands a device GPU buffers only where its ptrSupport has NCCL_PTR_CUDA: the harness's load case
// refuses --mem cuda on a device without it (MegaScale without MEGASCALE_GDR_COPY), naming the bit,
// before any registration.
TEST(NcclConformanceHarness, RefusesCudaBuffersOnADeviceWithoutNcclPtrCuda) {
  if (std::getenv("MEGASCALE_GDR_COPY") != nullptr) {
    GTEST_SKIP() << "MEGASCALE_GDR_COPY is set: the plugin's devices take GPU buffers";
  }
  Options o = plugin_options();
  o.mem_type = 2;
  o.cases = {"load"};
  const Report r = run(o);
  ASSERT_TRUE(r.load_error.empty()) << r.load_error;
  ASSERT_EQ(r.cases.size(), 1u);
  EXPECT_FALSE(r.cases[0].passed);
  EXPECT_NE(r.cases[0].detail.find("(lo): buffers registered as NCCL_PTR_CUDA (--mem cuda), but its "
                                   "ptrSupport 1 lacks NCCL_PTR_CUDA"),
            std::string::npos)
      << r.cases[0].detail;
}

// ---- In fresh processes: the plugin reads MEGASCALE_* once per process. ----

class NcclPluginEnvironment : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

bool log_has(const Report& r, const std::string& text) {
  for (const std::string& l : r.log) {
    if (l.find(text) != std::string::npos) return true;
  }
  return r.load_error.find(text) != std::string::npos;
}

// Exits 0 when a bad value fails init with a WARN naming the variable and the value.
[[noreturn]] void init_with(const char* name, const char* value, const char* expected) {
  ::setenv(name, value, 1);
  Options o = plugin_options();
  o.cases = {"load"};
  const Report r = run(o);
  const bool named = r.load_error.find(expected) != std::string::npos;
  if (!named) std::fprintf(stderr, "load_error: %s\n", r.load_error.c_str());
  std::_Exit(!r.load_error.empty() && r.cases.empty() && named ? 0 : 1);
}

TEST_F(NcclPluginEnvironment, BadValuesFailInitNamingTheVariable) {
  EXPECT_EXIT(
      init_with("MEGASCALE_LAYOUT", "lanes=0", "MEGASCALE_LAYOUT=lanes=0: lanes must be an integer in 1..64"),
      ::testing::ExitedWithCode(0), "");
  // A replaced layout variable fails init naming its replacement.
  EXPECT_EXIT(init_with("MEGASCALE_NTHREADS", "4",
                        "MEGASCALE_NTHREADS is replaced by MEGASCALE_LAYOUT (e.g. MEGASCALE_LAYOUT=wires=4)"),
              ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(init_with("MEGASCALE_CC", "no-such-preset", "MEGASCALE_CC=no-such-preset"),
              ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(init_with("MEGASCALE_RETRY_BUDGET_S", "-1", "MEGASCALE_RETRY_BUDGET_S=-1"),
              ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(init_with("MEGASCALE_TC", "300", "MEGASCALE_TC=300"), ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(init_with("MEGASCALE_PAYLOAD_CRC", "maybe", "MEGASCALE_PAYLOAD_CRC=maybe"),
              ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(init_with("MEGASCALE_RTO_FLOOR_US", "5ms", "MEGASCALE_RTO_FLOOR_US=5ms"),
              ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      init_with("MEGASCALE_CC_RTO_MIN_RTO_US", "5000", "environment set MEGASCALE_CC_RTO_MIN_RTO_US=5000"),
      ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(init_with("MEGASCALE_FAULT_DROP", "1.5", "MEGASCALE_FAULT_DROP=1.5"),
              ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(init_with("MEGASCALE_IFNAME", "=no-such-if0", "no-such-if0"), ::testing::ExitedWithCode(0), "");
}

// The checks of a forked run: each failed one is printed, and the child's exit status says whether any did.
struct Expectations {
  int bad = 0;
  void operator()(bool ok, const std::string& what) {
    if (!ok) {
      std::fprintf(stderr, "not as expected: %s\n", what.c_str());
      ++bad;
    }
  }
  [[noreturn]] void exit() const { std::_Exit(bad == 0 ? 0 : 1); }
};

// What went wrong in a forked run, for its "not as expected" line: the load error, or each case that
// did not pass with its detail (a HANG, or the step and error that failed) and the plugin's warnings.
std::string failures(const Report& r) {
  if (!r.load_error.empty()) return " (load: " + r.load_error + ")";
  std::string s;
  for (const CaseResult& c : r.cases) {
    if (!c.passed) s += "\n  case " + c.name + ": " + describe(c);
  }
  return s;
}

// The text of every file in `dir` whose extension is `ext` (".jsonl", ".prom"), one after another.
std::string files_text(const std::string& dir, const std::string& ext) {
  std::string all;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ext) continue;
    std::ifstream in(e.path());
    std::stringstream text;
    text << in.rdbuf();
    all += text.str();
  }
  return all;
}

// Runs `child(dir)` in a forked process with a fresh stats folder, and expects it to exit 0.
void expect_forked_run_passes(const char* prefix, void (*child)(const std::string&)) {
  std::string tmpl = std::string("/tmp/") + prefix + "-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  EXPECT_EXIT(child(tmpl), ::testing::ExitedWithCode(0), "");
  std::filesystem::remove_all(tmpl);
}

// Exits 0 when the knobs are echoed at INFO and a run writes both stats files with the counters.
[[noreturn]] void stats_run(const std::string& dir) {
  ::setenv("MEGASCALE_STATS_DIR", dir.c_str(), 1);
  // The case's process exits before this one reads its textfile: keep it, marked as left at exit.
  ::setenv("MEGASCALE_STATS_KEEP_PROM", "1", 1);
  ::setenv("MEGASCALE_LAYOUT", "lanes=2", 1);
  ::setenv("MEGASCALE_RTO_FLOOR_US", "2500", 1);
  ::setenv("MEGASCALE_TAIL_PROBE", "0", 1);
  Options o = plugin_options();
  o.cases = {"steps_in_flight"};
  const Report r = run(o);
  Expectations expect;
  expect(r.load_error.empty() && r.cases.size() == 1 && r.cases[0].passed, "the case passes" + failures(r));
  expect(log_has(r, ",lanes=2,stripes=") && log_has(r, "MEGASCALE_LAYOUT=wires=") &&
             log_has(r, "(given: lanes=2; rest auto: "),
         "MEGASCALE_LAYOUT echoed at INFO, resolved");
  // The controller in effect: the default, unless the outer environment chose one. (The ThreadSanitizer
  // stage of scripts/test.sh sets MEGASCALE_CC=fixed: under its slowdown the default hybrid controller
  // can crawl, and this case then missed its deadline.)
  const char* cc = std::getenv("MEGASCALE_CC");
  expect(log_has(r, std::string("MEGASCALE_CC=") + (cc != nullptr ? cc : "hybrid")),
         "MEGASCALE_CC echoed at INFO");
  // The floor reaches the wires (hybrid's own min_rto is 100 us), and their INFO lines say so.
  expect(log_has(r, "RTO >= 2500 us, tail probes off"),
         "each wire's INFO line gives the RTO floor and tail-probe setting that were set");
  // Connection set-up is timed on both sides (NCCL connects lazily, inside a collective's first call).
  const auto timed = [&](const std::string& head) {
    for (const std::string& l : r.log) {
      const size_t at = l.find(head);
      const size_t in = at == std::string::npos ? at : l.find(" in ", at);
      if (in != std::string::npos && l.find(" ms (wire ", in) != std::string::npos) return true;
    }
    return false;
  };
  expect(timed("connected ") && timed("accepted "), "connect and accept each say how long they took");
  const std::string jsonl = files_text(dir, ".jsonl"), prom = files_text(dir, ".prom");
  // Two comms (send and recv) closed: two "close" records with the engine's counters.
  size_t closes = 0;
  for (size_t at = jsonl.find("\"event\":\"close\""); at != std::string::npos;
       at = jsonl.find("\"event\":\"close\"", at + 1)) {
    ++closes;
  }
  expect(closes == 2, "two close records in the JSON lines");
  const size_t first_close = jsonl.find("\"event\":\"close\"");
  expect(jsonl.find("\"bytes_sent\"") != std::string::npos && first_close != std::string::npos &&
             jsonl.find("\"lanes\":2", first_close) < jsonl.find('\n', first_close),
         "engine counters and the lane count in the JSON lines");
  // How the plugin was set up opens the JSON lines and is in the textfile (stats_writer.h).
  const nlohmann::json settings = nlohmann::json::parse(jsonl.substr(0, jsonl.find('\n')), nullptr, false);
  expect(!settings.is_discarded() && settings.value("event", "") == "settings" &&
             settings["layout"]["lanes"] == 2 &&
             settings["settings"]["MEGASCALE_LAYOUT"]["source"] == "environment" &&
             settings["layout"]["source"] == "environment",
         "the settings record first in the JSON lines, with the lanes set");
  expect(prom.find("megascale_nccl_setting_info{name=\"MEGASCALE_LAYOUT\",value=\"wires=") !=
                 std::string::npos &&
             prom.find("megascale_nccl_layout_info{") != std::string::npos &&
             prom.find(",lanes=\"2\",") != std::string::npos,
         "the settings and the layout in the textfile");
  expect(prom.find("# TYPE megascale_nccl_bytes_sent_total counter") != std::string::npos,
         "Prometheus metadata in the textfile");
  expect(prom.find("conn=\"closed\"") != std::string::npos, "closed-connection totals in the textfile");
  // Every message of the case took time from post to done: a close record's median is above zero.
  const size_t close_at = jsonl.find("\"event\":\"close\"");
  const size_t p50_at =
      jsonl.find("\"request_latency_p50_ns\":", close_at == std::string::npos ? 0 : close_at);
  const long long p50 = p50_at == std::string::npos
                            ? 0
                            : std::atoll(jsonl.c_str() + p50_at + std::strlen("\"request_latency_p50_ns\":"));
  expect(p50 > 0, "a request latency median in the close record");
  expect(prom.find("# TYPE megascale_nccl_request_latency_seconds histogram") != std::string::npos &&
             prom.find("megascale_nccl_request_latency_seconds_bucket{ifname=\"") != std::string::npos,
         "the request latency in the textfile, as a histogram");
  // The same latency in parts: every completed request is in each of its role's phases, and a part of
  // each request's time has a median no larger than the whole's (the parts are non-negative and add
  // up to it). The last segment of a send is acknowledged a round trip after it left.
  std::istringstream lines(jsonl);
  int phased = 0;
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || j.value("event", "") != "close") continue;
    const nlohmann::json& n = j["nccl"];
    const bool send = j["role"] == "send";
    std::vector<std::string> names = {"wait", "transfer", "report"};
    if (send) names.insert(names.begin() + 2, "ack");
    const uint64_t whole = n["request_latency_p50_ns"];
    bool ok = n["phases"].size() == names.size() && n["completed"] > 0;
    for (const std::string& name : names) {
      const nlohmann::json& p = n["phases"][name];
      ok = ok && p.is_object() && p["count"] == n["completed"] && p["p50_ns"] <= whole;
    }
    if (send) ok = ok && n["phases"]["ack"]["p50_ns"] > 0;
    // The time NCCL's thread spent in the comm's calls: every post and test() took some.
    ok = ok && n["post_call_ns"] > 0 && n["test_call_ns"] > 0 && n["test_calls"] >= n["completed"];
    phased += ok ? 1 : 0;
  }
  expect(phased == 2,
         "both close records split the request latency into their role's phases and time the calls");
  expect(prom.find("megascale_nccl_request_phase_seconds_count{ifname=\"") != std::string::npos &&
             prom.find(",phase=\"ack\"}") != std::string::npos,
         "the phases in the textfile");
  expect(prom.find("# TYPE megascale_nccl_rx_delay_seconds histogram") != std::string::npos &&
             jsonl.find("\"rx_delay_p99_seconds\":") != std::string::npos,
         "this host's receive delay in both files");
  expect(prom.find("megascale_nccl_rtt_seconds_bucket{ifname=\"") != std::string::npos &&
             prom.find("megascale_nccl_nccl_") == std::string::npos,
         "the RTT samples as a histogram, and one prefix");
  expect(prom.find("# TYPE megascale_nccl_sends_waited_for_credit_total counter") != std::string::npos,
         "the sends that waited for a credit in the textfile");
  // The wires stopped when the harness finalized its context: each wrote its final counters ("wire"),
  // and the one that carried the case made system calls.
  long long send_syscalls = 0, recv_syscalls = 0;
  bool busy_within_awake = true;
  for (size_t at = jsonl.find("\"event\":\"wire\","); at != std::string::npos;
       at = jsonl.find("\"event\":\"wire\",", at + 1)) {
    const size_t end = jsonl.find('\n', at);
    const std::string line = jsonl.substr(at, end == std::string::npos ? std::string::npos : end - at);
    const auto number = [&](const std::string& key) {
      const size_t k = line.find("\"" + key + "\":");
      return k == std::string::npos ? 0LL : std::atoll(line.c_str() + k + key.size() + 3);
    };
    send_syscalls = std::max(send_syscalls, number("send_syscalls"));
    recv_syscalls = std::max(recv_syscalls, number("recv_syscalls"));
    busy_within_awake = busy_within_awake && line.find("\"io_awake_ns\":") != std::string::npos &&
                        number("io_busy_ns") <= number("io_awake_ns");
  }
  expect(send_syscalls > 0 && recv_syscalls > 0, "a wire record with the wire's system calls");
  expect(busy_within_awake,
         "each wire record has its I/O threads' awake time, and their busy time within it");
  // While they ran, the snapshots had them too: in the JSON lines and in the textfile.
  expect(jsonl.find("\"event\":\"wire_periodic\"") != std::string::npos, "periodic wire records");
  expect(prom.find("# TYPE megascale_nccl_wire_send_dropped_full_total counter") != std::string::npos &&
             prom.find("megascale_nccl_wire_send_syscalls_total{ifname=\"") != std::string::npos,
         "the wires' counters in the textfile");
  expect(prom.find("# TYPE megascale_nccl_wire_io_busy_seconds_total counter") != std::string::npos &&
             prom.find("megascale_nccl_wire_io_awake_seconds_total{ifname=\"") != std::string::npos,
         "the I/O threads' awake and busy seconds in the textfile");
  // Files named by the process's rank or number on the host (stats_writer.h), not its pid.
  // megascale-nccl-HOST-(rank|proc)N[-M].(jsonl|prom), checked by hand: std::regex trips GCC 12's
  // -Wmaybe-uninitialized in the sanitizer build.
  const auto named = [](const std::string& name) {
    const std::string prefix = "megascale-nccl-";
    const size_t dot = name.rfind('.');
    if (name.rfind(prefix, 0) != 0 || dot == std::string::npos) return false;
    const std::string ext = name.substr(dot + 1);
    if (ext != "jsonl" && ext != "prom") return false;
    const std::string stem = name.substr(0, dot);
    for (const std::string kind : {"-rank", "-proc"}) {
      const size_t at = stem.rfind(kind);
      if (at == std::string::npos || at <= prefix.size()) continue;
      const std::string number = stem.substr(at + kind.size());
      const size_t dash = number.find('-');
      const std::string first = number.substr(0, dash);
      const std::string second = dash == std::string::npos ? "1" : number.substr(dash + 1);
      const auto digits = [](const std::string& d) {
        return !d.empty() && d.find_first_not_of("0123456789") == std::string::npos;
      };
      if (digits(first) && digits(second)) return true;
    }
    return false;
  };
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    expect(named(e.path().filename().string()),
           "a stats file named by rank or number: " + e.path().filename().string());
  }
  // The case passed, so its process exited through exit() and the plugin's unload: it left the textfile
  // it was told to keep, marked as no longer written.
  expect(prom.find("\nmegascale_nccl_up 0\n") != std::string::npos &&
             prom.find("\nmegascale_nccl_up 1\n") == std::string::npos,
         "the textfile left at exit says megascale_nccl_up 0");
  expect.exit();
}

// Exits 0 when a run with MEGASCALE_TRACE_FILE writes a Chrome trace of every request: the file the
// pattern names, each send and receive once with its bytes, its phases inside it, and a comm's requests
// that were in flight together on lanes of their own (no two slices of one track overlap).
[[noreturn]] void trace_run(const std::string& dir) {
  const std::string pattern = dir + "/trace-%h-%p.json";
  ::setenv("MEGASCALE_TRACE_FILE", pattern.c_str(), 1);
  Options o = plugin_options();
  o.cases = {"steps_in_flight"};  // 64 sends of 512 KiB then 256 of 1 KiB, 8 in flight, each way once
  const Report r = run(o);
  Expectations expect;
  expect(r.load_error.empty() && r.cases.size() == 1 && r.cases[0].passed, "the case passes" + failures(r));
  // The plugin ran in the harness's child processes (one probed it, one ran the case): each wrote a
  // file named with its own pid. The case's is the one with requests in it.
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string prefix = std::string("trace-") + host + "-";
  std::string path;
  nlohmann::json j = nlohmann::json::parse("null");
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename();
    if (name.rfind(prefix, 0) != 0 || e.path().extension() != ".json") continue;
    std::ifstream in(e.path());
    nlohmann::json candidate = nlohmann::json::parse(in, nullptr, false);
    if (candidate.is_discarded() || !candidate.contains("otherData")) continue;
    if (path.empty() || candidate["otherData"].value("requests", 0) > j["otherData"].value("requests", 0)) {
      path = e.path().string();
      j = std::move(candidate);
    }
  }
  expect(!path.empty(), "a trace file " + dir + "/" + prefix + "<pid>.json");
  expect(log_has(r, "MEGASCALE_TRACE_FILE=" + path + " (environment)"), "the expanded path echoed at INFO");
  if (path.empty()) expect.exit();
  expect(j["traceEvents"].is_array(), "the file " + path + " is JSON with traceEvents");
  if (!j["traceEvents"].is_array()) expect.exit();
  struct Slice {
    double ts = 0, end = 0;
  };
  std::map<uint64_t, std::vector<Slice>> requests;  // by track
  std::map<std::string, int> count;
  std::map<std::string, uint64_t> bytes;
  bool phases_inside = true, named = true;
  std::set<uint64_t> tracks_named;
  std::vector<std::pair<uint64_t, Slice>> phases;
  // Lane 0 of each comm's track: its connection's ids, (conn, peer_conn), by role.
  std::set<std::pair<std::string, std::string>> send_ids, recv_ids;
  bool ids_on_lane0 = true;
  for (const nlohmann::json& e : j["traceEvents"]) {
    if (e["ph"] == "M") {
      if (e["name"] != "thread_name") continue;
      const uint64_t tid = e["tid"].get<uint64_t>();
      tracks_named.insert(tid);
      const nlohmann::json& a = e["args"];
      if (tid % 100 != 0) continue;
      ids_on_lane0 = ids_on_lane0 && a.contains("conn") && a.contains("peer_conn") &&
                     a["conn"].get<std::string>().size() == 16 && a["peer_conn"] != std::string(16, '0') &&
                     a.value("stripes", 0) >= 1;  // the comm's stripes, for megascale-message-times.py
      if (!ids_on_lane0) continue;
      const std::string name = a["name"];
      (name.rfind("send ", 0) == 0 ? send_ids : recv_ids).emplace(a["conn"], a["peer_conn"]);
      continue;
    }
    const Slice s{e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()};
    const uint64_t tid = e["tid"];
    const std::string name = e["name"];
    ++count[name];
    if (e["cat"] == "request") {
      bytes[name] += e["args"]["bytes"].get<uint64_t>();
      requests[tid].push_back(s);
    } else {
      phases.emplace_back(tid, s);
    }
  }
  for (const auto& [tid, p] : phases) {
    bool inside = false;
    for (const Slice& q : requests[tid]) inside = inside || (p.ts >= q.ts - 1e-3 && p.end <= q.end + 1e-3);
    phases_inside = phases_inside && inside;
  }
  bool disjoint = true;
  size_t send_lanes = 0;
  for (auto& [tid, list] : requests) {
    named = named && tracks_named.count(tid) == 1;
    std::sort(list.begin(), list.end(), [](const Slice& a, const Slice& b) { return a.ts < b.ts; });
    for (size_t i = 1; i < list.size(); ++i) disjoint = disjoint && list[i].ts >= list[i - 1].end - 1e-3;
  }
  for (const auto& [tid, list] : requests) send_lanes += tid / 100 == requests.begin()->first / 100 ? 1 : 0;
  constexpr uint64_t kBytes = 64 * (512 << 10) + 256 * 1024;
  expect(count["send"] == 320 && count["recv"] == 320, "320 sends and 320 receives, each once");
  expect(bytes["send"] == kBytes && bytes["recv"] == kBytes, "the bytes of every request");
  expect(count["wait"] == 640 && count["transfer"] == 640 && count["report"] == 640 && count["ack"] == 320,
         "each request's phases (ack for sends)");
  expect(phases_inside, "every phase inside its request's slice");
  expect(disjoint, "no two requests of one track overlap");
  expect(send_lanes >= 2 && send_lanes <= 8,
         "the first comm's requests (8 in flight) on 2..8 lanes, not " + std::to_string(send_lanes));
  expect(named, "every track named");
  std::set<std::pair<std::string, std::string>> mirrored;  // each receive's ids seen from its sender
  for (const auto& [conn, peer] : recv_ids) mirrored.emplace(peer, conn);
  expect(ids_on_lane0 && !send_ids.empty() && send_ids == mirrored,
         "each comm's connection ids on its track, a send's the mirror of its receive's");
  expect(j["otherData"]["requests"] == 640 && j["otherData"]["clock"] == "CLOCK_MONOTONIC",
         "the request count and the clock in otherData");
  expect.exit();
}

// Exits 0 when stats snapshots taken every 20 ms while 4 comm pairs on 2 threads move data (a snapshot is
// taken from whichever comm's call finds one due, so it reads comms other threads are writing) leave
// the case passing and write periodic records. Under ThreadSanitizer (scripts/test.sh's tsan stage) an
// unsynchronised counter fails the run: it did before the comms' counters took a lock.
[[noreturn]] void snapshots_run(const std::string& dir) {
  ::setenv("MEGASCALE_STATS_DIR", dir.c_str(), 1);
  ::setenv("MEGASCALE_STATS_INTERVAL_S", "0.02", 1);
  Options o = plugin_options();
  o.cases = {"many_comms_threads"};
  o.threads = 2;  // small enough for ThreadSanitizer's slowdown; two threads are all a race needs
  o.comms_per_thread = 2;
  const Report r = run(o);
  Expectations expect;
  expect(r.load_error.empty() && r.cases.size() == 1 && r.cases[0].passed, "the case passes" + failures(r));
  const std::string jsonl = files_text(dir, ".jsonl");
  // The case passed, so its process exited cleanly: by default the plugin removed its textfile.
  size_t proms = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) proms += e.path().extension() == ".prom";
  expect(proms == 0 && !jsonl.empty(), "the textfile removed at exit, the JSON lines kept");
  size_t periodic = 0;
  for (size_t at = jsonl.find("\"event\":\"periodic\""); at != std::string::npos;
       at = jsonl.find("\"event\":\"periodic\"", at + 1)) {
    ++periodic;
  }
  expect(periodic > 0, "periodic records while the comms moved data");
  expect.exit();
}

// Exits 0 when, with MEGASCALE_PAYLOAD_CRC=0 and I/O threads, the cases pass (every byte checked by the
// harness) and the receiving connection counted the segments that came without a payload CRC.
[[noreturn]] void unchecked_run(const std::string& dir) {
  ::setenv("MEGASCALE_STATS_DIR", dir.c_str(), 1);
  ::setenv("MEGASCALE_PAYLOAD_CRC", "0", 1);
  ::setenv("MEGASCALE_LAYOUT", "io_threads=2", 1);
  Options o = plugin_options();
  o.cases = {"message_sizes", "steps_in_flight"};
  const Report r = run(o);
  Expectations expect;
  expect(r.load_error.empty() && r.cases.size() == 2 && r.cases[0].passed && r.cases[1].passed,
         "both cases pass" + failures(r));
  expect(log_has(r, "MEGASCALE_PAYLOAD_CRC=0 (environment)"), "MEGASCALE_PAYLOAD_CRC echoed at INFO");
  expect(log_has(r, "payload CRC off"), "each wire's INFO line says the payload CRC is off");
  long long unchecked = 0;
  const std::string jsonl = files_text(dir, ".jsonl");
  const std::string key = "\"segments_unchecked\":";
  for (size_t at = jsonl.find(key); at != std::string::npos; at = jsonl.find(key, at + 1)) {
    unchecked = std::max(unchecked, std::atoll(jsonl.c_str() + at + key.size()));
  }
  expect(unchecked > 0, "a receiving connection counted segments without a payload CRC");
  expect.exit();
}

// Exits 0 when a GPU buffer copy that never finishes (MEGASCALE_FAULT_COPY_STALL: every copy after the
// first 20 held back, the emulated GPU-buffer path) fails the transfer with ncclUnhandledCudaError and a
// WARN naming the wait and its likely cause once MEGASCALE_GDR_COPY_TIMEOUT_MS has passed, rather than
// hanging until the harness's own deadline; the comms then close.
[[noreturn]] void stuck_copy_run() {
  ::setenv("MEGASCALE_GDR_COPY", "emulate", 1);
  ::setenv("MEGASCALE_FAULT_COPY_STALL", "20", 1);
  ::setenv("MEGASCALE_GDR_COPY_TIMEOUT_MS", "300", 1);
  Options o = plugin_options();
  o.cases = {"steps_in_flight"};  // 64 x 512 KiB, 8 in flight: far more than 20 copies
  const auto t0 = std::chrono::steady_clock::now();
  const Report r = run(o);
  const double took_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Expectations expect;
  expect(r.load_error.empty() && r.cases.size() == 1, "the case ran" + failures(r));
  if (r.cases.size() == 1) {
    const CaseResult& c = r.cases[0];
    expect(!c.passed, "the case failed");
    expect(c.detail.find("returned ncclUnhandledCudaError") != std::string::npos,
           "test() returned ncclUnhandledCudaError: " + c.detail);
    expect(c.detail.find("deadline") == std::string::npos && c.detail.find("timed out") == std::string::npos,
           "the plugin failed it, not the harness's deadline: " + c.detail);
  }
  expect(log_has(r, "a GPU buffer copy was still not done"), "a WARN says a copy was still not done");
  expect(log_has(r, "(MEGASCALE_FAULT_COPY_STALL=20: every copy after the first 20 is held back)"),
         "the WARN names the fault");
  expect(log_has(r, "CUDA_DEVICE_MAX_CONNECTIONS"), "the WARN names the likely cause");
  expect(took_s < 30,
         "it failed well before the case's 60 s deadline (took " + std::to_string(took_s) + " s)");
  expect.exit();
}

TEST_F(NcclPluginEnvironment, AStuckGpuBufferCopyFailsTheTransferInsteadOfHanging) {
  EXPECT_EXIT(stuck_copy_run(), ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(init_with("MEGASCALE_GDR_COPY_TIMEOUT_MS", "-1", "MEGASCALE_GDR_COPY_TIMEOUT_MS=-1"),
              ::testing::ExitedWithCode(0), "");
}

// Exits 0 when segments arriving twice (half of all datagrams duplicated on receive) make the wire WARN of
// late ACKs and say how to compare layouts; with `warn_s` "0" the data moves the same and no warning comes.
[[noreturn]] void late_ack_run(const char* warn_s) {
  ::setenv("MEGASCALE_FAULT_DUP", "0.5", 1);
  ::setenv("MEGASCALE_LATE_ACK_WARN_S", warn_s, 1);
  Options o = plugin_options();
  o.cases = {"throughput"};  // 1 GiB: long enough for the registry's looks, 100 ms apart, to end a window
  const Report r = run(o);
  Expectations expect;
  bool passed = r.load_error.empty() && r.cases.size() == o.cases.size();
  for (const CaseResult& c : r.cases) passed = passed && c.passed;
  expect(passed, "the cases pass" + failures(r));
  const bool warned = log_has(r, "were ones this side already had: the peer resent them because its ACKs");
  if (std::string(warn_s) == "0") {
    expect(log_has(r, "MEGASCALE_LATE_ACK_WARN_S=0 (no late-ACK warning) (environment)"),
           "the echo says off");
    expect(!warned, "no late-ACK WARN when it is off");
  } else {
    expect(warned, "a WARN names the duplicates and late ACKs");
    expect(log_has(r, "`STEPS=layouts scripts/check-nccl-plugin.sh` compares thread layouts"),
           "the WARN says how to compare layouts");
  }
  expect.exit();
}

TEST_F(NcclPluginEnvironment, SegmentsArrivingTwiceWarnOfLateAcks) {
  EXPECT_EXIT(late_ack_run("5"), ::testing::ExitedWithCode(0), "");  // one window, ended as the wires stop
  EXPECT_EXIT(late_ack_run("0"), ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(init_with("MEGASCALE_LATE_ACK_WARN_S", "-2", "MEGASCALE_LATE_ACK_WARN_S=-2"),
              ::testing::ExitedWithCode(0), "");
}

TEST_F(NcclPluginEnvironment, PayloadCrcOffMovesEveryByteAndIsCounted) {
  expect_forked_run_passes("megascale-unchecked", unchecked_run);
}

TEST_F(NcclPluginEnvironment, StatsDirGetsJsonLinesAndPrometheusTextfile) {
  expect_forked_run_passes("megascale-stats", stats_run);
}

TEST_F(NcclPluginEnvironment, StatsSnapshotsWhileManyCommsMoveOnOtherThreads) {
  expect_forked_run_passes("megascale-snapshots", snapshots_run);
}

TEST_F(NcclPluginEnvironment, TraceFileGetsEveryRequestAsChromeTrace) {
  expect_forked_run_passes("megascale-trace", trace_run);
}

}  // namespace
}  // namespace megascale::nccl::conformance
