// The shipped congestion-control presets, run through the fluid model behind `megascale cc`:
// the claims congestion/README.md makes about them, checked end to end with the real controllers.
#include <gtest/gtest.h>

#include "megascale/congestion/config.h"
#include "megascale/sim/fluid.h"

namespace megascale::sim {
namespace {

FluidConfig staggered_incast(int flows) {
  FluidConfig model;
  model.flows = flows;
  model.duration_ns = 30 * kNsPerMs;
  // Late starters join flows that already hold the link: fairness must be earned, not given.
  model.start_stagger_ns = 500 * kNsPerUs;
  return model;
}

FluidSummary run_preset(const char* name, const FluidConfig& model) {
  auto preset = cc::builtin_cc_config(name);
  EXPECT_TRUE(preset.ok()) << name;
  auto result = run_fluid(model, *preset);
  EXPECT_TRUE(result.ok()) << (result.ok() ? "" : result.error().message);
  return result->summary;
}

TEST(PresetsInFluidModel, HybridConvergesToAFairShareAtFullUtilisation) {
  for (int flows : {4, 8, 16}) {
    FluidSummary s = run_preset("hybrid", staggered_incast(flows));
    EXPECT_GE(s.jain, 0.95) << flows << " flows";
    EXPECT_GE(s.capacity_fraction, 0.95) << flows << " flows";
    EXPECT_EQ(s.drops, 0u) << flows << " flows";
  }
}

TEST(PresetsInFluidModel, SwiftHoldsQueueingDelayNearItsTarget) {
  FluidSummary s = run_preset("swift", staggered_incast(8));
  EXPECT_GE(s.jain, 0.95);
  EXPECT_GE(s.capacity_fraction, 0.95);
  // Target is 25 us base plus flow scaling; the queue must stay in that neighbourhood, not fill the buffer.
  EXPECT_LT(s.queue_delay_p99_us, 60.0);
  EXPECT_EQ(s.drops, 0u);
}

TEST(PresetsInFluidModel, FixedWindowFillsTheBufferAndDrops) {
  FluidSummary fixed = run_preset("fixed", staggered_incast(8));
  FluidSummary hybrid = run_preset("hybrid", staggered_incast(8));
  // No congestion control: 8 x 64 segments of 4 KB overflow a 1 MB buffer; the controlled preset does not.
  EXPECT_GT(fixed.drops, 0u);
  EXPECT_GT(fixed.queue_delay_p99_us, 3 * hybrid.queue_delay_p99_us);
}

TEST(PresetsInFluidModel, DcqcnPaperConvergesOnCnps) {
  FluidSummary s = run_preset("dcqcn-paper", staggered_incast(8));
  EXPECT_GT(s.cnps, 0u);
  EXPECT_GE(s.capacity_fraction, 0.9);
  EXPECT_GE(s.jain, 0.9);
}

// The firmware-style preset (300 us increase timer, F = 1, 20 Mb/s AI at 100G) keeps the link busy but
// shares it slowly: with staggered starts it is still unfair after 30 ms (Jain ~0.7 in this model), and
// the paper's timers get there. congestion/README.md reports this; the test pins both halves of it.
TEST(PresetsInFluidModel, DcqcnNicKeepsTheLinkBusyButSharesItSlowly) {
  FluidSummary nic = run_preset("dcqcn-nic", staggered_incast(8));
  FluidSummary paper = run_preset("dcqcn-paper", staggered_incast(8));
  EXPECT_GT(nic.cnps, 0u);
  EXPECT_GE(nic.capacity_fraction, 0.9);
  EXPECT_LT(nic.jain, paper.jain);
}

}  // namespace
}  // namespace megascale::sim
