// The UDP wire's socket layer on loopback: sendmmsg batches and GSO runs arrive as the datagrams that
// were sent (byte for byte, in order), GRO aggregates split back into them, ECT(0)/Not-ECT/DSCP leave in
// the TOS byte, a CE mark is read back. Internal units (collectives/wire/udp/src), tested directly.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../../../collectives/wire/udp/src/peers.h"
#include "../../../collectives/wire/udp/src/receiver.h"
#include "../../../collectives/wire/udp/src/rx_clock.h"
#include "../../../collectives/wire/udp/src/sender.h"
#include "../../../collectives/wire/udp/src/socket.h"
#include "../../support/ipv6_loopback.h"

namespace megascale::wire::detail {
namespace {

using megascale::test_support::ipv6_loopback_available;

// A datagram: `header_len` header bytes then `payload_len` payload bytes, each byte a function of the
// datagram's number, so the receiver can check every byte.
struct Datagram {
  std::vector<uint8_t> header;
  std::vector<uint8_t> payload;
};

Datagram make_datagram(uint32_t number, uint32_t header_len, uint32_t payload_len) {
  Datagram d;
  d.header.resize(header_len);
  d.payload.resize(payload_len);
  for (uint32_t i = 0; i < header_len; ++i) d.header[i] = static_cast<uint8_t>(number * 31 + i);
  for (uint32_t i = 0; i < payload_len; ++i) d.payload[i] = static_cast<uint8_t>(number * 17 + i * 3);
  return d;
}

std::vector<uint8_t> flatten(const Datagram& d) {
  std::vector<uint8_t> v = d.header;
  v.insert(v.end(), d.payload.begin(), d.payload.end());
  return v;
}

struct Received {
  std::vector<std::vector<uint8_t>> datagrams;
  std::vector<uint8_t> tos;            // per datagram
  std::vector<TimeNs> rx_realtime_ns;  // per datagram: its message's kernel receive timestamp (0: none)
  int messages = 0;
  int gro_messages = 0;
};

// Receives until `want` datagrams arrived or a second passed.
Received receive(const UdpSocket& s, size_t want) {
  UdpReceiver rx(16);
  Received out;
  for (int spins = 0; spins < 100 && out.datagrams.size() < want; ++spins) {
    pollfd p{s.fd, POLLIN, 0};
    poll(&p, 1, 10);
    const int n = rx.receive(s.fd);
    EXPECT_GE(n, 0);
    for (int i = 0; i < n; ++i) {
      RxMessage m = rx.message(i);
      EXPECT_FALSE(m.truncated);
      ++out.messages;
      if (m.segment_size < m.bytes.size()) ++out.gro_messages;
      for (size_t off = 0; off < m.bytes.size(); off += m.segment_size) {
        const size_t len = std::min(m.segment_size, m.bytes.size() - off);
        out.datagrams.emplace_back(m.bytes.begin() + static_cast<std::ptrdiff_t>(off),
                                   m.bytes.begin() + static_cast<std::ptrdiff_t>(off + len));
        out.tos.push_back(m.tos);
        out.rx_realtime_ns.push_back(m.rx_realtime_ns);
      }
    }
  }
  return out;
}

// Plain sockets: one datagram per message each way (no GSO, no GRO).
SocketOptions without_offload() {
  SocketOptions o;
  o.gso = o.gro = false;
  return o;
}

class UdpIo : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (std::string(GetParam()) == "::1" && !ipv6_loopback_available()) {
      GTEST_SKIP() << "no IPv6 loopback (::1) on this host";
    }
  }
  UdpSocket open(SocketOptions opts) {
    auto a = resolve_address(GetParam(), 0);
    EXPECT_TRUE(a) << a.error().message;
    auto s = open_udp_socket(*a, opts);
    EXPECT_TRUE(s) << s.error().message;
    sockets_.push_back(*s);
    return *s;
  }
  void TearDown() override {
    for (UdpSocket& s : sockets_) close_udp_socket(s);
  }
  std::vector<UdpSocket> sockets_;
};

