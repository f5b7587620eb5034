// A retransmitted segment may go out on another lane than its first copy, and its TxSeg then
// describes the latest copy (lane, lane sequence, send time). When the ACK that reports it was caused
// by the *first* copy arriving late, crediting the new lane with that delivery tells the per-lane loss
// rules (dupthresh and RACK) that the new lane delivered a segment it has not yet delivered, and they
// declare the new lane's earlier, still travelling segments lost: spurious retransmissions, which go
// out on yet other lanes and repeat the error there. On the UDP wire with four I/O threads this
// turned one late segment into hundreds of thousands of retransmissions with nothing lost.
#include <gtest/gtest.h>

#include <set>

#include "test_net.h"

namespace megascale::engine::testing {
namespace {

TEST(RetransmissionAmbiguity, LateFirstCopiesDoNotFakeLossesOnOtherLanes) {
  EngineConfig c = test_config();
  c.lanes = 4;
  c.cc.fixed.window_packets = 16;
  c.cc.rto.min_rto_ns = 1'000'000;  // the late first copies are repaired by the loss rules, not by RTO
  TestNet net(c);
  // Every lane has a path of its own length (lane i: +15 us x i), so the lanes arrive interleaved but
  // each in order; and the first copy of every 40th data segment is held back by 10 to 100 us (late,
  // not lost), so that some arrive just after their retransmission left and before it lands.
  std::set<uint64_t> held;
  uint64_t data_first_copies = 0;
  net.rule = [&](const Sent& s) {
    Fate f;
    if (s.from != 0 || !s.is_data()) return f;
    f.extra_delay_ns = 15'000 * static_cast<TimeNs>(s.pkt.hdr.lane);
    if (s.copy == 0 && ++data_first_copies % 40 == 0) {
      held.insert(s.pkt.seg.seq);
      f.extra_delay_ns += 10'000 * static_cast<TimeNs>(held.size() % 10 + 1);
    }
    return f;
  };
  auto [a, b] = net.connect_pair();
  ASSERT_TRUE(a && b);
  Batch batch({400 * 1000, 400 * 1000}, 9);
  ASSERT_NO_FATAL_FAILURE(batch.post_recvs(b));
  ASSERT_NO_FATAL_FAILURE(batch.post_sends(a));
  ASSERT_TRUE(batch.run(net, a, b));
  batch.expect_intact(b);
  ASSERT_GE(held.size(), 15u);
  // Only the held segments look lost (their lane moved on without them); everything else arrived in
  // its lane's order and must never be sent twice.
  uint64_t spurious = 0, repairs = 0;
  for (const Sent& s : net.trace) {
    if (s.from != 0 || !s.is_data() || s.copy == 0) continue;
    if (held.count(s.pkt.seg.seq)) {
      ++repairs;
    } else {
      ++spurious;
    }
  }
  EXPECT_EQ(spurious, 0u) << "retransmissions of segments that were neither lost nor late (fast "
                          << a->stats().retransmits_fast << ", rto " << a->stats().retransmits_rto << ")";
  EXPECT_GE(repairs, held.size() / 2);  // the rules did see the late ones as lost
}

}  // namespace
}  // namespace megascale::engine::testing
