// The UDP wire end to end on loopback, two wires in one process. I/O threads: every lane moved and every byte
// kept, stalled threads taken over by siblings, and the TX and copy fences that report each send and receive
// once, with its bytes in place.
#include <gtest/gtest.h>

#include "udp_loopback.h"

namespace megascale::wire {
namespace {

// Threaded, four lanes on two I/O threads per side: big and odd sizes arrive intact, every lane's port
// carried data, and the receive path (kernel timestamps, CRCs checked off the engine's thread) holds.
TEST_P(UdpLoopback, IoThreadsMoveEveryLaneAndKeepEveryByte) {
  UdpConfig c = wire_config(host_, FaultConfig{});
  c.io_threads = 2;
  Pair p = connect_pair(c, c);
  ASSERT_TRUE(p.recv_conn);
  TransferResult r;
  ASSERT_NO_FATAL_FAILURE(transfer(p, {1, 8191, 8193, kMiB + 3, 16 * kMiB - 1, 64 * kMiB}, sec(60), r));
  report((host_ + " io_threads 2").c_str(), r, p);
  const UdpWireStats tx = p.sender->stats();
  const UdpWireStats rx = p.receiver->stats();
  ASSERT_EQ(tx.datagrams_per_port.size(), 4u);
  for (uint64_t n : tx.datagrams_per_port) EXPECT_GT(n, 0u);
  EXPECT_GT(tx.send_syscalls, 0u);
  EXPECT_GT(rx.recv_syscalls, 0u);
  EXPECT_EQ(rx.rx_timestamped + rx.rx_timestamps_rejected, rx.datagrams_received);
  // The port the sender's lanes all go to is a receive group of one socket per I/O thread; picked by
  // lane, the 4 lanes land 2 and 2, so both threads receive. (With the kernel's hash instead, an even
  // split is not promised.)
  const UdpCapabilities& caps = p.receiver->capabilities();
  EXPECT_EQ(caps.rx_group, 2u) << caps.describe();
  ASSERT_EQ(rx.recv_messages_per_io_thread.size(), 2u);
  if (caps.rx_spread == "lane") {
    for (uint64_t n : rx.recv_messages_per_io_thread) EXPECT_GT(n, 0u) << caps.describe();
  } else {
    std::printf("[   NOTE   ] receive group spread by the kernel's hash (%s): per-thread split not checked\n",
                caps.rx_spread.c_str());
  }
  // Every datagram the receiving engine took was accounted for by the wire, and none was refused as
  // malformed or corrupt: the CRC check on the I/O threads passed them all.
  const auto [received, corrupt] = p.receiver->with_endpoint([&](engine::Endpoint& ep) {
    return std::pair{ep.stats().packets_received, ep.connection(p.recv_conn)->stats().corrupt_dropped};
  });
  EXPECT_EQ(received, rx.datagrams_received);
  EXPECT_EQ(corrupt, 0u);
  // The I/O threads of both sides worked, and their busy time is a part of their awake time.
  for (const UdpWireStats* w : {&tx, &rx}) {
    EXPECT_GT(w->io_busy_ns, 0u);
    EXPECT_LE(w->io_busy_ns, w->io_awake_ns);
  }
  // And back the other way on the same connection.
  Pair back{std::move(p.receiver), std::move(p.sender), p.recv_conn, p.send_conn};
  TransferResult r2;
  ASSERT_NO_FATAL_FAILURE(transfer(back, {3, 5 * kMiB}, sec(30), r2));
  EXPECT_EQ(r2.bytes, 5 * kMiB + 3);
}

// With I/O threads a finished send is held back by UdpWire::test() until the threads have sent every
// batch that holds one of its packets (the TX fence, which keeps them from reading a buffer the caller
// may free): polled, each send still completes exactly once, its buffer freed the moment it does
// (caught by AddressSanitizer otherwise), and wait() finds a send that test() held back. `resent`: the
// sender's retransmissions and tail probes.
void sends_reported_once_through_tx_fence(const UdpConfig& sender_config, const UdpConfig& receiver_config,
                                          uint64_t* resent) {
  Pair p = connect_pair(sender_config, receiver_config);
  ASSERT_TRUE(p.recv_conn);
  constexpr int kMessages = 48;
  constexpr uint64_t kSize = 96 * 1024 + 5;
  std::vector<std::vector<uint8_t>> sinks(kMessages, std::vector<uint8_t>(kSize));
  std::vector<std::unique_ptr<std::vector<uint8_t>>> sources(kMessages);
  std::vector<engine::RequestId> sends(kMessages), recvs(kMessages);
  for (int i = 0; i < kMessages; ++i) {
    sources[i] = std::make_unique<std::vector<uint8_t>>(kSize);
    fill(*sources[i], kSize, 500 + i);
    auto r = p.receiver->post_recv(p.recv_conn, sinks[i].data(), kSize, i);
    auto sr = p.sender->post_send(p.send_conn, sources[i]->data(), kSize, i);
    ASSERT_TRUE(r && sr);
    recvs[i] = *r;
    sends[i] = *sr;
  }
  // The last send through wait(), after test() has had a chance to hold it back.
  int done = 0, held_looks = 0;
  std::vector<bool> reported(kMessages, false);
  const TimeNs t0 = UdpWire::now();
  while (done < kMessages - 1 && UdpWire::now() - t0 < sec(30)) {
    for (int i = 0; i < kMessages - 1; ++i) {
      if (reported[i]) continue;
      const engine::Completion sc = p.sender->test(p.send_conn, sends[i]);
      if (!sc.done) {
        ++held_looks;
        continue;
      }
      ASSERT_TRUE(sc.ok) << sc.error;
      EXPECT_TRUE(sc.send);
      EXPECT_EQ(sc.bytes, kSize);
      reported[i] = true;
      ++done;
      sources[i].reset();  // the caller's buffer is its own again
      const engine::Completion again = p.sender->test(p.send_conn, sends[i]);
      EXPECT_TRUE(again.done && !again.ok) << "a send reported twice";
    }
  }
  ASSERT_EQ(done, kMessages - 1) << "sends not reported within 30 s";
  engine::Completion last = p.sender->test(p.send_conn, sends[kMessages - 1]);
  if (!last.done) {  // held back for the fence, or still in flight
    last = p.sender->wait(p.send_conn, sends[kMessages - 1], sec(30));
  }
  ASSERT_TRUE(last.done && last.ok) << last.error;
  sources[kMessages - 1].reset();
  for (int i = 0; i < kMessages; ++i) {
    const engine::Completion rc = p.receiver->wait(p.recv_conn, recvs[i], sec(30));
    ASSERT_TRUE(rc.done && rc.ok) << rc.error;
    EXPECT_EQ(rc.bytes, kSize);
    EXPECT_EQ(first_mismatch(sinks[i], kSize, 500 + i), -1) << "message " << i;
  }
  *resent = p.sender->with_endpoint([&](engine::Endpoint& ep) {
    const engine::ConnectionStats s = ep.connection(p.send_conn)->stats();
    return s.retransmits_fast + s.retransmits_rto + s.tail_probes;
  });
  std::printf(
      "[   INFO   ] %d looks at sends not yet reported (in flight or held for the fence), %llu "
      "segments sent again\n",
      held_looks, static_cast<unsigned long long>(*resent));
}

// An I/O thread that loses its CPU (paused here, as a hypervisor or an oversubscribed scheduler would
// for milliseconds) must not hold the lanes it serves: with UdpConfig::stall_ns the engine's thread
// hands its sockets' packets to the other thread, and that thread reads its receive-group member.
TEST_P(UdpLoopback, StalledIoThreadsWorkIsTakenOverBySiblings) {
  UdpConfig c = wire_config(host_, FaultConfig{});
  c.io_threads = 2;
  c.stall_ns = 300 * kNsPerUs;
  Pair p = connect_pair(c, c);
  ASSERT_TRUE(p.recv_conn);
  ASSERT_TRUE(p.sender->pause_io_thread(1, true));
  ASSERT_TRUE(p.receiver->pause_io_thread(1, true));
  EXPECT_FALSE(p.receiver->pause_io_thread(2, true)) << "there is no third thread";
  // Paused before anything is posted and for longer than stall_ns, so that no batch is handed to it
  // first: this test is about the rerouting and the stolen receives; the next one about batches a
  // stalled thread already holds.
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  TransferResult r;
  transfer(p, {1, kMiB + 3, 16 * kMiB - 1, 8 * kMiB}, sec(20), r);
  report((host_ + " thread 1 of each side paused").c_str(), r, p);
  const UdpWireStats tx = p.sender->stats();
  const UdpWireStats rx = p.receiver->stats();
  std::printf(
      "[ takeover ] sender: %llu packets rerouted; receiver: %llu messages stolen, per thread %llu / %llu\n",
      static_cast<unsigned long long>(tx.tx_rerouted), static_cast<unsigned long long>(rx.rx_stolen),
      static_cast<unsigned long long>(rx.recv_messages_per_io_thread.at(0)),
      static_cast<unsigned long long>(rx.recv_messages_per_io_thread.at(1)));
  EXPECT_GT(tx.tx_rerouted, 0u);
  if (p.receiver->capabilities().rx_spread == "lane") {
    // Lanes 1 and 3 land on the paused thread's member: only a sibling could have read them.
    EXPECT_GT(rx.rx_stolen, 0u);
  } else {
    std::printf("[   NOTE   ] receive group spread by the kernel's hash: stolen receives not required\n");
  }
  p.sender->pause_io_thread(1, false);
  p.receiver->pause_io_thread(1, false);
}

// Batches handed to an I/O thread before it stalled are sent by its sibling: a send whose packets that
// thread holds completes while it is still gone (the TX fence passes once they are sent, by whichever
// thread), and nothing is sent twice or lost on the way.
TEST_P(UdpLoopback, StalledIoThreadsQueuedBatchesAreSentBySiblings) {
  UdpConfig c = wire_config(host_, FaultConfig{});
  c.io_threads = 2;
  // Long enough that the engine's thread goes on handing the paused thread batches until its queue is
  // full (it cannot tell the thread is gone before then).
  c.stall_ns = 20 * kNsPerMs;
  Pair p = connect_pair(c, c);
  ASSERT_TRUE(p.recv_conn);
  const uint64_t size = 16 * kMiB;
  std::vector<uint8_t> src(size), dst(size);
  fill(src, size, 11);
  auto rr = p.receiver->post_recv(p.recv_conn, dst.data(), size, 1);
  ASSERT_TRUE(rr) << rr.error().message;
  ASSERT_TRUE(p.sender->pause_io_thread(1, true));
  auto sr = p.sender->post_send(p.send_conn, src.data(), size, 1);
  ASSERT_TRUE(sr) << sr.error().message;
  const engine::Completion sc = p.sender->wait(p.send_conn, *sr, sec(20));
  EXPECT_TRUE(sc.done && sc.ok) << (sc.done ? sc.error
                                            : "the send did not complete while its thread was paused");
  const engine::Completion rc = p.receiver->wait(p.recv_conn, *rr, sec(20));
  EXPECT_TRUE(rc.done && rc.ok) << rc.error;
  EXPECT_EQ(first_mismatch(dst, size, 11), -1);
  const UdpWireStats tx = p.sender->stats();
  std::printf(
      "[ takeover ] sender: %llu datagrams sent from the paused thread's queue, %llu packets rerouted\n",
      static_cast<unsigned long long>(tx.tx_stolen), static_cast<unsigned long long>(tx.tx_rerouted));
  EXPECT_GT(tx.tx_stolen, 0u) << "no batch was queued on the paused thread, or none was taken over";
  p.sender->pause_io_thread(1, false);
}

// The same pause with the takeover off holds the transfer until the thread is back: what the test
// above guards against.
TEST_P(UdpLoopback, StalledIoThreadHoldsTrafficWhenTakeoverIsOff) {
  UdpConfig c = wire_config(host_, FaultConfig{});
  c.io_threads = 2;
  c.stall_ns = 0;
  c.engine.cc.rto.retry_budget_ns = sec(30);
  Pair p = connect_pair(c, c);
  ASSERT_TRUE(p.recv_conn);
  ASSERT_TRUE(p.sender->pause_io_thread(1, true));
  ASSERT_TRUE(p.receiver->pause_io_thread(1, true));
  const uint64_t size = 16 * kMiB;
  std::vector<uint8_t> src(size), dst(size);
  fill(src, size, 9);
  auto rr = p.receiver->post_recv(p.recv_conn, dst.data(), size, 1);
  ASSERT_TRUE(rr) << rr.error().message;
  auto sr = p.sender->post_send(p.send_conn, src.data(), size, 1);
  ASSERT_TRUE(sr) << sr.error().message;
  const engine::Completion held = p.receiver->wait(p.recv_conn, *rr, ms(1000));
  EXPECT_FALSE(held.done) << "16 MiB arrived in spite of paused threads and no takeover";
  EXPECT_EQ(p.sender->stats().tx_rerouted, 0u);
  EXPECT_EQ(p.sender->stats().tx_stolen, 0u);
  EXPECT_EQ(p.receiver->stats().rx_stolen, 0u);
  p.sender->pause_io_thread(1, false);
  p.receiver->pause_io_thread(1, false);
  const engine::Completion rc = p.receiver->wait(p.recv_conn, *rr, sec(20));
  ASSERT_TRUE(rc.done && rc.ok) << rc.error;
  EXPECT_EQ(first_mismatch(dst, size, 9), -1);
  const engine::Completion sc = p.sender->wait(p.send_conn, *sr, sec(20));
  EXPECT_TRUE(sc.done && sc.ok) << sc.error;
}

TEST_P(UdpLoopback, IoThreadsReportEachSendOnceThroughTheTxFence) {
  UdpConfig c = wire_config(host_, FaultConfig{});
  c.io_threads = 2;
  uint64_t resent = 0;
  sends_reported_once_through_tx_fence(c, c, &resent);
}

// The same with 2% of datagrams lost (and some duplicated, reordered, corrupted) on both receive paths:
// retransmissions and probes of a send may still sit in a thread's batch when its ACKs arrive, and a
// send's fence must cover them (its own batches, not only those holding its first copies).
TEST_P(UdpLoopback, IoThreadsReportEachSendOnceThroughTheTxFenceUnderLoss) {
  UdpConfig sender = wire_config(host_, faults(0.02, 31));
  UdpConfig receiver = wire_config(host_, faults(0.02, 32));
  sender.io_threads = receiver.io_threads = 2;
  sender.engine.tail_probe = receiver.engine.tail_probe = true;
  uint64_t resent = 0;
  ASSERT_NO_FATAL_FAILURE(sends_reported_once_through_tx_fence(sender, receiver, &resent));
  EXPECT_GT(resent, 0u) << "nothing was sent twice: the test shows nothing about retransmissions";
}

// In threaded mode the progress thread hands payload copies to the I/O threads and does not wait for
// them, so the engine may finish a receive whose last bytes are still being copied: UdpWire::test()
// holds it back until its own copies are done (the copy fence). Polled, every receive is reported with all
// of its bytes already in place, checked the moment test() says done, and wait() and close() keep the
// same promise.
void receives_reported_with_bytes_in_place(const UdpConfig& sender_config, const UdpConfig& receiver_config) {
  Pair p = connect_pair(sender_config, receiver_config);
  ASSERT_TRUE(p.recv_conn);
  constexpr int kMessages = 32;
  constexpr uint64_t kSize = kMiB + 7;
  std::vector<std::vector<uint8_t>> sources(kMessages, std::vector<uint8_t>(kSize));
  std::vector<std::unique_ptr<std::vector<uint8_t>>> sinks(kMessages);
  std::vector<engine::RequestId> recvs(kMessages);
  for (int i = 0; i < kMessages; ++i) {
    fill(sources[i], kSize, 700 + i);
    sinks[i] = std::make_unique<std::vector<uint8_t>>(kSize);
    auto r = p.receiver->post_recv(p.recv_conn, sinks[i]->data(), kSize, i);
    ASSERT_TRUE(r) << r.error().message;
    recvs[i] = *r;
  }
  std::vector<engine::RequestId> sends(kMessages);
  for (int i = 0; i < kMessages; ++i) {
    auto sr = p.sender->post_send(p.send_conn, sources[i].data(), kSize, i);
    ASSERT_TRUE(sr) << sr.error().message;
    sends[i] = *sr;
  }
  // The last receive through wait().
  int done = 0;
  std::vector<bool> reported(kMessages, false);
  const TimeNs t0 = UdpWire::now();
  while (done < kMessages - 1 && UdpWire::now() - t0 < sec(30)) {
    for (int i = 0; i < kMessages - 1; ++i) {
      if (reported[i]) continue;
      const engine::Completion rc = p.receiver->test(p.recv_conn, recvs[i]);
      if (!rc.done) continue;
      ASSERT_TRUE(rc.ok) << rc.error;
      EXPECT_EQ(rc.bytes, kSize);
      ASSERT_EQ(first_mismatch(*sinks[i], kSize, 700 + i), -1)
          << "message " << i << " reported before its bytes";
      reported[i] = true;
      ++done;
      sinks[i].reset();  // the caller's buffer is its own again
    }
  }
  ASSERT_EQ(done, kMessages - 1) << "receives not reported within 30 s";
  const engine::Completion last = p.receiver->wait(p.recv_conn, recvs[kMessages - 1], sec(30));
  ASSERT_TRUE(last.done && last.ok) << last.error;
  EXPECT_EQ(first_mismatch(*sinks[kMessages - 1], kSize, 700 + kMessages - 1), -1);
  EXPECT_FALSE(p.receiver->requests_held());
  // The sources stay until their sends are done (the TX fence): a retransmission may still read them.
  for (int i = 0; i < kMessages; ++i) {
    const engine::Completion sc = p.sender->wait(p.send_conn, sends[i], sec(30));
    EXPECT_TRUE(sc.done && sc.ok) << sc.error;
  }
}

TEST_P(UdpLoopback, IoThreadsReportEachReceiveWithItsBytesInPlace) {
  UdpConfig c = wire_config(host_, FaultConfig{});
  c.io_threads = 2;
  receives_reported_with_bytes_in_place(c, c);
}

// The same with 2% loss (and duplicates, reordering, corruption) on both receive paths: retransmitted
// segments are copied late, in rounds that also copy later messages' bytes, and each receive's fence
// must still cover its own last copy.
TEST_P(UdpLoopback, IoThreadsReportEachReceiveWithItsBytesInPlaceUnderLoss) {
  UdpConfig sender = wire_config(host_, faults(0.02, 41));
  UdpConfig receiver = wire_config(host_, faults(0.02, 42));
  sender.io_threads = receiver.io_threads = 2;
  sender.engine.tail_probe = receiver.engine.tail_probe = true;
  receives_reported_with_bytes_in_place(sender, receiver);
}

INSTANTIATE_TEST_SUITE_P(Loopback, UdpLoopback, loopback_hosts(), loopback_host_name);

}  // namespace
}  // namespace megascale::wire
