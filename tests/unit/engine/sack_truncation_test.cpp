// More holes than an ACK has SACK ranges (kMaxSackRanges): the receiver reports the lowest ranges, so
// what the sender learns is exact up to the last range it was told about. Reporting the newest arrival
// instead (RFC 2018's first-block rule) would tell the sender of segments far beyond unreported ones, and
// its per-lane loss rules (dupthresh, RACK) would take those unreported but delivered segments for lost:
// the spurious retransmissions the UDP wire's I/O threads showed with four lanes.
#include <gtest/gtest.h>

#include <set>

#include "test_net.h"

namespace megascale::engine::testing {
namespace {

TEST(SackTruncation, DeliveredSegmentsBeyondTheReportedRangesAreNeverRetransmitted) {
  EngineConfig c = test_config();
  c.lanes = 1;
  c.cc.fixed.window_packets = 60;  // the whole message in one window: nothing overtakes the held segments
  TestNet net(c);
  net.coalesce = true;
  auto [a, b] = net.connect_pair();
  ASSERT_TRUE(a && b);
  // Drop the first copy of every other data segment among the first 60 sent: 30 holes, far more than
  // an ACK's 16 ranges can show at once. The other 30 all arrive at one instant, as a wire's batch
  // does, so one coalesced ACK answers them all.
  std::set<uint64_t> dropped;
  const TimeNs arrive_at = net.now + 200'000;
  int first_copies = 0;
  net.rule = [&](const Sent& s) {
    Fate f;
    if (s.from != 0 || !s.is_data() || s.copy != 0 || first_copies >= 60) return f;
    ++first_copies;
    if (first_copies % 2 == 0) {
      dropped.insert(s.pkt.seg.seq);
      f.drop = true;
    } else {
      f.extra_delay_ns = arrive_at - net.now - net.link_delay_ns;
    }
    return f;
  };
  Batch batch({60 * 1000}, 21);
  ASSERT_NO_FATAL_FAILURE(batch.post_recvs(b));
  ASSERT_NO_FATAL_FAILURE(batch.post_sends(a));
  ASSERT_TRUE(batch.run(net, a, b));
  batch.expect_intact(b);
  ASSERT_EQ(dropped.size(), 30u);
  uint64_t spurious = 0;
  for (const Sent& s : net.trace) {
    if (s.from == 0 && s.is_data() && s.copy > 0 && !dropped.count(s.pkt.seg.seq)) ++spurious;
  }
  EXPECT_EQ(spurious, 0u) << "retransmissions of segments that had arrived (fast "
                          << a->stats().retransmits_fast << ", rto " << a->stats().retransmits_rto << ")";
  EXPECT_GE(a->stats().retransmits(), 30u);  // every hole was repaired
}

}  // namespace
}  // namespace megascale::engine::testing
