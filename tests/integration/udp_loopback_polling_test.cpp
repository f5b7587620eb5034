// The UDP wire end to end on loopback, two wires in one process. Polling: threads poll while requests are
// pending and sleep when none are; polling threads sharing one CPU give way to each other.
#include <gtest/gtest.h>

#include "udp_loopback.h"

namespace megascale::wire {
namespace {

// pending_poll_ns: while a receive is posted the receiving wire's threads (progress and I/O) poll
// instead of sleeping, however long its message takes; once nothing is outstanding they sleep again
// after idle_poll_ns. With the window equal to idle_poll_ns (off) they sleep while the receive waits:
// the progress thread then runs a small fraction of the rounds it runs polling. The I/O threads' awake
// time (UdpWireStats::io_awake_ns) counts the polling and their busy time none of it.
TEST_P(UdpLoopback, ThreadsPollWhileRequestsArePendingAndSleepWhenNoneAre) {
  for (const uint32_t io_threads : {0u, 2u}) {
    uint64_t rounds_polling = 0;
    for (const bool on : {true, false}) {
      SCOPED_TRACE(testing::Message() << "io_threads " << io_threads << ", pending polling " << on);
      UdpConfig c = wire_config(host_, FaultConfig{});
      c.io_threads = io_threads;
      c.idle_poll_ns = 50 * kNsPerUs;
      c.pending_poll_ns = on ? sec(10) : c.idle_poll_ns;
      Pair p = connect_pair(c, c);
      ASSERT_TRUE(p.recv_conn);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the handshake's traffic is over
      std::vector<uint8_t> sink(4096);
      auto r = p.receiver->post_recv(p.recv_conn, sink.data(), sink.size(), 3);
      ASSERT_TRUE(r) << r.error().message;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the threads have seen it
      const UdpWireStats posted = p.receiver->stats();
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the sender is silent meanwhile
      const UdpWireStats waited = p.receiver->stats();
      const uint64_t rounds = waited.progress_calls - posted.progress_calls;
      std::printf(
          "[ io_threads %u, pending polling %s ] %llu progress rounds, %llu + %llu sleeps in 300 ms "
          "with a receive posted\n",
          io_threads, on ? "on " : "off", static_cast<unsigned long long>(rounds),
          static_cast<unsigned long long>(waited.sleeps - posted.sleeps),
          static_cast<unsigned long long>(waited.io_thread_sleeps - posted.io_thread_sleeps));
      // The I/O threads' awake time over those 300 ms (of 600 for the two): polling, they were awake
      // all along and moved nothing; asleep, hardly awake.
      const uint64_t awake = waited.io_awake_ns - posted.io_awake_ns;
      const uint64_t busy = waited.io_busy_ns - posted.io_busy_ns;
      std::printf("[ io_threads %u, pending polling %s ] I/O threads awake %.0f ms, busy %.1f ms\n",
                  io_threads, on ? "on " : "off", awake / 1e6, busy / 1e6);
      if (on) {
        EXPECT_EQ(waited.sleeps, posted.sleeps) << "the progress thread slept while a receive was posted";
        EXPECT_EQ(waited.io_thread_sleeps, posted.io_thread_sleeps)
            << "an I/O thread slept while a receive was posted";
        rounds_polling = rounds;
        if (io_threads > 0) {
          EXPECT_GT(awake, static_cast<uint64_t>(io_threads * 250 * kNsPerMs))
              << "polling I/O threads count as awake";
          EXPECT_LT(busy * 10, awake) << "polling with nothing to move is not work";
        }
      } else {
        EXPECT_LT(rounds * 10, rounds_polling) << "with the window off the threads should sleep meanwhile";
        if (io_threads > 0) {
          EXPECT_LT(awake, static_cast<uint64_t>(io_threads * 150 * kNsPerMs))
              << "sleeping I/O threads count as asleep";
        }
      }
      std::vector<uint8_t> data(4096, 0x5A);
      auto s = p.sender->post_send(p.send_conn, data.data(), data.size(), 3);
      ASSERT_TRUE(s) << s.error().message;
      ASSERT_TRUE(p.sender->wait(p.send_conn, *s, sec(10)).ok);
      const engine::Completion got = p.receiver->wait(p.recv_conn, *r, sec(10));
      ASSERT_TRUE(got.done && got.ok) << got.error;
      EXPECT_EQ(sink, data);
      EXPECT_EQ(p.receiver->with_endpoint([](engine::Endpoint& ep) { return ep.requests_pending(); }), 0u);
      // Nothing outstanding: the progress thread goes back to sleep.
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const UdpWireStats idle_a = p.receiver->stats();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const UdpWireStats idle_b = p.receiver->stats();
      EXPECT_LT((idle_b.progress_calls - idle_a.progress_calls) * 10, rounds_polling)
          << "with nothing outstanding the progress thread should not poll";
    }
  }
}

// Polling threads that outnumber the CPUs give way to each other. Pinned to one CPU: two wires with an
// I/O thread each, and the test's own thread polling test() as NCCL's proxy thread does (yielding after
// a round that finished nothing: NVIDIA/nccl src/proxy.cc, the progress loop), are five threads that
// poll while requests are pending. Before the wire's threads yielded in rounds that found nothing, the
// thread holding the next packet waited out scheduler slices of milliseconds, the delay-based
// controller cut its window for them and RTOs fired: `megascale perf --io-threads 1` pinned to one CPU
// moved 8 messages of 512 KiB in 2 s (0.02 Gb/s; 10-11 Gb/s with the yields). Here 16 MiB must move in
// less than 4 s.
TEST_P(UdpLoopback, PollingThreadsOnOneCpuGiveWayToEachOther) {
  cpu_set_t before;
  ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof before, &before), 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  const int cpu = sched_getcpu();
  ASSERT_GE(cpu, 0);
  CPU_SET(cpu, &one);
  ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof one, &one), 0);
  // Threads inherit the creating thread's CPUs: the wires' threads all run on `cpu`.
  struct Restore {
    cpu_set_t set;
    ~Restore() { pthread_setaffinity_np(pthread_self(), sizeof set, &set); }
  } restore{before};
  // The default controller, as the plugin and `megascale perf` run it: its delay target is what a
  // thread kept off the CPU for milliseconds makes it cut the window for.
  UdpConfig c;
  c.bind_host = host_;
  c.io_threads = 1;
  c.engine.cc.rto.retry_budget_ns = sec(10);
  Pair p = connect_pair(c, c);
  ASSERT_TRUE(p.recv_conn);
  TransferResult r;
  ASSERT_NO_FATAL_FAILURE(transfer(p, std::vector<uint64_t>(16, kMiB), sec(30), r, 4, /*poll=*/true));
  report((host_ + " 5 polling threads on one CPU").c_str(), r, p);
  EXPECT_LT(r.seconds, 4.0) << "16 MiB took " << r.seconds << " s with every polling thread on one CPU";
}

INSTANTIATE_TEST_SUITE_P(Loopback, UdpLoopback, loopback_hosts(), loopback_host_name);

}  // namespace
}  // namespace megascale::wire
