// Ring credits (rc_ring.h).
#include "megascale/wire/verbs/rc_ring.h"

#include <string>

namespace megascale::wire::verbs {

std::optional<uint32_t> RingWriter::take() {
  if (credits_ == 0) return std::nullopt;
  --credits_;
  const uint32_t slot = next_;
  next_ = next_ + 1 == slots_ ? 0 : next_ + 1;
  return slot;
}

Status RingWriter::on_credit(uint32_t n) {
  if (n > slots_ - credits_) {
    return make_error(ErrorCode::kRemote, "RC ring: the peer returned " + std::to_string(n) +
                                              " slots, only " + std::to_string(slots_ - credits_) +
                                              " are out");
  }
  credits_ += n;
  return {};
}

void RingWriter::reset() {
  credits_ = slots_;
  next_ = 0;
}

Status RingReader::check(uint32_t slots, uint32_t return_batch) {
  if (slots == 0 || return_batch == 0 || return_batch > slots) {
    return make_error("RC ring: credit return batch " + std::to_string(return_batch) + " must be 1.." +
                      std::to_string(slots) + " (the ring's slots)");
  }
  return {};
}

Status RingReader::on_filled(uint32_t slot) {
  if (slot != next_) {
    return make_error(ErrorCode::kRemote, "RC ring: a write into slot " + std::to_string(slot) +
                                              ", expected " + std::to_string(next_) +
                                              " (writes of one QP arrive in order)");
  }
  next_ = next_ + 1 == slots_ ? 0 : next_ + 1;
  ++unreturned_;
  return {};
}

uint32_t RingReader::take_credits() {
  if (unreturned_ < batch_) return 0;
  const uint32_t n = unreturned_;
  unreturned_ = 0;
  return n;
}

void RingReader::reset() {
  next_ = 0;
  unreturned_ = 0;
}

}  // namespace megascale::wire::verbs
