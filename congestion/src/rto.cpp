#include "megascale/congestion/rto.h"

#include <algorithm>
#include <cmath>

#include "megascale/common/splitmix.h"

namespace megascale::cc {
namespace {

TimeNs round_ns(double ns) {
  return static_cast<TimeNs>(std::llround(ns));
}

// first * 2^n, saturating at `ceiling` (first and ceiling are positive).
TimeNs doubled(TimeNs first, uint32_t n, TimeNs ceiling) {
  if (first >= ceiling) return ceiling;
  if (n >= 62 || first > (ceiling >> n)) return ceiling;
  return std::min(first << n, ceiling);
}

}  // namespace

RtoEstimator::RtoEstimator(const RtoParams& params, uint64_t seed) : p_(params), rng_state_(seed) {
  jitter_factor_ = draw_jitter_factor();
}

double RtoEstimator::draw_jitter_factor() {
  // 53 random bits give a uniform double in [0, 1).
  const double u = unit_interval(splitmix64_next(rng_state_));
  return 1.0 - p_.first_jitter + 2.0 * p_.first_jitter * u;
}

void RtoEstimator::on_rtt_sample(TimeNs rtt_ns) {
  if (rtt_ns < 0) return;
  const auto r = static_cast<double>(rtt_ns);
  if (!has_sample_) {
    // RFC 6298 §2.2.
    srtt_ns_ = r;
    rttvar_ns_ = r / 2;
    has_sample_ = true;
    return;
  }
  // RFC 6298 §2.3, alpha = 1/8, beta = 1/4; RTTVAR uses the SRTT from before this sample.
  rttvar_ns_ = 0.75 * rttvar_ns_ + 0.25 * std::fabs(srtt_ns_ - r);
  srtt_ns_ = 0.875 * srtt_ns_ + 0.125 * r;
}

TimeNs RtoEstimator::srtt_ns() const {
  return round_ns(srtt_ns_);
}

TimeNs RtoEstimator::rttvar_ns() const {
  return round_ns(rttvar_ns_);
}

TimeNs RtoEstimator::base_rto_ns() const {
  // RFC 6298 §2.2-2.5 with our floor and ceiling in place of its 1 s minimum and 60 s maximum. The
  // clock-granularity term G is dropped: time is in ns.
  const double rto = has_sample_ ? srtt_ns_ + static_cast<double>(p_.rttvar_k) * rttvar_ns_
                                 : static_cast<double>(p_.initial_rto_ns);
  // Clamped in double first: an absurd sample must not overflow the conversion.
  const double floor_ns = static_cast<double>(p_.min_rto_ns);
  const double ceiling_ns = static_cast<double>(p_.max_rto_ns);
  return clamp_rto(round_ns(std::min(std::max(rto, floor_ns), ceiling_ns)));
}

TimeNs RtoEstimator::clamp_rto(TimeNs rto_ns) const {
  // Not std::clamp: a ceiling below the floor (which config.h rejects) must not be undefined here.
  return std::min(std::max(rto_ns, p_.min_rto_ns), p_.max_rto_ns);
}

TimeNs RtoEstimator::first_timeout_ns(double jitter_factor) const {
  // The floor stays a floor even for the jittered first timeout: it guards against spurious
  // retransmissions, which jitter must not defeat.
  const double t = static_cast<double>(base_rto_ns()) * jitter_factor;
  return clamp_rto(round_ns(t));
}

TimeNs RtoEstimator::timeout_ns() const {
  if (given_up_) return kNever;
  const TimeNs first = first_timeout_ns(jitter_factor_);
  if (!in_episode()) return first;
  const TimeNs backed_off = doubled(first, backoff_count_, p_.max_rto_ns);
  // The last timer of the episode ends exactly at the budget deadline, so a dead peer is declared
  // dead on time rather than up to one max_rto late.
  const TimeNs to_deadline = episode_start_ns_ + p_.retry_budget_ns - last_timeout_ns_;
  return std::min(backed_off, to_deadline);
}

RtoVerdict RtoEstimator::on_timeout(TimeNs now) {
  if (given_up_) return RtoVerdict::kGiveUp;
  if (!in_episode()) episode_start_ns_ = now;
  last_timeout_ns_ = now;
  ++backoff_count_;
  if (backoff_count_ > p_.max_retries || now - episode_start_ns_ >= p_.retry_budget_ns) {
    given_up_ = true;
    return RtoVerdict::kGiveUp;
  }
  return RtoVerdict::kRetry;
}

void RtoEstimator::on_progress(TimeNs /*now*/) {
  if (!in_episode()) return;  // the jitter is drawn once per episode, not per ACK
  backoff_count_ = 0;
  jitter_factor_ = draw_jitter_factor();
}

TimeNs RtoEstimator::worst_case_budget_ns() const {
  const TimeNs first = first_timeout_ns(1.0 + p_.first_jitter);
  // Time from the first timeout firing to the give-up: the next max_retries backed-off timeouts,
  // cut at the budget. Once the ceiling is reached every further term is max_rto.
  TimeNs after_first = 0;
  for (uint32_t i = 1; i <= p_.max_retries && after_first < p_.retry_budget_ns; ++i) {
    const TimeNs t = doubled(first, i, p_.max_rto_ns);
    if (t <= 0) break;  // degenerate parameters (zero timeouts); config.h rejects them
    if (t == p_.max_rto_ns) {
      const uint64_t left = p_.max_retries - i + 1;
      const TimeNs room = p_.retry_budget_ns - after_first;
      after_first += (left >= static_cast<uint64_t>(room / t + 1)) ? room : static_cast<TimeNs>(left) * t;
      break;
    }
    after_first += t;
  }
  return first + std::min(after_first, p_.retry_budget_ns);
}

}  // namespace megascale::cc
