// MEGASCALE_* variables that are not knobs (collectives/nccl/src/config.h, load_plugin_config's
// `set_names`): each gets one warning naming the closest knob, and no knob the documentation lists is
// ever taken for a typo, whatever else is set.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "../../support/source_path.h"
#include "config.h"

namespace megascale::nccl {
namespace {

// Loads with `vars` as the environment: the values through getenv, the names as environ's.
Result<PluginConfig> load(const std::map<std::string, std::string>& vars) {
  std::vector<std::string> names;
  for (const auto& [name, value] : vars) names.push_back(name);
  return load_plugin_config(
      [&vars](const char* name) -> const char* {
        auto it = vars.find(name);
        return it == vars.end() ? nullptr : it->second.c_str();
      },
      names);
}

std::vector<std::string> warnings_with(const PluginConfig& c, const std::string& text) {
  std::vector<std::string> out;
  for (const std::string& w : c.warnings) {
    if (w.find(text) != std::string::npos) out.push_back(w);
  }
  return out;
}
std::vector<std::string> not_a_knob_warnings(const PluginConfig& c) {
  return warnings_with(c, "is not a knob");
}

TEST(PluginUnknownEnv, AMisspelledKnobGetsOneWarningNamingTheClosestKnob) {
  auto c = load({{"MEGASCALE_FAULT_DROPP", "0.1"}});
  ASSERT_TRUE(c) << c.error().message;
  const auto warns = not_a_knob_warnings(*c);
  ASSERT_EQ(warns.size(), 1u);
  EXPECT_NE(warns[0].find("MEGASCALE_FAULT_DROPP is not a knob"), std::string::npos) << warns[0];
  EXPECT_NE(warns[0].find("did you mean MEGASCALE_FAULT_DROP?"), std::string::npos) << warns[0];
}

TEST(PluginUnknownEnv, SuggestsAcrossEveryReader) {
  // The names come from the plugin's own table, the preset overrides and the local-ranks reader.
  auto c = load(
      {{"MEGASCALE_LAYUOT", "wires=2"}, {"MEGASCALE_CC_SWIFT_BETTA", "0.5"}, {"MEGASCALE_LOCAL_RANK", "2"}});
  ASSERT_TRUE(c) << c.error().message;
  const auto warns = not_a_knob_warnings(*c);
  ASSERT_EQ(warns.size(), 3u);
  std::string all;
  for (const std::string& w : warns) all += w + "\n";
  EXPECT_NE(all.find("did you mean MEGASCALE_LAYOUT?"), std::string::npos) << all;
  EXPECT_NE(all.find("did you mean MEGASCALE_CC_SWIFT_BETA?"), std::string::npos) << all;
  EXPECT_NE(all.find("did you mean MEGASCALE_LOCAL_RANKS?"), std::string::npos) << all;
}

TEST(PluginUnknownEnv, OtherVariablesAreNotThePluginsBusiness) {
  auto c = load({{"NCCL_DEBUG", "INFO"},
                 {"MEGASCALE", "1"},
                 {"MEGASCALE_CONFORMANCE_PEER", "x"},
                 {"MEGASCALE_NULL_GBPS", "5"}});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_TRUE(not_a_knob_warnings(*c).empty());
}

// Every variable docs/CONFIG.md names, set together with a value the knob takes (so that no reader stops
// early) or named without a value: none is taken for a typo.
TEST(PluginUnknownEnv, NoDocumentedKnobIsReported) {
  std::ifstream in(megascale::test::source_path("docs/CONFIG.md"));
  ASSERT_TRUE(in.is_open());
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  std::set<std::string> documented;
  // Every MEGASCALE_[A-Z0-9_]* word, trailing underscores dropped (std::regex trips GCC 12's
  // -Wmaybe-uninitialized in the sanitizer builds).
  auto in_name = [](char ch) { return (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_'; };
  for (size_t at = doc.find("MEGASCALE_"); at != std::string::npos; at = doc.find("MEGASCALE_", at + 1)) {
    size_t end = at + 10;
    while (end < doc.size() && in_name(doc[end])) ++end;
    const bool family = end < doc.size() && (doc[end] == '*' || doc[end] == '<');  // MEGASCALE_FAULT_*
    while (end > at + 10 && doc[end - 1] == '_') --end;
    if (end > at + 10 && !family) documented.insert(doc.substr(at, end - at));
  }
  documented.erase("MEGASCALE_FAULT_DROPP");  // the page's example of a typo
  ASSERT_GT(documented.size(), 40u);
  std::vector<std::string> names(documented.begin(), documented.end());
  auto c = load_plugin_config([](const char*) -> const char* { return nullptr; }, names);
  ASSERT_TRUE(c) << c.error().message;
  for (const std::string& w : not_a_knob_warnings(*c)) ADD_FAILURE() << w;
}

// A preset section the chosen controller never reads is a warning too, naming the preset and the keys.
TEST(PluginUnknownEnv, APresetSectionTheControllerDoesNotReadIsAWarning) {
  const std::string path = ::testing::TempDir() + "swift-with-dcqcn.yaml";
  std::ofstream(path) << "controller: swift\ndcqcn:\n  g: 0.5\n";
  auto c = load({{"MEGASCALE_CC", path}});
  ASSERT_TRUE(c) << c.error().message;
  const auto unread = warnings_with(*c, "does not read");
  ASSERT_EQ(unread.size(), 1u);
  EXPECT_EQ(unread[0], "MEGASCALE_CC=" + path +
                           ": dcqcn.g is set, but the swift controller does not read the dcqcn section");
  // Switched to dcqcn by its variable, the same preset's dcqcn section is read.
  auto switched = load({{"MEGASCALE_CC", path}, {"MEGASCALE_CC_CONTROLLER", "dcqcn"}});
  ASSERT_TRUE(switched) << switched.error().message;
  EXPECT_TRUE(warnings_with(*switched, "does not read").empty());
}

TEST(PluginUnknownEnv, ClosestNameIsTheSmallestEditDistance) {
  EXPECT_EQ(closest_name("MEGASCALE_LAYUOT", {"MEGASCALE_LAYOUT", "MEGASCALE_TC"}), "MEGASCALE_LAYOUT");
  EXPECT_EQ(closest_name("MEGASCALE_T", {"MEGASCALE_LAYOUT", "MEGASCALE_TC"}), "MEGASCALE_TC");
  EXPECT_EQ(closest_name("X", {}), "");
}

TEST(PluginUnknownEnv, EnvNamesKeepsOnlyMegascaleNames) {
  char a[] = "MEGASCALE_LAYOUT=wires=4", b[] = "PATH=/bin", c[] = "MEGASCALE_X=a=b";
  char* envp[] = {a, b, c, nullptr};
  EXPECT_EQ(megascale_env_names(envp), (std::vector<std::string>{"MEGASCALE_LAYOUT", "MEGASCALE_X"}));
}

}  // namespace
}  // namespace megascale::nccl
