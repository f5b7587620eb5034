// MegaScale's hybrid (NSDI '24 §3.6): Swift's window and delay target plus a DCQCN-style ECN response.
// The control law, its 2x2 table and the reasons for each choice are in congestion/README.md.
#include "megascale/congestion/hybrid.h"

#include <algorithm>
#include <cmath>

#include "megascale/congestion/swift.h"

namespace megascale::cc {

namespace {

// "Once per RTT" and rtt/cwnd pacing need a positive RTT; 1 ns is the floor.
TimeNs positive_rtt(TimeNs rtt_ns) {
  return std::max<TimeNs>(rtt_ns, 1);
}

}  // namespace

HybridController::HybridController(const HybridParams& params, const FlowParams& flow)
    : p_(params),
      target_(params.swift),
      flow_(flow),
      cwnd_(std::clamp(params.swift.init_cwnd_packets, params.swift.min_cwnd_packets,
                       params.swift.max_cwnd_packets)),
      rtt_ns_(positive_rtt(flow.base_rtt_ns)),
      pacing_rtt_(flow.base_rtt_ns),
      hops_(flow.hops) {}

bool HybridController::can_decrease(TimeNs now) const {
  // Swift Algorithm 1: can_decrease = (now - t_last_decrease >= rtt); here shared by delay, ECN, CNP
  // and loss, so one congestion episode costs one cut per RTT whichever signals report it.
  return !decreased_once_ || now - t_last_decrease_ >= rtt_ns_;
}

void HybridController::close_rounds(TimeNs now) {
  if (!round_open_) {
    round_open_ = true;
    round_start_ns_ = now;
    return;
  }
  const TimeNs elapsed_ns = now - round_start_ns_;
  if (elapsed_ns < rtt_ns_) return;
  // DCTCP's estimator (Alizadeh et al., SIGCOMM '10) as DCQCN uses it (Zhu et al., SIGCOMM '15):
  // alpha = (1 - g) alpha + g F once per RTT, F = fraction of acked packets that were marked. A CNP
  // carries no count, so a round that saw one has F = 1, as DCQCN's per-CNP update has.
  double marked_fraction = 0;
  if (round_cnp_) {
    marked_fraction = 1;
  } else if (round_acked_packets_ > 0) {
    marked_fraction = std::min(round_marked_packets_ / round_acked_packets_, 1.0);
  }
  alpha_ = (1 - p_.g) * alpha_ + p_.g * marked_fraction;
  // Whole rounds that passed with no feedback are rounds without ECN: alpha decays as DCQCN's alpha
  // timer decays it when no CNP arrives.
  const int64_t rounds = elapsed_ns / rtt_ns_;
  if (rounds > 1) alpha_ *= std::pow(1 - p_.g, static_cast<double>(rounds - 1));
  round_start_ns_ += rounds * rtt_ns_;
  round_acked_packets_ = 0;
  round_marked_packets_ = 0;
  round_cnp_ = false;
}

void HybridController::decrease(TimeNs now, double factor) {
  cwnd_ = std::clamp(cwnd_ * factor, p_.swift.min_cwnd_packets, p_.swift.max_cwnd_packets);
  t_last_decrease_ = now;
  decreased_once_ = true;
  ++decreases_;
}

void HybridController::respond(TimeNs now, bool ecn, double acked_packets) {
  const SwiftParams& s = p_.swift;
  bool over_target = have_delay_ && !target_.below(delay_ns_, cwnd_, hops_);
  if (over_target && delay_upper_bound_) {
    // Swift §3.1-§3.3: only fabric delay cuts. A bound above the target may be the receiver's host
    // delay, not the fabric's: no delay signal, so hold (an ECN mark still cuts below).
    if (!ecn) return;
    over_target = false;
  }

  if (!over_target && !ecn) {
    // Swift Algorithm 1 additive increase: ai per RTT's worth of ACKs at or above one packet, ai per
    // ACK below it. Only an ACK with a delay sample gets here.
    cwnd_ += cwnd_ >= 1 ? s.ai_packets / cwnd_ * acked_packets : s.ai_packets * acked_packets;
    cwnd_ = std::clamp(cwnd_, s.min_cwnd_packets, s.max_cwnd_packets);
    return;
  }
  // Any congestion signal: never grow; cut if this RTT's cut is still unspent, else hold.
  if (!can_decrease(now)) return;
  double cut = 0;
  if (over_target && delay_ns_ > 0) {
    const double target_ns = target_.ns(cwnd_, hops_);
    cut = s.beta * (delay_ns_ - target_ns) / delay_ns_;  // Swift Algorithm 1, delay-proportional
  }
  if (ecn) {
    // DCQCN's R_C (1 - alpha/2), with a floor so a mark still acts while alpha has decayed to ~0.
    cut = std::max(cut, std::max(alpha_ / 2, p_.ecn_min_cut));
  }
  cut = std::min(cut, s.max_mdf);  // one cut per RTT, never more than max_mdf
  if (cut <= 0) return;            // zero excess and no mark: nothing to take
  decrease(now, 1 - cut);
}

void HybridController::on_send(TimeNs now, uint64_t /*bytes*/) {
  close_rounds(now);
}

void HybridController::on_ack(TimeNs now, const AckSample& ack) {
  close_rounds(now);
  retransmit_cnt_ = 0;
  cwnd_before_rtos_ = 0;  // the run of timeouts is over; only the ACK that ends it may undo it
  if (ack.hops != 0) hops_ = ack.hops;

  const double acked_packets = ack.acked_packets != 0
                                   ? static_cast<double>(ack.acked_packets)
                                   : static_cast<double>(ack.acked_bytes) / flow_.mss_bytes;
  const bool ecn = ack.ecn_ce || ack.ce_packets > 0;
  round_acked_packets_ += acked_packets;
  if (ecn) {
    // A receiver that counts marks reports ce_packets; a plain CE echo marks everything it acks.
    round_marked_packets_ +=
        ack.ce_packets > 0 ? std::min(static_cast<double>(ack.ce_packets), acked_packets) : acked_packets;
  }

  if (ack.rtt_ns >= 0) {
    rtt_ns_ = positive_rtt(ack.rtt_ns);
    // Swift §3.3: the fabric delay excludes the receiver's echoed queuing and processing time; §3.4
    // paces below one packet over that fabric round trip too (swift.cpp says why).
    const TimeNs remote_ns = p_.swift.use_fabric_delay ? std::max<TimeNs>(ack.remote_delay_ns, 0) : 0;
    pacing_rtt_.on_sample(ack.rtt_ns - remote_ns);
    delay_ns_ = static_cast<double>(std::max<TimeNs>(ack.rtt_ns - remote_ns, 0));
    delay_upper_bound_ = ack.delay_upper_bound;
    have_delay_ = true;
  } else if (!ecn) {
    return;  // neither a delay sample nor a mark: nothing to act on
  }
  respond(now, ecn, acked_packets);
}

void HybridController::on_cnp(TimeNs now) {
  close_rounds(now);
  round_cnp_ = true;
  respond(now, /*ecn=*/true, 0);
}

void HybridController::on_fast_recovery(TimeNs now) {
  close_rounds(now);
  retransmit_cnt_ = 0;
  if (can_decrease(now)) decrease(now, 1 - p_.swift.max_mdf);
}

void HybridController::on_rto(TimeNs now) {
  close_rounds(now);
  if (retransmit_cnt_ == 0) cwnd_before_rtos_ = cwnd_;
  ++retransmit_cnt_;
  if (retransmit_cnt_ >= p_.swift.retx_reset_threshold) {
    // Swift Algorithm 1: repeated timeouts mean the path is likely gone; restart from the floor.
    decrease(now, 0);
  } else if (can_decrease(now)) {
    decrease(now, 1 - p_.swift.max_mdf);
  }
}

void HybridController::on_spurious_rto(TimeNs now) {
  close_rounds(now);
  // As Swift's: the window before the run of timeouts, and the count toward the floor from zero.
  if (cwnd_before_rtos_ > 0) {
    cwnd_ =
        std::clamp(std::max(cwnd_, cwnd_before_rtos_), p_.swift.min_cwnd_packets, p_.swift.max_cwnd_packets);
  }
  retransmit_cnt_ = 0;
  cwnd_before_rtos_ = 0;
}

void HybridController::on_timer(TimeNs now) {
  close_rounds(now);
}

bool HybridController::at_floor() const {
  return cwnd_ <= p_.swift.min_cwnd_packets;
}

double HybridController::cwnd_bytes() const {
  return cwnd_ * flow_.mss_bytes;
}

double HybridController::pacing_rate_bps() const {
  // Swift §3.4: below one packet, one packet every rtt/cwnd, i.e. cwnd * mss bytes per RTT.
  return pacing_rtt_.rate_bps(cwnd_, flow_.mss_bytes, flow_.line_rate_bps);
}

ControllerState HybridController::state() const {
  ControllerState s;
  s.cwnd_bytes = cwnd_bytes();
  s.pacing_rate_bps = pacing_rate_bps();
  s.target_delay_ns = target_.ns(cwnd_, hops_);
  s.alpha = alpha_;
  s.decreases = decreases_;
  return s;
}

}  // namespace megascale::cc
