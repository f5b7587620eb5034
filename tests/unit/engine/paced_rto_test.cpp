// A retransmission held by the pacer is not in flight, so it cannot time out. Below one packet of
// window Swift paces one packet every rtt/cwnd (Kumar et al., SIGCOMM '20, §3.4), which can be many
// RTOs: the timer must wait for the retransmission to leave (RFC 6298 5.1: start it when a segment is
// sent) rather than fire again and again on nothing, each time counting a timeout and doubling the
// backoff. Found on Swift's 5000-to-1 incast, where more than half the timeouts were of this kind.
#include <gtest/gtest.h>

#include "test_net.h"

namespace megascale::engine::testing {
namespace {

// One lane of Swift below one packet, paced strictly (no burst allowance): 0.002 packets of 1000 B
// per 10 us of base RTT is one segment per 5 ms; after the timeout's cut, one per 10 ms, while the
// RTO is 1 ms (no RTT sample yet).
EngineConfig paced_swift_config() {
  EngineConfig c = test_config();
  c.lanes = 1;
  c.cc.kind = cc::ControllerKind::kSwift;
  c.cc.flow.base_rtt_ns = 10'000;
  c.cc.swift.init_cwnd_packets = 0.002;
  c.cc.swift.min_cwnd_packets = 0.001;
  c.cc.pacer.burst_bytes = 1;
  return c;
}

TEST(PacedRto, ARetransmissionWaitingForThePacerDoesNotTimeOutAgain) {
  TestNet net(paced_swift_config());
  auto [a, b] = net.connect_pair();
  ASSERT_NE(b, nullptr);
  // The only data segment's first transmission is lost: one timeout must recover it.
  net.rule = [](const Sent& s) {
    Fate f;
    f.drop = s.is_data() && s.copy == 0;
    return f;
  };
  Batch batch({1000}, 3);
  batch.post_recvs(b);
  batch.post_sends(a);
  const TimeNs t0 = net.now;
  ASSERT_TRUE(batch.run(net, a, b));
  batch.expect_intact(b);
  EXPECT_EQ(a->stats().retransmits_rto, 1u);
  EXPECT_EQ(a->stats().timeouts, 1u);  // not one per backed-off timer while the pacer held it
  // The retransmission left when the pacer allowed (~10 ms at the cut window) and was acknowledged one
  // RTT later, not after a backed-off timer.
  EXPECT_LT(net.now - t0, 30'000'000);
}

}  // namespace
}  // namespace megascale::engine::testing
