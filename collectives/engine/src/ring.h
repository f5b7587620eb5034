// A fixed-capacity FIFO over a power-of-two array: no allocation after construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "megascale/common/splitmix.h"

namespace megascale::engine::detail {

inline uint32_t round_up_pow2(uint32_t v) {
  uint32_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

template <class T>
class Ring {
 public:
  Ring() = default;
  explicit Ring(uint32_t min_capacity) : buf_(round_up_pow2(min_capacity)), mask_(buf_.size() - 1) {}

  bool empty() const { return head_ == tail_; }
  bool full() const { return tail_ - head_ == buf_.size(); }
  size_t size() const { return static_cast<size_t>(tail_ - head_); }
  size_t capacity() const { return buf_.size(); }

  // The caller checks full() first.
  void push(const T& v) { buf_[static_cast<size_t>(tail_++ & mask_)] = v; }
  T& front() { return buf_[static_cast<size_t>(head_ & mask_)]; }
  const T& front() const { return buf_[static_cast<size_t>(head_ & mask_)]; }
  void pop() { ++head_; }
  T& at(size_t i) { return buf_[static_cast<size_t>((head_ + i) & mask_)]; }
  void clear() { head_ = tail_ = 0; }
  // Doubles the capacity, keeping the elements in order (EngineConfig::grow_connection_state).
  void grow() {
    std::vector<T> bigger(buf_.empty() ? 1 : buf_.size() * 2);
    const size_t n = size();
    for (size_t i = 0; i < n; ++i) bigger[i] = at(i);
    buf_.swap(bigger);
    mask_ = buf_.size() - 1;
    head_ = 0;
    tail_ = n;
  }

 private:
  std::vector<T> buf_;
  uint64_t mask_ = 0;
  uint64_t head_ = 0;
  uint64_t tail_ = 0;
};

// The engine's deterministic PRNG (connection ids, path ids, RTO seeds): common/splitmix.h.
inline uint64_t splitmix64(uint64_t& state) {
  return splitmix64_next(state);
}

}  // namespace megascale::engine::detail
