// Fault configuration from YAML and MEGASCALE_FAULT_* variables: values land in the right fields,
// and every bad value is an error that names where it came from and what it was.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <string>

#include "megascale/wire/fault.h"

namespace megascale::wire {
namespace {

EnvLookup env_of(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(FaultConfigYaml, ReadsEveryKey) {
  auto cfg = parse_fault_config(R"(
fault:
  drop: 0.01
  duplicate: 0.002
  reorder: 0.03
  reorder_depth: 12
  delay: 0.5
  delay_us: 250
  corrupt: 1%
  mark_ce: 0.25
  seed: 99
)",
                                "test.yaml");
  ASSERT_TRUE(cfg) << cfg.error().message;
  EXPECT_DOUBLE_EQ(cfg->drop, 0.01);
  EXPECT_DOUBLE_EQ(cfg->duplicate, 0.002);
  EXPECT_DOUBLE_EQ(cfg->reorder, 0.03);
  EXPECT_EQ(cfg->reorder_depth, 12u);
  EXPECT_DOUBLE_EQ(cfg->delay, 0.5);
  EXPECT_EQ(cfg->delay_ns, 250'000);
  EXPECT_DOUBLE_EQ(cfg->corrupt, 0.01);
  EXPECT_DOUBLE_EQ(cfg->mark_ce, 0.25);
  EXPECT_EQ(cfg->seed, 99u);
  EXPECT_TRUE(cfg->enabled());
}

TEST(FaultConfigYaml, LoadsAFileAndNamesItInErrors) {
  const std::string path = ::testing::TempDir() + "/megascale_fault_test.yaml";
  {
    std::ofstream out(path);
    out << "fault:\n  drop: 0.25\n";
  }
  auto cfg = load_fault_config(path);
  ASSERT_TRUE(cfg) << cfg.error().message;
  EXPECT_DOUBLE_EQ(cfg->drop, 0.25);
  {
    std::ofstream out(path);
    out << "fault:\n  drop: 2\n";
  }
  cfg = load_fault_config(path);
  ASSERT_FALSE(cfg);
  EXPECT_NE(cfg.error().message.find(path + ": fault.drop=2"), std::string::npos) << cfg.error().message;
  std::remove(path.c_str());
  cfg = load_fault_config(path);
  ASSERT_FALSE(cfg);
  EXPECT_NE(cfg.error().message.find("cannot open"), std::string::npos);
}

TEST(FaultConfigYaml, NoSectionMeansOff) {
  auto cfg = parse_fault_config("udp:\n  batch: 64\n", "test.yaml");
  ASSERT_TRUE(cfg) << cfg.error().message;
  EXPECT_FALSE(cfg->enabled());
}

TEST(FaultConfigYaml, DelayUsAloneDelaysEverything) {
  auto cfg = parse_fault_config("fault:\n  delay_us: 30\n", "t.yaml");
  ASSERT_TRUE(cfg) << cfg.error().message;
  EXPECT_DOUBLE_EQ(cfg->delay, 1.0);
  EXPECT_EQ(cfg->delay_ns, 30'000);
}

TEST(FaultConfigYaml, ErrorsNameFileKeyAndValue) {
  struct Case {
    const char* yaml;
    const char* must_contain;
  };
  const Case cases[] = {
      {"fault:\n  drop: 1.5\n", "t.yaml: fault.drop=1.5: a probability must be in [0, 1]"},
      {"fault:\n  drop: -0.1\n", "fault.drop=-0.1"},
      {"fault:\n  duplicate: lots\n", "fault.duplicate=lots: not a number"},
      {"fault:\n  dropp: 0.1\n", "fault.dropp: unknown key"},
      {"fault:\n  reorder_depth: 0\n", "fault.reorder_depth=0: must be at least 1"},
      {"fault:\n  reorder_depth: 2.5\n", "fault.reorder_depth=2.5"},
      {"fault:\n  delay_us: -3\n", "fault.delay_us=-3"},
      {"fault:\n  seed: -1\n", "fault.seed=-1"},
      {"fault:\n  mark_ce: nan\n", "fault.mark_ce=nan"},
      {"fault:\n  drop: [1]\n", "fault.drop: must be a scalar"},
      {"fault: 3\n", "`fault` must be a mapping"},
      {"fault: [\n", "t.yaml: YAML"},
  };
  for (const Case& c : cases) {
    auto cfg = parse_fault_config(c.yaml, "t.yaml");
    ASSERT_FALSE(cfg) << c.yaml;
    EXPECT_NE(cfg.error().message.find(c.must_contain), std::string::npos)
        << "got: " << cfg.error().message << "\nwanted: " << c.must_contain;
  }
}

TEST(FaultConfigEnv, ReadsEveryVariableAndOverridesBase) {
  FaultConfig base;
  base.drop = 0.5;
  base.corrupt = 0.2;
  auto cfg = fault_config_from_env(base, env_of({{"MEGASCALE_FAULT_DROP", "0.001"},
                                                 {"MEGASCALE_FAULT_DUP", "2%"},
                                                 {"MEGASCALE_FAULT_REORDER", "0.05"},
                                                 {"MEGASCALE_FAULT_REORDER_DEPTH", "3"},
                                                 {"MEGASCALE_FAULT_DELAY_US", "12.5"},
                                                 {"MEGASCALE_FAULT_CE", "1"},
                                                 {"MEGASCALE_FAULT_SEED", "18446744073709551615"}}));
  ASSERT_TRUE(cfg) << cfg.error().message;
  EXPECT_DOUBLE_EQ(cfg->drop, 0.001);
  EXPECT_DOUBLE_EQ(cfg->duplicate, 0.02);
  EXPECT_DOUBLE_EQ(cfg->reorder, 0.05);
  EXPECT_EQ(cfg->reorder_depth, 3u);
  EXPECT_EQ(cfg->delay_ns, 12'500);
  EXPECT_DOUBLE_EQ(cfg->delay, 1.0);    // _DELAY_US without _DELAY: every datagram
  EXPECT_DOUBLE_EQ(cfg->corrupt, 0.2);  // not set in the environment: base kept
  EXPECT_DOUBLE_EQ(cfg->mark_ce, 1.0);
  EXPECT_EQ(cfg->seed, UINT64_MAX);
}

TEST(FaultConfigEnv, NothingSetKeepsBase) {
  FaultConfig base;
  auto cfg = fault_config_from_env(base, env_of({}));
  ASSERT_TRUE(cfg);
  EXPECT_FALSE(cfg->enabled());
}

TEST(FaultConfigEnv, DelayProbabilityAndAmountTogether) {
  auto cfg = fault_config_from_env(
      FaultConfig{}, env_of({{"MEGASCALE_FAULT_DELAY", "0.25"}, {"MEGASCALE_FAULT_DELAY_US", "100"}}));
  ASSERT_TRUE(cfg) << cfg.error().message;
  EXPECT_DOUBLE_EQ(cfg->delay, 0.25);
  EXPECT_EQ(cfg->delay_ns, 100'000);
}

TEST(FaultConfigEnv, BadValueNamesVariableAndValue) {
  struct Case {
    const char* var;
    const char* value;
    const char* must_contain;
  };
  const Case cases[] = {
      {"MEGASCALE_FAULT_DROP", "1.5", "MEGASCALE_FAULT_DROP=1.5: a probability must be in [0, 1]"},
      {"MEGASCALE_FAULT_DROP", "abc", "MEGASCALE_FAULT_DROP=abc: not a number"},
      {"MEGASCALE_FAULT_DROP", "", "MEGASCALE_FAULT_DROP=: not a number"},
      {"MEGASCALE_FAULT_DROP", "0.1x", "MEGASCALE_FAULT_DROP=0.1x"},
      {"MEGASCALE_FAULT_DUP", "101%", "MEGASCALE_FAULT_DUP=101%"},
      {"MEGASCALE_FAULT_REORDER", "inf", "MEGASCALE_FAULT_REORDER=inf"},
      {"MEGASCALE_FAULT_CORRUPT", "-0.01", "MEGASCALE_FAULT_CORRUPT=-0.01"},
      {"MEGASCALE_FAULT_CE", "2", "MEGASCALE_FAULT_CE=2"},
      {"MEGASCALE_FAULT_DELAY_US", "soon", "MEGASCALE_FAULT_DELAY_US=soon"},
      {"MEGASCALE_FAULT_DELAY_US", "-1", "MEGASCALE_FAULT_DELAY_US=-1"},
      {"MEGASCALE_FAULT_SEED", "0x10", "MEGASCALE_FAULT_SEED=0x10: not a non-negative integer"},
      {"MEGASCALE_FAULT_SEED", "99999999999999999999", "MEGASCALE_FAULT_SEED=99999999999999999999"},
      {"MEGASCALE_FAULT_REORDER_DEPTH", "0", "MEGASCALE_FAULT_REORDER_DEPTH=0: must be at least 1"},
  };
  for (const Case& c : cases) {
    auto cfg = fault_config_from_env(FaultConfig{}, env_of({{c.var, c.value}}));
    ASSERT_FALSE(cfg) << c.var << "=" << c.value;
    EXPECT_NE(cfg.error().message.find(c.must_contain), std::string::npos)
        << "got: " << cfg.error().message << "\nwanted: " << c.must_contain;
  }
}

TEST(FaultConfigValidate, RejectsOutOfRangeStructValues) {
  FaultConfig cfg;
  cfg.reorder = 2.0;
  Status s = validate_fault_config(cfg, "api");
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("fault.reorder"), std::string::npos) << s.error().message;
}

TEST(FaultConfigYaml, DuplicateKeyIsRefusedWithBothLines) {
  auto cfg = parse_fault_config("fault:\n  drop: 0.1\n  seed: 3\n  drop: 0.5\n", "dup.yaml");
  ASSERT_FALSE(cfg);
  EXPECT_NE(cfg.error().message.find("dup.yaml:4: duplicate key 'fault.drop' (first on line 2)"),
            std::string::npos)
      << cfg.error().message;
}

}  // namespace
}  // namespace megascale::wire
