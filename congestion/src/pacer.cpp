#include "megascale/congestion/pacer.h"

#include <algorithm>
#include <cmath>

namespace megascale::cc {
namespace {

double to_bytes_per_ns(double rate_bps) {
  return rate_bps > 0 ? rate_bps / 8e9 : 0.0;
}

}  // namespace

Pacer::Pacer(const PacerParams& params, double rate_bps)
    : burst_bytes_(static_cast<double>(params.burst_bytes)),
      rate_bps_(rate_bps),
      bytes_per_ns_(to_bytes_per_ns(rate_bps)) {}

double Pacer::tokens_bytes(TimeNs now) const {
  if (!anchored_) return burst_bytes_;
  // The elapsed time is an exact integer; only the product with the rate is rounded, once.
  const TimeNs elapsed_ns = std::max<TimeNs>(0, now - anchor_ns_);
  return std::min(burst_bytes_, tokens_at_anchor_ + static_cast<double>(elapsed_ns) * bytes_per_ns_);
}

void Pacer::set_rate(TimeNs now, double rate_bps) {
  if (anchored_) {
    // Settle what was earned at the old rate up to `now`, then accrue at the new one from here.
    tokens_at_anchor_ = tokens_bytes(now);
    anchor_ns_ = std::max(anchor_ns_, now);
  }
  rate_bps_ = rate_bps;
  bytes_per_ns_ = to_bytes_per_ns(rate_bps);
}

TimeNs Pacer::next_send_ns(TimeNs now, uint64_t bytes) const {
  const double need = std::min(static_cast<double>(bytes), burst_bytes_);
  const double have = tokens_bytes(now);
  if (have >= need) return now;
  if (bytes_per_ns_ <= 0) return kNever;
  // Tokens only grow after the anchor; an earlier `now` counts as the anchor.
  const TimeNs from = std::max(now, anchor_ns_);
  const double wait_ns = std::ceil((need - have) / bytes_per_ns_);
  if (wait_ns >= static_cast<double>(kNever - from)) return kNever;
  TimeNs t = from + static_cast<TimeNs>(wait_ns);
  // The division and the product in tokens_bytes round independently: settle on the first ns at which
  // tokens_bytes itself allows the send, so next_send_ns(t) == t holds and t - 1 would not do.
  while (tokens_bytes(t) < need) ++t;
  while (t > from + 1 && tokens_bytes(t - 1) >= need) --t;
  return t;
}

void Pacer::on_send(TimeNs now, uint64_t bytes) {
  const double have = tokens_bytes(now);
  anchor_ns_ = anchored_ ? std::max(anchor_ns_, now) : now;
  anchored_ = true;
  tokens_at_anchor_ = have - static_cast<double>(bytes);
  last_send_bytes_ = bytes;
}

}  // namespace megascale::cc
