// What one `megascale perf` run measures: the test, the message sizes, how long each row runs, and the
// transport settings. Filled from the command line (cli/cmd_perf.cpp) or by a test, checked by
// validate_perf_options, and turned into the per-row plan by sizes_for / iterations_for.
//
//   PerfOptions o;
//   o.test = PerfTest::kBw;
//   o.all_sizes = true;                        // -a: 2 B .. 64 MiB for bw
//   o.loopback = true;
//   if (Status s = validate_perf_options(o); !s) { print(s.error().message); return 2; }
//   for (uint64_t size : sizes_for(o, PerfTest::kBw)) run_row(size, iterations_for(o, PerfTest::kBw, size));
//
// perftest's conventions (linux-rdma/perftest): the same flags on both sides; the server is
// `megascale perf [opts]`, the client `megascale perf [opts] <server>`. Defaults follow ib_write_bw and
// ib_write_lat: bw 65536 B x 5000 messages, latency 2 B x 1000 round trips, sweep 2 .. 2^23 with -a.
// Ours: the bw sweep goes on to 2^26 (64 MiB, NCCL-sized buffers), and when -n is not given a row
// moves at most kDefaultRowBytes so that -a ends in minutes, not hours.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "megascale/common/result.h"

namespace megascale::perf {

enum class PerfTest : uint8_t { kBw, kLat, kBoth };

// What carries the measured messages (--wire). udp: the UDP wire, control and data on one wire.
// verbs-ud / verbs-rc: the verbs wire (collectives/wire/verbs, port.h) on an RDMA device for the data
// connection; the control connection stays on UDP (host and -p as for udp), and the server's accept
// carries its verbs address, which the client's data connection then goes to.
enum class PerfWire : uint8_t { kUdp, kVerbsUd, kVerbsRc };
std::string_view to_string(PerfWire w);
Result<PerfWire> parse_perf_wire(std::string_view text);  // "udp", "verbs-ud", "verbs-rc"
inline bool is_verbs(PerfWire w) {
  return w != PerfWire::kUdp;
}
// --segment's default: the largest segment on verbs-rc (a packet is one RDMA write, which the NIC cuts
// into MTU-sized packets itself, so the per-write costs (work request, completion, ring slot, the
// engine's per-segment work and ACK) spread over the most bytes); on loopback (whose MTU is 64 KiB)
// 60000 bytes for one UDP lane (a datagram's system-call and copy costs spread over the most bytes) and
// 16 KiB for more (three to a GSO message: lanes of 60000-byte datagrams overflow each other's receive
// buffers, docs/PERFORMANCE.md); otherwise 4 KiB. verbs-ud lowers its segment to its MTU.
uint32_t default_segment_bytes(PerfWire w, bool loopback, uint32_t lanes);

// How a side waits for its wire. kBusy spins on the sockets (perftest's way: lowest latency, a whole
// core per side). kAdaptive spins while datagrams keep coming and sleeps in epoll once none came or
// left for kAdaptiveSpinNs: a bw row or a ping-pong runs as with kBusy, a side waiting for its peer
// costs no CPU. kSleep sleeps in epoll whenever nothing is due: on a host with fewer free cores than
// spinning threads (a loaded 2-core VM) it measures better, since a woken thread is scheduled ahead of
// one that spins (a short spin window, such as 50 us, is worse than both: spinning uses up the
// scheduler's credit and the sleeps still come).
enum class PerfPoll : uint8_t { kAdaptive, kBusy, kSleep };
inline constexpr int64_t kAdaptiveSpinNs = 1'000'000;
std::string_view to_string(PerfPoll p);
Result<PerfPoll> parse_perf_poll(std::string_view text);  // "adaptive", "busy", "sleep"

std::string_view to_string(PerfTest t);
Result<PerfTest> parse_perf_test(std::string_view text);  // "bw", "lat", "both"

// perftest's defaults.
inline constexpr uint64_t kDefaultBwSizeBytes = 65536;
inline constexpr uint64_t kDefaultLatSizeBytes = 2;
inline constexpr uint64_t kDefaultBwIterations = 5000;
inline constexpr uint64_t kDefaultLatIterations = 1000;
inline constexpr uint16_t kDefaultPort = 18515;  // perftest's out-of-band port
// -a: 2 .. 2^23 (perftest), and 2^26 for bandwidth.
inline constexpr int kSweepMaxLog2Lat = 23;
inline constexpr int kSweepMaxLog2Bw = 26;
// Without -n, a bw row sends at most this many bytes (a latency row: this many each way), and at
// least kMinDefaultIterations messages.
inline constexpr uint64_t kDefaultRowBytes = uint64_t{2} << 30;
inline constexpr uint64_t kMinDefaultIterations = 16;
inline constexpr uint64_t kMaxSizeBytes = uint64_t{1} << 30;  // -s limit: buffers are allocated
// Each message buffer starts on a page and takes whole pages.
inline constexpr uint64_t kBufferPageBytes = 4096;
// Buffers a latency row takes on each side: two for its sends (one in flight, one being refilled),
// three for the receives it keeps posted ahead (rows.h, kLatRecvsAhead + 1).
inline constexpr uint64_t kLatBuffersPerSide = 5;

// Flag names as the command line spells them; PerfOptions::explicit_flags holds those the user gave,
// which the parameter exchange compares between server and client.
namespace flag {
inline constexpr std::string_view kTest = "--test";
inline constexpr std::string_view kAll = "-a";
inline constexpr std::string_view kSize = "-s";
inline constexpr std::string_view kIters = "-n";
inline constexpr std::string_view kDuration = "-D";
inline constexpr std::string_view kWindow = "--window";
inline constexpr std::string_view kLanes = "--lanes";
inline constexpr std::string_view kCc = "--cc";
inline constexpr std::string_view kSegment = "--segment";
inline constexpr std::string_view kCheck = "--check";
inline constexpr std::string_view kTclass = "-T";
inline constexpr std::string_view kBidirectional = "-b";
inline constexpr std::string_view kWire = "--wire";
}  // namespace flag

struct PerfOptions {
  // What to measure.
  PerfTest test = PerfTest::kBoth;
  bool all_sizes = false;   // -a: the sweep
  uint64_t size_bytes = 0;  // -s; 0 = the test's default (bw 65536, lat 2)
  uint64_t iterations = 0;  // -n: messages per bw row, round trips per latency row; 0 = default
  double duration_s = 0;    // -D: seconds per row instead of a count (0 = off)
  uint32_t window = 128;    // --window: bw messages in flight (perftest's tx-depth)
  bool check = false;       // --check: fill and verify every byte (else the ends of each message)
  // -b: bw rows in both directions at once, perftest's bidirectional test. Each side sends its own
  // messages while it receives the other's (a NCCL ring's pattern: every rank sends and receives on
  // one wire); the BW columns are the sum of both sides' send rates, as perftest's -b reports them.
  bool bidirectional = false;

