// `megascale ceiling`: what the kernel alone moves over loopback on this host, with none of megascale's
// code in the way: the bound under any UDP wire, beside the TCP that NCCL's Socket net rides.
//
//   CeilingOptions o;  o.proto = CeilingProto::kUdp;  o.pairs = 4;  o.copy = true;
//   CeilingResult r = run_ceiling(o);
//   if (!r.error.empty()) fail(r.error);
//   use(r.gbps(), r.bytes_per_cpu_second());
//
// Each pair is a sender thread and a receiver thread with their own sockets on 127.0.0.1, both making
// blocking system calls (no polling, so the CPU they use is the work itself):
// - UDP: datagrams of `bytes`, sendmmsg and recvmmsg of up to `batch`, at most `window` in flight per
//   pair (the receiver's count, read through memory: no acknowledgement packets), so the kernel drops
//   nothing; the UDP wire's path without the transport.
// - TCP: one connection, blocking send and recv of `bytes` at a time, as NCCL's socket threads do.
// What the UDP wire adds per payload byte can be added back one pass at a time:
// - `copy`: the receiver copies each payload once more, into a 4 MiB ring (the wire's copy from its
//   batch into the posted buffer; TCP's single copy is the kernel's);
// - `crc`: CRC32C over each payload at both ends (the transport's payload CRC); the receiver checks it,
//   so a run with `crc` also proves every byte arrived as sent.
// Each datagram or write carries its sequence number; the receiver counts gaps and reorderings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace megascale::perf {

enum class CeilingProto : uint8_t { kUdp, kTcp };

struct CeilingOptions {
  CeilingProto proto = CeilingProto::kUdp;
  uint32_t pairs = 4;        // sender/receiver thread pairs, 1..256
  size_t bytes = 32 * 1024;  // a datagram's payload (UDP, at most 65,507) or one send() (TCP)
  double seconds = 3;        // sending time; the receivers then drain what is in flight
  uint32_t window = 64;      // UDP: datagrams in flight per pair
  uint32_t batch = 16;       // UDP: datagrams per sendmmsg / recvmmsg, 1..1024
  bool copy = false;         // the receiver copies each payload once more
  bool crc = false;          // CRC32C of each payload at both ends, checked by the receiver
  bool ipv6 = false;         // ::1 instead of 127.0.0.1
};

// Empty when the options are usable, else what is wrong with them (names the field).
std::string validate(const CeilingOptions& o);

struct CeilingResult {
  std::string error;           // non-empty: the run failed (a socket call), nothing below is valid
  double seconds = 0;          // from the first send to the last receive
  uint64_t messages_sent = 0;  // datagrams or send() calls
  uint64_t messages_received = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t out_of_order = 0;        // a message whose sequence number is not the next expected one
  uint64_t crc_errors = 0;          // with `crc`: payloads whose CRC did not match
  uint64_t lost = 0;                // UDP: datagrams sent and never received (after the drain)
  double sender_cpu_seconds = 0;    // user + system time of the sender threads
  double receiver_cpu_seconds = 0;  // user + system time of the receiver threads
  // Every CPU's busy time over the run (/proc/stat: user, nice, system, irq, softirq), whoever ran: it
  // includes the interrupt and softirq work a kernel may not charge to the threads, and anything else
  // the host ran meanwhile. 0 where /proc/stat cannot be read.
  double host_cpu_seconds = 0;
  uint32_t rcvbuf_bytes = 0;  // UDP: the receive buffer the kernel granted each socket

  double gbps() const { return seconds > 0 ? static_cast<double>(bytes_received) * 8 / seconds / 1e9 : 0; }
  // Payload bytes received per busy CPU-second of the host (of the threads where /proc/stat is not
  // there): what a CPU-bound host can move per core.
  double bytes_per_cpu_second() const {
    const double cpu = host_cpu_seconds > 0 ? host_cpu_seconds : sender_cpu_seconds + receiver_cpu_seconds;
    return cpu > 0 ? static_cast<double>(bytes_received) / cpu : 0;
  }
};

CeilingResult run_ceiling(const CeilingOptions& o);

// "udp", "udp+copy", "udp+copy+crc", "tcp", "tcp+crc": the row's name; parse_row is its inverse, over
// `base` (which supplies the other fields). Empty error when the name parsed.
std::string row_name(const CeilingOptions& o);
std::string parse_row(const std::string& name, CeilingOptions& o);

}  // namespace megascale::perf
