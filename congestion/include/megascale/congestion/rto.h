// Adaptive retransmission timeout: RFC 6298 SRTT/RTTVAR with a floor and a ceiling, exponential
// backoff from a randomised first timeout, and a total retry budget after which the connection fails.
//
// MegaScale (NSDI '24 §6.3) saw links flap for several seconds, dropping everything in flight; a
// transport that gives up before the link returns fails the whole job. So the timeout starts short
// (fast recovery from a single loss), doubles on every further timeout, and the connection is declared
// dead only when the retry budget (default 30 s, longer than any flap) is spent. The first timeout of
// each loss episode is drawn from rto * [1 - first_jitter, 1 + first_jitter], as NVIDIA's adaptive
// retransmission does per QP, so that flows hit by the same flap do not retransmit in lock step.
//
//   RtoEstimator rto(RtoParams{}, /*seed=*/lane_id);
//   rto.on_rtt_sample(12'000);                 // from every ACK of a segment sent once (Karn)
//   arm_timer(now + rto.timeout_ns());         // whenever the retransmission timer is (re)started
//   // the timer fired:
//   if (rto.on_timeout(now) == RtoVerdict::kGiveUp) fail_connection();
//   else { retransmit_oldest(); arm_timer(now + rto.timeout_ns()); }
//   // an ACK for new data arrived:
//   rto.on_progress(now);
//
// Loss episode: it starts when a timeout fires with no episode running and ends at on_progress. Its
// start, episode_start_ns(), is the `now` of that first on_timeout (the moment the sender learns of the
// loss; the estimator never sees when the caller armed the timer). The retry budget is spent, and
// on_timeout returns kGiveUp, at the first timeout with now - episode_start_ns() >= retry_budget_ns, or
// at the timeout number max_retries + 1 of the episode (max_retries retransmissions by timeout, then
// failure, as IB's retry_cnt). Once given up the estimator stays given up.
//
// Pure and deterministic: no clock, no global state; the seed fixes every random draw.
#pragma once

#include <cstdint>

#include "megascale/common/units.h"
#include "megascale/congestion/params.h"

namespace megascale::cc {

enum class RtoVerdict : uint8_t {
  kRetry,   // retransmit and arm timeout_ns() again
  kGiveUp,  // the retry budget is spent: fail the connection
};

class RtoEstimator {
 public:
  // `seed` makes the per-flow randomised first timeout reproducible (use e.g. the lane or QP number).
  RtoEstimator(const RtoParams& params, uint64_t seed);

  // Feeds one RTT measurement. Callers follow Karn's rule: no samples from retransmitted segments.
  // RFC 6298 §2: the first sample sets SRTT = R, RTTVAR = R/2; later ones RTTVAR = 3/4 RTTVAR +
  // 1/4 |SRTT - R|, then SRTT = 7/8 SRTT + 1/8 R. Negative samples (no measurement) are ignored.
  void on_rtt_sample(TimeNs rtt_ns);

  // The timeout to arm now, ns. Outside a loss episode: the first timeout of the next episode,
  // clamp(base_rto * f, min_rto, max_rto), where f in [1 - first_jitter, 1 + first_jitter] is drawn
  // once per episode. After n timeouts in the episode: min(first * 2^n, max_rto), shortened so the
  // timer ends no later than the budget deadline episode_start_ns() + retry_budget_ns (measured from
  // the latest on_timeout). kNever once given up.
  TimeNs timeout_ns() const;

  // The retransmission timer fired at `now`. Starts a loss episode if none is running, counts the
  // timeout and says whether to retry or give up (see the file comment for the exact rule).
  RtoVerdict on_timeout(TimeNs now);

  // New data was acknowledged: ends the loss episode, resets the backoff and the retry budget and
  // draws the next episode's first-timeout jitter. Does not undo a give-up.
  void on_progress(TimeNs now);

  // Smoothed RTT and RTT variation, ns (0 before the first sample).
  TimeNs srtt_ns() const;
  TimeNs rttvar_ns() const;
  // clamp(SRTT + k * RTTVAR, min_rto, max_rto); clamp(initial_rto, ...) before the first sample.
  TimeNs base_rto_ns() const;
  // Timeouts counted in the current loss episode (0 outside one).
  uint32_t backoff_count() const { return backoff_count_; }
  bool in_episode() const { return backoff_count_ > 0; }
  // When the current episode's first timeout fired; kNever outside an episode.
  TimeNs episode_start_ns() const { return in_episode() ? episode_start_ns_ : kNever; }
  bool given_up() const { return given_up_; }

  // Longest time a dead peer takes to be declared dead, from the moment the first timeout of an
  // episode is armed (normally the last progress) to the kGiveUp verdict, with the current RTT
  // estimate (at construction: initial_rto_ns) and the largest first-timeout jitter:
  //   first_max + min(retry_budget, sum_{i=1..max_retries} min(first_max * 2^i, max_rto)).
  // Useful to echo at start-up next to the parameters.
  TimeNs worst_case_budget_ns() const;

 private:
  TimeNs clamp_rto(TimeNs rto_ns) const;
  TimeNs first_timeout_ns(double jitter_factor) const;
  double draw_jitter_factor();

  RtoParams p_;
  uint64_t rng_state_;  // splitmix64 state
  bool has_sample_ = false;
  double srtt_ns_ = 0;  // kept in double: the 1/8 and 1/4 gains would truncate in integers
  double rttvar_ns_ = 0;
  double jitter_factor_ = 1;  // f for the current (or next) episode's first timeout
  uint32_t backoff_count_ = 0;
  TimeNs episode_start_ns_ = 0;
  TimeNs last_timeout_ns_ = 0;
  bool given_up_ = false;
};

}  // namespace megascale::cc
