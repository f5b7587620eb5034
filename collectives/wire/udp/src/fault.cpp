// The fault injector's per-datagram decisions (see fault.h for the order and semantics).
#include "megascale/wire/fault.h"

#include <algorithm>
#include <utility>

#include "megascale/common/splitmix.h"

namespace megascale::wire {

bool FaultConfig::enabled() const {
  return drop > 0 || duplicate > 0 || reorder > 0 || delay > 0 || corrupt > 0 || mark_ce > 0;
}

FaultInjector::FaultInjector(const FaultConfig& config) : config_(config), rng_state_(config.seed) {}

// SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014):
// a Weyl sequence through a 64-bit finalizer. Small, fast, and its output is fixed by the seed alone.
uint64_t FaultInjector::next_u64() {
  return splitmix64_next(rng_state_);
}

double FaultInjector::uniform() {
  // The top 53 bits fill a double's mantissa exactly: uniform on [0, 1) with no rounding bias.
  return static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
}

FaultInjector::Verdict FaultInjector::apply(TimeNs now, uint32_t peer, std::span<uint8_t> datagram,
                                            bool& ce) {
  ++counters_.datagrams;
  // Every draw happens for every datagram, so that one fault's probability does not shift the
  // sequence of decisions for the others.
  const double u_drop = uniform();
  const double u_corrupt = uniform();
  const uint64_t corrupt_bit = next_u64();
  const double u_ce = uniform();
  const double u_dup = uniform();
  const double u_delay = uniform();
  const double u_reorder = uniform();

  if (u_drop < config_.drop) {
    ++counters_.dropped;
    return {Action::kDrop, 0};
  }
  if (u_corrupt < config_.corrupt && !datagram.empty()) {
    const uint64_t bit = corrupt_bit % (datagram.size() * 8);
    datagram[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    ++counters_.corrupted;
  }
  if (u_ce < config_.mark_ce) {
    if (!ce) ++counters_.ce_marked;
    ce = true;
  }
  int copies = 1;
  if (u_dup < config_.duplicate) {
    copies = 2;
    ++counters_.duplicated;
  }

  const bool room = held() < kMaxHeldDatagrams;
  if (room && u_delay < config_.delay) {
    ++counters_.delayed;
    delayed_.push_back(
        Held{HeldDatagram{{datagram.begin(), datagram.end()}, peer, ce}, now + config_.delay_ns, 0, copies});
    return {Action::kHold, 0};
  }
  if (room && u_reorder < config_.reorder) {
    ++counters_.reordered;
    reordered_.push_back(Held{HeldDatagram{{datagram.begin(), datagram.end()}, peer, ce},
                              now + kReorderMaxHoldNs, delivered_ + config_.reorder_depth, copies});
    return {Action::kHold, 0};
  }
  delivered_ += 1;
  return {Action::kDeliver, copies};
}

bool FaultInjector::pop_ready(TimeNs now, HeldDatagram& out) {
  if (pending_copies_ > 0) {
    --pending_copies_;
    out = pending_copy_;
    return true;
  }
  auto take = [&](std::deque<Held>& queue) {
    Held& h = queue.front();
    if (h.copies > 1) {
      pending_copies_ = h.copies - 1;
      pending_copy_ = h.datagram;
    }
    out = std::move(h.datagram);
    queue.pop_front();
    return true;
  };
  // Both queues are FIFO with non-decreasing release times (a constant delay, a constant depth), so
  // only their fronts can be due.
  if (!delayed_.empty() && delayed_.front().release_ns <= now) return take(delayed_);
  if (!reordered_.empty() &&
      (reordered_.front().release_after <= delivered_ || reordered_.front().release_ns <= now)) {
    return take(reordered_);
  }
  return false;
}

TimeNs FaultInjector::next_deadline() const {
  TimeNs t = kNever;
  if (pending_copies_ > 0) return 0;
  if (!delayed_.empty()) t = std::min(t, delayed_.front().release_ns);
  if (!reordered_.empty()) {
    const Held& h = reordered_.front();
    t = std::min(t, h.release_after <= delivered_ ? TimeNs{0} : h.release_ns);
  }
  return t;
}

}  // namespace megascale::wire
