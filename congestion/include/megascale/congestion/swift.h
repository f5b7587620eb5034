// Swift delay-based congestion control (Kumar et al., "Swift: Delay is Simple and Effective for
// Congestion Control in the Datacenter", SIGCOMM 2020, Algorithm 1, §3.4-§3.5).
//
//   SwiftController cc(SwiftParams{}, FlowParams{.line_rate_bps = gbps(100), .mss_bytes = 4096});
//   cc.on_ack(now, {.acked_bytes = 4096, .acked_packets = 1, .rtt_ns = 30'000});
//   double window = cc.cwnd_bytes();   // below one packet, pacing_rate_bps() spaces sends by rtt/cwnd
#pragma once

#include "megascale/congestion/controller.h"
#include "megascale/congestion/params.h"

namespace megascale::cc {

// Swift's target delay for a window of `cwnd_packets` over `hops` forward hops (§3.5):
//   t = base_target + hops * h + max(0, min(alpha / sqrt(cwnd) + beta, fs_range)),
//   alpha = fs_range / (1/sqrt(fs_min_cwnd) - 1/sqrt(fs_max_cwnd)), beta = -alpha / sqrt(fs_max_cwnd).
// Shared with the hybrid controller.
double swift_target_delay_ns(const SwiftParams& p, double cwnd_packets, uint8_t hops);

// The same curve with the parts that depend only on the parameters (two square roots and a division)
// computed once: controllers evaluate it on every ACK. ns() returns exactly what swift_target_delay_ns
// returns for the same parameters, bit for bit (the same operations on the same values).
class SwiftTarget {
 public:
  explicit SwiftTarget(const SwiftParams& p);
  double ns(double cwnd_packets, uint8_t hops) const;
  // delay_ns < ns(cwnd_packets, hops), without the square root when the delay is below the topology
  // term, which the target never is (the flow term is >= 0): the common case of an uncongested path.
  bool below(double delay_ns, double cwnd_packets, uint8_t hops) const {
    return delay_ns < base_ns_ + static_cast<double>(hops) * per_hop_ns_ || delay_ns < ns(cwnd_packets, hops);
  }

 private:
  double base_ns_;
  double per_hop_ns_;
  double fs_range_ns_;
  double inv_sqrt_max_ = 0;
  double span_ = 0;
  bool scaling_;  // false: flow scaling disabled or ill-defined (the topology term alone)
};

// The RTT that spaces sends below one packet (§3.4: one packet every rtt/cwnd). The paper's rtt is the
// latest sample; taken raw, one sample that measured an outage (a segment that sat out a link flap
// for seconds) would space the next send seconds apart, and the next sample, the one that could
// correct it, would wait as long: the flow stalls. So: the first sample as is, then an EWMA (gain 1/8,
// RFC 6298's) of samples each bounded to 4x the current estimate. A steady RTT is followed exactly;
// a real rise is followed within a few ACKs (x1.375 per ACK); an outlier moves it by at most x1.375.
class PacingRtt {
 public:
  explicit PacingRtt(TimeNs base_rtt_ns);
  void on_sample(TimeNs rtt_ns);
  TimeNs ns() const { return rtt_ns_; }
  // cwnd * mss bytes per RTT below one packet, the line rate at or above it; never below 1 bit/s.
  double rate_bps(double cwnd_packets, uint32_t mss_bytes, double line_rate_bps) const;

 private:
  TimeNs rtt_ns_;
  bool sampled_ = false;
};

class SwiftController final : public Controller {
 public:
  SwiftController(const SwiftParams& params, const FlowParams& flow);

  ControllerKind kind() const override { return ControllerKind::kSwift; }
  void on_send(TimeNs now, uint64_t bytes) override;
  void on_ack(TimeNs now, const AckSample& ack) override;
  void on_cnp(TimeNs now) override;  // Swift ignores ECN/CNPs
  void on_fast_recovery(TimeNs now) override;
  void on_rto(TimeNs now) override;
  void on_spurious_rto(TimeNs now) override;
  void on_timer(TimeNs now) override;
  TimeNs next_timer_ns() const override { return kNever; }
  double cwnd_bytes() const override;
  double pacing_rate_bps() const override;
  bool at_floor() const override;  // cwnd at min_cwnd_packets
  ControllerState state() const override;

  double cwnd_packets() const { return cwnd_; }
  uint32_t retransmit_count() const { return retransmit_cnt_; }

 private:
  bool can_decrease(TimeNs now) const;
  void clamp_and_note_decrease(TimeNs now, double prev_cwnd);

  SwiftParams p_;
  SwiftTarget target_;
  FlowParams flow_;
  double cwnd_;                 // packets (fractional below 1)
  TimeNs rtt_ns_;               // latest RTT sample (the paper uses instantaneous delay), else base_rtt
  PacingRtt pacing_rtt_;        // the smoothed RTT that spaces sends below one packet
  TimeNs t_last_decrease_ = 0;  // set only by a decrease branch, never by an increase or a hold
  bool decreased_once_ = false;
  uint32_t retransmit_cnt_ = 0;
  double cwnd_before_rtos_ = 0;  // the window when this run of timeouts began; 0 outside a run
  uint8_t hops_ = 0;  // last nonzero AckSample::hops, else FlowParams::hops
  uint64_t decreases_ = 0;
};

}  // namespace megascale::cc
