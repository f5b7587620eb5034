// MegaScale's hybrid congestion control (Jiang et al., NSDI '24, §3.6): "an algorithm incorporating
// principles from both Swift and DCQCN, which integrates the precise measurement of RTT with the rapid
// congestion response capabilities of ECN". The paper gives no equations; the control law here is ours
// and is written out in full in congestion/README.md ("Hybrid"). In short: a Swift window (delay target
// with flow and topology scaling, additive increase, delay-proportional cut, pacing below one packet)
// that also cuts on ECN marks and CNPs, by a DCQCN/DCTCP-style alpha, before the delay has built up.
// Every decrease cause shares one once-per-RTT budget and no RTT loses more than max_mdf.
//
//   HybridController cc(HybridParams{}, FlowParams{.line_rate_bps = gbps(100), .mss_bytes = 4096});
//   cc.on_ack(now, {.acked_bytes = 4096, .acked_packets = 1, .rtt_ns = 18'000, .ecn_ce = true});
//   cc.on_cnp(now);                   // a RoCE NIC's CNP counts as an ECN echo
//   double window = cc.cwnd_bytes();  // below one packet, pacing_rate_bps() spaces sends by rtt/cwnd
#pragma once

#include <cstdint>

#include "megascale/congestion/controller.h"
#include "megascale/congestion/params.h"
#include "megascale/congestion/swift.h"

namespace megascale::cc {

class HybridController final : public Controller {
 public:
  // alpha starts at 1, as in DCTCP and DCQCN: a new flow's first mark cuts by alpha/2 = 50% (within
  // max_mdf); alpha then tracks the marked fraction with a time constant of about 1/g RTTs.
  static constexpr double kInitialAlpha = 1.0;

  HybridController(const HybridParams& params, const FlowParams& flow);

  ControllerKind kind() const override { return ControllerKind::kHybrid; }
  // Closes elapsed alpha rounds; the hybrid has no byte counter.
  void on_send(TimeNs now, uint64_t bytes) override;
  // One ACK: feeds the alpha round and applies the 2x2 law (README). An ACK without an RTT sample
  // (rtt_ns < 0) cannot increase the window; if it echoes ECN it acts like a CNP.
  void on_ack(TimeNs now, const AckSample& ack) override;
  // An ECN signal judged against the latest delay sample; it also makes the current round's F = 1.
  void on_cnp(TimeNs now) override;
  // Swift: cut by max_mdf, at most once per RTT; resets the consecutive-RTO count.
  void on_fast_recovery(TimeNs now) override;
  // Swift: cut by max_mdf at most once per RTT; after retx_reset_threshold consecutive RTOs, min_cwnd.
  void on_rto(TimeNs now) override;
  void on_spurious_rto(TimeNs now) override;
  // Closes elapsed alpha rounds; the window never changes by itself.
  void on_timer(TimeNs now) override;
  TimeNs next_timer_ns() const override { return kNever; }
  double cwnd_bytes() const override;
  // Line rate at or above one packet (ACK-clocked); cwnd * mss per RTT below it (Swift §3.4).
  double pacing_rate_bps() const override;
  bool at_floor() const override;  // cwnd at swift.min_cwnd_packets
  // cwnd, pacing rate, target delay for the current window, alpha as of the last call, decreases.
  ControllerState state() const override;

  double cwnd_packets() const { return cwnd_; }
  double alpha() const { return alpha_; }
  uint32_t retransmit_count() const { return retransmit_cnt_; }

 private:
  bool can_decrease(TimeNs now) const;
  // Applies alpha = (1-g) alpha + g F for every RTT round that has ended by `now`.
  void close_rounds(TimeNs now);
  // The 2x2 law on the latest delay sample; `ecn` says whether this signal carries a mark.
  void respond(TimeNs now, bool ecn, double acked_packets);
  // Takes one multiplicative decrease (the once-per-RTT budget is the caller's check).
  void decrease(TimeNs now, double factor);

  HybridParams p_;
  SwiftTarget target_;       // p_.swift's target delay curve
  FlowParams flow_;
  double cwnd_;                     // packets (fractional below 1)
  TimeNs rtt_ns_;                   // latest RTT sample, else FlowParams::base_rtt_ns
  PacingRtt pacing_rtt_;            // the smoothed RTT that spaces sends below one packet (swift.h)
  double delay_ns_ = 0;             // latest delay compared with the target (fabric delay by default)
  bool have_delay_ = false;         // no sample yet: the first signals count as "below target"
  bool delay_upper_bound_ = false;  // delay_ns_ only bounds the fabric delay (AckSample::delay_upper_bound)
  double alpha_ = kInitialAlpha;
  // The alpha round now open: it starts at the first call and lasts one RTT.
  bool round_open_ = false;
  TimeNs round_start_ns_ = 0;
  double round_acked_packets_ = 0;
  double round_marked_packets_ = 0;
  bool round_cnp_ = false;
  TimeNs t_last_decrease_ = 0;  // set only when a cut is taken
  bool decreased_once_ = false;
  uint32_t retransmit_cnt_ = 0;
  double cwnd_before_rtos_ = 0;  // the window when this run of timeouts began; 0 outside a run
  uint8_t hops_;  // last nonzero AckSample::hops, else FlowParams::hops
  uint64_t decreases_ = 0;
};

}  // namespace megascale::cc
