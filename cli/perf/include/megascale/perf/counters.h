// Counters around one perf row: what the transport did (retransmissions, timeouts, ECN, CNPs, repaths,
// RTT percentiles), what the UDP wire cost (datagrams, syscalls, GSO/GRO messages), and what the
// kernel dropped (UDP receive-buffer overflows, host-wide from /proc/net/snmp and per socket from
// /proc/net/udp). A snapshot is taken before and after the row; the row reports the difference.
//
//   SideSnapshot before = take_snapshot(wire, conn);
//   ... run the row ...
//   SideCounters c = side_delta(before, take_snapshot(wire, conn));
//   print(c.retransmits_fast, c.kernel.rcvbuf_errors, rtt_percentile_ns(c.rtt, 0.99));
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "megascale/common/result.h"
#include "megascale/common/units.h"
#include "megascale/engine/connection.h"
#include "megascale/engine/stats.h"
#include "megascale/wire/udp.h"

namespace megascale::perf {

// The kernel's UDP counters (IPv4 "Udp:" in /proc/net/snmp plus IPv6 "Udp6" in /proc/net/snmp6). They
// are host-wide: on a shared machine other programs' drops count too (the per-socket count does not).
struct KernelUdp {
  bool ok = false;             // the files could be read
  uint64_t rcvbuf_errors = 0;  // datagrams dropped: the socket's receive buffer was full
  uint64_t in_errors = 0;      // all receive errors (includes rcvbuf_errors)
  uint64_t socket_drops = 0;   // /proc/net/udp{,6} "drops" of our own sockets
};

// Parses the "Udp:" header/value line pair of /proc/net/snmp. Error if absent or malformed.
Result<KernelUdp> parse_snmp_udp(std::string_view snmp_text);
// Adds Udp6RcvbufErrors / Udp6InErrors from /proc/net/snmp6 text (absent lines leave `into` as is).
void add_snmp6_udp(std::string_view snmp6_text, KernelUdp& into);
// Sums the "drops" column of /proc/net/udp or /proc/net/udp6 text over sockets bound to `ports`.
uint64_t socket_drops_for_ports(std::string_view proc_net_udp_text, const std::vector<uint16_t>& ports);
// Reads all of the above now. ok = false (and zeros) where /proc is not readable.
KernelUdp read_kernel_udp(const std::vector<uint16_t>& ports);

// Bucket counts of an engine RttHistogram, so that two snapshots can be subtracted.
using RttCounts = std::array<uint64_t, engine::RttHistogram::kBuckets>;
// The histogram's bucket counts, copied.
RttCounts rtt_counts(const engine::RttHistogram& h);
uint64_t rtt_total(const RttCounts& c);
// The q-quantile of counts as its bucket's upper edge (0 when empty; the last bucket gives `max_ns`).
TimeNs rtt_percentile_ns(const RttCounts& c, double q, TimeNs max_ns);

// This process's CPU time so far (getrusage RUSAGE_SELF: every thread, user and system), and who it is.
struct ProcessCpu {
  bool ok = false;  // getrusage answered
  uint64_t user_ns = 0;
  uint64_t sys_ns = 0;  // the kernel's work for the process: syscalls, and under Soft-RoCE rxe's packet work
  uint64_t process_id = 0;
};
ProcessCpu read_process_cpu();

// One side of a connection at one instant.
struct SideSnapshot {
  engine::ConnectionStats conn;
  engine::EndpointStats endpoint;
  RttCounts rtt{};
  wire::UdpWireStats wire;
  KernelUdp kernel;
  ProcessCpu cpu;
};

// Reads the connection's and the wire's counters and the kernel's (call from the thread that drives
// the wire, or while nothing else uses it).
SideSnapshot take_snapshot(wire::UdpWire& w, engine::ConnId conn);

// What changed on one side during a row.
struct SideCounters {
  // The transport (sender side: this side's sends).
  uint64_t retransmits_fast = 0;
  uint64_t retransmits_rto = 0;
  uint64_t timeouts = 0;
  uint64_t ecn_marks = 0;  // CE marks echoed back to this sender
  uint64_t cnps_received = 0;
  uint64_t repaths = 0;
  uint64_t floor_stalls = 0;  // lanes that stayed at their controller's floor for seconds, ACKs flowing
  uint64_t bytes_sent = 0;    // payload, retransmissions included
  uint64_t sends_posted = 0;
  uint64_t sends_waited_for_credit = 0;  // posted before the peer's receive had granted them room
  // The transport (receiver side).
  uint64_t bytes_received = 0;
  uint64_t ce_received = 0;
  uint64_t cnps_sent = 0;
  uint64_t duplicates_dropped = 0;
  uint64_t corrupt_dropped = 0;    // payload CRC mismatch
  uint64_t malformed_dropped = 0;  // intact header, impossible content
  RttCounts rtt{};
  TimeNs rtt_max_ns = 0;  // the histogram's max so far (for the top bucket)
  // The wire.
  uint64_t datagrams_sent = 0;
  uint64_t datagrams_received = 0;
  uint64_t udp_bytes_sent = 0;
  uint64_t send_syscalls = 0;
  uint64_t send_messages = 0;
  uint64_t gso_messages = 0;
  uint64_t recv_syscalls = 0;
  uint64_t recv_messages = 0;
  uint64_t gro_messages = 0;
  uint64_t send_dropped_full = 0;
  uint64_t progress_calls = 0;
  uint64_t clock_reads = 0;  // the data wire's progress rounds' clock reads (UdpWireStats)
  uint64_t wake_reads = 0;   // and its wake-up eventfd reads
  // Injected by MEGASCALE_FAULT_* on this side's receive path (not the kernel's); fault_offered counts
  // the datagrams the injector saw (0: injection off).
  uint64_t fault_offered = 0;
  uint64_t fault_dropped = 0;
  uint64_t fault_duplicated = 0;
  uint64_t fault_reordered = 0;
  uint64_t fault_delayed = 0;
  uint64_t fault_corrupted = 0;
  uint64_t fault_ce_marked = 0;
  // Datagrams the endpoint could not hand to a connection: failed decoding (bad magic, header CRC,
  // truncated) or for a connection id it does not have.
  uint64_t endpoint_malformed = 0;
  uint64_t unknown_connection = 0;
  // A stalled I/O thread's work taken over (--stall-us): messages read from its socket, packets given
  // to a sibling instead, and datagrams a sibling sent from its queue.
  uint64_t rx_stolen = 0;
  uint64_t tx_rerouted = 0;
  uint64_t tx_stolen = 0;
  // The I/O threads' time awake (not asleep in epoll) and, of it, in rounds that moved something
  // (UdpWireStats::io_awake_ns, io_busy_ns); 0 without I/O threads.
  uint64_t io_awake_ns = 0;
  uint64_t io_busy_ns = 0;
  // The kernel during the row.
  KernelUdp kernel;
  // SEGs (DATA and CREDIT, retransmissions included) this side's engine sent, and new ones it accepted.
  uint64_t segments_sent = 0;
  uint64_t segments_received = 0;
  // CPU time of this side's process during the row (all its threads; cpu_ok false where getrusage
  // failed). With --loopback both sides are one process: process_id tells, and sum_sides counts it once.
  bool cpu_ok = false;
  uint64_t cpu_user_ns = 0;
  uint64_t cpu_sys_ns = 0;
  uint64_t process_id = 0;
};

SideCounters side_delta(const SideSnapshot& before, const SideSnapshot& after);

// Faults injected in all (every kind), and datagrams dropped as junk (corrupt payload, impossible
// content, undecodable, unknown connection).
uint64_t faults_injected(const SideCounters& c);
uint64_t junk_dropped(const SideCounters& c);

// a + b, field by field (both directions of a row; the kernel's host counters too, so give
// `same_host` = true when both sides read the same machine's counters: they are then taken from `a`).
// CPU time adds up too, except when both sides are one process (same host and process id): then it is
// that process's, the larger of the two sides' readings (each timed the row from its own side).
SideCounters sum_sides(const SideCounters& a, const SideCounters& b, bool same_host);

// A packet port's own counters (--wire verbs-*: UdpWireStats::port) for a --timeout message:
// "; port: name value, name value"; "" over UDP sockets (no port counters). They say where a stalled
// verbs transfer stands (RC: lanes up, ring credit, writes outstanding, packets waiting).
std::string port_counters_text(const wire::UdpWireStats& w);

}  // namespace megascale::perf
