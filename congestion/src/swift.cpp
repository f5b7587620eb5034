// Swift (Kumar et al., SIGCOMM '20): Algorithm 1 for the window, §3.4 for pacing below one packet and
// §3.5 for the flow- and topology-scaled target delay. Only the fabric window (fcwnd) is modelled; the
// endpoint part of the RTT is removed from the signal instead (use_fabric_delay).
#include "megascale/congestion/swift.h"

#include <algorithm>
#include <cmath>

namespace megascale::cc {

namespace {

// An RTT of zero would make "once per RTT" and rtt/cwnd pacing meaningless; 1 ns is the floor.
TimeNs positive_rtt(TimeNs rtt_ns) {
  return std::max<TimeNs>(rtt_ns, 1);
}

}  // namespace

SwiftTarget::SwiftTarget(const SwiftParams& p)
    : base_ns_(static_cast<double>(p.base_target_ns)),
      per_hop_ns_(static_cast<double>(p.per_hop_ns)),
      fs_range_ns_(static_cast<double>(p.fs_range_ns)),
      scaling_(p.fs_min_cwnd_packets > 0 && p.fs_max_cwnd_packets > p.fs_min_cwnd_packets && fs_range_ns_ > 0) {
  if (scaling_) {
    inv_sqrt_max_ = 1.0 / std::sqrt(p.fs_max_cwnd_packets);
    span_ = 1.0 / std::sqrt(p.fs_min_cwnd_packets) - inv_sqrt_max_;
  }
}

double SwiftTarget::ns(double cwnd_packets, uint8_t hops) const {
  const double topology_ns = base_ns_ + static_cast<double>(hops) * per_hop_ns_;

  // Flow-based scaling (§3.5): alpha / sqrt(cwnd) + beta with
  //   alpha = fs_range / (1/sqrt(fs_min) - 1/sqrt(fs_max)),  beta = -alpha / sqrt(fs_max).
  // Written as fs_range * (1/sqrt(cwnd) - 1/sqrt(fs_max)) / (1/sqrt(fs_min) - 1/sqrt(fs_max)), the same
  // expression, so the term is exactly 0 at fs_max and exactly fs_range at fs_min.
  if (!scaling_) return topology_ns;                            // flow scaling disabled or ill-defined
  if (!(cwnd_packets > 0)) return topology_ns + fs_range_ns_;  // 1/sqrt(0) is infinite: the cap applies
  const double flow_ns = fs_range_ns_ * (1.0 / std::sqrt(cwnd_packets) - inv_sqrt_max_) / span_;
  return topology_ns + std::max(0.0, std::min(flow_ns, fs_range_ns_));
}

double swift_target_delay_ns(const SwiftParams& p, double cwnd_packets, uint8_t hops) {
  return SwiftTarget(p).ns(cwnd_packets, hops);
}

PacingRtt::PacingRtt(TimeNs base_rtt_ns) : rtt_ns_(positive_rtt(base_rtt_ns)) {}

void PacingRtt::on_sample(TimeNs rtt_ns) {
  const TimeNs sample = positive_rtt(rtt_ns);
  if (!sampled_) {
    sampled_ = true;
    rtt_ns_ = sample;
    return;
  }
  const TimeNs bounded = std::min(sample, 4 * rtt_ns_);
  rtt_ns_ = positive_rtt(rtt_ns_ + (bounded - rtt_ns_) / 8);
}

double PacingRtt::rate_bps(double cwnd_packets, uint32_t mss_bytes, double line_rate_bps) const {
  if (cwnd_packets >= 1) return line_rate_bps;  // ACK-clocked: the NIC sends at line rate
  const double rate_bps = cwnd_packets * mss_bytes * 8.0 / (static_cast<double>(rtt_ns_) * 1e-9);
  // A zero rate would stall the flow for ever; 1 bps is the floor should min_cwnd be configured as 0.
  return std::max(std::min(rate_bps, line_rate_bps), 1.0);
}

SwiftController::SwiftController(const SwiftParams& params, const FlowParams& flow)
    : p_(params),
      target_(params),
      flow_(flow),
      cwnd_(std::min(std::max(params.init_cwnd_packets, params.min_cwnd_packets), params.max_cwnd_packets)),
      rtt_ns_(positive_rtt(flow.base_rtt_ns)),
      pacing_rtt_(flow.base_rtt_ns),
      hops_(flow.hops) {}

void SwiftController::on_send(TimeNs /*now*/, uint64_t /*bytes*/) {}  // ACK-clocked; no send counters

void SwiftController::on_cnp(TimeNs /*now*/) {}  // delay is the only congestion signal

void SwiftController::on_timer(TimeNs /*now*/) {}  // no timers

bool SwiftController::at_floor() const {
  return cwnd_ <= p_.min_cwnd_packets;
}

bool SwiftController::can_decrease(TimeNs now) const {
  // Algorithm 1: can_decrease = (now - t_last_decrease >= rtt); the first decrease is always allowed.
  return !decreased_once_ || now - t_last_decrease_ >= rtt_ns_;
}

void SwiftController::clamp_and_note_decrease(TimeNs now, double prev_cwnd) {
  cwnd_ = std::min(std::max(cwnd_, p_.min_cwnd_packets), p_.max_cwnd_packets);
  // Algorithm 1: "if cwnd <= cwnd_prev: t_last_decrease = now". Only decrease branches call this, so
  // an increase clamped at max_cwnd, or a held window while a cut is not yet allowed, never restarts
  // the once-per-RTT clock (otherwise steady over-target ACKs would block every later cut).
  if (cwnd_ <= prev_cwnd) {
    t_last_decrease_ = now;
    decreased_once_ = true;
    ++decreases_;
  }
}

void SwiftController::on_ack(TimeNs now, const AckSample& ack) {
  retransmit_cnt_ = 0;
  cwnd_before_rtos_ = 0;       // the run of timeouts is over; only the ACK that ends it may undo it
  if (ack.rtt_ns < 0) return;  // no delay sample: nothing to compare with the target

  rtt_ns_ = positive_rtt(ack.rtt_ns);
  if (ack.hops != 0) hops_ = ack.hops;  // TTL-measured hop count replaces the configured one

  // §3.3: the fabric part of the RTT excludes the receiver's echoed queuing and processing time.
  const TimeNs remote_ns = p_.use_fabric_delay ? std::max<TimeNs>(ack.remote_delay_ns, 0) : 0;
  const double delay_ns = static_cast<double>(std::max<TimeNs>(ack.rtt_ns - remote_ns, 0));
  // §3.4 spaces cwnd packets over the round trip of the path the window governs, here the fabric's: a
  // receiver descheduled for milliseconds would otherwise put 1,000 of its stalls between the sends of
  // a window at the 0.001-packet floor, and the samples that could lift it would come as rarely.
  pacing_rtt_.on_sample(ack.rtt_ns - remote_ns);
  const double acked_packets = ack.acked_packets != 0
                                   ? static_cast<double>(ack.acked_packets)
                                   : static_cast<double>(ack.acked_bytes) / flow_.mss_bytes;

  const double prev_cwnd = cwnd_;
  if (target_.below(delay_ns, cwnd_, hops_)) {
    // Additive increase: ai packets per RTT's worth of ACKs above one packet, ai per ACK below it.
    cwnd_ += cwnd_ >= 1 ? p_.ai_packets / cwnd_ * acked_packets : p_.ai_packets * acked_packets;
    cwnd_ = std::min(std::max(cwnd_, p_.min_cwnd_packets), p_.max_cwnd_packets);
  } else if (ack.delay_upper_bound) {
    // §3.1-§3.3: Swift cuts on fabric delay only, the endpoint's part taken out. A bound still holds
    // the receiver's unechoed host delay, so above the target it tells nothing about the fabric: hold.
  } else if (can_decrease(now)) {
    // Multiplicative decrease proportional to the excess delay, at most max_mdf (Algorithm 1).
    // delay >= target > 0 here unless the target itself is 0; a zero delay has no excess to cut.
    const double target_ns = target_.ns(cwnd_, hops_);
    const double excess = delay_ns > 0 ? (delay_ns - target_ns) / delay_ns : 0.0;
    cwnd_ *= std::max(1.0 - p_.beta * excess, 1.0 - p_.max_mdf);
    clamp_and_note_decrease(now, prev_cwnd);
  }
}

void SwiftController::on_rto(TimeNs now) {
  if (retransmit_cnt_ == 0) cwnd_before_rtos_ = cwnd_;
  ++retransmit_cnt_;
  const double prev_cwnd = cwnd_;
  if (retransmit_cnt_ >= p_.retx_reset_threshold) {
    cwnd_ = p_.min_cwnd_packets;  // repeated timeouts: the path is likely gone, restart from the floor
  } else if (can_decrease(now)) {
    cwnd_ *= 1.0 - p_.max_mdf;
  } else {
    return;
  }
  clamp_and_note_decrease(now, prev_cwnd);
}

void SwiftController::on_spurious_rto(TimeNs /*now*/) {
  // Back to the window before the run (never below what it has grown to since), and the count that
  // leads to the floor starts again. Later delay samples cut it as usual if the path is congested.
  if (cwnd_before_rtos_ > 0) cwnd_ = std::min(std::max(cwnd_, cwnd_before_rtos_), p_.max_cwnd_packets);
  retransmit_cnt_ = 0;
  cwnd_before_rtos_ = 0;
}

void SwiftController::on_fast_recovery(TimeNs now) {
  retransmit_cnt_ = 0;
  if (!can_decrease(now)) return;
  const double prev_cwnd = cwnd_;
  cwnd_ *= 1.0 - p_.max_mdf;
  clamp_and_note_decrease(now, prev_cwnd);
}

double SwiftController::cwnd_bytes() const {
  return cwnd_ * flow_.mss_bytes;
}

double SwiftController::pacing_rate_bps() const {
  // §3.4: below one packet, send one packet every rtt/cwnd, i.e. cwnd * mss bytes per RTT.
  return pacing_rtt_.rate_bps(cwnd_, flow_.mss_bytes, flow_.line_rate_bps);
}

ControllerState SwiftController::state() const {
  ControllerState s;
  s.cwnd_bytes = cwnd_bytes();
  s.pacing_rate_bps = pacing_rate_bps();
  s.target_delay_ns = target_.ns(cwnd_, hops_);
  s.decreases = decreases_;
  return s;
}

}  // namespace megascale::cc
