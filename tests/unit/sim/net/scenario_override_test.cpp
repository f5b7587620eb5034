// `megascale sim --set KEY=VALUE` and `--seed N` (ScenarioOverride): an override changes exactly the key
// it names, goes through the same checks as the file's own text, and an error in it names the override,
// the key and the value; a fabric file given as a scenario is refused saying what it is.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "megascale/sim/scenario.h"

namespace megascale::sim {
namespace {

const std::string kSourceDir = MEGASCALE_SOURCE_DIR;

constexpr const char* kScenario = R"(name: t
fabric: star:9
switch:
  buffer_bytes: 300000
  ecn: {kmin_bytes: 50000, kmax_bytes: 200000, pmax: 0.1}
lanes: 2
workload: {kind: incast, senders: 8, receiver: 8, bytes: 200000}
link_events: []
seed: 5
)";

Result<SimScenario> with(std::vector<ScenarioOverride> overrides) {
  return parse_sim_scenario(kScenario, "t.yaml", overrides);
}

std::string error_of(std::vector<ScenarioOverride> overrides) {
  auto s = with(std::move(overrides));
  return s.ok() ? std::string("(no error)") : s.error().message;
}

TEST(ScenarioOverride, ParsesKeyEqualsValue) {
  auto o = parse_override("workload.bytes=65536");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->key, "workload.bytes");
  EXPECT_EQ(o->value, "65536");
  auto list = parse_override("results.size_bins_bytes=[1000, 10000]");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->value, "[1000, 10000]");
  for (const char* bad : {"workload.bytes", "=5", ""}) {
    auto b = parse_override(bad);
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_NE(b.error().message.find("KEY=VALUE"), std::string::npos) << b.error().message;
  }
}

TEST(ScenarioOverride, ChangesOnlyTheKeyItNames) {
  auto base = with({});
  ASSERT_TRUE(base.ok()) << base.error().message;
  auto s = with({{"workload.bytes", "65536"}, {"seed", "77"}, {"switch.ecn.pmax", "0.5"}, {"lanes", "1"}});
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->bytes, 65536u);
  EXPECT_EQ(s->seed, 77u);
  EXPECT_DOUBLE_EQ(s->red.pmax, 0.5);
  EXPECT_EQ(s->lanes, 1u);
  EXPECT_EQ(s->senders, base->senders);
  EXPECT_EQ(s->red.kmin_bytes, base->red.kmin_bytes);
  EXPECT_EQ(s->buffer_bytes, base->buffer_bytes);
  // A key the file does not have, where the schema has it: a new map and a list value.
  auto added = with({{"switch.pfc.xoff_bytes", "60000"},
                     {"switch.pfc.xon_bytes", "40000"},
                     {"results.size_bins_bytes", "[1000, 100000]"}});
  ASSERT_TRUE(added.ok()) << added.error().message;
  EXPECT_TRUE(added->pfc.enabled);
  EXPECT_EQ(added->pfc.xoff_bytes, 60000u);
  EXPECT_EQ(added->size_bins_bytes, (std::vector<uint64_t>{1000, 100000}));
  // Later overrides win, as a later --set on the command line.
  auto twice = with({{"lanes", "1"}, {"lanes", "3"}});
  ASSERT_TRUE(twice.ok());
  EXPECT_EQ(twice->lanes, 3u);
}

TEST(ScenarioOverride, ABadValueIsRefusedAsInTheFileNamingTheOverride) {
  // The file's own check, with the override in place of FILE:LINE.
  EXPECT_EQ(error_of({{"workload.bytes", "abc"}}), "--set workload.bytes=abc: bytes: abc: must be a number");
  EXPECT_EQ(error_of({{"switch.ecn.pmax", "1.5"}}),
            "--set switch.ecn.pmax=1.5: pmax: 1.5: must be in [0, 1]");
  EXPECT_EQ(error_of({{"lanes", "0"}}), "--set lanes=0: lanes: 0: must be in [1, 64]");
  EXPECT_NE(
      error_of({{"workload.kind", "ring"}}).find("--set workload.kind=ring: kind: ring: must be incast"),
      std::string::npos);
}

TEST(ScenarioOverride, AnUnknownKeyIsRefusedNamingIt) {
  EXPECT_NE(
      error_of({{"workload.flows", "16"}}).find("--set workload.flows=16: flows: 16: unknown key (kind,"),
      std::string::npos)
      << error_of({{"workload.flows", "16"}});
  EXPECT_NE(error_of({{"lane", "2"}}).find("--set lane=2: lane: 2: unknown key (name,"), std::string::npos);
  // Under a key whose value is not a map: the fabric is a name, with nothing under it.
  EXPECT_EQ(error_of({{"fabric.link_gbps", "100"}}),
            "--set fabric.link_gbps=100: fabric is star:9 in t.yaml, which has no keys under it");
  EXPECT_EQ(error_of({{"link_events.0.at_us", "5"}}),
            "--set link_events.0.at_us=5: link_events is a list of 0; 0 is not an index in it");
  EXPECT_NE(error_of({{"workload..bytes", "5"}}).find("empty part"), std::string::npos);
}

TEST(ScenarioOverride, ACcOverrideIsCheckedOnItsPresetNamingTheOverride) {
  // cc keys are the controller preset's, checked when the preset is resolved (scenario_cc_config).
  auto s = with({{"cc.swift.base_target_us", "40"}});
  ASSERT_TRUE(s.ok()) << s.error().message;
  auto cfg = scenario_cc_config(*s, "swift");
  ASSERT_TRUE(cfg.ok()) << cfg.error().message;
  auto base = scenario_cc_config(*with({}), "swift");
  ASSERT_TRUE(base.ok());
  EXPECT_NE(cfg->swift.base_target_ns, base->swift.base_target_ns);

  auto bad = with({{"cc.swift.base_target_us", "abc"}});
  ASSERT_TRUE(bad.ok()) << bad.error().message;
  auto bad_cfg = scenario_cc_config(*bad, "swift");
  ASSERT_FALSE(bad_cfg.ok());
  EXPECT_EQ(bad_cfg.error().message.rfind("--set cc.swift.base_target_us=abc: cc: ", 0), 0u)
      << bad_cfg.error().message;
  EXPECT_NE(bad_cfg.error().message.find("abc"), std::string::npos);

  auto unknown = scenario_cc_config(*with({{"cc.swift.no_such_key", "1"}}), "swift");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().message,
            "--set cc.swift.no_such_key=1: cc: swift.no_such_key: not a key of the swift preset");
}

TEST(ScenarioOverride, AFabricFileIsRefusedSayingWhatItIs) {
  auto s = load_sim_scenario(kSourceDir + "/configs/fabrics/fat-tree-k16.yaml");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find(
                "this is a fabric file, not a scenario: name it in a scenario as `fabric: PATH` (a file in "
                "configs/fabrics/ by its name: `fabric: fat-tree-k16`)"),
            std::string::npos)
      << s.error().message;
}

}  // namespace
}  // namespace megascale::sim
