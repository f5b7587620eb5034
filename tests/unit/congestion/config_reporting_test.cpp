// How a preset's mistakes are reported (congestion/src/config.cpp): in time linear in the preset's size
// however many there are, and settings the chosen controller never reads are named (unread_settings).
#include <gtest/gtest.h>

#include <ctime>
#include <string>
#include <string_view>

#include "megascale/congestion/config.h"

namespace megascale::cc {
namespace {

// `count` lines "k<i>: <value>" from k0 (appended piecewise: GCC 12 at -O3 misreads
// "k" + std::to_string(i) as an overlapping memcpy, -Wrestrict).
void append_keys(std::string& text, int count, std::string_view value) {
  for (int i = 0; i < count; ++i) {
    text += 'k';
    text += std::to_string(i);
    text += ": ";
    text += value;
    text += '\n';
  }
}

// The process's CPU seconds since `start` (std::clock): unlike wall time, not stretched by other
// processes on a loaded CI machine.
double cpu_seconds_since(std::clock_t start) {
  return static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC;
}

// 160k unknown keys: each is reported with its line. Quadratic reporting took over 100 s; linear takes
// about a second of CPU, most of it yaml-cpp's parse, so 20 s fails the quadratic form and holds anywhere.
TEST(CcConfigReporting, ManyUnknownKeysAreReportedInLinearTime) {
  constexpr int kKeys = 160'000;
  std::string text = "controller: swift\n";
  text.reserve(static_cast<size_t>(kKeys) * 16);
  append_keys(text, kKeys, "1");
  const std::clock_t start = std::clock();
  Result<CcConfig> c = parse_cc_config(text, "many.yaml");
  const double seconds = cpu_seconds_since(start);
  ASSERT_FALSE(c);
  const std::string& m = c.error().message;
  EXPECT_NE(m.find("many.yaml:2: unknown key 'k0'"), std::string::npos);
  EXPECT_NE(m.find("many.yaml:160001: unknown key 'k159999'"), std::string::npos);
  EXPECT_LT(seconds, 20.0) << "reporting " << kKeys << " unknown keys took " << seconds << " s of CPU";
}

// Many keys written twice: each duplicate is reported against its first line.
TEST(CcConfigReporting, ManyDuplicateKeysAreEachReported) {
  constexpr int kKeys = 20'000;
  std::string text = "controller: swift\n";
  append_keys(text, kKeys, "1");
  append_keys(text, kKeys, "2");
  const std::clock_t start = std::clock();
  Result<CcConfig> c = parse_cc_config(text, "dups.yaml");
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("dups.yaml:20002: duplicate key 'k0' (first on line 2)"),
            std::string::npos);
  EXPECT_NE(c.error().message.find("dups.yaml:40001: duplicate key 'k19999' (first on line 20001)"),
            std::string::npos);
  EXPECT_LT(cpu_seconds_since(start), 20.0);
}

// Aliases: ten levels of ten aliases each (10^10 paths) and a mapping that contains itself are walked
// once each by the duplicate-key check, which still finds the duplicate inside.
TEST(CcConfigReporting, AliasesAreWalkedOnce) {
  std::string text = "controller: swift\nl0: &l0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 10; ++i) {
    const std::string level = std::to_string(i), below = std::to_string(i - 1);
    text += 'l';
    text += level;
    text += ": &l";
    text += level;
    text += " [";
    for (int j = 0; j < 10; ++j) {
      text += j > 0 ? ", *l" : "*l";
      text += below;
    }
    text += "]\n";
  }
  text += "m: &m {k: 1, k: 2, self: *m}\n";
  const std::clock_t start = std::clock();
  Result<CcConfig> c = parse_cc_config(text, "a.yaml");
  const double seconds = cpu_seconds_since(start);
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("a.yaml:12: duplicate key 'm.k' (first on line 12)"), std::string::npos)
      << c.error().message;
  EXPECT_LT(seconds, 20.0);
}

// Past yaml-cpp's nesting limit its message is "bad file" at a mark past the last line: the loader names
// the nesting and the last line instead.
TEST(CcConfigReporting, DeepNestingNamesTheNestingAndALineOfTheFile) {
  Result<CcConfig> c =
      parse_cc_config("controller: hybrid\nflow: " + std::string(100'000, '[') + "\n", "d.yaml");
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("d.yaml:2: YAML syntax error: lists or mappings nested deeper than"),
            std::string::npos)
      << c.error().message;
}

TEST(CcConfigReporting, AnotherControllersSectionIsNamed) {
  Result<CcConfig> c =
      parse_cc_config("controller: swift\ndcqcn:\n  g: 0.5\n  min_rate_mbps: 20\n", "s.yaml");
  ASSERT_TRUE(c) << c.error().message;
  const std::vector<std::string> unread = unread_settings(*c);
  ASSERT_EQ(unread.size(), 1u);
  EXPECT_EQ(unread[0],
            "dcqcn.g, dcqcn.min_rate_mbps are set, but the swift controller does not read the "
            "dcqcn section");
}

TEST(CcConfigReporting, SharedSectionsAndTheControllersOwnAreRead) {
  for (const std::string& name : builtin_cc_config_names()) {
    Result<CcConfig> c = builtin_cc_config(name);
    ASSERT_TRUE(c) << c.error().message;
    EXPECT_TRUE(unread_settings(*c).empty()) << name << ": " << unread_settings(*c)[0];
  }
  // The hybrid's own Swift part is hybrid.swift, read by the hybrid; the top-level swift is not.
  Result<CcConfig> h =
      parse_cc_config("controller: hybrid\nhybrid:\n  swift: {beta: 0.5}\nswift:\n  beta: 0.7\n", "h.yaml");
  ASSERT_TRUE(h) << h.error().message;
  const std::vector<std::string> unread = unread_settings(*h);
  ASSERT_EQ(unread.size(), 1u);
  EXPECT_EQ(unread[0], "swift.beta is set, but the hybrid controller does not read the swift section");
}

// The controller chosen by MEGASCALE_CC_CONTROLLER is the one that counts.
TEST(CcConfigReporting, TheControllerAfterOverridesCounts) {
  Result<CcConfig> c = parse_cc_config("controller: swift\ndcqcn:\n  g: 0.5\n", "s.yaml");
  ASSERT_TRUE(c) << c.error().message;
  auto env = [](const char* name) -> const char* {
    return std::string(name) == "MEGASCALE_CC_CONTROLLER" ? "dcqcn" : nullptr;
  };
  Result<CcConfig> switched = apply_cc_env_overrides(*c, env);
  ASSERT_TRUE(switched) << switched.error().message;
  EXPECT_TRUE(unread_settings(*switched).empty());
}

}  // namespace
}  // namespace megascale::cc
