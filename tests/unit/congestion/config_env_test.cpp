// Per-key environment overrides (MEGASCALE_CC_<PATH>) on top of a preset: each variable sets its field
// in the YAML's units, nested sections work, nothing set changes nothing, and every bad value is
// refused with the variable, its value and the rule named.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "megascale/congestion/config.h"

namespace megascale::cc {
namespace {

struct FakeEnv {
  std::map<std::string, std::string> vars;
  EnvLookup fn() const {
    return [this](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  }
};

CcConfig hybrid() {
  auto c = builtin_cc_config("hybrid");
  EXPECT_TRUE(c.ok());
  return *c;
}

TEST(CcEnvOverrides, NothingSetChangesNothing) {
  const CcConfig base = hybrid();
  FakeEnv env{{{"MEGASCALE_CC_SWIFT_BETA", ""}, {"UNRELATED", "1"}}};
  std::vector<std::string> applied;
  auto c = apply_cc_env_overrides(base, env.fn(), &applied);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_TRUE(applied.empty());
  EXPECT_EQ(c->hybrid.swift.beta, base.hybrid.swift.beta);
  EXPECT_EQ(c->kind, base.kind);
}

TEST(CcEnvOverrides, EachVariableSetsItsFieldInYamlUnits) {
  FakeEnv env{{{"MEGASCALE_CC_SWIFT_BETA", "0.5"},
               {"MEGASCALE_CC_HYBRID_SWIFT_BASE_TARGET_US", "40"},
               {"MEGASCALE_CC_HYBRID_G", "0.125"},
               {"MEGASCALE_CC_RTO_MIN_RTO_US", "250"},
               {"MEGASCALE_CC_RTO_RETRY_BUDGET_S", "12"},
               {"MEGASCALE_CC_FLOW_LINE_RATE_GBPS", "200"},
               {"MEGASCALE_CC_SWIFT_USE_FABRIC_DELAY", "false"}}};
  std::vector<std::string> applied;
  auto c = apply_cc_env_overrides(hybrid(), env.fn(), &applied);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_DOUBLE_EQ(c->swift.beta, 0.5);
  EXPECT_EQ(c->hybrid.swift.base_target_ns, 40'000);
  EXPECT_DOUBLE_EQ(c->hybrid.g, 0.125);
  EXPECT_EQ(c->rto.min_rto_ns, 250'000);
  EXPECT_EQ(c->rto.retry_budget_ns, 12'000'000'000);
  EXPECT_DOUBLE_EQ(c->flow.line_rate_bps, 200e9);
  EXPECT_FALSE(c->swift.use_fabric_delay);
  EXPECT_EQ(applied.size(), 7u);
  EXPECT_EQ(c->kind, ControllerKind::kHybrid);
}

// A rule between two keys, broken by setting one of them: the message names the variable that was set,
// not only the key it pushed out of range.
TEST(CcEnvOverrides, ACrossKeyRuleNamesTheVariableThatBrokeIt) {
  FakeEnv env{{{"MEGASCALE_CC_RTO_MIN_RTO_US", "5000"}, {"MEGASCALE_CC_SWIFT_BETA", "0.5"}}};
  auto c = apply_cc_env_overrides(hybrid(), env.fn());
  ASSERT_FALSE(c.ok());
  const std::string& m = c.error().message;
  EXPECT_NE(m.find("rto.initial_rto_us"), std::string::npos) << m;
  EXPECT_NE(m.find("(the environment set MEGASCALE_CC_RTO_MIN_RTO_US=5000)"), std::string::npos) << m;
  EXPECT_EQ(m.find("SWIFT_BETA"), std::string::npos) << m;  // another section's variable is not blamed
}

TEST(CcEnvOverrides, ControllerCanBeChosen) {
  FakeEnv env{{{"MEGASCALE_CC_CONTROLLER", "swift"}}};
  auto c = apply_cc_env_overrides(hybrid(), env.fn());
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->kind, ControllerKind::kSwift);
}

TEST(CcEnvOverrides, BadValuesNameTheVariableTheValueAndTheRule) {
  struct Case {
    std::string var, value, expect;
  };
  const std::vector<Case> cases = {
      {"MEGASCALE_CC_SWIFT_BETA", "abc", "expected a number"},
      {"MEGASCALE_CC_SWIFT_BETA", "2", "(0, 1]"},
      {"MEGASCALE_CC_RTO_MAX_RETRIES", "1.5", "whole number"},
      {"MEGASCALE_CC_SWIFT_USE_FABRIC_DELAY", "maybe", "true or false"},
      {"MEGASCALE_CC_CONTROLLER", "bbr", "unknown controller"},
      // A relation: the floor above the ceiling.
      {"MEGASCALE_CC_HYBRID_SWIFT_MIN_CWND_PACKETS", "5000", "MEGASCALE_CC_HYBRID_SWIFT_MIN_CWND_PACKETS=5000"},
  };
  for (const Case& k : cases) {
    FakeEnv env{{{k.var, k.value}}};
    auto c = apply_cc_env_overrides(hybrid(), env.fn());
    ASSERT_FALSE(c.ok()) << k.var << "=" << k.value;
    const std::string& m = c.error().message;
    EXPECT_NE(m.find(k.var + "=" + k.value), std::string::npos) << m;
    EXPECT_NE(m.find(k.expect), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace megascale::cc
