// FixedWindowController: the no-congestion-control baseline keeps window_packets * mss in flight at
// line rate whatever the network reports.
#include "megascale/congestion/fixed_window.h"

#include <gtest/gtest.h>

namespace megascale::cc {
namespace {

// Every signal a controller can receive, many times over, at increasing times.
void barrage(Controller& cc) {
  TimeNs now = 0;
  for (int i = 0; i < 100; ++i, now += 1'000) {
    cc.on_send(now, 4096);
    cc.on_ack(now, AckSample{.acked_bytes = 4096,
                             .acked_packets = 1,
                             .rtt_ns = 5'000'000,
                             .remote_delay_ns = 0,
                             .ecn_ce = true,
                             .ce_packets = 1,
                             .hops = 5});
    cc.on_cnp(now);
    cc.on_fast_recovery(now);
    cc.on_rto(now);
    cc.on_timer(now);
  }
}

TEST(FixedWindowTest, WindowIsWindowPacketsTimesMss) {
  const FlowParams flow{.line_rate_bps = gbps(100), .mss_bytes = 4096};
  FixedWindowController cc(FixedWindowParams{.window_packets = 64}, flow);
  EXPECT_EQ(cc.kind(), ControllerKind::kFixedWindow);
  EXPECT_DOUBLE_EQ(cc.cwnd_bytes(), 64.0 * 4096);
  EXPECT_DOUBLE_EQ(cc.pacing_rate_bps(), gbps(100));

  FixedWindowController jumbo(FixedWindowParams{.window_packets = 3}, FlowParams{.mss_bytes = 9000});
  EXPECT_DOUBLE_EQ(jumbo.cwnd_bytes(), 3.0 * 9000);
}

TEST(FixedWindowTest, IgnoresEverySignal) {
  const FlowParams flow{.line_rate_bps = gbps(200), .mss_bytes = 4096};
  FixedWindowController cc(FixedWindowParams{.window_packets = 16}, flow);
  barrage(cc);
  EXPECT_DOUBLE_EQ(cc.cwnd_bytes(), 16.0 * 4096);
  EXPECT_DOUBLE_EQ(cc.pacing_rate_bps(), gbps(200));
  EXPECT_EQ(cc.next_timer_ns(), kNever);

  const ControllerState s = cc.state();
  EXPECT_DOUBLE_EQ(s.cwnd_bytes, 16.0 * 4096);
  EXPECT_DOUBLE_EQ(s.pacing_rate_bps, gbps(200));
  EXPECT_EQ(s.decreases, 0u);
  EXPECT_EQ(s.alpha, 0.0);
  EXPECT_EQ(s.target_delay_ns, 0.0);
  EXPECT_EQ(s.target_rate_bps, 0.0);
}

}  // namespace
}  // namespace megascale::cc
