// Shared fixtures of the UDP loopback tests (udp_loopback_*_test.cpp): two wires in one process, each
// with its own progress thread, messages whose every byte is checked, fault injection, and the
// parameterised suite over 127.0.0.1 and ::1. Every wait has a deadline.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "../support/ipv6_loopback.h"
#include "megascale/wire/udp.h"

namespace megascale::wire {

inline constexpr uint64_t kMiB = 1 << 20;

using megascale::test_support::ipv6_loopback_available;

// The byte at `offset` of message `seed`: every 8-byte word differs and depends on its position, so a
// misplaced, duplicated-over or corrupted segment shows.
inline uint64_t pattern_word(uint64_t seed, uint64_t word) {
  return (word + 1) * 0x9E3779B97F4A7C15ULL ^ (seed << 32 | seed);
}

inline void fill(std::vector<uint8_t>& buf, uint64_t size, uint64_t seed) {
  for (uint64_t w = 0; w * 8 < size; ++w) {
    const uint64_t v = pattern_word(seed, w);
    std::memcpy(buf.data() + w * 8, &v, std::min<uint64_t>(8, size - w * 8));
  }
}

// First offset where `buf` differs from the pattern, or -1.
inline int64_t first_mismatch(const std::vector<uint8_t>& buf, uint64_t size, uint64_t seed) {
  for (uint64_t w = 0; w * 8 < size; ++w) {
    const uint64_t v = pattern_word(seed, w);
    const uint64_t n = std::min<uint64_t>(8, size - w * 8);
    if (std::memcmp(buf.data() + w * 8, &v, n) != 0) return static_cast<int64_t>(w * 8);
  }
  return -1;
}

inline constexpr uint8_t kCanary = 0xA5;
inline constexpr uint64_t kCanaryBytes = 64;

struct Pair {
  std::unique_ptr<UdpWire> sender;
  std::unique_ptr<UdpWire> receiver;
  engine::ConnId send_conn = 0;
  engine::ConnId recv_conn = 0;
};

// The tests' transport settings. A fixed window (32 segments per lane: 1 MiB in flight, inside the
// socket buffers) rather than the delay-based default: on a loaded 2-core CI host, scheduling delays
// of milliseconds look like queueing to Swift and would make the run time, not the outcome, depend on
// the machine. One test below runs the default preset.
inline UdpConfig wire_config(const std::string& host, const FaultConfig& fault) {
  UdpConfig c;
  c.bind_host = host;
  c.fault = fault;
  c.engine.lanes = 4;
  c.engine.segment_bytes = 8192;
  c.engine.cc.kind = cc::ControllerKind::kFixedWindow;
  c.engine.cc.fixed.window_packets = 32;
  c.engine.cc.pacer.burst_bytes = 64 * 1024;  // one GSO message per lane per round
  c.engine.cc.rto.min_rto_ns = ms(1);         // thread wake-ups on a busy host take ~100s of us
  // Loopback never loses a packet by itself; a 5 s budget bounds how long a broken run can take.
  c.engine.cc.rto.retry_budget_ns = sec(5);
  c.engine.connect_timeout_ns = sec(5);
  return c;
}

// Two wires, threaded, connected sender -> receiver.
inline Pair connect_pair(const UdpConfig& sender_config, const UdpConfig& receiver_config) {
  Pair p;
  const std::string& host = sender_config.bind_host;
  auto r = UdpWire::create(receiver_config);
  EXPECT_TRUE(r) << r.error().message;
  if (!r) return p;
  auto s = UdpWire::create(sender_config);
  EXPECT_TRUE(s) << s.error().message;
  if (!s) return p;
  p.receiver = std::move(*r);
  p.sender = std::move(*s);
  EXPECT_TRUE(p.receiver->start());
  EXPECT_TRUE(p.sender->start());
  auto conn = p.sender->connect(host, p.receiver->local_port());
  EXPECT_TRUE(conn) << conn.error().message;
  if (!conn) return p;
  p.send_conn = *conn;
  auto accepted = p.receiver->wait_accept(sec(10));
  EXPECT_TRUE(accepted) << accepted.error().message;
  if (!accepted) return p;
  p.recv_conn = *accepted;
  Status est = p.sender->wait_established(p.send_conn, sec(10));
  EXPECT_TRUE(est) << est.error().message;
  return p;
}

inline Pair connect_pair(const std::string& host, const FaultConfig& sender_fault,
                         const FaultConfig& receiver_fault) {
  return connect_pair(wire_config(host, sender_fault), wire_config(host, receiver_fault));
}

struct TransferResult {
  uint64_t bytes = 0;
  double seconds = 0;
};

// A request's completion within `timeout`: wait() blocks on the wire; with `poll`, test() is called
// in a loop that yields after each look that finds it not done, as NCCL's proxy thread polls.
inline engine::Completion complete(UdpWire& w, engine::ConnId conn, engine::RequestId req, TimeNs timeout,
                                   bool poll) {
  if (!poll) return w.wait(conn, req, timeout);
  const TimeNs deadline = UdpWire::now() + timeout;
  engine::Completion c = w.test(conn, req);
  while (!c.done && UdpWire::now() < deadline) {
    std::this_thread::yield();
    c = w.test(conn, req);
  }
  if (!c.done) c.error = "not done within the timeout (polled with test())";
  return c;
}

// Sends each size as one message (up to `window` in flight) and checks every byte, the reported size,
// and that nothing was written past the message (canary). Fails the test on error or timeout. With
// `poll`, completions are polled (complete()) rather than waited for.
inline void transfer(Pair& p, const std::vector<uint64_t>& sizes, TimeNs timeout_each, TransferResult& result,
                     size_t window = 2, bool poll = false) {
  struct Slot {
    std::vector<uint8_t> send_buf, recv_buf;
    uint64_t size = 0, seed = 0;
    engine::RequestId send_req = 0, recv_req = 0;
  };
  result = TransferResult{};
  const TimeNs start = UdpWire::now();
  std::vector<Slot> slots(window);
  size_t posted = 0, checked = 0;
  auto post = [&](Slot& s, size_t i) {
    s.size = sizes[i];
    s.seed = i + 1;
    // Buffers are reused: a segment that never arrives leaves the previous message's bytes (another
    // seed) behind, which the check sees; only the canary after the message is rewritten.
    if (s.send_buf.size() < s.size) s.send_buf.resize(s.size);
    if (s.recv_buf.size() < s.size + kCanaryBytes) s.recv_buf.resize(s.size + kCanaryBytes);
    fill(s.send_buf, s.size, s.seed);
    std::memset(s.recv_buf.data() + s.size, kCanary, kCanaryBytes);
    auto rr = p.receiver->post_recv(p.recv_conn, s.recv_buf.data(), s.size + kCanaryBytes,
                                    static_cast<int32_t>(i % 1000));
    ASSERT_TRUE(rr) << rr.error().message;
    s.recv_req = *rr;
    auto sr = p.sender->post_send(p.send_conn, s.send_buf.data(), s.size, static_cast<int32_t>(i % 1000));
    ASSERT_TRUE(sr) << sr.error().message;
    s.send_req = *sr;
  };
  for (; posted < sizes.size() && posted < window; ++posted) post(slots[posted % window], posted);
  while (checked < sizes.size()) {
    Slot& s = slots[checked % window];
    engine::Completion sc = complete(*p.sender, p.send_conn, s.send_req, timeout_each, poll);
    ASSERT_TRUE(sc.done) << "send of " << s.size << " B: " << sc.error;
    ASSERT_TRUE(sc.ok) << "send of " << s.size << " B failed: " << sc.error;
    engine::Completion rc = complete(*p.receiver, p.recv_conn, s.recv_req, timeout_each, poll);
    ASSERT_TRUE(rc.done) << "recv of " << s.size << " B: " << rc.error;
    ASSERT_TRUE(rc.ok) << "recv of " << s.size << " B failed: " << rc.error;
    EXPECT_EQ(rc.bytes, s.size);
    const int64_t bad = first_mismatch(s.recv_buf, s.size, s.seed);
    ASSERT_EQ(bad, -1) << "message " << checked << " (" << s.size << " B) differs at byte " << bad;
    for (uint64_t k = 0; k < kCanaryBytes; ++k) {
      ASSERT_EQ(s.recv_buf[s.size + k], kCanary) << "bytes written past the message end";
    }
    result.bytes += s.size;
    ++checked;
    if (posted < sizes.size()) {
      post(slots[posted % window], posted);
      ++posted;
    }
  }
  result.seconds = static_cast<double>(UdpWire::now() - start) / 1e9;
}

// Faults on both wires' receive paths: data segments, credits and ACKs are all hit.
inline FaultConfig faults(double drop, uint64_t seed) {
  FaultConfig f;
  f.drop = drop;
  f.reorder = 0.01;
  f.reorder_depth = 8;
  f.duplicate = 0.01;
  f.corrupt = 0.002;
  f.delay = 0.002;
  f.delay_ns = 300 * kNsPerUs;
  f.seed = seed;
  return f;
}

inline void report(const char* what, const TransferResult& r, const Pair& p) {
  const UdpWireStats tx = p.sender->stats();
  const UdpWireStats rx = p.receiver->stats();
  std::printf(
      "[ %s ] %.1f MiB in %.2f s = %.2f Gbit/s; sender: %llu datagrams, %llu gso msgs, %llu syscalls; "
      "receiver: %llu datagrams in %llu msgs (%llu gro); faults rx: drop %llu dup %llu reorder %llu "
      "corrupt %llu / ack path: drop %llu\n",
      what, static_cast<double>(r.bytes) / kMiB, r.seconds,
      static_cast<double>(r.bytes) * 8 / r.seconds / 1e9, static_cast<unsigned long long>(tx.datagrams_sent),
      static_cast<unsigned long long>(tx.gso_messages), static_cast<unsigned long long>(tx.send_syscalls),
      static_cast<unsigned long long>(rx.datagrams_received),
      static_cast<unsigned long long>(rx.recv_messages), static_cast<unsigned long long>(rx.gro_messages),
      static_cast<unsigned long long>(rx.fault.dropped), static_cast<unsigned long long>(rx.fault.duplicated),
      static_cast<unsigned long long>(rx.fault.reordered),
      static_cast<unsigned long long>(rx.fault.corrupted), static_cast<unsigned long long>(tx.fault.dropped));
}

class UdpLoopback : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    host_ = GetParam();
    if (host_ == "::1" && !ipv6_loopback_available()) GTEST_SKIP() << "no IPv6 loopback (::1) on this host";
  }
  std::string host_;
};

// The hosts UdpLoopback runs on, and their names in test names (Loopback/UdpLoopback.Name/ipv4).
inline auto loopback_hosts() {
  return ::testing::Values("127.0.0.1", "::1");
}
inline std::string loopback_host_name(const ::testing::TestParamInfo<const char*>& info) {
  return std::string(info.param) == "::1" ? "ipv6" : "ipv4";
}

}  // namespace megascale::wire
