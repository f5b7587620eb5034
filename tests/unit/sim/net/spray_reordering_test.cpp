// Per-packet spraying reorders a lane's packets. With the engine's default loss rules (dupthresh 3,
// RACK window min RTT / 4) that reads as loss: retransmissions and window cuts on an idle fabric. The
// `loss_detection` key of a scenario widens both; configs/sim/htsim-tails-spray.yaml uses it to reproduce
// htsim's flat spraying tail. Here a cut of that file on the small 2-tier preset, both ways.
#include <gtest/gtest.h>

#include <string>

#include "../../../support/source_path.h"
#include "megascale/sim/scenario.h"

namespace megascale::sim {
namespace {

const std::string kDir = megascale::test::source_path("configs/sim/");

TEST(SprayReordering, TolerantLossDetectionRemovesSpuriousRetransmissions) {
  auto file = load_sim_scenario(kDir + "htsim-tails-spray.yaml");
  ASSERT_TRUE(file) << file.error().message;
  EXPECT_TRUE(file->spray);
  EXPECT_EQ(file->dupthresh, 64u);
  EXPECT_EQ(file->reorder_window_ns, 50'000);

  SimScenario tolerant = *file;
  tolerant.fabric = "small-2tier";
  tolerant.bytes = 1'000'000;
  SimScenario strict = tolerant;
  strict.dupthresh = 3;
  strict.reorder_window_ns = 0;

  auto a = run_sim_scenario(tolerant, "", nullptr);
  ASSERT_TRUE(a) << a.error().message;
  auto b = run_sim_scenario(strict, "", nullptr);
  ASSERT_TRUE(b) << b.error().message;
  const ScenarioSummary sa = summarize_run(*a);
  const ScenarioSummary sb = summarize_run(*b);
  ASSERT_GT(a->result.completed, 0u);
  EXPECT_EQ(a->result.completed, b->result.completed);
  EXPECT_EQ(sa.drops, 0u);
  EXPECT_EQ(sb.drops, 0u);
  // Nothing is lost either way: every retransmission of the strict rules is spurious.
  EXPECT_GT(sb.retransmits, 0u);
  EXPECT_EQ(sa.retransmits, 0u);
  EXPECT_LT(sa.fct_p99_us, sb.fct_p99_us);
}

// A minimal scenario whose loss_detection key is `value` (a YAML flow map).
Result<SimScenario> with_loss_detection(const std::string& value) {
  return parse_sim_scenario("name: x\nfabric: small-2tier\nloss_detection: " + value +
                                "\nworkload: {kind: permutation, bytes: 1000}\n",
                            "inline.yaml");
}

TEST(SprayReordering, LossDetectionKeysAreChecked) {
  auto bad = with_loss_detection("{dupthresh: 0}");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("dupthresh"), std::string::npos) << bad.error().message;
  auto unknown = with_loss_detection("{dupthresh2: 4}");
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("unknown key (dupthresh, reorder_window_us, tail_probe)"),
            std::string::npos)
      << unknown.error().message;
  auto probe = with_loss_detection("{tail_probe: true}");
  ASSERT_TRUE(probe) << probe.error().message;
  EXPECT_TRUE(probe->tail_probe);
  auto not_bool = with_loss_detection("{tail_probe: 2}");
  ASSERT_FALSE(not_bool);
  EXPECT_NE(not_bool.error().message.find("tail_probe"), std::string::npos) << not_bool.error().message;
  EXPECT_NE(not_bool.error().message.find("true or false"), std::string::npos) << not_bool.error().message;
}

}  // namespace
}  // namespace megascale::sim
