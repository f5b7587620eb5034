// Replayed and stale handshakes (protocol version 3, EngineConfig::confirm_handshake): a server that
// gets an earlier run's datagrams, replayed by a stranger, hands no phantom connection to accept(),
// and a real client that comes after is served. The datagrams are captured from a run in TestNet and
// sent into a fresh endpoint, which (as a fresh process with its own seed) draws other ids.
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "test_net.h"

namespace megascale::engine::testing {
namespace {

// The client's (A's) datagrams of one complete run: handshake, a message, close.
std::vector<std::vector<uint8_t>> capture_client_run() {
  TestNet net(test_config(1), test_config(2));
  auto [a, b] = net.connect_pair();
  EXPECT_NE(b, nullptr);
  if (b == nullptr) return {};
  Batch batch({20'000}, 1);
  batch.post_recvs(b);
  batch.post_sends(a);
  EXPECT_TRUE(batch.run(net, a, b));
  a->close(net.now);
  b->close(net.now);
  net.run_for(100'000'000);
  std::vector<std::vector<uint8_t>> sent;
  for (const Sent& s : net.trace) {
    if (s.from == 0) sent.push_back(s.bytes);
  }
  return sent;
}

// A fresh server (its own seed, as a new process draws) and, later, a real client.
struct FreshServer {
  TestNet net{test_config(5), test_config(6)};  // ep[0]: the real client; ep[1]: the server
  Endpoint& server() { return *net.ep[1]; }

  // The replayer sends `datagrams` from the client's address, 10 us apart, as a relay would.
  void replay(const std::vector<std::vector<uint8_t>>& datagrams) {
    for (const auto& d : datagrams) {
      server().on_packet(net.now, kPeerA, d.data(), d.size(), false);
      net.run_for(10'000);
    }
  }
};

TEST(Replay, ACapturedRunReplayedIntoAFreshServerYieldsNoConnection) {
  const auto captured = capture_client_run();
  ASSERT_GT(captured.size(), 5u);
  FreshServer f;
  f.replay(captured);
  f.net.run_for(20'000'000);
  EXPECT_FALSE(f.server().accept().has_value()) << "the server adopted a phantom client";
  EXPECT_EQ(f.server().stats().connections_accepted, 0u);
  EXPECT_GT(f.server().stats().unknown_connection, 0u);  // the run's data named ids this server never drew
  // The replayed SYN's half-open connection is dropped, unseen, once the connect timeout passes.
  f.net.run_for(f.server().config().connect_timeout_ns + 1'000'000'000);
  EXPECT_EQ(f.server().connection_count(), 0u);
  EXPECT_EQ(f.server().stats().handshakes_unconfirmed, 1u);

  // A real client afterwards is served.
  auto [a, b] = f.net.connect_pair();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->remote_id(), a->id());
  Batch batch({30'000}, 2);
  batch.post_recvs(b);
  batch.post_sends(a);
  ASSERT_TRUE(batch.run(f.net, a, b));
  batch.expect_intact(b);
}

TEST(Replay, AReplayedSynDoesNotTurnTheRealClientAway) {
  const auto captured = capture_client_run();
  ASSERT_FALSE(captured.empty());
  FreshServer f;
  f.replay({captured.front()});  // the SYN alone, just before the real client comes
  ASSERT_EQ(f.server().stats().syns_received, 1u);
  auto [a, b] = f.net.connect_pair();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->remote_id(), a->id()) << "accept() gave the replayed SYN's connection first";
  Batch batch({10'000}, 3);
  batch.post_recvs(b);
  batch.post_sends(a);
  ASSERT_TRUE(batch.run(f.net, a, b));
  batch.expect_intact(b);
  f.net.run_for(f.server().config().connect_timeout_ns + 1'000'000'000);
  EXPECT_FALSE(f.server().accept().has_value());
  EXPECT_EQ(f.server().stats().connections_accepted, 1u);
  EXPECT_EQ(f.server().stats().handshakes_unconfirmed, 1u);
}

TEST(Replay, ALostConfirmationIsRecoveredBySynAckRetransmission) {
  // Without the confirming ACK the acceptor sends its SYN_ACK again; the initiator confirms again.
  TestNet net(test_config(1), test_config(2));
  int acks_from_a = 0;
  net.rule = [&](const Sent& s) {
    Fate f;
    f.drop = s.from == 0 && s.is_ack() && acks_from_a++ == 0;  // the first confirmation
    return f;
  };
  auto id = net.ep[0]->connect(net.now, kPeerB);
  ASSERT_TRUE(id.ok());
  Connection* a = net.ep[0]->connection(*id);
  Connection* b = nullptr;
  // The SYN_ACK goes again after the handshake's initial RTO (cc.rto.initial_rto_ns).
  ASSERT_TRUE(net.run_until(
      [&] {
        if (auto acc = net.ep[1]->accept()) b = net.ep[1]->connection(*acc);
        return b != nullptr;
      },
      net.now + 10'000'000'000));
  uint32_t synacks = 0;
  bool flagged = true;
  for (const Sent& s : net.trace) {
    if (s.pkt.hdr.type != PacketType::kSynAck) continue;
    ++synacks;
    flagged &= (s.pkt.hdr.flags & kFlagConfirm) != 0;
  }
  EXPECT_EQ(synacks, 2u);
  EXPECT_TRUE(flagged);
  EXPECT_EQ(b->remote_id(), a->id());
}

TEST(Replay, WithoutConfirmationAcceptGetsTheConnectionAtItsSyn) {
  // confirm_handshake off (the simulator's setting): no flag, no extra packet, accept() at the SYN.
  EngineConfig cb = test_config(2);
  cb.confirm_handshake = false;
  TestNet net(test_config(1), cb);
  ASSERT_TRUE(net.ep[0]->connect(net.now, kPeerB).ok());
  net.run_for(6'000);  // the SYN has arrived, the SYN_ACK not yet
  EXPECT_TRUE(net.ep[1]->accept().has_value());
  net.run_for(1'000'000);
  for (const Sent& s : net.trace) {
    EXPECT_NE(s.pkt.hdr.type, PacketType::kAck) << "an ACK with nothing to acknowledge";
    EXPECT_EQ(s.pkt.hdr.flags & kFlagConfirm, 0);
  }
}

TEST(Replay, ARefusedClientIsToldWhy) {
  TestNet net(test_config(1), test_config(2));
  auto [a, b] = net.connect_pair();
  ASSERT_NE(b, nullptr);
  net.ep[1]->refuse(b->id(), "server busy: serving another client");
  ASSERT_TRUE(net.run_until([&] { return a->state() == ConnectionState::kFailed; }, net.now + 1'000'000'000));
  EXPECT_EQ(a->error(), "connection refused by peer 2: server busy: serving another client");
  EXPECT_EQ(net.ep[1]->connection_count(), 0u);
}

}  // namespace
}  // namespace megascale::engine::testing