// Sends `sizes` (payload bytes; header 72) from `tx` to `rx_sock` and checks what arrives.
void send_and_check(const UdpSocket& tx, const UdpSocket& rx_sock, const std::vector<uint32_t>& sizes,
                    bool gso, const std::vector<bool>& ect, SendCounters* counters_out,
                    Received* received_out) {
  std::vector<Datagram> ds;
  for (uint32_t i = 0; i < sizes.size(); ++i) ds.push_back(make_datagram(i, 72, sizes[i]));
  std::vector<TxItem> items;
  for (uint32_t i = 0; i < ds.size(); ++i) {
    items.push_back(TxItem{ds[i].header.data(), 72, ds[i].payload.data(), sizes[i], 0, 0,
                           ect.empty() ? true : static_cast<bool>(ect[i])});
  }
  std::vector<SockAddr> peers = {rx_sock.local};
  std::vector<UdpSocket> pool = {tx};
  UdpSender sender(64);
  bool gso_on = gso;
  sender.send(items, pool, peers, gso_on);
  Received r = receive(rx_sock, ds.size());
  ASSERT_EQ(r.datagrams.size(), ds.size());
  for (size_t i = 0; i < ds.size(); ++i) EXPECT_EQ(r.datagrams[i], flatten(ds[i])) << "datagram " << i;
  EXPECT_EQ(sender.counters().datagrams, ds.size());
  EXPECT_EQ(sender.counters().dropped_full + sender.counters().dropped_error, 0u);
  if (counters_out) *counters_out = sender.counters();
  if (received_out) *received_out = r;
}

TEST_P(UdpIo, KernelGrantsGsoGroAndEcnOnLoopback) {
  UdpSocket s = open(SocketOptions{});
  // Linux >= 5.0 has both; report rather than fail elsewhere, since the wire falls back.
  RecordProperty("gso", s.gso);
  RecordProperty("gro", s.gro);
  EXPECT_TRUE(s.ect);
  EXPECT_TRUE(s.recv_tos);
  EXPECT_GT(s.local.port(), 0);
  EXPECT_GT(s.rcvbuf_bytes, 0);
}

TEST_P(UdpIo, PlainBatchArrivesIntactAndInOrder) {
  const SocketOptions no_offload = without_offload();
  UdpSocket tx = open(no_offload);
  UdpSocket rx = open(no_offload);
  SendCounters c;
  send_and_check(tx, rx, {1000, 0, 5, 1400, 1000, 65000 - 72}, false, {}, &c, nullptr);
  EXPECT_EQ(c.messages, 6u);  // one message per datagram
  EXPECT_EQ(c.gso_messages, 0u);
  EXPECT_EQ(c.syscalls, 1u);  // one sendmmsg for the batch
}

TEST_P(UdpIo, GsoRunsCoverEqualSizeDatagramsAndAShorterLast) {
  UdpSocket tx = open(SocketOptions{});
  SocketOptions no_gro;
  no_gro.gro = false;
  UdpSocket rx = open(no_gro);
  if (!tx.gso) GTEST_SKIP() << "kernel refused UDP_SEGMENT";
  SendCounters c;
  Received r;
  // Runs: [1000 x3, 500] [1000 x2] [2000] -> three messages.
  send_and_check(tx, rx, {1000, 1000, 1000, 500, 1000, 1000, 2000}, true, {}, &c, &r);
  EXPECT_EQ(c.messages, 3u);
  EXPECT_EQ(c.gso_messages, 2u);
  EXPECT_EQ(r.messages, 7);  // without GRO the kernel segments: one message per datagram
}

TEST_P(UdpIo, GroDeliversAggregatesThatSplitBackIntoTheDatagrams) {
  UdpSocket tx = open(SocketOptions{});
  UdpSocket rx = open(SocketOptions{});
  if (!tx.gso || !rx.gro) GTEST_SKIP() << "kernel refused UDP_SEGMENT or UDP_GRO";
  std::vector<uint32_t> sizes(40, 1400);
  sizes.push_back(100);
  Received r;
  send_and_check(tx, rx, sizes, true, {}, nullptr, &r);
  EXPECT_LT(r.messages, 41);  // aggregated
  EXPECT_GT(r.gro_messages, 0);
}

