#include "megascale/congestion/dcqcn.h"

#include <algorithm>
#include <cmath>

namespace megascale::cc {

namespace {

// R_C approaches R_T by halving; once closer than this it is set to R_T, so recovery ends exactly at the
// line rate instead of stalling one ulp below it (where (R_T + R_C) / 2 can round back to R_C).
constexpr double kRateSnapBps = 1.0;

// More pending alpha expiries than this are applied in closed form, (1-g)^n, instead of one by one.
// Unreachable with sane gains: alpha falls from 1 to kAlphaNegligible within this many steps for any
// g >= 1/300, after which the alpha timer stops.
constexpr int64_t kAlphaClosedFormSteps = 4096;

// cwnd_bytes() without a window cap: larger than any real in-flight amount.
constexpr double kUnlimitedWindowBytes = 1e18;

}  // namespace

DcqcnParams dcqcn_paper_params() {
  // Zhu et al. SIGCOMM '15 values at 40 Gbps (as HPCC-sim and MATLAB fluid models citing the paper
  // use them).
  DcqcnParams p;
  p.g = 1.0 / 256;
  p.alpha_init = 1.0;
  p.alpha_update_ns = 55 * kNsPerUs;         // K = tau' = 55 us
  p.rate_increase_timer_ns = 55 * kNsPerUs;  // T = 55 us
  p.byte_counter_bytes = 10'000'000;         // B = 10 MB
  p.fast_recovery_steps = 5;                 // F = 5
  p.rate_ai_bps = mbps(40);                  // R_AI = 40 Mbps
  p.min_decrease_interval_ns = 0;            // every CNP cuts (the NP already paces CNPs)
  p.max_decrease_fraction = 0.5;             // implied: alpha <= 1 cuts at most alpha/2 = 50%
  p.cnp_interval_ns = 50 * kNsPerUs;         // N = tau = 50 us
  p.window_cap_bdp = 0;
  return p;
}

DcqcnParams dcqcn_nic_firmware_params(double line_rate_bps) {
  // NVIDIA/Mellanox CX-4+ firmware [DOCA "DCQCN CC Parameters"] and HPCC-sim's
  // Mellanox-style "dcqcn" run (simulation/run.py) for what the DOCA excerpt does not give.
  DcqcnParams p = dcqcn_paper_params();
  p.g = 5.0 / 1024;                           // alpha <- (G/1024) alpha with G = 1019 (DOCA)
  p.alpha_init = 1023.0 / 1024;               // initial alpha (DOCA)
  p.alpha_update_ns = 1 * kNsPerUs;           // dce_tcp_rtt = 1 us (DOCA)
  p.min_decrease_interval_ns = 4 * kNsPerUs;  // rate_reduce_monitor_period = 4 us (DOCA)
  p.max_decrease_fraction = 0.5;              // min_dec_fac = 50% (DOCA)
  p.min_rate_bps = mbps(1);                   // min rate 1 Mbps (DOCA)
  p.rate_increase_timer_ns = 300 * kNsPerUs;  // RP_TIMER = 300 us (HPCC-sim)
  p.fast_recovery_steps = 1;                  // FAST_RECOVERY_TIMES = 1 (HPCC-sim)
  const double per_25g = line_rate_bps / gbps(25);
  p.rate_ai_bps = mbps(5) * per_25g;    // 5 Mbps * BW/25G (HPCC-sim)
  p.rate_hai_bps = mbps(50) * per_25g;  // 50 Mbps * BW/25G (HPCC-sim)
  return p;
}

DcqcnController::DcqcnController(const DcqcnParams& params, const FlowParams& flow)
    : p_(params),
      flow_(flow),
      line_rate_bps_(std::max(flow.line_rate_bps, 1.0)),
      // The interface promises a pacing rate above zero, so the floor is at least 1 bps.
      min_rate_bps_(std::clamp(params.min_rate_bps, 1.0, line_rate_bps_)),
      rate_bps_(line_rate_bps_),
      target_rate_bps_(line_rate_bps_),
      alpha_(std::clamp(params.alpha_init, 0.0, 1.0)),
      rtt_ns_(flow.base_rtt_ns) {
  if (alpha_ < kAlphaNegligible) alpha_ = 0;
}

void DcqcnController::catch_up(TimeNs now) {
  if (!started_) {
    started_ = true;
    last_now_ = now;
    if (p_.alpha_update_ns > 0 && p_.g > 0 && alpha_ > 0) next_alpha_ns_ = now + p_.alpha_update_ns;
    return;  // starts at line rate: no increase timer until the first cut
  }
  if (now <= last_now_) return;  // time never runs backwards here
  last_now_ = now;

  // Alpha timer (paper: "if no CNP for K, alpha = (1-g) alpha"). Alpha only scales the next cut, so
  // its expiries commute with the rate-increase expiries and are processed on their own.
  if (next_alpha_ns_ <= now) {
    const int64_t pending = (now - next_alpha_ns_) / p_.alpha_update_ns + 1;
    if (pending > kAlphaClosedFormSteps) {
      alpha_ *= std::pow(1.0 - p_.g, static_cast<double>(pending));
      next_alpha_ns_ += pending * p_.alpha_update_ns;
      if (alpha_ < kAlphaNegligible) alpha_ = 0;
    } else {
      for (int64_t i = 0; i < pending && alpha_ > 0; ++i) {
        alpha_ *= 1.0 - p_.g;
        if (alpha_ < kAlphaNegligible) alpha_ = 0;
      }
      next_alpha_ns_ += pending * p_.alpha_update_ns;
    }
    if (alpha_ == 0) next_alpha_ns_ = kNever;
  }

  // Rate-increase timer T. Each expiry at least halves R_T - R_C or raises R_T, so recovery to line
  // rate (where the timer stops) takes a bounded number of steps.
  while (next_increase_ns_ <= now) {
    if (at_line_rate()) {
      next_increase_ns_ = kNever;
      break;
    }
    if (timer_steps_are_flat()) {
      const int64_t pending = (now - next_increase_ns_) / p_.rate_increase_timer_ns + 1;
      timer_count_ += static_cast<uint64_t>(pending);
      next_increase_ns_ += pending * p_.rate_increase_timer_ns;
      break;
    }
    rate_increase(IncreaseSource::kTimer);
    next_increase_ns_ += p_.rate_increase_timer_ns;
  }
  if (at_line_rate()) next_increase_ns_ = kNever;
}

// Which increase phase an expiry applies. i_T and i_B are read *before* the expiring counter counts the
// current expiry, i.e. they are the expirations completed earlier since the last cut:
//   fast recovery    while max(i_T, i_B) <  F   (so exactly F steps of fast recovery, QCN's "F cycles")
//   additive         when  max(i_T, i_B) >= F and min(i_T, i_B) < F
//   hyper            when  min(i_T, i_B) >= F, step i = min(i_T, i_B) - F + 1 (1 on the first)
// The paper's text says fast recovery while both counts are "< F" and additive/hyper when
// one/both "exceed" F. Read with counts that include the current expiry, "< F" and "> F" leave the count
// == F undefined and give only F-1 fast-recovery steps; reading the counts before the current expiry
// with ">= F" closes that gap, keeps F fast-recovery steps and gives the notes' i = min - F + 1.
void DcqcnController::rate_increase(IncreaseSource source) {
  uint64_t& count = source == IncreaseSource::kTimer ? timer_count_ : byte_count_;
  if (!at_line_rate()) {
    const uint64_t f = p_.fast_recovery_steps;
    const uint64_t hi = std::max(timer_count_, byte_count_);
    const uint64_t lo = std::min(timer_count_, byte_count_);
    if (hi >= f && lo < f) {
      target_rate_bps_ += p_.rate_ai_bps;  // additive increase
    } else if (lo >= f) {
      target_rate_bps_ += static_cast<double>(lo - f + 1) * p_.rate_hai_bps;  // hyper increase
    }
    target_rate_bps_ = std::min(target_rate_bps_, line_rate_bps_);
    rate_bps_ = (target_rate_bps_ + rate_bps_) / 2;  // every phase: R_C = (R_T + R_C) / 2
    if (target_rate_bps_ - rate_bps_ < kRateSnapBps) rate_bps_ = target_rate_bps_;
    rate_bps_ = std::clamp(rate_bps_, min_rate_bps_, line_rate_bps_);
  }
  ++count;
}

// True when every further timer expiry would only count (R_C == R_T and the phase's R_T step is 0):
// possible only with R_AI or R_HAI <= 0, which config validation rejects; guards the loop regardless.
bool DcqcnController::timer_steps_are_flat() const {
  if (rate_bps_ != target_rate_bps_) return false;
  const uint64_t f = p_.fast_recovery_steps;
  if (timer_count_ < f) return false;  // still heading for additive or hyper increase
  return byte_count_ < f ? p_.rate_ai_bps <= 0 : p_.rate_hai_bps <= 0;
}

void DcqcnController::on_send(TimeNs now, uint64_t bytes) {
  catch_up(now);
  if (p_.byte_counter_bytes == 0) return;  // byte counter off
  bytes_counted_ += bytes;
  while (bytes_counted_ >= p_.byte_counter_bytes) {
    if (at_line_rate()) {
      // Nothing left to recover: count the remaining expiries at once (they change no rate).
      byte_count_ += bytes_counted_ / p_.byte_counter_bytes;
      bytes_counted_ %= p_.byte_counter_bytes;
      break;
    }
    bytes_counted_ -= p_.byte_counter_bytes;
    rate_increase(IncreaseSource::kByteCounter);
  }
  if (at_line_rate()) next_increase_ns_ = kNever;
}

void DcqcnController::on_ack(TimeNs now, const AckSample& ack) {
  catch_up(now);
  if (ack.rtt_ns > 0) rtt_ns_ = ack.rtt_ns;
  // ack.ecn_ce is deliberately ignored: the receiver's CnpPacer turns CE marks into CNPs.
}

void DcqcnController::on_cnp(TimeNs now) {
  catch_up(now);
  // Firmware style (rate_reduce_monitor_period): CNPs close to the last cut feed alpha but do not cut.
  const bool merged =
      p_.min_decrease_interval_ns > 0 && cut_once_ && now - last_cut_ns_ < p_.min_decrease_interval_ns;
  if (!merged) {
    // Zhu et al., RP algorithm, on a CNP: R_T = R_C, R_C = R_C (1 - alpha/2), with alpha
    // before its update.
    const double cut = std::min(alpha_ / 2, std::clamp(p_.max_decrease_fraction, 0.0, 1.0));
    target_rate_bps_ = rate_bps_;
    rate_bps_ = std::max(rate_bps_ * (1 - cut), min_rate_bps_);
    timer_count_ = 0;
    byte_count_ = 0;
    bytes_counted_ = 0;
    next_increase_ns_ =
        p_.rate_increase_timer_ns > 0 && !at_line_rate() ? now + p_.rate_increase_timer_ns : kNever;
    last_cut_ns_ = now;
    cut_once_ = true;
    ++decreases_;
  }
  // alpha = (1-g) alpha + g; the alpha timer restarts, since this period had a CNP.
  alpha_ = std::min((1 - p_.g) * alpha_ + p_.g, 1.0);
  if (alpha_ < kAlphaNegligible) alpha_ = 0;
  next_alpha_ns_ = p_.alpha_update_ns > 0 && p_.g > 0 && alpha_ > 0 ? now + p_.alpha_update_ns : kNever;
}

void DcqcnController::on_fast_recovery(TimeNs now) {
  catch_up(now);
}

void DcqcnController::on_rto(TimeNs now) {
  catch_up(now);
}

void DcqcnController::on_timer(TimeNs now) {
  catch_up(now);
}

TimeNs DcqcnController::next_timer_ns() const {
  if (!started_) return kNever;
  const TimeNs increase = at_line_rate() ? kNever : next_increase_ns_;
  return std::min(next_alpha_ns_, increase);
}

double DcqcnController::cwnd_bytes() const {
  if (p_.window_cap_bdp <= 0) return kUnlimitedWindowBytes;
  // DCQCN+w: cap in-flight at window_cap_bdp * R_C * RTT, but never below one segment so a slow flow
  // still makes progress at its pacing rate.
  const double bdp_bytes = rate_bps_ * static_cast<double>(rtt_ns_) / 1e9 / 8;
  return std::max(p_.window_cap_bdp * bdp_bytes, static_cast<double>(flow_.mss_bytes));
}

ControllerState DcqcnController::state() const {
  ControllerState s;
  s.cwnd_bytes = cwnd_bytes();
  s.pacing_rate_bps = rate_bps_;
  s.target_rate_bps = target_rate_bps_;
  s.alpha = alpha_;
  s.decreases = decreases_;
  return s;
}

bool CnpPacer::on_packet(TimeNs now, bool ce_marked) {
  if (!ce_marked) return false;
  if (cnps_sent_ > 0 && interval_ns_ > 0 && now - last_cnp_ns_ < interval_ns_) return false;
  last_cnp_ns_ = now;
  ++cnps_sent_;
  return true;
}

}  // namespace megascale::cc
