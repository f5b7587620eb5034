// The congestion-controller interface every algorithm in congestion/ implements.
//
// A controller is pure and deterministic: it never reads a clock, does no I/O and spawns no thread.
// The caller passes `now` into every call and asks, after each call, how much may be in flight
// (`cwnd_bytes`) and how fast to send (`pacing_rate_bps`). The same object runs under the UDP and verbs
// wires in real time and inside the simulator in virtual time.
//
//   FlowParams flow{.line_rate_bps = gbps(100), .mss_bytes = 4096};
//   auto cc = make_controller(config, flow);          // config.h
//   cc->on_send(now, 4096);
//   cc->on_ack(now, AckSample{.acked_bytes = 4096, .acked_packets = 1, .rtt_ns = 12'000});
//   if (in_flight + 4096 <= cc->cwnd_bytes()) { /* send, paced at cc->pacing_rate_bps() */ }
//
// Timers (DCQCN's alpha and rate-increase timers) are caught up lazily by every call: a call with a
// later `now` first processes every expiry up to `now`. `next_timer_ns()` tells the caller when the
// controller would next change on its own, so a wire can wake for it; calling `on_timer(now)` then is
// optional for correctness but keeps rates fresh between packets.
#pragma once

#include <cstdint>
#include <string_view>

#include "megascale/common/units.h"

namespace megascale::cc {

// What every controller needs to know about the flow it governs.
struct FlowParams {
  double line_rate_bps = 100e9;  // NIC line rate: the most any controller ever allows
  uint32_t mss_bytes = 4096;     // payload bytes per segment; windows in packets are multiples of it
  TimeNs base_rtt_ns = 10'000;   // RTT guess before the first sample (us-scale fabrics)
  uint8_t hops = 0;              // forward hop count when known (Swift's topology-based scaling)
};

// One acknowledgement, as the transport delivers it to the sender's controller.
struct AckSample {
  uint64_t acked_bytes = 0;        // newly acknowledged payload bytes
  uint32_t acked_packets = 0;      // newly acknowledged segments
  TimeNs rtt_ns = -1;              // RTT sample from the echoed send timestamp; <0 = no sample
  TimeNs remote_delay_ns = 0;      // receiver's queuing+processing delay echoed in the ACK (Swift's
                                   // endpoint delay); fabric delay = rtt_ns - remote_delay_ns
  bool ecn_ce = false;             // the ACK echoes CE: at least one acked packet was marked
  uint32_t ce_packets = 0;         // how many acked packets were marked, when the receiver counts them
  uint8_t hops = 0;                // forward hops measured from TTL (0 = unknown, use FlowParams::hops)
  bool delay_upper_bound = false;  // remote_delay_ns is not this sample's own (a coalesced ACK echoed
                                   // another segment), so rtt_ns - remote_delay_ns is only an upper
                                   // bound of the fabric delay: it may show room, never congestion
};

enum class ControllerKind : uint8_t { kFixedWindow, kSwift, kDcqcn, kHybrid };

std::string_view to_string(ControllerKind kind);

// A snapshot of internal state for counters, plots and tests.
struct ControllerState {
  double cwnd_bytes = 0;         // current window
  double pacing_rate_bps = 0;    // current pacing rate
  double target_rate_bps = 0;    // DCQCN's R_T (0 where not applicable)
  double target_delay_ns = 0;    // Swift/hybrid delay target for the current window (0 where n/a)
  double alpha = 0;              // DCQCN/hybrid congestion estimate (0 where n/a)
  uint64_t decreases = 0;        // multiplicative decreases taken so far
};

class Controller {
 public:
  virtual ~Controller() = default;

  virtual ControllerKind kind() const = 0;

  // A segment of `bytes` left the sender (feeds DCQCN's byte counter).
  virtual void on_send(TimeNs now, uint64_t bytes) = 0;
  // New data was acknowledged.
  virtual void on_ack(TimeNs now, const AckSample& ack) = 0;
  // A congestion notification packet arrived (DCQCN's CNP; hybrid treats it as an ECN echo).
  virtual void on_cnp(TimeNs now) = 0;
  // A SACK hole started fast retransmission (once per loss episode, not per lost segment).
  virtual void on_fast_recovery(TimeNs now) = 0;
  // The retransmission timer fired.
  virtual void on_rto(TimeNs now) = 0;
  // The timeouts since this lane's last acknowledgment were spurious: the original copies arrived (the
  // ACK echoed a first transmission's timestamp; Eifel, RFC 3522 / 4015). Undo what those timeouts cut.
  // A host that stalls for tens of RTOs (a descheduled receiver) otherwise leaves a delay-based lane at
  // its floor, paced at rtt/min_cwnd. Controllers that cut nothing on a timeout keep the default.
  virtual void on_spurious_rto(TimeNs /*now*/) {}
  // Process timer expiries up to `now` (also done implicitly by every other call).
  virtual void on_timer(TimeNs now) = 0;

  // When the controller next changes by itself; kNever if it would not.
  virtual TimeNs next_timer_ns() const = 0;
  // Most bytes that may be unacknowledged. Rate-based controllers return a cap (or a very large value).
  virtual double cwnd_bytes() const = 0;
  // Rate to pace segments at, bps; never above the line rate, never zero.
  virtual double pacing_rate_bps() const = 0;
  // The window or rate is at its configured minimum (Swift's min_cwnd, DCQCN's min_rate): a lane that
  // stays there while ACKs keep arriving is starved, not merely slowed (the engine counts it).
  virtual bool at_floor() const { return false; }

  virtual ControllerState state() const = 0;
};

// Jain's fairness index of a set of rates: (sum x)^2 / (n * sum x^2); 1 = perfectly fair.
double jain_index(const double* rates, int n);

}  // namespace megascale::cc
