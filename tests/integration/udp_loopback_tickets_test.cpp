// The UDP wire end to end on loopback, two wires in one process. Tickets (UdpWire::submit): requests posted
// without the wire's lock finish with their bytes in place; those of a gone connection fail or are forgotten
// at close.
#include <gtest/gtest.h>

#include "udp_loopback.h"

namespace megascale::wire {
namespace {

// Tickets (UdpWire::submit): sends and receives submitted from threads other than the progress thread,
// without the wire's lock, each finish exactly once with its bytes in place, also when the engine's
// limits (4 sends, 4 receives outstanding) make most of them wait in the wire's queue for a later
// round, and with I/O threads (the TX and copy fences).
TEST_P(UdpLoopback, TicketsSubmittedWithoutTheLockFinishWithTheirBytesInPlace) {
  for (const uint32_t io_threads : {0u, 2u}) {
    SCOPED_TRACE(testing::Message() << "io_threads " << io_threads);
    UdpConfig c = wire_config(host_, FaultConfig{});
    c.io_threads = io_threads;
    c.engine.max_posted_sends = 4;
    c.engine.max_posted_recvs = 4;
    Pair p = connect_pair(c, c);
    ASSERT_TRUE(p.recv_conn);
    constexpr int kMessages = 32;
    const uint64_t sizes[] = {0, 1, 8192, 40 * 1024 + 3, 300 * 1024};
    std::vector<std::vector<uint8_t>> sources(kMessages), sinks(kMessages);
    std::vector<UdpWire::Ticket> sends(kMessages), recvs(kMessages);
    for (int i = 0; i < kMessages; ++i) {
      const uint64_t size = sizes[i % 5];
      sources[i].resize(size + 1);
      sinks[i].assign(size + kCanaryBytes, kCanary);
      fill(sources[i], size, 700 + i);
      recvs[i].set_recv(p.recv_conn, sinks[i].data(), size, i);
      sends[i].set_send(p.send_conn, sources[i].data(), size, i);
    }
    // Two submitting threads, one per wire, as NCCL's proxy threads of two ranks.
    std::thread receiving([&] {
      for (auto& t : recvs) p.receiver->submit(t);
    });
    std::thread sending([&] {
      for (auto& t : sends) p.sender->submit(t);
    });
    receiving.join();
    sending.join();
    const TimeNs t0 = UdpWire::now();
    const auto all_done = [](const std::vector<UdpWire::Ticket>& ts) {
      return std::all_of(ts.begin(), ts.end(), [](const UdpWire::Ticket& t) { return t.done(); });
    };
    while (!(all_done(sends) && all_done(recvs)) && UdpWire::now() - t0 < sec(20)) std::this_thread::yield();
    ASSERT_TRUE(all_done(sends) && all_done(recvs)) << "tickets never finished";
    for (int i = 0; i < kMessages; ++i) {
      const uint64_t size = sizes[i % 5];
      const engine::Completion& s = sends[i].completion();
      const engine::Completion& r = recvs[i].completion();
      ASSERT_TRUE(s.ok && s.send) << "send " << i << ": " << s.error;
      ASSERT_TRUE(r.ok && !r.send) << "receive " << i << ": " << r.error;
      EXPECT_EQ(s.bytes, size);
      EXPECT_EQ(r.bytes, size);
      EXPECT_EQ(r.tag, i);
      EXPECT_EQ(first_mismatch(sinks[i], size, 700 + i), -1) << "message " << i;
      for (uint64_t k = size; k < size + kCanaryBytes; ++k)
        ASSERT_EQ(sinks[i][k], kCanary) << "message " << i << " wrote past its buffer";
    }
  }
}

// A ticket that cannot be posted finishes at once, not ok, with the reason; close() forgets a
// connection's tickets, queued or posted, so their memory may go (ASan would see a later touch).
TEST_P(UdpLoopback, TicketsOfAGoneConnectionFailOrAreForgottenAtClose) {
  UdpConfig c = wire_config(host_, FaultConfig{});
  c.engine.max_posted_recvs = 2;
  Pair p = connect_pair(c, c);
  ASSERT_TRUE(p.recv_conn);

  UdpWire::Ticket unknown;
  uint8_t byte = 0;
  unknown.set_send(p.send_conn + 1000, &byte, 1, 0);
  p.sender->submit(unknown);
  const TimeNs t0 = UdpWire::now();
  while (!unknown.done() && UdpWire::now() - t0 < sec(10)) std::this_thread::yield();
  ASSERT_TRUE(unknown.done());
  EXPECT_FALSE(unknown.completion().ok);
  EXPECT_NE(unknown.completion().error.find("unknown connection"), std::string::npos)
      << unknown.completion().error;

  UdpWire::Ticket bad;
  bad.set_recv(p.recv_conn, nullptr, 16, 0);  // a null buffer with room for bytes
  p.receiver->submit(bad);
  while (!bad.done() && UdpWire::now() - t0 < sec(10)) std::this_thread::yield();
  ASSERT_TRUE(bad.done());
  EXPECT_FALSE(bad.completion().ok);
  EXPECT_NE(bad.completion().error.find("bad arguments"), std::string::npos) << bad.completion().error;

  {
    // Five receives against a limit of two: two posted, three queued; none can finish (nothing sent).
    std::vector<uint8_t> sink(5 * 64);
    std::vector<UdpWire::Ticket> recvs(5);
    for (int i = 0; i < 5; ++i) {
      recvs[i].set_recv(p.recv_conn, sink.data() + 64 * i, 64, i);
      p.receiver->submit(recvs[i]);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (const auto& t : recvs) EXPECT_FALSE(t.done());
    p.receiver->close(p.recv_conn, /*release=*/true);
    for (const auto& t : recvs) EXPECT_FALSE(t.done()) << "close() finished a forgotten ticket";
  }  // the tickets and their buffers are gone; the wire must not touch them again
  std::vector<uint8_t> late(64, 1);
  // The receiver's RST may reach the sender before this send is posted (the post fails), or after (the
  // wait fails or times out); either way the forgotten tickets above must stay untouched.
  auto s = p.sender->post_send(p.send_conn, late.data(), late.size(), 0);
  if (s) {
    (void)p.sender->wait(p.send_conn, *s, ms(300));
  } else {
    EXPECT_NE(s.error().message.find("released the connection"), std::string::npos) << s.error().message;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

// Bad arguments are refused where the ticket is set: submit() finishes it at once, not ok, naming them,
// without a progress round (this wire has no thread and nobody calls progress()).
TEST(UdpWireTickets, BadArgumentsFinishAtSubmitWithoutARound) {
  auto wire = UdpWire::create(wire_config("127.0.0.1", FaultConfig{}));
  ASSERT_TRUE(wire.ok()) << wire.error().message;
  UdpWire::Ticket null_send;
  null_send.set_send(1, nullptr, 16, 0);
  (*wire)->submit(null_send);
  ASSERT_TRUE(null_send.done());
  EXPECT_FALSE(null_send.completion().ok);
  EXPECT_TRUE(null_send.completion().send);
  EXPECT_EQ(null_send.completion().error, "post_send: bad arguments (tag 0, null buffer of 16 bytes)");

  UdpWire::Ticket negative_tag;
  uint8_t byte = 0;
  negative_tag.set_send(1, &byte, 1, -1);
  (*wire)->submit(negative_tag);
  ASSERT_TRUE(negative_tag.done());
  EXPECT_EQ(negative_tag.completion().error, "post_send: bad arguments (tag -1, buffer of 1 bytes)");

  UdpWire::Ticket bad_recv;
  bad_recv.set_recv(1, &byte, 1, -2);  // -1 is "any tag"; below it is no tag
  (*wire)->submit(bad_recv);
  ASSERT_TRUE(bad_recv.done());
  EXPECT_FALSE(bad_recv.completion().send);
  EXPECT_EQ(bad_recv.completion().error, "post_recv: bad arguments (tag -2, buffer of 1 bytes)");

  // A ticket set again after a refusal is an ordinary one: it waits for a round.
  bad_recv.set_recv(1, &byte, 1, 0);
  (*wire)->submit(bad_recv);
  EXPECT_FALSE(bad_recv.done());
  (*wire)->close(1);  // forgets it
}

// help(): a polling caller's thread runs the wire's rounds when nothing else does. The pair's progress
// threads are stopped after the connect, so only help() moves the tickets: 2 MiB each way, every byte
// checked. It runs no round before help_after_ns has passed since the last one ended, and none at all
// with help_after_ns 0.
TEST_P(UdpLoopback, HelpRunsRoundsOnTheCallersThreadWhenNoRoundHasEnded) {
  UdpConfig c = wire_config(host_, FaultConfig{});
  c.help_after_ns = us(1);
  Pair p = connect_pair(c, c);
  ASSERT_TRUE(p.recv_conn);
  p.sender->stop();
  p.receiver->stop();
  constexpr uint64_t kSize = 2 * kMiB;
  std::vector<uint8_t> source(kSize), sink(kSize + kCanaryBytes, kCanary);
  fill(source, kSize, 91);
  UdpWire::Ticket send, recv;
  recv.set_recv(p.recv_conn, sink.data(), kSize, 5);
  send.set_send(p.send_conn, source.data(), kSize, 5);
  p.receiver->submit(recv);
  p.sender->submit(send);
  const TimeNs t0 = UdpWire::now();
  uint64_t helped = 0;
  while (!(send.done() && recv.done()) && UdpWire::now() - t0 < sec(20)) {
    helped += p.sender->help(UdpWire::now()) ? 1 : 0;
    helped += p.receiver->help(UdpWire::now()) ? 1 : 0;
  }
  ASSERT_TRUE(send.done() && recv.done()) << "help() rounds never finished the tickets";
  ASSERT_TRUE(send.completion().ok) << send.completion().error;
  ASSERT_TRUE(recv.completion().ok) << recv.completion().error;
  EXPECT_EQ(recv.completion().bytes, kSize);
  EXPECT_EQ(first_mismatch(sink, kSize, 91), -1);
  EXPECT_EQ(sink[kSize], kCanary);
  EXPECT_EQ(p.sender->stats().help_rounds + p.receiver->stats().help_rounds, helped);

  // The threshold: a round ended at `now` holds help() off until help_after_ns later.
  UdpConfig slow = wire_config(host_, FaultConfig{});
  slow.help_after_ns = sec(1);
  auto wire = UdpWire::create(slow);
  ASSERT_TRUE(wire.ok()) << wire.error().message;
  ASSERT_TRUE((*wire)->progress());
  const TimeNs now = UdpWire::now();
  EXPECT_FALSE((*wire)->help(now));
  EXPECT_TRUE((*wire)->help(now + sec(2)));
  EXPECT_FALSE((*wire)->help(UdpWire::now()));  // the round it ran ended just now
  EXPECT_EQ((*wire)->stats().help_rounds, 1u);

  UdpConfig off = wire_config(host_, FaultConfig{});
  off.help_after_ns = 0;
  auto idle = UdpWire::create(off);
  ASSERT_TRUE(idle.ok()) << idle.error().message;
  EXPECT_FALSE((*idle)->help(UdpWire::now() + sec(10)));
  EXPECT_EQ((*idle)->stats().help_rounds, 0u);
}

INSTANTIATE_TEST_SUITE_P(Loopback, UdpLoopback, loopback_hosts(), loopback_host_name);

}  // namespace
}  // namespace megascale::wire