// Kernel receive timestamps: every message carries one (a GRO aggregate one for all its datagrams);
// converted to CLOCK_MONOTONIC they are non-decreasing in arrival order and tell when the datagrams
// arrived, not when they were read: read 30 ms after the send, they still say "at the send".
TEST_P(UdpIo, ReceiveTimestampsArePresentMonotoneAndTellTheArrival) {
  UdpSocket tx = open(SocketOptions{});
  UdpSocket rx = open(SocketOptions{});
  ASSERT_TRUE(rx.rx_timestamps) << "kernel refused SO_TIMESTAMPNS";
  RxClock clock;
  clock.refresh();
  EXPECT_LT(clock.error_ns(), 50 * kNsPerUs);  // three vDSO reads; even a preempted try has two more

  // The kernel turns stamping on arrival on lazily: the first socket that asks schedules a work item
  // that flips a static key, and until it has run datagrams are stamped when read. Wait for it (on
  // a busy host the work item may run milliseconds later).
  {
    const Datagram probe = make_datagram(99, 72, 10);
    std::vector<TxItem> one = {TxItem{probe.header.data(), 72, probe.payload.data(), 10, 0, 0, true}};
    std::vector<SockAddr> to = {rx.local};
    std::vector<UdpSocket> from = {tx};
    UdpSender probe_sender(1);
    bool on = false;
    for (int tries = 0; tries < 200 && !on; ++tries) {
      bool probe_gso = false;
      probe_sender.send(one, from, to, probe_gso);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      const TimeNs read_at = RxClock::read(CLOCK_MONOTONIC);
      Received p = receive(rx, 1);
      ASSERT_EQ(p.datagrams.size(), 1u);
      on = clock.to_monotonic(p.rx_realtime_ns[0]) < read_at - kNsPerMs;
    }
    ASSERT_TRUE(on) << "the kernel never stamped a datagram before it was read";
  }

  std::vector<uint32_t> sizes(30, 1400);  // a GSO run (GRO may aggregate it) ...
  sizes.push_back(100);
  for (uint32_t i = 0; i < 10; ++i) sizes.push_back(200 + i);  // ... and plain datagrams
  std::vector<Datagram> ds;
  std::vector<TxItem> items;
  for (uint32_t i = 0; i < sizes.size(); ++i) ds.push_back(make_datagram(i, 72, sizes[i]));
  for (uint32_t i = 0; i < ds.size(); ++i) {
    items.push_back(TxItem{ds[i].header.data(), 72, ds[i].payload.data(), sizes[i], 0, 0, true});
  }
  std::vector<SockAddr> peers = {rx.local};
  std::vector<UdpSocket> pool = {tx};
  UdpSender sender(64);
  bool gso = tx.gso;
  const TimeNs sent = RxClock::read(CLOCK_MONOTONIC);
  sender.send(items, pool, peers, gso);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const TimeNs read_from = RxClock::read(CLOCK_MONOTONIC);
  Received r = receive(rx, ds.size());
  const TimeNs read_until = RxClock::read(CLOCK_MONOTONIC);
  ASSERT_EQ(r.datagrams.size(), ds.size());
  TimeNs prev = 0;
  for (size_t i = 0; i < r.datagrams.size(); ++i) {
    ASSERT_NE(r.rx_realtime_ns[i], 0) << "datagram " << i << " has no receive timestamp";
    const TimeNs t = clock.to_monotonic(r.rx_realtime_ns[i]);
    EXPECT_GE(t, sent - clock.error_ns()) << "datagram " << i;
    EXPECT_LE(t, read_until + clock.error_ns()) << "datagram " << i;
    // Arrival, not read time: loopback delivers within the send call; 15 ms of slack for a busy host.
    EXPECT_LT(t, sent + 15 * kNsPerMs)
        << "datagram " << i << " stamped " << (read_from - t) / kNsPerUs << " us before it was read";
    EXPECT_GE(t, prev) << "datagram " << i;
    prev = t;
    EXPECT_TRUE(RxClock::plausible(t, read_until));
  }
  if (rx.gro && gso) {
    EXPECT_GT(r.gro_messages, 0) << "the GSO run should have arrived as aggregates, stamped too";
  }
}

TEST_P(UdpIo, ReceiveTimestampsCanBeTurnedOff) {
  SocketOptions off;
  off.rx_timestamps = false;
  UdpSocket tx = open(SocketOptions{});
  UdpSocket rx = open(off);
  EXPECT_FALSE(rx.rx_timestamps);
  Received r;
  send_and_check(tx, rx, {100, 200}, false, {}, nullptr, &r);
  for (TimeNs t : r.rx_realtime_ns) EXPECT_EQ(t, 0);
}

TEST(RxClock, ConvertsRealtimeToMonotonicAndRejectsImplausibleStamps) {
  RxClock clock;
  EXPECT_TRUE(clock.stale(0));
  clock.refresh();
  const TimeNs mono = RxClock::read(CLOCK_MONOTONIC);
  EXPECT_FALSE(clock.stale(mono));
  EXPECT_TRUE(clock.stale(mono + RxClock::kRefreshNs + 1));
  const TimeNs real = RxClock::read(CLOCK_REALTIME);
  const TimeNs mono_after = RxClock::read(CLOCK_MONOTONIC);
  // `real` was read between `mono` and `mono_after`: so is its conversion, within the error bound.
  EXPECT_GE(clock.to_monotonic(real), mono - clock.error_ns());
  EXPECT_LE(clock.to_monotonic(real), mono_after + clock.error_ns());
  EXPECT_TRUE(RxClock::plausible(mono, mono_after));
  EXPECT_FALSE(RxClock::plausible(mono_after + RxClock::kMaxRxAheadNs + 1, mono_after));  // future
  EXPECT_FALSE(RxClock::plausible(mono_after - RxClock::kMaxRxAgeNs - 1, mono_after));    // stale
}

