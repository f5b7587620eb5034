// The stats files' record of how the plugin was set up (collectives/nccl/src/stats_writer.h): the
// "settings" line of the .jsonl and the info metrics of the .prom, from a known configuration, and
// settings_of's reading of a PluginConfig.
#include "stats_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "config.h"

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
  const std::map<std::string, std::string> vars = {
      {"MEGASCALE_LAYOUT", "wires=2,io_threads=3,lanes=3"}};
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

}  // namespace
}  // namespace megascale::nccl
