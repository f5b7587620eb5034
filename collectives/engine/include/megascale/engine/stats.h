// Counters of the engine, per lane, per connection and per endpoint. Plain structs, updated in place
// by the engine with no allocation; read them at any time between calls.
//
//   const ConnectionStats& s = conn->stats();
//   printf("%llu retx (%llu fast, %llu rto), p99 rtt %lld ns\n", s.retransmits(), s.retransmits_fast,
//          s.retransmits_rto, s.rtt.percentile_ns(0.99));
//   for (uint32_t i = 0; i < conn->lanes(); ++i) use(conn->lane_stats(i).cwnd_bytes);
#pragma once

#include <array>
#include <cstdint>

#include "megascale/common/units.h"

namespace megascale::engine {

// RTT histogram with fixed log-spaced buckets: 4 per power of two (<= 19% relative error) from 64 ns to
// ~68.7 s; smaller values fall in bucket 0, larger in the last. add() is a few instructions and never
// allocates. min and max are exact.
class RttHistogram {
 public:
  static constexpr int kSubBuckets = 4;
  static constexpr int kMinLog2 = 6;   // 64 ns
  static constexpr int kMaxLog2 = 36;  // ~68.7 s
  static constexpr int kBuckets = (kMaxLog2 - kMinLog2) * kSubBuckets + 2;

  void add(TimeNs rtt_ns);
  uint64_t count() const { return count_; }
  TimeNs min_ns() const { return count_ ? min_ns_ : 0; }
  TimeNs max_ns() const { return count_ ? max_ns_ : 0; }
  // The sum of every sample (a mean, or a Prometheus histogram's _sum).
  TimeNs sum_ns() const { return sum_ns_; }
  // The samples in `bucket` (0 .. kBuckets-1): those in (bucket_upper_ns(bucket - 1),
  // bucket_upper_ns(bucket)].
  uint64_t bucket_count(int bucket) const;
  // The q-quantile (0..1), as the upper edge of its bucket clamped to [min, max]; 0 when empty.
  TimeNs percentile_ns(double q) const;
  void clear() { *this = RttHistogram{}; }
  // Adds every sample of `other` (as if each had been add()ed here).
  void merge(const RttHistogram& other);

  static int bucket_of(TimeNs rtt_ns);
  static TimeNs bucket_upper_ns(int bucket);

 private:
  std::array<uint64_t, kBuckets> buckets_{};
  uint64_t count_ = 0;
  TimeNs min_ns_ = kNever;
  TimeNs max_ns_ = 0;
  TimeNs sum_ns_ = 0;
};

// One lane of one connection (sender side unless noted).
struct LaneStats {
  uint32_t path_id = 0;        // current path entropy (the wire maps it to a UDP source port)
  uint64_t bytes_sent = 0;     // payload bytes sent, retransmissions included
  uint64_t segments_sent = 0;  // SEGs sent (DATA and CREDIT), retransmissions included
  uint64_t bytes_acked = 0;    // payload bytes acknowledged (credited to the lane that sent them)
  uint64_t segments_acked = 0;
  uint64_t retransmits_fast = 0;  // retransmissions sent on this lane after SACK/RACK loss detection
  uint64_t retransmits_rto = 0;   // retransmissions sent on this lane after a timeout
  uint64_t tail_probes = 0;       // tail-loss probes sent on this lane (EngineConfig::tail_probe)
  uint64_t timeouts = 0;          // RTOs that found a segment of this lane lost
  uint64_t losses = 0;            // segments sent on this lane that were declared lost
  uint64_t ecn_marks = 0;         // CE marks echoed back for segments of this lane
  uint64_t cnps_received = 0;     // CNPs for this lane
  uint64_t cnps_sent = 0;         // receiver side: CNPs sent for CE marks arriving on this lane
  uint64_t repaths = 0;           // times this lane took a new path id
  uint64_t floor_stalls = 0;      // stays at the controller's floor longer than floor_stall_ns with
                                  // ACKs arriving (EngineConfig::floor_stall_ns)
  RttHistogram rtt;               // RTT samples (Karn: none from retransmitted segments)
  double cwnd_bytes = 0;          // the controller's window now
  double pacing_rate_bps = 0;     // the controller's pacing rate now
  uint64_t in_flight_bytes = 0;   // payload bytes sent on this lane and not acked or declared lost
};

// One connection; the sender-side counters are the sums over its lanes.
struct ConnectionStats {
  // Sending.
  uint64_t bytes_sent = 0;
  uint64_t segments_sent = 0;
  uint64_t bytes_acked = 0;
  uint64_t retransmits_fast = 0;
  uint64_t retransmits_rto = 0;
  uint64_t timeouts = 0;           // RTO expiries (each may retransmit several segments)
  uint64_t timeouts_spurious = 0;  // of those, undone: the original copies arrived (Eifel)
  uint64_t tail_probes = 0;        // segments sent again as tail-loss probes (not in retransmits())
  uint64_t ecn_marks = 0;          // CE marks echoed by the peer
  uint64_t cnps_received = 0;
  uint64_t repaths = 0;
  uint64_t floor_stalls = 0;  // lanes that stayed at their controller's floor longer than
                              // EngineConfig::floor_stall_ns while ACKs arrived (once per stay)
  uint64_t acks_received = 0;
  RttHistogram rtt;           // RTT samples: send to the ACK's arrival (the wire's receive timestamp)
  RttHistogram fabric_delay;  // the same samples less the receiver's echoed delay (what Swift and
                              // the hybrid controller compare with their targets)
  RttHistogram rx_delay;      // every packet of this connection: receive timestamp to processing
                              // (this host's scheduling delay; only when the wire gives timestamps)
  // Receiving.
  uint64_t bytes_received = 0;     // payload bytes placed into receive buffers (each byte once)
  uint64_t segments_received = 0;  // new (non-duplicate) SEGs accepted
  uint64_t segments_unchecked = 0;  // of those, DATA without a payload CRC (the peer's payload_crc false)
  uint64_t ce_received = 0;        // arriving SEGs marked CE
  uint64_t cnps_sent = 0;
  uint64_t acks_sent = 0;
  uint64_t duplicates_dropped = 0;     // SEGs already received (acked again, not placed again)
  uint64_t malformed_dropped = 0;      // intact header, impossible content (bad slot, offset, ...)
  uint64_t corrupt_dropped = 0;        // payload CRC mismatch
  uint64_t out_of_window_dropped = 0;  // seq beyond the reorder window
  // Requests.
  uint64_t sends_posted = 0;
  uint64_t sends_waited_for_credit = 0;  // posted before the peer's receive (its CREDIT) had arrived: the
                                         // data waits at least a one-way trip for it
  uint64_t sends_completed = 0;
  uint64_t sends_failed = 0;
  uint64_t recvs_posted = 0;
  uint64_t recvs_completed = 0;
  uint64_t recvs_failed = 0;