TEST_P(UdpIo, RunsBreakAtTheGsoByteLimit) {
  UdpSocket tx = open(SocketOptions{});
  UdpSocket rx = open(SocketOptions{});
  if (!tx.gso) GTEST_SKIP() << "kernel refused UDP_SEGMENT";
  // 9000-byte datagrams: at most 7 per GSO message (kGsoMaxBytes).
  std::vector<uint32_t> sizes(20, 9000 - 72);
  SendCounters c;
  send_and_check(tx, rx, sizes, true, {}, &c, nullptr);
  EXPECT_EQ(c.messages, 3u);  // 7 + 7 + 6
}

TEST_P(UdpIo, RefusedGsoFallsBackToOneDatagramPerMessage) {
  UdpSocket tx = open(SocketOptions{});
  UdpSocket rx = open(SocketOptions{});
  if (!tx.gso) GTEST_SKIP() << "kernel refused UDP_SEGMENT";
  if (tx.local.family() != AF_INET) GTEST_SKIP() << "SO_NO_CHECK is IPv4 only";
  // Without a UDP checksum the kernel cannot offload segmentation and refuses GSO sends (EINVAL),
  // as a device without checksum offload would (EIO).
  const int one = 1;
  ASSERT_EQ(setsockopt(tx.fd, SOL_SOCKET, SO_NO_CHECK, &one, sizeof one), 0);
  std::vector<Datagram> ds;
  for (uint32_t i = 0; i < 10; ++i) ds.push_back(make_datagram(i, 72, 1000));
  std::vector<TxItem> items;
  for (const Datagram& d : ds)
    items.push_back(TxItem{d.header.data(), 72, d.payload.data(), 1000, 0, 0, true});
  std::vector<SockAddr> peers = {rx.local};
  std::vector<UdpSocket> pool = {tx};
  UdpSender sender(64);
  bool gso = true;
  sender.send(items, pool, peers, gso);
  EXPECT_FALSE(gso);
  EXPECT_EQ(sender.counters().gso_fallbacks, 1u);
  EXPECT_EQ(sender.counters().datagrams, 10u);
  EXPECT_EQ(sender.counters().gso_messages, 0u);
  Received r = receive(rx, ds.size());
  ASSERT_EQ(r.datagrams.size(), ds.size());
  for (size_t i = 0; i < ds.size(); ++i) EXPECT_EQ(r.datagrams[i], flatten(ds[i]));
}

// A datagram to a closed port draws an ICMP port unreachable, which the kernel also reports once on the
// socket's next send, whatever its destination: that send fails without sending anything. The sender
// tries such a message once more, so the live peer's datagrams all arrive and none is dropped.
TEST_P(UdpIo, ClosedPortOfOnePeerCostsAnotherPeerNoDatagram) {
  const SocketOptions no_offload = without_offload();
  UdpSocket tx = open(no_offload);
  UdpSocket live = open(no_offload);
  SockAddr closed_addr;
  {
    auto a = resolve_address(GetParam(), 0);
    ASSERT_TRUE(a);
    auto gone = open_udp_socket(*a, no_offload);
    ASSERT_TRUE(gone);
    closed_addr = gone->local;
    close_udp_socket(*gone);  // nothing listens there any more
  }
  std::vector<SockAddr> peers = {closed_addr, live.local};
  std::vector<UdpSocket> pool = {tx};
  UdpSender sender(64);
  bool gso = false;
  Datagram d0 = make_datagram(0, 72, 100);
  std::vector<TxItem> to_closed = {TxItem{d0.header.data(), 72, d0.payload.data(), 100, 0, 0, true}};
  sender.send(to_closed, pool, peers, gso);
  pollfd p{tx.fd, 0, 0};  // POLLERR is always reported: the ICMP message is queued
  ASSERT_EQ(poll(&p, 1, 1000), 1) << "no ICMP port unreachable within 1 s";
  ASSERT_TRUE(p.revents & POLLERR);
  std::vector<Datagram> ds;
  std::vector<TxItem> to_live;
  for (uint32_t i = 1; i <= 3; ++i) ds.push_back(make_datagram(i, 72, 100 + i));
  for (const Datagram& d : ds) {
    to_live.push_back(
        TxItem{d.header.data(), 72, d.payload.data(), static_cast<uint32_t>(d.payload.size()), 0, 1, true});
  }
  sender.send(to_live, pool, peers, gso);
  EXPECT_EQ(sender.counters().error_retries, 1u);
  EXPECT_EQ(sender.counters().dropped_error, 0u);
  Received r = receive(live, ds.size());
  ASSERT_EQ(r.datagrams.size(), ds.size());
  for (size_t i = 0; i < ds.size(); ++i) EXPECT_EQ(r.datagrams[i], flatten(ds[i])) << "datagram " << i;
  // The error queue still names the closed port (the wire hands it to the engine).
  std::vector<SockAddr> unreachable;
  EXPECT_EQ(read_port_unreachable(tx.fd, unreachable), 1u);
  ASSERT_EQ(unreachable.size(), 1u);
  EXPECT_EQ(unreachable[0], closed_addr);
}