  // Where.
  std::string server;            // client mode: the server's host; empty = server (or loopback)
  bool loopback = false;         // --loopback: server and client in this process on 127.0.0.1 / ::1
  uint16_t port = kDefaultPort;  // -p: the server's UDP port (socket i of the server binds port + i)
  bool port_given = false;       // loopback binds ephemeral ports unless -p was given
  bool ipv6 = false;             // -6
  std::string bind_host;         // --bind: local address; empty = any (loopback: the loopback address)
  std::string device;            // -d: udp: the interface whose address bind_host is (device.h);
                                 // verbs: the RDMA device ("" = the first with an ACTIVE RoCE port)

  // The verbs wire (--wire verbs-*): the data connection's port. The control connection stays on UDP.
  PerfWire wire = PerfWire::kUdp;     // --wire
  uint32_t ib_port = 0;               // -i: 1-based; 0 = the device's first ACTIVE Ethernet port
  std::optional<uint32_t> gid_index;  // -x: as MEGASCALE_IB_GID_INDEX (it overrides that variable)
  std::string sysfs_root = "/sys/class/infiniband";  // where devices are discovered (tests point elsewhere)

  // The transport.
  uint32_t lanes = 4;                   // --lanes: lanes (UDP source ports) per connection, 1..64
  std::string cc = "hybrid";            // --cc: built-in preset name or YAML file
  uint32_t segment_bytes = 4096;        // --segment: payload bytes per datagram
  uint8_t dscp = 0;                     // -T: the TOS byte's upper six bits (DSCP = TOS >> 2)
  PerfPoll poll = PerfPoll::kAdaptive;  // --poll
  uint32_t io_threads = 0;              // --io-threads: the wire's I/O threads per side (UdpConfig)
  uint32_t stall_us = 300;              // --stall-us: an I/O thread silent this long is taken over
                                        // (UdpConfig::stall_ns); 0 = never
  bool payload_crc = true;              // --no-payload-crc clears it: this side's payloads leave unchecked
                                        // (EngineConfig::payload_crc; each side's own, not exchanged)

