// Tests of make_controller (config_factory.cpp): each preset builds the controller it names, with that
// controller's own section and with the flow it is given. Needs FixedWindowController, SwiftController,
// DcqcnController and HybridController, so it builds once all four are on main.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "megascale/congestion/config.h"

namespace megascale::cc {
namespace {

CcConfig preset(const std::string& name) {
  Result<CcConfig> cfg = builtin_cc_config(name);
  EXPECT_TRUE(cfg) << cfg.error().message;
  return cfg ? *cfg : CcConfig{};
}

TEST(MakeController, EveryPresetBuildsTheControllerItNames) {
  for (const std::string& name : builtin_cc_config_names()) {
    SCOPED_TRACE(name);
    CcConfig cfg = preset(name);
    std::unique_ptr<Controller> cc = make_controller(cfg);
    ASSERT_NE(cc, nullptr);
    EXPECT_EQ(cc->kind(), cfg.kind);
    // controller.h: the pacing rate is never above the line rate and never zero.
    EXPECT_GT(cc->pacing_rate_bps(), 0);
    EXPECT_LE(cc->pacing_rate_bps(), cfg.flow.line_rate_bps);
    EXPECT_GT(cc->cwnd_bytes(), 0);
  }
}

TEST(MakeController, TheGivenFlowOverridesThePresetsFlow) {
  FlowParams slow{.line_rate_bps = 10e9, .mss_bytes = 1000, .base_rtt_ns = 5'000, .hops = 2};
  for (const std::string& name : builtin_cc_config_names()) {
    SCOPED_TRACE(name);
    std::unique_ptr<Controller> cc = make_controller(preset(name), slow);
    ASSERT_NE(cc, nullptr);
    EXPECT_LE(cc->pacing_rate_bps(), slow.line_rate_bps);
  }
}

TEST(MakeController, FixedWindowUsesTheFixedSectionAndTheFlowsMss) {
  CcConfig cfg = preset("fixed");
  cfg.fixed.window_packets = 16;
  cfg.flow.mss_bytes = 1000;
  std::unique_ptr<Controller> cc = make_controller(cfg);
  ASSERT_NE(cc, nullptr);
  EXPECT_DOUBLE_EQ(cc->cwnd_bytes(), 16 * 1000.0);                  // the window, in bytes
  EXPECT_DOUBLE_EQ(cc->pacing_rate_bps(), cfg.flow.line_rate_bps);  // no congestion control: line rate
}

TEST(MakeController, SwiftStartsAtItsInitialWindow) {
  CcConfig cfg = preset("swift");
  cfg.swift.init_cwnd_packets = 3;
  std::unique_ptr<Controller> cc = make_controller(cfg, FlowParams{.mss_bytes = 2000});
  ASSERT_NE(cc, nullptr);
  EXPECT_DOUBLE_EQ(cc->cwnd_bytes(), 3 * 2000.0);
}

TEST(MakeController, HybridTakesItsSwiftPartFromHybridSwift) {
  CcConfig cfg = preset("hybrid");
  cfg.swift.init_cwnd_packets = 3;  // pure Swift's: must not reach the hybrid
  cfg.hybrid.swift.init_cwnd_packets = 7;
  std::unique_ptr<Controller> cc = make_controller(cfg, FlowParams{.mss_bytes = 1000});
  ASSERT_NE(cc, nullptr);
  EXPECT_EQ(cc->kind(), ControllerKind::kHybrid);
  EXPECT_DOUBLE_EQ(cc->cwnd_bytes(), 7 * 1000.0);
}

TEST(MakeController, DcqcnStartsAtLineRate) {
  // DCQCN's reaction point starts at the line rate and only slows on CNPs (SIGCOMM '15).
  CcConfig cfg = preset("dcqcn-paper");
  std::unique_ptr<Controller> cc = make_controller(cfg, FlowParams{.line_rate_bps = 25e9});
  ASSERT_NE(cc, nullptr);
  EXPECT_DOUBLE_EQ(cc->pacing_rate_bps(), 25e9);
}

}  // namespace
}  // namespace megascale::cc
