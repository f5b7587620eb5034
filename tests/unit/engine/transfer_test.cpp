// Messages over a clean network: sizes from 0 bytes up, tags, many in flight, receives posted late,
// receive buffers larger than the message, messages larger than the receive, both directions.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "test_net.h"

namespace megascale::engine::testing {
namespace {

TEST(Transfer, OneMessageArrivesIntactExactlyOnce) {
  TestNet net(test_config());
  auto [a, b] = net.connect_pair();
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(a->state(), ConnectionState::kEstablished);
  Batch batch({25'500}, 1);  // 26 segments, the last one short
  batch.post_recvs(b);
  batch.post_sends(a);
  ASSERT_TRUE(batch.run(net, a, b));
  batch.expect_intact(b);
  EXPECT_EQ(b->stats().duplicates_dropped, 0u);
  EXPECT_EQ(a->stats().retransmits(), 0u);
  EXPECT_EQ(a->stats().bytes_acked, 25'500u);
  EXPECT_EQ(a->stats().segments_sent, 26u);  // data only: B posted the receive, A only sends
  EXPECT_EQ(b->stats().segments_sent, 1u);   // B's one CREDIT
}

TEST(Transfer, SizesAroundTheSegmentBoundary) {
  TestNet net(test_config());
  auto [a, b] = net.connect_pair();
  Batch batch({0, 1, 999, 1000, 1001, 1999, 2000, 2001, 0, 7}, 2);
  batch.post_recvs(b);
  batch.post_sends(a);
  ASSERT_TRUE(batch.run(net, a, b));
  batch.expect_intact(b);
  // 0 and 1..1000-byte messages take one segment each; 1001..2000 two; 2001 three.
  EXPECT_EQ(a->stats().segments_sent, 1u + 1 + 1 + 1 + 2 + 2 + 2 + 3 + 1 + 1);
}

TEST(Transfer, ZeroLengthMessageCompletesWithZeroBytes) {
  TestNet net(test_config());
  auto [a, b] = net.connect_pair();
  char dummy = 'x';
  auto r = b->post_recv(&dummy, 1, -1);
  auto s = a->post_send(nullptr, 0, 3);
  ASSERT_TRUE(r.ok() && s.ok());
  Completion rc, sc;
  ASSERT_TRUE(wait_done(net, b, *r, &rc));
  ASSERT_TRUE(wait_done(net, a, *s, &sc));
  EXPECT_TRUE(rc.ok && sc.ok);
  EXPECT_TRUE(sc.send);  // a wire fences its send path on these (collectives/wire/README.md, "TX fence")
  EXPECT_FALSE(rc.send);
  EXPECT_EQ(rc.bytes, 0u);
  EXPECT_EQ(rc.tag, 3);
  EXPECT_EQ(dummy, 'x');
  // One segment: released once, placed once.
  EXPECT_GT(sc.first_ns, 0);
  EXPECT_EQ(sc.first_ns, sc.last_ns);
  EXPECT_GE(sc.done_ns, sc.last_ns + 2 * net.link_delay_ns);
  EXPECT_GE(rc.first_ns, sc.first_ns + net.link_delay_ns);
  EXPECT_EQ(rc.first_ns, rc.done_ns);
}

// Completion's times split a request's life: where a send waited (its credit, the window) and how long
// its segments and its last ACK took; when a receive's first and last segments were placed.
TEST(Transfer, CompletionsSayWhereEachRequestsTimeWent) {
  TestNet net(test_config());
  auto [a, b] = net.connect_pair();
  const auto m = pattern(9, 200'000);  // 200 segments: more than two lanes of 32 have in flight at once
  std::vector<uint8_t> buf(m.size());
  // The send is posted first, so it waits for the receive's credit.
  auto s = a->post_send(m.data(), m.size(), 1);
  ASSERT_TRUE(s.ok());
  net.run_for(1'000'000);
  const TimeNs recv_posted = net.now;
  auto r = b->post_recv(buf.data(), buf.size(), 1);
  ASSERT_TRUE(r.ok());
  Completion sc, rc;
  ASSERT_TRUE(wait_done(net, b, *r, &rc));
  ASSERT_TRUE(wait_done(net, a, *s, &sc));
  ASSERT_TRUE(sc.ok && rc.ok);
  EXPECT_TRUE(std::equal(m.begin(), m.end(), buf.begin()));
  const TimeNs d = net.link_delay_ns;
  // The first segment left once the credit had crossed to the sender.
  EXPECT_GE(sc.first_ns, recv_posted + d);
  // The last left a round trip later at least (the window was full), and the ACK that covered it came
  // back after another.
  EXPECT_GE(sc.last_ns, sc.first_ns + 2 * d);
  EXPECT_GE(sc.done_ns, sc.last_ns + 2 * d);
  // The receive's first segment was placed a link delay after the first left; its last one completed
  // it, after the last left and before the ACK that finished the send got back.
  EXPECT_GE(rc.first_ns, sc.first_ns + d);
  EXPECT_EQ(rc.last_ns, rc.done_ns);
  EXPECT_GE(rc.last_ns, sc.last_ns + d);
  EXPECT_LE(rc.done_ns, sc.done_ns - d);
}

TEST(Transfer, ReceiveLargerThanMessageReportsRealSize) {
  TestNet net(test_config());
  auto [a, b] = net.connect_pair();
  Batch batch({3'333, 10}, 3, /*extra_capacity=*/5'000);
  batch.post_recvs(b);
  batch.post_sends(a);
  ASSERT_TRUE(batch.run(net, a, b));
  batch.expect_intact(b);  // also checks nothing was written past the message
}

TEST(Transfer, ManyMessagesInFlightBothDirections) {
  TestNet net(test_config());
  auto [a, b] = net.connect_pair();
  std::vector<uint64_t> sizes;
  for (int i = 0; i < 120; ++i) sizes.push_back(static_cast<uint64_t>((i * 7919) % 9'000));
  ASSERT_TRUE(exchange_both_ways(net, a, b, sizes, 4, 5));
  EXPECT_EQ(a->stats().retransmits() + b->stats().retransmits(), 0u);
}

TEST(Transfer, ReceivePostedLateReleasesTheSend) {
  TestNet net(test_config());
  auto [a, b] = net.connect_pair();
  Batch batch({50'000}, 6);
  batch.post_sends(a);
  net.run_for(50'000'000);  // 50 ms: the send must wait for a credit, moving no data
  EXPECT_EQ(a->stats().segments_sent, 0u);
  EXPECT_FALSE(a->test(batch.msgs[0].send_id).done);
  batch.post_recvs(b);
  ASSERT_TRUE(batch.run(net, a, b));
  batch.expect_intact(b);
  EXPECT_EQ(a->stats().sends_waited_for_credit, 1u);
}

TEST(Transfer, SendsPostedBeforeTheirCreditArrivedAreCounted) {
  TestNet net(test_config());
  auto [a, b] = net.connect_pair();
  const auto m = pattern(5, 1500);
  std::vector<uint8_t> r1(1500), r2(1500);
  // The receive is posted, but its credit is still on the way when the send is posted.
  auto q1 = b->post_recv(r1.data(), r1.size(), -1);
  auto s1 = a->post_send(m.data(), m.size(), 0);
  ASSERT_TRUE(q1.ok() && s1.ok());
  EXPECT_EQ(a->stats().sends_waited_for_credit, 1u);
  Completion c;
  ASSERT_TRUE(wait_done(net, a, *s1, &c));
  // This time the credit arrives first.
  auto q2 = b->post_recv(r2.data(), r2.size(), -1);
  ASSERT_TRUE(q2.ok());
  net.run_for(10'000'000);
  auto s2 = a->post_send(m.data(), m.size(), 0);
  ASSERT_TRUE(s2.ok());
  ASSERT_TRUE(wait_done(net, b, *q2, &c));
  EXPECT_TRUE(std::equal(m.begin(), m.end(), r2.begin()));
  EXPECT_EQ(a->stats().sends_waited_for_credit, 1u);
  EXPECT_EQ(a->stats().sends_posted, 2u);
}

TEST(Transfer, TagsMatchInPostOrderAndAnyTagTakesTheEarliest) {
  TestNet net(test_config());
  auto [a, b] = net.connect_pair();
  const auto m1 = pattern(11, 1500), m2 = pattern(12, 700), m3 = pattern(13, 2100);
  std::vector<uint8_t> r7(3000), rany(3000), r9(3000);
  // Receives: tag 7, any, tag 9. Sends: tag 9, tag 7, tag 4.
  auto q7 = b->post_recv(r7.data(), r7.size(), 7);
  auto qany = b->post_recv(rany.data(), rany.size(), -1);
  auto q9 = b->post_recv(r9.data(), r9.size(), 9);
  auto s9 = a->post_send(m1.data(), m1.size(), 9);
  auto s7 = a->post_send(m2.data(), m2.size(), 7);
  auto s4 = a->post_send(m3.data(), m3.size(), 4);
  Completion c7, cany, c9, x;
  ASSERT_TRUE(wait_done(net, b, *q7, &c7));
  ASSERT_TRUE(wait_done(net, b, *qany, &cany));
  // The tag-9 send took the "any" receive (earliest match); the tag-4 send took nothing yet...
  EXPECT_EQ(cany.tag, 9);
  EXPECT_EQ(cany.bytes, m1.size());
  EXPECT_TRUE(std::equal(m1.begin(), m1.end(), rany.begin()));
  EXPECT_EQ(c7.tag, 7);
  EXPECT_TRUE(std::equal(m2.begin(), m2.end(), r7.begin()));
  net.run_for(10'000'000);
  EXPECT_FALSE(b->test(*q9).done);
  EXPECT_FALSE(a->test(*s4).done);
  // ... until a receive for tag 4 is posted; the tag-9 receive is still waiting.
  std::vector<uint8_t> r4(3000);
  auto q4 = b->post_recv(r4.data(), r4.size(), 4);
  Completion c4;
  ASSERT_TRUE(wait_done(net, b, *q4, &c4));
  EXPECT_EQ(c4.bytes, m3.size());
  EXPECT_TRUE(std::equal(m3.begin(), m3.end(), r4.begin()));
  EXPECT_FALSE(b->test(*q9).done);
  ASSERT_TRUE(wait_done(net, a, *s9, &x));
  EXPECT_TRUE(x.ok);
  ASSERT_TRUE(wait_done(net, a, *s7, &x));
  EXPECT_TRUE(x.ok);
}

TEST(Transfer, MessageLargerThanReceiveFailsBothSides) {
  TestNet net(test_config());
  auto [a, b] = net.connect_pair();
  const auto big = pattern(20, 5'000);
  std::vector<uint8_t> small(4'999, 0xEE);
  auto r = b->post_recv(small.data(), small.size(), 1);
  auto s = a->post_send(big.data(), big.size(), 1);
  Completion rc, sc;
  ASSERT_TRUE(wait_done(net, b, *r, &rc));
  ASSERT_TRUE(wait_done(net, a, *s, &sc));
  EXPECT_FALSE(sc.ok);
  EXPECT_FALSE(rc.ok);
  EXPECT_TRUE(sc.send);  // failed sends too
  EXPECT_FALSE(rc.send);
  EXPECT_NE(sc.error.find("larger than the peer's receive buffer of 4999 bytes"), std::string::npos)
      << sc.error;
  EXPECT_NE(rc.error.find("message of 5000 bytes is larger"), std::string::npos) << rc.error;
  EXPECT_EQ(sc.code, ErrorCode::kInvalidUsage);  // this request alone failed: the connection is fine
  EXPECT_EQ(rc.code, ErrorCode::kInvalidUsage);
  EXPECT_TRUE(std::all_of(small.begin(), small.end(), [](uint8_t v) { return v == 0xEE; }));
  // The connection stays usable.
  Batch batch({4'000}, 21);
  batch.post_recvs(b);
  batch.post_sends(a);
  ASSERT_TRUE(batch.run(net, a, b));
  batch.expect_intact(b);
}

TEST(Transfer, RequestIdsAreReportedOnceAndBadArgumentsAreErrors) {
  TestNet net(test_config());
  auto [a, b] = net.connect_pair();
  uint8_t buf[10] = {};
  auto r = b->post_recv(buf, sizeof buf, 0);
  auto s = a->post_send(buf, 4, 0);
  Completion c;
  ASSERT_TRUE(wait_done(net, a, *s, &c));
  EXPECT_TRUE(c.ok);
  Completion again = a->test(*s);
  EXPECT_TRUE(again.done);
  EXPECT_FALSE(again.ok);
  EXPECT_EQ(again.error, "unknown request");
  EXPECT_FALSE(a->post_send(buf, 4, -1).ok());
  EXPECT_FALSE(b->post_recv(buf, 4, -2).ok());
  EXPECT_FALSE(a->post_send(nullptr, 4, 0).ok());
  ASSERT_TRUE(wait_done(net, b, *r, &c));
}

TEST(Transfer, PostsBeforeTheHandshakeCompletes) {
  TestNet net(test_config());
  auto id = net.ep[0]->connect(net.now, kPeerB);
  ASSERT_TRUE(id.ok());
  Connection* a = net.ep[0]->connection(*id);
  ASSERT_EQ(a->state(), ConnectionState::kConnecting);
  Batch batch({12'345}, 30);
  batch.post_sends(a);  // queued until the handshake ends and B posts a receive
  Connection* b = nullptr;
  ASSERT_TRUE(net.run_until(
      [&] {
        if (auto acc = net.ep[1]->accept()) b = net.ep[1]->connection(*acc);
        return b != nullptr;
      },
      net.now + 1'000'000'000));
  batch.post_recvs(b);
  ASSERT_TRUE(batch.run(net, a, b));
  batch.expect_intact(b);
}

TEST(Transfer, TooManyOutstandingPostsAreRefused) {
  EngineConfig cfg = test_config();
  cfg.max_posted_sends = 4;
  cfg.max_posted_recvs = 3;
  TestNet net(cfg);
  auto [a, b] = net.connect_pair();
  uint8_t buf[8] = {};
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(a->post_send(buf, 8, 0).ok());
  auto fifth = a->post_send(buf, 8, 0);
  ASSERT_FALSE(fifth.ok());
  EXPECT_NE(fifth.error().message.find("max_posted_sends"), std::string::npos);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(b->post_recv(buf, 8, 0).ok());
  EXPECT_FALSE(b->post_recv(buf, 8, 0).ok());
}

}  // namespace
}  // namespace megascale::engine::testing
