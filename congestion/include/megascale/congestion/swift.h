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

class SwiftController final : public Controller {
 public:
  SwiftController(const SwiftParams& params, const FlowParams& flow);

  ControllerKind kind() const override { return ControllerKind::kSwift; }
  void on_send(TimeNs now, uint64_t bytes) override;
  void on_ack(TimeNs now, const AckSample& ack) override;
  void on_cnp(TimeNs now) override;  // Swift ignores ECN/CNPs
  void on_fast_recovery(TimeNs now) override;
  void on_rto(TimeNs now) override;
  void on_timer(TimeNs now) override;
  TimeNs next_timer_ns() const override { return kNever; }
  double cwnd_bytes() const override;
  double pacing_rate_bps() const override;
  ControllerState state() const override;

  double cwnd_packets() const { return cwnd_; }
  uint32_t retransmit_count() const { return retransmit_cnt_; }

 private:
  bool can_decrease(TimeNs now) const;
  void clamp_and_note_decrease(TimeNs now, double prev_cwnd);

  SwiftParams p_;
  FlowParams flow_;
  double cwnd_;                 // packets (fractional below 1)
  TimeNs rtt_ns_;               // latest RTT sample (the paper uses instantaneous delay), else base_rtt
  TimeNs t_last_decrease_ = 0;  // set only by a decrease branch, never by an increase or a hold
  bool decreased_once_ = false;
  uint32_t retransmit_cnt_ = 0;
  uint8_t hops_ = 0;  // last nonzero AckSample::hops, else FlowParams::hops
  uint64_t decreases_ = 0;
};

}  // namespace megascale::cc
