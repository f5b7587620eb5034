// Connection setup and teardown: lost handshake packets, version mismatch, connect timeout, clean
// close with drain, peer closing midway, peer vanishing (error within the retry budget, in virtual
// time), unknown connections, malformed packets, release while open.
#include <gtest/gtest.h>

#include <set>

#include "megascale/congestion/rto.h"
#include "test_net.h"

namespace megascale::engine::testing {
namespace {

TEST(Lifecycle, HandshakeSurvivesLostSynAndSynAck) {
  TestNet net(test_config());
  net.rule = [](const Sent& s) {
    Fate f;
    f.drop = (s.pkt.hdr.type == PacketType::kSyn || s.pkt.hdr.type == PacketType::kSynAck) && s.copy == 0;
    return f;
  };
  auto [a, b] = net.connect_pair();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->state(), ConnectionState::kEstablished);
  EXPECT_EQ(a->remote_id(), b->id());
  EXPECT_EQ(b->remote_id(), a->id());
  // The lost SYN_ACK is sent again, at B's own retransmission timer (version 3: B waits for A's
  // confirmation) or in answer to A's SYN sent again, whichever fires first: one connection either way.
  uint32_t synacks = 0;
  for (const Sent& s : net.trace) synacks += s.pkt.hdr.type == PacketType::kSynAck ? 1 : 0;
  EXPECT_GE(synacks, 2u);
  EXPECT_GE(net.ep[1]->stats().syns_received, 1u);
  EXPECT_EQ(net.ep[1]->connection_count(), 1u);  // a SYN sent again did not create a second connection
  EXPECT_FALSE(net.ep[1]->accept().has_value());
  Batch batch({5'000}, 1);
  batch.post_recvs(b);
  batch.post_sends(a);
  ASSERT_TRUE(batch.run(net, a, b));
  batch.expect_intact(b);
}

TEST(Lifecycle, NegotiatesTheSmallerSegmentSize) {
  EngineConfig ca = test_config(), cb = test_config(2);
  ca.segment_bytes = 1400;
  cb.segment_bytes = 600;
  TestNet net(ca, cb);
  auto [a, b] = net.connect_pair();
  EXPECT_EQ(a->segment_bytes(), 600u);
  EXPECT_EQ(b->segment_bytes(), 600u);
  Batch batch({6'000}, 2);
  batch.post_recvs(b);
  batch.post_sends(a);
  ASSERT_TRUE(batch.run(net, a, b));
  batch.expect_intact(b);
  EXPECT_EQ(a->stats().segments_sent, 10u);
}

TEST(Lifecycle, VersionMismatchFailsConnectWithClearError) {
  EngineConfig future = test_config(2);
  future.version_min = kVersion + 1;
  future.version_max = kVersion + 1;
  TestNet net(test_config(), future);
  auto id = net.ep[0]->connect(net.now, kPeerB);
  ASSERT_TRUE(id.ok());
  Connection* a = net.ep[0]->connection(*id);
  uint8_t buf[4] = {};
  auto s = a->post_send(buf, 4, 0);
  ASSERT_TRUE(net.run_until([&] { return a->state() == ConnectionState::kFailed; }, net.now + 1'000'000'000));
  EXPECT_NE(a->error().find("version mismatch: acceptor speaks 4..4, initiator speaks 1..3"),
            std::string::npos)
      << a->error();
  Completion c = a->test(*s);
  EXPECT_TRUE(c.done);
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.error, a->error());  // the pending send carries the cause
  EXPECT_EQ(net.ep[1]->stats().version_mismatches, 1u);
  EXPECT_EQ(net.ep[0]->stats().version_mismatches, 1u);
  EXPECT_EQ(net.ep[1]->connection_count(), 0u);
  EXPECT_FALSE(a->post_send(buf, 4, 0).ok());
}

TEST(Lifecycle, VersionMismatchTheOtherWay) {
  EngineConfig future = test_config(2);
  future.version_min = kVersion + 1;
  future.version_max = kVersion + 2;
  TestNet net(future, test_config());
  auto id = net.ep[0]->connect(net.now, kPeerB);
  Connection* a = net.ep[0]->connection(*id);
  ASSERT_TRUE(net.run_until([&] { return a->state() == ConnectionState::kFailed; }, net.now + 1'000'000'000));
  EXPECT_NE(a->error().find("acceptor speaks 1..3, initiator speaks 4..5"), std::string::npos) << a->error();
}

TEST(Lifecycle, VersionsNegotiateToTheHighestBothSpeak) {
  EngineConfig old = test_config(2);
  old.version_max = 1;
  for (const auto& [ca, cb, want] : {std::tuple{test_config(), test_config(2), int{kVersion}},
                                     std::tuple{test_config(), old, 1}, std::tuple{old, test_config(2), 1}}) {
    TestNet net(ca, cb);
    int seen = -1;
    net.rule = [&](const Sent& s) {
      if (s.is_data()) seen = s.pkt.hdr.version;
      return Fate{};
    };
    auto [a, b] = net.connect_pair();
    ASSERT_NE(b, nullptr);
    Batch batch({5'000}, 1);
    batch.post_recvs(b);
    batch.post_sends(a);
    ASSERT_TRUE(batch.run(net, a, b));
    batch.expect_intact(b);
    EXPECT_EQ(seen, want);
  }
  // Ranges that agree on a version this engine does not implement (4) are refused, naming it.
  EngineConfig ahead = test_config(3), ahead_b = test_config(4);
  ahead.version_max = ahead_b.version_max = kVersion + 1;
  TestNet net(ahead, ahead_b);
  auto id = net.ep[0]->connect(net.now, kPeerB);
  Connection* a = net.ep[0]->connection(*id);
  ASSERT_TRUE(net.run_until([&] { return a->state() == ConnectionState::kFailed; }, net.now + 1'000'000'000));
  EXPECT_NE(a->error().find("the highest common version 4 is not implemented (this engine implements 1..3)"),
            std::string::npos)
      << a->error();
}

TEST(Lifecycle, ConnectToNobodyFailsAfterTheConnectTimeout) {
  EngineConfig cfg = test_config();
  cfg.connect_timeout_ns = 3'000'000'000;
  TestNet net(cfg);
  net.rule = [](const Sent&) {
    Fate f;
    f.drop = true;  // a black hole
    return f;
  };
  const TimeNs t0 = net.now;
  auto id = net.ep[0]->connect(net.now, kPeerB);
  Connection* a = net.ep[0]->connection(*id);
  ASSERT_TRUE(
      net.run_until([&] { return a->state() == ConnectionState::kFailed; }, net.now + 60'000'000'000));
  EXPECT_NE(a->error().find("no answer"), std::string::npos) << a->error();
  EXPECT_GE(net.now - t0, cfg.connect_timeout_ns);
  EXPECT_LE(net.now - t0, cfg.connect_timeout_ns + 2 * cfg.cc.rto.max_rto_ns);
  EXPECT_EQ(net.ep[0]->next_deadline(), kNever);  // nothing left to do: no hang, no busy timer
}

TEST(Lifecycle, CleanCloseDrainsSendsThenBothSidesClose) {
  TestNet net(test_config());
  auto [a, b] = net.connect_pair();
  Batch batch({30'000, 20'000}, 3);
  batch.post_recvs(b);
  batch.post_sends(a);
  a->close(net.now);  // right away: the sends are in progress and must drain first
  EXPECT_EQ(a->state(), ConnectionState::kClosing);
  EXPECT_FALSE(a->post_send(batch.msgs[0].data.data(), 1, 0).ok());
  ASSERT_TRUE(batch.run(net, a, b));
  batch.expect_intact(b);
  ASSERT_TRUE(net.run_until(
      [&] { return a->state() == ConnectionState::kClosed && b->state() == ConnectionState::kClosed; },
      net.now + 1'000'000'000));
  EXPECT_EQ(a->close_report().unfinished_sends, 0u);
  EXPECT_EQ(a->close_report().unfinished_recvs, 0u);
  EXPECT_TRUE(b->close_report().closed_by_peer);
  EXPECT_FALSE(a->close_report().closed_by_peer);
  EXPECT_EQ(net.ep[0]->next_deadline(), kNever);
  EXPECT_EQ(net.ep[1]->next_deadline(), kNever);
}

// A message the peer received before it closed completes, although the segment before it (a CREDIT)
// was lost and no ACK of the message came back: the closing side sends its FIN only once what it
// received has no gap, so that the FIN's cumulative ACK covers the message. (Seen under injected loss:
// a client's last control message failed with "peer closed the connection" after the server had it.)
TEST(Lifecycle, AMessageThePeerReceivedBeforeClosingCompletes) {
  TestNet net(test_config());
  auto [a, b] = net.connect_pair();
  bool b_closed = false;
  net.rule = [&](const Sent& s) {
    Fate f;
    // A's first CREDIT is lost, and B's ACKs until it closes.
    f.drop = (s.from == 0 && s.is_seg() && !s.is_data() && s.copy == 0) ||
             (s.from == 1 && s.is_ack() && !b_closed);
    return f;
  };
  std::vector<uint8_t> reply(64);
  auto r_reply = a->post_recv(reply.data(), reply.size(), 1);  // its CREDIT goes first, and is lost
  ASSERT_TRUE(r_reply);
  std::vector<uint8_t> in(2'000);
  auto r_in = b->post_recv(in.data(), in.size(), 0);
  ASSERT_TRUE(r_in);
  const auto msg = pattern(9, 2'000);
  auto s_msg = a->post_send(msg.data(), msg.size(), 0);
  ASSERT_TRUE(s_msg);
  Completion got, sent;
  ASSERT_TRUE(net.run_until([&] { return (got = b->test(*r_in)).done; }, net.now + 1'000'000'000));
  EXPECT_TRUE(got.ok) << got.error;
  b_closed = true;
  b->close(net.now);
  ASSERT_TRUE(net.run_until([&] { return (sent = a->test(*s_msg)).done; }, net.now + 5'000'000'000));
  EXPECT_TRUE(sent.ok) << sent.error;
  ASSERT_TRUE(net.run_until(
      [&] { return a->state() == ConnectionState::kClosed && b->state() == ConnectionState::kClosed; },
      net.now + 5'000'000'000));
  EXPECT_EQ(b->close_report().unfinished_recvs, 0u);
}

TEST(Lifecycle, PeerClosesMidwayAndPendingWorkFailsWithReport) {
  TestNet net(test_config());
  auto [a, b] = net.connect_pair();
  // B posts one receive; A sends two messages (the second never gets a receive); A also waits for a
  // message from B that B never sends.
  Batch first({8'000}, 4);
  first.post_recvs(b);
  first.post_sends(a);
  const auto orphan = pattern(5, 4'000);
  auto s2 = a->post_send(orphan.data(), orphan.size(), 0);
  std::vector<uint8_t> back(100);
  auto r_back = a->post_recv(back.data(), back.size(), 0);
  ASSERT_TRUE(first.run(net, a, b));
  first.expect_intact(b);
  // Now B posts another receive and closes before any data for it could come.
  std::vector<uint8_t> late(10'000);
  auto r_late = b->post_recv(late.data(), late.size(), 6);
  EXPECT_EQ(net.ep[0]->requests_pending(), 2u);  // the orphan send and the receive from B
  EXPECT_EQ(net.ep[1]->requests_pending(), 1u);
  b->close(net.now);
  ASSERT_TRUE(net.run_until(
      [&] { return a->state() == ConnectionState::kClosed && b->state() == ConnectionState::kClosed; },
      net.now + 1'000'000'000));
  Completion c2 = a->test(*s2), cb = a->test(*r_back), cl = b->test(*r_late);
  ASSERT_TRUE(c2.done && cb.done && cl.done);
  EXPECT_FALSE(c2.ok);
  EXPECT_FALSE(cb.ok);
  EXPECT_FALSE(cl.ok);
  EXPECT_NE(c2.error.find("peer closed the connection (it left 0 sends and 1 receives unfinished)"),
            std::string::npos)
      << c2.error;
  EXPECT_NE(cl.error.find("closed locally with 1 receives pending"), std::string::npos) << cl.error;
  EXPECT_EQ(c2.code, ErrorCode::kRemote);  // the peer's close failed them
  EXPECT_EQ(cb.code, ErrorCode::kRemote);
  EXPECT_EQ(cl.code, ErrorCode::kInvalidUsage);  // our own close did
  EXPECT_TRUE(a->close_report().closed_by_peer);
  EXPECT_EQ(a->close_report().unfinished_sends, 1u);
  EXPECT_EQ(a->close_report().unfinished_recvs, 1u);
  EXPECT_EQ(a->close_report().peer_unfinished_recvs, 1u);
  EXPECT_EQ(b->close_report().peer_unfinished_sends, 1u);
  EXPECT_EQ(b->close_report().unfinished_recvs, 1u);
  // Failed requests are completed ones: nothing is left pending for a wire to poll for.
  EXPECT_EQ(net.ep[0]->requests_pending(), 0u);
  EXPECT_EQ(net.ep[1]->requests_pending(), 0u);
}

// The last message before a close: B takes it and closes at once, and every ACK B sends is lost. B's
// FIN carries its receive point, so A's send completes as delivered instead of failing as unfinished.
TEST(Lifecycle, FinAcknowledgesWhatItsLostAcksCouldNot) {
  TestNet net(test_config());
  auto [a, b] = net.connect_pair();
  net.rule = [](const Sent& s) {
    Fate f;
    f.drop = s.from == 1 && s.is_ack();
    return f;
  };
  const auto msg = pattern(3, 6'000);
  std::vector<uint8_t> got(msg.size());
  auto r = b->post_recv(got.data(), got.size(), 0);
  auto s = a->post_send(msg.data(), msg.size(), 0);
  ASSERT_TRUE(r.ok() && s.ok());
  ASSERT_TRUE(net.run_until([&] { return b->test(*r).done; }, net.now + 1'000'000'000));
  EXPECT_FALSE(a->test(*s).done);  // no ACK reached A
  b->close(net.now);
  ASSERT_TRUE(net.run_until([&] { return a->state() == ConnectionState::kClosed; }, net.now + 1'000'000'000));
  const Completion c = a->test(*s);
  ASSERT_TRUE(c.done);
  EXPECT_TRUE(c.ok) << c.error;
  EXPECT_EQ(c.bytes, msg.size());
  EXPECT_EQ(a->close_report().unfinished_sends, 0u);
  EXPECT_EQ(got, msg);
}

TEST(Lifecycle, LostFinIsRetransmitted) {
  TestNet net(test_config());
  auto [a, b] = net.connect_pair();
  net.rule = [](const Sent& s) {
    Fate f;
    f.drop = s.pkt.hdr.type == PacketType::kFin && s.copy == 0;  // both the FIN and its reply, once
    return f;
  };
  a->close(net.now);
  ASSERT_TRUE(net.run_until(
      [&] { return a->state() == ConnectionState::kClosed && b->state() == ConnectionState::kClosed; },
      net.now + 1'000'000'000));
}

TEST(Lifecycle, PeerVanishesErrorWithinTheRetryBudget) {
  EngineConfig cfg = test_config();
  cfg.cc.rto.retry_budget_ns = 5'000'000'000;  // 5 s of virtual time
  TestNet net(cfg);
  auto [a, b] = net.connect_pair();
  Batch batch({200'000}, 6);
  batch.post_recvs(b);
  std::vector<uint8_t> back(10);
  auto r_back = a->post_recv(back.data(), back.size(), 0);
  batch.post_sends(a);
  net.run_for(20'000);  // some data flows...
  net.rule = [](const Sent&) {
    Fate f;
    f.drop = true;  // ...then B is gone: nothing gets through any more
    return f;
  };
  const TimeNs vanished = net.now;
  cc::RtoEstimator worst(cfg.cc.rto, 0);
  ASSERT_TRUE(
      net.run_until([&] { return a->state() == ConnectionState::kFailed; }, net.now + 120'000'000'000));
  EXPECT_NE(a->error().find("unreachable: no progress for"), std::string::npos) << a->error();
  EXPECT_NE(a->error().find("retransmission timeouts"), std::string::npos) << a->error();
  EXPECT_NE(a->error().find(" s after "), std::string::npos) << a->error();  // seconds, for a 5 s budget
  // Failed after the budget, and not much later than the slowest schedule allows.
  EXPECT_GE(net.now - vanished, cfg.cc.rto.retry_budget_ns);
  EXPECT_LE(net.now - vanished, worst.worst_case_budget_ns() + cfg.cc.rto.max_rto_ns);
  Completion s = a->test(batch.msgs[0].send_id), r = a->test(*r_back);
  EXPECT_TRUE(s.done && !s.ok);
  EXPECT_TRUE(r.done && !r.ok);
  EXPECT_EQ(s.error, a->error());
  EXPECT_EQ(s.code, ErrorCode::kTimeout);
  EXPECT_EQ(r.code, ErrorCode::kTimeout);
  auto late = a->post_send(back.data(), back.size(), 0);  // a failed connection takes no more
  ASSERT_FALSE(late);
  EXPECT_EQ(late.error().code, ErrorCode::kTimeout);  // the connection's failure, not the post's
  EXPECT_GE(a->stats().timeouts, 5u);
  EXPECT_LT(a->stats().bytes_acked, 200'000u);  // it did vanish mid-transfer
  EXPECT_EQ(net.ep[0]->stats().connections_failed, 1u);
  EXPECT_EQ(net.ep[0]->next_deadline(), kNever);  // no timers left: nothing spins
}

// A budget of milliseconds (as the simulator's flap scenarios use) reads in milliseconds, not "0.0 s".
TEST(Lifecycle, ShortRetryBudgetIsReportedInMilliseconds) {
  EngineConfig cfg = test_config();
  cfg.cc.rto.retry_budget_ns = 3'000'000;  // 3 ms
  cfg.cc.rto.min_rto_ns = std::min<TimeNs>(cfg.cc.rto.min_rto_ns, 100'000);
  cfg.cc.rto.initial_rto_ns = std::min<TimeNs>(cfg.cc.rto.initial_rto_ns, 200'000);
  TestNet net(cfg);
  auto [a, b] = net.connect_pair();
  Batch batch({50'000}, 7);
  batch.post_recvs(b);
  net.rule = [](const Sent& s) {
    Fate f;
    f.drop = s.is_data();  // every data segment is lost
    return f;
  };
  batch.post_sends(a);
  ASSERT_TRUE(net.run_until([&] { return a->state() == ConnectionState::kFailed; }, net.now + 1'000'000'000));
  EXPECT_NE(a->error().find("unreachable: no progress for"), std::string::npos) << a->error();
  EXPECT_NE(a->error().find(" ms after "), std::string::npos) << a->error();
}

TEST(Lifecycle, IdlePeerVanishesPendingReceiveFailsByKeepalive) {
  EngineConfig cfg = test_config();
  cfg.cc.rto.retry_budget_ns = 3'000'000'000;
  cfg.keepalive_interval_ns = 500'000'000;
  TestNet net(cfg);
  auto [a, b] = net.connect_pair();
  std::vector<uint8_t> buf(100);
  auto r = a->post_recv(buf.data(), buf.size(), 0);  // waits for a message B will never send
  net.run_for(5'000'000'000);  // a live but silent peer answers the probes: nothing fails
  EXPECT_EQ(a->state(), ConnectionState::kEstablished);
  EXPECT_FALSE(a->test(*r).done);
  net.rule = [](const Sent&) {
    Fate f;
    f.drop = true;
    return f;
  };
  const TimeNs vanished = net.now;
  ASSERT_TRUE(
      net.run_until([&] { return a->state() == ConnectionState::kFailed; }, net.now + 60'000'000'000));
  EXPECT_NE(a->error().find("keepalive probes unanswered"), std::string::npos) << a->error();
  EXPECT_GE(net.now - vanished, cfg.cc.rto.retry_budget_ns);
  EXPECT_LE(net.now - vanished,
            cfg.keepalive_interval_ns + cfg.cc.rto.retry_budget_ns + cfg.cc.rto.max_rto_ns);
  Completion c = a->test(*r);
  EXPECT_TRUE(c.done && !c.ok);
  EXPECT_EQ(c.error, a->error());
}

// What a UDP wire sees when the peer process is gone but its host is up: every datagram A sends to B
// comes back as ICMP port unreachable, which the wire reports (Endpoint::on_port_unreachable).
struct ClosedPort {
  TestNet& net;
  bool closed = false;  // B's port is closed: A's packets are lost and reported
  bool forged = false;  // reports for A's packets although B still answers (a forged ICMP)
  bool silent = false;  // A's lost packets draw no report (ICMP dropped on the path, say)
  uint64_t unreported = 0;
  uint64_t reported = 0;

  explicit ClosedPort(TestNet& n) : net(n) {
    net.rule = [this](const Sent& s) {
      Fate f;
      if (s.from == 0 && (closed || forged) && !silent) ++unreported;
      f.drop = closed;
      return f;
    };
  }
  // Hands the reports to A's endpoint; call between events (a run_until predicate).
  void report() {
    for (; unreported > 0; --unreported, ++reported) net.ep[0]->on_port_unreachable(net.now, kPeerB);
  }
};

TEST(Lifecycle, PeerWhosePortClosedFailsAfterTheGraceNotTheRetryBudget) {
  EngineConfig cfg = test_config();
  cfg.cc.rto.retry_budget_ns = 30'000'000'000;
  TestNet net(cfg);
  auto [a, b] = net.connect_pair();
  ClosedPort port(net);
  Batch batch({200'000}, 6);
  batch.post_recvs(b);
  std::vector<uint8_t> back(10);
  auto r_back = a->post_recv(back.data(), back.size(), 0);
  batch.post_sends(a);
  net.run_for(20'000);  // some data flows, then B's process is gone
  port.closed = true;
  const TimeNs gone = net.now;
  ASSERT_TRUE(net.run_until(
      [&] {
        port.report();
        return a->state() == ConnectionState::kFailed;
      },
      net.now + 60'000'000'000));
  EXPECT_NE(a->error().find("gone: its port is closed (ICMP port unreachable for"), std::string::npos)
      << a->error();
  // After the grace, within a few backed-off retransmissions of it; far inside the retry budget.
  EXPECT_GE(net.now - gone, cfg.port_closed_fail_ns);
  EXPECT_LE(net.now - gone, 2 * cfg.port_closed_fail_ns + cfg.cc.rto.min_rto_ns);
  EXPECT_GE(port.reported, 2u);
  EXPECT_EQ(net.ep[0]->stats().port_unreachable_reports, port.reported);
  Completion s = a->test(batch.msgs[0].send_id), r = a->test(*r_back);
  EXPECT_TRUE(s.done && !s.ok);
  EXPECT_TRUE(r.done && !r.ok);
  EXPECT_EQ(s.error, a->error());
  EXPECT_EQ(s.code, ErrorCode::kRemote);
  EXPECT_EQ(r.code, ErrorCode::kRemote);
  EXPECT_EQ(net.ep[0]->next_deadline(), kNever);
}

// The reports begin only after the retransmissions have backed off to the 1 s ceiling (until then the
// peer's socket swallowed them: a process still dying, say). The next retransmission after the first
// report is then up to a second away, so the connection probes the peer itself once the grace is over,
// and that probe's report fails it.
TEST(Lifecycle, ClosedPortIsConfirmedByAProbeAtTheGraceNotAtTheNextBackedOffRetransmission) {
  EngineConfig cfg = test_config();
  cfg.cc.rto.retry_budget_ns = 30'000'000'000;
  TestNet net(cfg);
  auto [a, b] = net.connect_pair();
  ClosedPort port(net);
  Batch batch({200'000}, 10);
  batch.post_recvs(b);
  batch.post_sends(a);
  net.run_for(20'000);
  port.closed = port.silent = true;  // silently at first: lost, never reported
  net.run_for(4'000'000'000);
  port.silent = false;
  ASSERT_EQ(a->state(), ConnectionState::kEstablished);
  TimeNs first = kNever;
  ASSERT_TRUE(net.run_until(
      [&] {
        if (port.unreported > 0 && first == kNever) first = net.now;
        port.report();
        return a->state() == ConnectionState::kFailed;
      },
      net.now + 10'000'000'000));
  EXPECT_NE(a->error().find("gone: its port is closed"), std::string::npos) << a->error();
  EXPECT_GE(net.now - first, cfg.port_closed_fail_ns);
  EXPECT_LE(net.now - first, cfg.port_closed_fail_ns + 1'000'000);  // the probe's report, not 1 s later
}

TEST(Lifecycle, PortUnreachableFromAPeerThatStillAnswersFailsNothing) {
  EngineConfig cfg = test_config();
  TestNet net(cfg);
  auto [a, b] = net.connect_pair();
  ClosedPort port(net);
  port.forged = true;  // every packet of A's is "reported", but B receives and answers them all
  Batch batch({2'000'000}, 8);
  batch.post_recvs(b);
  batch.post_sends(a);
  ASSERT_TRUE(net.run_until(
      [&] {
        port.report();
        bool all = true;
        for (Batch::Msg& m : batch.msgs) {
          if (!m.sc.done) m.sc = a->test(m.send_id);
          if (!m.rc.done) m.rc = b->test(m.recv_id);
          all = all && m.sc.done && m.rc.done;
        }
        return all;
      },
      net.now + 10'000'000'000));
  EXPECT_GT(port.reported, 10u);
  EXPECT_EQ(a->state(), ConnectionState::kEstablished);
  batch.expect_intact(b);
}

TEST(Lifecycle, OneReportAloneOrTheReportsTurnedOffLeaveItToTheRetryBudget) {
  for (const bool off : {false, true}) {
    EngineConfig cfg = test_config();
    cfg.cc.rto.retry_budget_ns = 2'000'000'000;
    if (off) cfg.port_closed_fail_ns = 0;
    TestNet net(cfg);
    auto [a, b] = net.connect_pair();
    ClosedPort port(net);
    Batch batch({200'000}, 9);
    batch.post_recvs(b);
    batch.post_sends(a);
    net.run_for(20'000);
    port.closed = true;
    ASSERT_TRUE(net.run_until(
        [&] {
          // One report (off: all of them); later packets are lost without a word, as on a path that
          // drops ICMP.
          port.report();
          if (!off && port.reported > 0) port.silent = true;
          return a->state() == ConnectionState::kFailed;
        },
        net.now + 60'000'000'000))
        << "off=" << off;
    EXPECT_GE(port.reported, 1u);
    EXPECT_NE(a->error().find("unreachable: no progress for"), std::string::npos) << a->error();
  }
}

TEST(Lifecycle, PacketsForUnknownConnectionsGetARateLimitedReset) {
  TestNet net(test_config());
  auto [a, b] = net.connect_pair();
  const ConnId bid = b->id();
  net.ep[1]->release(bid);  // B forgets the connection without telling A (its RST is lost)
  net.rule = [](const Sent& s) {
    Fate f;
    f.drop = s.pkt.hdr.type == PacketType::kRst && s.pkt.rst.reason == RstReason::kAborted;
    return f;
  };
  net.run_for(1'000'000);
  net.rule = nullptr;
  ASSERT_EQ(a->state(), ConnectionState::kEstablished);
  Batch batch({20'000}, 7);
  batch.post_sends(a);
  std::vector<uint8_t> buf(10);
  auto r = a->post_recv(buf.data(), buf.size(), 0);  // A's credit reaches B, which knows no such id
  ASSERT_TRUE(net.run_until([&] { return a->state() == ConnectionState::kFailed; }, net.now + 1'000'000'000));
  EXPECT_NE(a->error().find("connection reset by peer"), std::string::npos) << a->error();
  EXPECT_NE(a->error().find("unknown connection"), std::string::npos) << a->error();
  EXPECT_GE(net.ep[1]->stats().unknown_connection, 1u);
  EXPECT_EQ(net.ep[1]->stats().rsts_sent, 2u);  // the lost abort, and one for the unknown id
  Completion c = a->test(*r);
  EXPECT_TRUE(c.done && !c.ok);
}

// A wire sends each lane from its own UDP source port, so the receiving wire names each lane's packets
// by a different peer id (and a repathed lane by yet another). Packets that name a connection id of
// ours are that connection's whatever peer id they come with; replies still go to the connection's own
// peer (TestNet checks every transmitted packet's peer).
TEST(Lifecycle, LanesArrivingUnderDistinctPeerIdsAreOneConnection) {
  EngineConfig cfg = test_config();
  cfg.lanes = 4;
  cfg.cc.kind = cc::ControllerKind::kDcqcn;  // so CNPs flow too
  TestNet net(cfg);
  std::set<uint32_t> peers_seen[2];
  uint64_t marked = 0;
  net.rule = [&](const Sent& s) {
    Fate f;
    // The SYN comes from the home address (path id 0); everything else from its lane's port. The
    // SYN_ACK and FIN leave on lane 0, which is not the port the initiator connected to.
    if (s.pkt.hdr.type != PacketType::kSyn) {
      f.from_peer = 100 + 10 * static_cast<uint32_t>(s.from) + s.pkt.hdr.lane;
      peers_seen[1 - s.from].insert(f.from_peer);
    }
    f.ce = s.is_data() && s.index % 7 == 0;
    marked += f.ce ? 1 : 0;
    return f;
  };
  auto [a, b] = net.connect_pair();
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(a->state(), ConnectionState::kEstablished);
  EXPECT_EQ(b->peer(), kPeerA);  // the SYN's source: replies go there
  Batch ab({300'000, 1, 70'000}, 3);
  ab.post_recvs(b);
  ab.post_sends(a);
  Batch ba({200'000}, 4);
  ba.post_recvs(a);
  ba.post_sends(b);
  ASSERT_TRUE(ab.run(net, a, b));
  ASSERT_TRUE(ba.run(net, b, a));
  ab.expect_intact(b);
  ba.expect_intact(a);
  EXPECT_GE(peers_seen[1].size(), 4u);  // B heard A's four lanes under four peer ids
  EXPECT_GE(peers_seen[0].size(), 4u);
  EXPECT_GT(marked, 0u);
  EXPECT_GT(a->stats().cnps_received, 0u);  // CNPs from B's lanes' ports reached A's connection
  a->close(net.now);
  ASSERT_TRUE(net.run_until(
      [&] { return a->state() == ConnectionState::kClosed && b->state() == ConnectionState::kClosed; },
      net.now + 1'000'000'000));
  for (const auto& ep : net.ep) {
    EXPECT_EQ(ep->stats().unknown_connection, 0u);
    EXPECT_EQ(ep->stats().rsts_sent, 0u);
  }
  EXPECT_EQ(a->stats().timeouts, 0u);
}

// Demultiplexing by id keeps the rules for what names no id of ours: a packet for an unknown id gets a
// rate-limited RST to whoever sent it, and an RST about an unknown connection (it names the recipient's
// remote id) counts only when it comes from the connection's own peer.
TEST(Lifecycle, UnknownIdsAndTheirResetsStillGoByPeer) {
  TestNet net(test_config());
  auto [a, b] = net.connect_pair();
  Endpoint& eb = *net.ep[1];
  uint8_t pkt[kMaxHeaderBytes];
  const size_t n =
      encode_ack(CommonHeader{.type = PacketType::kAck, .dst_conn_id = b->id() ^ 0x5A5A}, {}, pkt);
  eb.on_packet(net.now, 77, pkt, n, false);
  TxPacket tx;
  ASSERT_TRUE(eb.poll_tx(net.now, tx));
  EXPECT_EQ(tx.peer, 77u);
  EXPECT_EQ(tx.path_id, kHomePathId);
  Packet rst;
  ASSERT_EQ(decode_packet(tx.header, tx.header_len, rst), DecodeResult::kOk);
  ASSERT_EQ(rst.hdr.type, PacketType::kRst);
  EXPECT_EQ(rst.rst.reason, RstReason::kUnknownConnection);
  EXPECT_EQ(rst.rst.ref_conn_id, b->id() ^ 0x5A5A);
  eb.on_packet(net.now + 1, 78, pkt, n, false);  // within rst_interval_ns: no second RST
  EXPECT_FALSE(eb.poll_tx(net.now + 1, tx));
  EXPECT_EQ(eb.stats().rsts_rate_limited, 1u);
  EXPECT_EQ(eb.stats().unknown_connection, 2u);

  // "Unknown connection" about A's remote id (B's id), from a stranger: ignored; from B: fatal.
  RstBody body;
  body.reason = RstReason::kUnknownConnection;
  body.ref_conn_id = a->remote_id();
  const size_t rn = encode_rst(CommonHeader{.type = PacketType::kRst, .dst_conn_id = 0}, body, pkt);
  net.ep[0]->on_packet(net.now, 77, pkt, rn, false);
  EXPECT_EQ(a->state(), ConnectionState::kEstablished);
  net.ep[0]->on_packet(net.now, kPeerB, pkt, rn, false);
  EXPECT_EQ(a->state(), ConnectionState::kFailed);
  EXPECT_NE(a->error().find("connection reset by peer"), std::string::npos) << a->error();
}

TEST(Lifecycle, ReleaseWhileOpenResetsThePeer) {
  TestNet net(test_config());
  auto [a, b] = net.connect_pair();
  std::vector<uint8_t> buf(100);
  auto r = b->post_recv(buf.data(), buf.size(), 0);
  std::vector<uint8_t> mine(100);
  ASSERT_TRUE(a->post_recv(mine.data(), mine.size(), 0).ok());
  EXPECT_EQ(net.ep[0]->requests_pending(), 1u);
  net.ep[0]->release(a->id());
  EXPECT_EQ(net.ep[0]->requests_pending(), 0u);  // released with the connection, not left pending
  ASSERT_TRUE(net.run_until([&] { return b->state() == ConnectionState::kFailed; }, net.now + 1'000'000'000));
  EXPECT_NE(b->error().find("released the connection"), std::string::npos) << b->error();
  Completion c = b->test(*r);
  EXPECT_TRUE(c.done && !c.ok);
  EXPECT_EQ(net.ep[1]->requests_pending(), 0u);
  EXPECT_EQ(net.ep[0]->connection_count(), 0u);
}

TEST(Lifecycle, MalformedPacketsAreCountedAndDropped) {
  TestNet net(test_config());
  auto [a, b] = net.connect_pair();
  Endpoint& eb = *net.ep[1];
  const uint64_t before = eb.stats().malformed_dropped;
  // Too short, wrong magic, bad header CRC (a valid ACK with a flipped bit), trailing garbage.
  uint8_t junk[64] = {1, 2, 3};
  eb.on_packet(net.now, kPeerA, junk, 3, false);
  eb.on_packet(net.now, kPeerA, junk, sizeof junk, false);
  uint8_t hdr[kMaxHeaderBytes];
  AckHeader ack;
  size_t n = encode_ack(CommonHeader{.dst_conn_id = b->id()}, ack, hdr);
  hdr[40] ^= 4;
  eb.on_packet(net.now, kPeerA, hdr, n, false);
  hdr[40] ^= 4;
  eb.on_packet(net.now, kPeerA, hdr, n + 1, false);
  EXPECT_EQ(eb.stats().malformed_dropped - before, 4u);
  // An intact ACK acknowledging data never sent is dropped by the connection and counted there.
  ack.cum_ack = 1'000'000;
  n = encode_ack(CommonHeader{.dst_conn_id = b->id()}, ack, hdr);
  eb.on_packet(net.now, kPeerA, hdr, n, false);
  EXPECT_EQ(b->stats().malformed_dropped, 1u);
  // A DATA segment for a receive slot B never posted: dropped, counted, not acknowledged.
  uint8_t pkt[kMaxHeaderBytes + 4] = {};
  SegHeader seg;
  seg.seq = 0;
  seg.slot = 5;
  seg.msg_len = 4;
  seg.payload_len = 4;
  seg.payload_crc = crc32c(pkt + kSegHeaderBytes, 4);
  n = encode_seg(CommonHeader{.flags = kFlagLast, .dst_conn_id = b->id()}, seg, pkt);
  eb.on_packet(net.now, kPeerA, pkt, n + 4, false);
  EXPECT_EQ(b->stats().malformed_dropped, 2u);
  EXPECT_EQ(b->stats().segments_received, 0u);
  // The connection still works.
  Batch batch({9'000}, 8);
  batch.post_recvs(b);
  batch.post_sends(a);
  ASSERT_TRUE(batch.run(net, a, b));
  batch.expect_intact(b);
}

}  // namespace
}  // namespace megascale::engine::testing
