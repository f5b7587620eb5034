// perf's counters: the kernel's UDP drop counters parsed from /proc text, per-socket drops, RTT
// histogram differences between two snapshots, summing both sides of a row, and a packet port's
// counters in a --timeout message.
#include "megascale/perf/counters.h"

#include <gtest/gtest.h>

#include <string>

namespace megascale::perf {
namespace {

constexpr const char* kSnmp =
    "Ip: Forwarding DefaultTTL InReceives\n"
    "Ip: 1 64 1000\n"
    "Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti "
    "MemErrors\n"
    "Udp: 977198 0 2385 979589 2381 0 4 0 0\n"
    "UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti "
    "MemErrors\n"
    "UdpLite: 0 0 7 0 7 0 0 0 0\n";

TEST(PerfKernel, ParsesUdpLineOfProcNetSnmp) {
  auto k = parse_snmp_udp(kSnmp);
  ASSERT_TRUE(k) << k.error().message;
  EXPECT_TRUE(k->ok);
  EXPECT_EQ(k->rcvbuf_errors, 2381u);  // Udp's, not UdpLite's
  EXPECT_EQ(k->in_errors, 2385u);
}

TEST(PerfKernel, MissingUdpLinesAreAnError) {
  EXPECT_FALSE(parse_snmp_udp("Ip: Forwarding\nIp: 1\n"));
  EXPECT_FALSE(parse_snmp_udp("Udp: InDatagrams NoPorts\nUdp: 1 2\n"));  // no RcvbufErrors column
  EXPECT_FALSE(parse_snmp_udp(""));
}

TEST(PerfKernel, AddsUdp6Counters) {
  KernelUdp k;
  add_snmp6_udp(
      "Udp6InDatagrams                 \t18944\nUdp6InErrors \t12\nUdp6RcvbufErrors\t10\n"
      "UdpLite6RcvbufErrors 99\n",
      k);
  EXPECT_EQ(k.in_errors, 12u);
  EXPECT_EQ(k.rcvbuf_errors, 10u);
}

TEST(PerfKernel, SocketDropsOfOurPortsOnly) {
  const std::string udp =
      "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref "
      "pointer drops\n"
      "  101: 0100007F:BDE7 00000000:0000 07 00000000:00000000 00:00000000 00000000  1000        0 91234 2 "
      "0000000000000000 17\n"
      "  102: 0100007F:BDE8 00000000:0000 07 00000000:00000000 00:00000000 00000000  1000        0 91235 2 "
      "0000000000000000 3\n"
      "  103: 00000000:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 11111 2 "
      "0000000000000000 500\n";
  EXPECT_EQ(socket_drops_for_ports(udp, {0xBDE7}), 17u);
  EXPECT_EQ(socket_drops_for_ports(udp, {0xBDE7, 0xBDE8}), 20u);
  EXPECT_EQ(socket_drops_for_ports(udp, {1}), 0u);
}

TEST(PerfKernel, ReadsThisMachinesCounters) {
  const KernelUdp k = read_kernel_udp({});
  if (!k.ok) GTEST_SKIP() << "/proc/net/snmp not readable here";
  EXPECT_GE(k.in_errors, k.rcvbuf_errors);  // InErrors includes receive-buffer drops
}

TEST(PerfRtt, BucketCountsAreRecoveredExactly) {
  engine::RttHistogram h;
  RttCounts want{};
  // A spread from 40 ns to 2 s, some buckets many times.
  for (TimeNs v : {40, 100, 100, 5'000, 12'000, 12'500, 13'000, 64'000, 1'000'000, 2'000'000'000}) {
    h.add(v);
    ++want[static_cast<size_t>(engine::RttHistogram::bucket_of(v))];
  }
  for (int i = 0; i < 1000; ++i) {
    const TimeNs v = 8'000 + i * 37;
    h.add(v);
    ++want[static_cast<size_t>(engine::RttHistogram::bucket_of(v))];
  }
  EXPECT_EQ(rtt_counts(h), want);
  EXPECT_EQ(rtt_total(rtt_counts(h)), h.count());
  EXPECT_EQ(rtt_total(rtt_counts(engine::RttHistogram{})), 0u);
}

TEST(PerfRtt, DeltaPercentilesSeeOnlyTheRowsSamples) {
  engine::ConnectionStats s;
  for (int i = 0; i < 1000; ++i) s.rtt.add(5'000);  // an earlier row: 5 us
  SideSnapshot before;
  before.conn = s;
  before.rtt = rtt_counts(s.rtt);
  for (int i = 0; i < 100; ++i) s.rtt.add(200'000);  // this row: 200 us
  SideSnapshot after;
  after.conn = s;
  after.rtt = rtt_counts(s.rtt);
  const SideCounters d = side_delta(before, after);
  EXPECT_EQ(rtt_total(d.rtt), 100u);
  const TimeNs p50 = rtt_percentile_ns(d.rtt, 0.5, d.rtt_max_ns);
  EXPECT_EQ(p50, 200'000);  // the bucket's upper edge is clamped to the largest sample seen
  // The whole connection's median would be 5 us's bucket.
  EXPECT_LT(s.rtt.percentile_ns(0.5), 10'000);
}

TEST(PerfSides, DeltaAndSumCountBothDirectionsAndTheHostOnce) {
  SideSnapshot a, b;
  b.conn.retransmits_fast = 4;
  b.conn.retransmits_rto = 1;
  b.conn.timeouts = 1;
  b.conn.ecn_marks = 6;
  b.wire.send_syscalls = 10;
  a.wire.tx_stolen = 5;
  b.wire.tx_stolen = 12;
  a.kernel = {true, 100, 200, 7};
  b.kernel = {true, 103, 205, 9};
  const SideCounters d = side_delta(a, b);
  EXPECT_EQ(d.retransmits_fast, 4u);
  EXPECT_EQ(d.send_syscalls, 10u);
  EXPECT_EQ(d.tx_stolen, 7u);
  EXPECT_EQ(d.kernel.rcvbuf_errors, 3u);
  EXPECT_EQ(d.kernel.in_errors, 5u);
  EXPECT_EQ(d.kernel.socket_drops, 2u);

  SideCounters other = d;
  other.kernel.rcvbuf_errors = 1;
  other.kernel.socket_drops = 1;
  const SideCounters same = sum_sides(d, other, /*same_host=*/true);
  EXPECT_EQ(same.retransmits_fast, 8u);
  EXPECT_EQ(same.tx_stolen, 14u);
  EXPECT_EQ(same.kernel.rcvbuf_errors, 3u);  // one host: counted once
  EXPECT_EQ(same.kernel.socket_drops, 3u);   // different sockets: both
  const SideCounters two = sum_sides(d, other, /*same_host=*/false);
  EXPECT_EQ(two.kernel.rcvbuf_errors, 4u);

  SideSnapshot unread;
  EXPECT_FALSE(side_delta(unread, b).kernel.ok);
}

// CPU per segment: each side's process time over the row and its engine's segments; two sides in one
// process (--loopback) are that process once, two processes add up.
TEST(PerfSides, CpuTimeIsPerProcessAndSegmentsAddUp) {
  SideSnapshot a, b;
  a.conn.segments_sent = 10;
  b.conn.segments_sent = 110;
  a.conn.segments_received = 5;
  b.conn.segments_received = 55;
  a.cpu = {true, 1'000, 2'000, 42};
  b.cpu = {true, 301'000, 502'000, 42};
  const SideCounters d = side_delta(a, b);
  EXPECT_EQ(d.segments_sent, 100u);
  EXPECT_EQ(d.segments_received, 50u);
  EXPECT_TRUE(d.cpu_ok);
  EXPECT_EQ(d.cpu_user_ns, 300'000u);
  EXPECT_EQ(d.cpu_sys_ns, 500'000u);
  EXPECT_EQ(d.process_id, 42u);

  SideCounters server = d;
  server.cpu_user_ns = 200'000;
  server.cpu_sys_ns = 600'000;
  server.segments_sent = 20;
  const SideCounters one = sum_sides(d, server, /*same_host=*/true);
  EXPECT_EQ(one.segments_sent, 120u);
  EXPECT_EQ(one.cpu_user_ns, 300'000u);  // one process: its time once, the larger reading
  EXPECT_EQ(one.cpu_sys_ns, 600'000u);
  server.process_id = 43;
  const SideCounters two = sum_sides(d, server, /*same_host=*/true);
  EXPECT_EQ(two.cpu_user_ns, 500'000u);
  EXPECT_EQ(two.cpu_sys_ns, 1'100'000u);
  EXPECT_EQ(sum_sides(d, d, /*same_host=*/false).cpu_user_ns, 600'000u);  // same pid, other host

  // A reading that failed, or a snapshot from another process, counts no CPU.
  SideSnapshot failed = b;
  failed.cpu.ok = false;
  EXPECT_FALSE(side_delta(a, failed).cpu_ok);
  EXPECT_FALSE(sum_sides(d, side_delta(a, failed), true).cpu_ok);
  SideSnapshot elsewhere = b;
  elsewhere.cpu.process_id = 7;
  EXPECT_FALSE(side_delta(a, elsewhere).cpu_ok);

  const ProcessCpu now = read_process_cpu();
  EXPECT_TRUE(now.ok);
  EXPECT_GT(now.process_id, 0u);
}

TEST(PerfSides, FaultsAndJunkAreCountedPerRowAndSummed) {
  SideSnapshot a, b;
  a.wire.fault.datagrams = 100;
  b.wire.fault.datagrams = 600;
  b.wire.fault.dropped = 9;
  b.wire.fault.duplicated = 4;
  b.wire.fault.reordered = 6;
  b.wire.fault.delayed = 1;
  b.wire.fault.corrupted = 2;
  b.wire.fault.ce_marked = 3;
  b.conn.corrupt_dropped = 2;
  b.conn.malformed_dropped = 1;
  a.endpoint.malformed_dropped = 10;
  b.endpoint.malformed_dropped = 13;
  b.endpoint.unknown_connection = 5;
  const SideCounters d = side_delta(a, b);
  EXPECT_EQ(d.fault_offered, 500u);
  EXPECT_EQ(faults_injected(d), 25u);
  EXPECT_EQ(d.endpoint_malformed, 3u);
  EXPECT_EQ(junk_dropped(d), 2u + 1u + 3u + 5u);

  const SideCounters both = sum_sides(d, d, /*same_host=*/true);
  EXPECT_EQ(both.fault_offered, 1000u);
  EXPECT_EQ(faults_injected(both), 50u);
  EXPECT_EQ(junk_dropped(both), 22u);
}

TEST(PerfPort, ATimeoutNamesThePortsCountersAndNothingOverSockets) {
  wire::UdpWireStats w;
  EXPECT_EQ(port_counters_text(w), "");
  w.port = {{"rc_lanes_up", 4}, {"rc_write_credits", 0}, {"rc_waiting", 2032}};
  EXPECT_EQ(port_counters_text(w), "; port: rc_lanes_up 4, rc_write_credits 0, rc_waiting 2032");
}

}  // namespace
}  // namespace megascale::perf