  uint64_t retransmits() const { return retransmits_fast + retransmits_rto; }
  // Adds another connection's counters and histograms (one figure for several connections that carry
  // one stream, such as an NCCL comm's stripes).
  void merge(const ConnectionStats& other);
};

// Packets an endpoint could not hand to a connection, and connection setup.
struct EndpointStats {
  uint64_t packets_received = 0;
  uint64_t packets_sent = 0;
  uint64_t malformed_dropped = 0;   // failed decoding before demultiplexing (bad magic, CRC, ...)
  uint64_t unknown_connection = 0;  // intact packets for a connection id we do not have
  uint64_t rsts_sent = 0;
  uint64_t rsts_rate_limited = 0;  // RSTs not sent because of rst_interval_ns
  uint64_t rsts_received = 0;
  uint64_t syns_received = 0;       // including retransmitted SYNs
  uint64_t version_mismatches = 0;  // handshakes refused or failed on version
  uint64_t connections_initiated = 0;
  uint64_t connections_accepted = 0;  // handed to accept() (with confirm_handshake: once confirmed)
  uint64_t connections_failed = 0;
  // Accepted SYNs whose SYN_ACK no packet from the initiator ever answered (EngineConfig::
  // confirm_handshake): replayed or forged SYNs, or an initiator that vanished. Dropped unseen.
  uint64_t handshakes_unconfirmed = 0;
  uint64_t port_unreachable_reports = 0;  // on_port_unreachable calls (ICMP port unreachable, from the wire)
  uint64_t requests_posted = 0;     // every connection's post_send and post_recv that were accepted
  uint64_t receives_completed = 0;  // every connection's receive completions, ok or not (the wire defers
                                    // its send after a round that completed one: udp.h, progress)
  uint64_t bytes_received = 0;      // payload bytes placed, every connection's (ConnectionStats)
  uint64_t segments_received = 0;   // every connection's ConnectionStats::segments_received
  uint64_t duplicates_dropped = 0;  // every connection's ConnectionStats::duplicates_dropped: segments the
                                    // peer sent again though this side had them (its ACKs were late or lost)
  uint64_t floor_stalls = 0;        // every connection's ConnectionStats::floor_stalls
  uint64_t sends_completed = 0;     // every connection's send completions, ok or not (a simulated
                                    // workload looks at its requests only after some completed)
  uint64_t connections_polled = 0;  // connections poll_tx asked for a packet: about one per packet sent
                                    // plus one per connection that had an event, never all of them
};

}  // namespace megascale::engine