  // The client's lane source ports (source_ports.h): an explicit list (--source-ports), or chosen by
  // the topology's port mapping for the fabric path --from -> --to (--fabric, --hash). Client only.
  std::vector<uint16_t> source_ports;  // --source-ports, one per lane
  std::string fabric;                  // --fabric: preset name or fabric YAML
  std::string from;                    // --from hH:nN: this (client) NIC in the fabric
  std::string to;                      // --to hH:nN: the server's NIC
  std::vector<std::string> hashes;     // --hash: one (every tier) or three (tor, spine, core)

  // Limits.
  double timeout_s = 60;                        // --timeout: fail when nothing completes for this long
  uint64_t buffer_budget_bytes = 256ULL << 20;  // --buffer-mib: message buffers per side
  bool verbose = false;                         // -v: wire counters (syscalls, GSO) after each row

  // --baseline ucx (with --loopback, bw rows): each row run again over UCX (ucx.h) and shown beside.
  bool baseline_ucx = false;

  std::set<std::string, std::less<>> explicit_flags;  // flag:: names the user gave
  bool is_explicit(std::string_view f) const { return explicit_flags.count(f) > 0; }
};

enum class PerfRole : uint8_t { kServer, kClient, kLoopback };
PerfRole role_of(const PerfOptions& o);

// Checks the options together (ranges and combinations); the message names the flag and the value,
// e.g. "-a and -s: give one of them". The congestion-control preset is resolved separately (it reads
// files).
Status validate_perf_options(const PerfOptions& o);

// Settings that run but are likely to measure the host rather than the transport, one sentence each:
// I/O threads whose spinning threads (each side's progress thread and its --io-threads; two sides with
// --loopback) outnumber `usable_cpus` (wire::usable_cpus()). The threads yield in rounds that find
// nothing, so they take turns rather than starve one another, but each packet waits for its thread's turn.
std::vector<std::string> perf_warnings(const PerfOptions& o, unsigned usable_cpus);

// The message sizes of a row list: -s, -a (2, 4, ... 2^23, or 2^26 for bw) or the test's default.
std::vector<uint64_t> sizes_for(const PerfOptions& o, PerfTest test);

// Messages (bw) or round trips (lat) for one row of `size_bytes` when no -D is given: -n, or the
// default capped to kDefaultRowBytes.
uint64_t iterations_for(const PerfOptions& o, PerfTest test, uint64_t size_bytes);

// Message buffers one side allocates for a bw row, each way: enough for the window, within the budget
// (at least one; check_buffer_budget refuses a budget too small for that). The bw window is
// min(window, buffers).
uint32_t buffers_for(const PerfOptions& o, uint64_t size_bytes);
// Memory `count` buffers for messages of `size_bytes` take (each rounded up to whole pages).
uint64_t buffer_bytes(uint64_t count, uint64_t size_bytes);
// --buffer-mib must hold one bw message of the largest size each way and a latency row's
// kLatBuffersPerSide: an error names the flag and the budget the sizes need.
Status check_buffer_budget(const PerfOptions& o);

}  // namespace megascale::perf
