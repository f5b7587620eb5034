// The UDP wire end to end on loopback, two wires in one process. Transfers: messages of every size, a
// zero-length one, the default controller, caller-driven progress (NCCL's way) with and without I/O threads,
// and CE marks echoed back.
#include <gtest/gtest.h>

#include "udp_loopback.h"

namespace megascale::wire {
namespace {

TEST_P(UdpLoopback, MessagesOfEverySizeArriveIntact) {
  Pair p = connect_pair(host_, FaultConfig{}, FaultConfig{});
  ASSERT_TRUE(p.recv_conn);
  std::printf("[ caps ] %s\n", p.sender->capabilities().describe().c_str());
  const std::vector<uint64_t> sizes = {1,       7,        4096,     8191,          8192,     8193,
                                       100'000, kMiB + 3, 4 * kMiB, 16 * kMiB - 1, 64 * kMiB};
  TransferResult r;
  ASSERT_NO_FATAL_FAILURE(transfer(p, sizes, sec(30), r));
  report(host_.c_str(), r, p);
  // Four lanes, four ports: every port carried data (each lane's path id has a socket of its own).
  const UdpWireStats tx = p.sender->stats();
  ASSERT_EQ(tx.datagrams_per_port.size(), 4u);
  for (uint64_t n : tx.datagrams_per_port)
    EXPECT_GT(n, 0u);  // a lane whose path looks slow (a loaded host) may carry little
  // Every datagram went to the engine with its kernel receive timestamp (GRO aggregates' included),
  // and the engine saw this host's receive delay.
  const UdpWireStats rx = p.receiver->stats();
  ASSERT_TRUE(p.receiver->capabilities().rx_timestamps);
  EXPECT_EQ(rx.rx_timestamped + rx.rx_timestamps_rejected, rx.datagrams_received);
  EXPECT_EQ(rx.rx_timestamps_rejected, 0u) << "the realtime clock stepped during the test?";
  const uint64_t stamped = p.sender->with_endpoint(
      [&](engine::Endpoint& ep) { return ep.connection(p.send_conn)->stats().rx_delay.count(); });
  EXPECT_EQ(stamped, tx.datagrams_received);  // ACKs and credits, every one stamped
  // Both directions work on one connection: the receiver sends back.
  Pair back{std::move(p.receiver), std::move(p.sender), p.recv_conn, p.send_conn};
  TransferResult r2;
  ASSERT_NO_FATAL_FAILURE(transfer(back, {3, 5 * kMiB}, sec(30), r2));
  EXPECT_EQ(r2.bytes, 5 * kMiB + 3);
}

TEST_P(UdpLoopback, ZeroLengthMessage) {
  Pair p = connect_pair(host_, FaultConfig{}, FaultConfig{});
  ASSERT_TRUE(p.recv_conn);
  TransferResult r;
  ASSERT_NO_FATAL_FAILURE(transfer(p, {0, 1, 0}, sec(10), r));
  EXPECT_EQ(r.bytes, 1u);
}

TEST_P(UdpLoopback, DefaultCongestionControlPreset) {
  UdpConfig c;
  c.bind_host = host_;
  c.engine.cc.rto.retry_budget_ns = sec(10);
  Pair p = connect_pair(c, c);
  ASSERT_TRUE(p.recv_conn);
  TransferResult r;
  ASSERT_NO_FATAL_FAILURE(transfer(p, {1, 100'000, 4 * kMiB}, sec(60), r));
  report((host_ + " default cc").c_str(), r, p);
}

// NCCL's way: no wire threads; one thread posts, tests and calls progress() on both wires.
void caller_driven_transfer(const std::string& host_, uint32_t io_threads) {
  UdpConfig c = wire_config(host_, FaultConfig{});
  c.io_threads = io_threads;
  auto rw = UdpWire::create(c);
  auto sw = UdpWire::create(c);
  ASSERT_TRUE(rw && sw);
  UdpWire& receiver = **rw;
  UdpWire& sender = **sw;
  auto peer = sender.add_peer(host_, receiver.local_port());
  ASSERT_TRUE(peer) << peer.error().message;
  const TimeNs t0 = UdpWire::now();
  auto conn = sender.endpoint().connect(UdpWire::now(), *peer);
  ASSERT_TRUE(conn);
  std::optional<engine::ConnId> accepted;
  const uint64_t size = 3 * kMiB + 17;
  std::vector<uint8_t> data(size), sink(size);
  fill(data, size, 77);
  engine::RequestId send_req = 0, recv_req = 0;
  engine::Completion send_done, recv_done;
  auto pump = [&] {
    ASSERT_TRUE(sender.progress());
    ASSERT_TRUE(receiver.progress());
  };
  while (!accepted && UdpWire::now() - t0 < sec(10)) {
    pump();
    accepted = receiver.endpoint().accept();
  }
  ASSERT_TRUE(accepted) << "no connection within 10 s";
  send_req = *sender.endpoint().connection(*conn)->post_send(data.data(), size, 5);
  recv_req = *receiver.endpoint().connection(*accepted)->post_recv(sink.data(), size, 5);
  while (!(send_done.done && recv_done.done) && UdpWire::now() - t0 < sec(20)) {
    pump();
    // The wire's test(): with I/O threads it holds the send back until they no longer read its buffer.
    if (!send_done.done) send_done = sender.test(*conn, send_req);
    if (!recv_done.done) recv_done = receiver.endpoint().connection(*accepted)->test(recv_req);
  }
  ASSERT_TRUE(send_done.done && recv_done.done) << "not done within 20 s";
  EXPECT_TRUE(send_done.ok) << send_done.error;
  ASSERT_TRUE(recv_done.ok) << recv_done.error;
  EXPECT_EQ(recv_done.bytes, size);
  EXPECT_EQ(recv_done.tag, 5);
  EXPECT_EQ(first_mismatch(sink, size, 77), -1);
  EXPECT_GT(sender.stats().progress_calls, 0u);
}

TEST_P(UdpLoopback, CallerDrivenProgressOnOneThread) {
  caller_driven_transfer(host_, 0);
}

// As NCCL drives it, with the system calls on two I/O threads per wire: progress() only runs the
// engine, and the datagrams still go out and come in.
TEST_P(UdpLoopback, CallerDrivenProgressWithIoThreads) {
  caller_driven_transfer(host_, 2);
}

// CE marks reach the engine and come back to the sender as ECN echoes (the kernel's IP_RECVTOS path
// itself is tested in udp_io_test; here the mark is injected at the receiving wire).
TEST_P(UdpLoopback, CeMarksReachTheEngineAndAreEchoed) {
  FaultConfig mark;
  mark.mark_ce = 1.0;
  Pair p = connect_pair(host_, FaultConfig{}, mark);
  ASSERT_TRUE(p.recv_conn);
  TransferResult r;
  ASSERT_NO_FATAL_FAILURE(transfer(p, {kMiB}, sec(20), r));
  const uint64_t ce_received = p.receiver->with_endpoint(
      [&](engine::Endpoint& ep) { return ep.connection(p.recv_conn)->stats().ce_received; });
  const uint64_t echoed = p.sender->with_endpoint(
      [&](engine::Endpoint& ep) { return ep.connection(p.send_conn)->stats().ecn_marks; });
  EXPECT_GE(ce_received, kMiB / 8192);  // every data segment arrived marked
  EXPECT_GT(echoed, 0u);
  EXPECT_GT(p.receiver->stats().fault.ce_marked, 0u);
}

INSTANTIATE_TEST_SUITE_P(Loopback, UdpLoopback, loopback_hosts(), loopback_host_name);

}  // namespace
}  // namespace megascale::wire