TEST_P(UdpIo, EctZeroDscpAndNotEctPerPacket) {
  SocketOptions o;
  o.dscp = 26;  // AF31
  o.gro = false;
  UdpSocket tx = open(o);
  UdpSocket rx = open(o);
  Received r;
  send_and_check(tx, rx, {100, 100, 100}, true, {true, false, true}, nullptr, &r);
  ASSERT_EQ(r.tos.size(), 3u);
  EXPECT_EQ(r.tos[0], tos_byte(26, kEcnEct0));
  EXPECT_EQ(r.tos[1], tos_byte(26, 0));  // the engine said Not-ECT: DSCP kept, ECN bits clear
  EXPECT_EQ(r.tos[2], tos_byte(26, kEcnEct0));
}

TEST_P(UdpIo, CeMarkIsReadBack) {
  UdpSocket rx = open(SocketOptions{});
  // A socket whose TOS byte says CE stands in for a switch that marked the packet.
  const int fd = socket(rx.local.family(), SOCK_DGRAM, 0);
  ASSERT_GE(fd, 0);
  const int ce = kEcnCe;
  if (rx.local.family() == AF_INET) {
    ASSERT_EQ(setsockopt(fd, IPPROTO_IP, IP_TOS, &ce, sizeof ce), 0);
  } else {
    ASSERT_EQ(setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &ce, sizeof ce), 0);
  }
  const char msg[] = "marked";
  ASSERT_EQ(sendto(fd, msg, sizeof msg, 0, rx.local.addr(), rx.local.len), static_cast<ssize_t>(sizeof msg));
  close(fd);
  UdpReceiver receiver(4);
  pollfd p{rx.fd, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 1000), 1);
  ASSERT_EQ(receiver.receive(rx.fd), 1);
  RxMessage m = receiver.message(0);
  EXPECT_TRUE(m.ce);
  EXPECT_EQ(m.bytes.size(), sizeof msg);
  EXPECT_EQ(receiver.counters().ce, 1u);
}

TEST_P(UdpIo, PeerTableInternsAndFindsAddresses) {
  PeerTable peers(2);
  auto a = resolve_address(GetParam(), 1000);
  auto b = resolve_address(GetParam(), 1001);
  auto c = resolve_address(GetParam(), 1002);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(peers.intern(*a), 0u);
  EXPECT_EQ(peers.intern(*b), 1u);
  EXPECT_EQ(peers.intern(*a), 0u);
  EXPECT_EQ(peers.find(*b), 1u);
  EXPECT_FALSE(peers.intern(*c).has_value());  // full
  EXPECT_FALSE(peers.find(*c).has_value());
  EXPECT_EQ(peers.address(1).port(), 1001);
}

INSTANTIATE_TEST_SUITE_P(Loopback, UdpIo, ::testing::Values("127.0.0.1", "::1"), [](const auto& param_info) {
  return std::string(param_info.param) == "::1" ? "ipv6" : "ipv4";
});

TEST(UdpAddress, ResolveAndFormat) {
  auto a = resolve_address("127.0.0.1", 5000);
  ASSERT_TRUE(a);
  EXPECT_EQ(format_address(*a), "127.0.0.1:5000");
  auto b = resolve_address("::1", 6000);
  ASSERT_TRUE(b);
  EXPECT_EQ(format_address(*b), "[::1]:6000");
  auto bad = resolve_address("no such host.invalid", 1);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("no such host.invalid"), std::string::npos);
}

}  // namespace
}  // namespace megascale::wire::detail
