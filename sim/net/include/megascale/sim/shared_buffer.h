// A switch's shared packet buffer with the dynamic threshold of Choudhury and Hahne ("Dynamic Queue
// Length Thresholds for Shared-Memory Packet Switches", IEEE/ACM ToN 6(2), 1998): every queue draws on
// one pool of B bytes, and a queue may grow only while its length stays within alpha times the free
// buffer, T(t) = alpha x (B - used(t)). With one congested queue it settles at alpha/(1+alpha) x B,
// with n at alpha/(1+n alpha) x B each, so some buffer is always left for a queue that starts to grow.
// Broadcom's Trident/Tomahawk ASICs use this rule for egress queues and for PFC ingress priority
// groups (SONiC's "dynamic_th" is log2(alpha)).
//
//   SharedBuffer buf(SharedBufferConfig{.bytes = 32 << 20, .alpha = 1.0});
//   if (buf.admits(queue_bytes, frame_bytes)) { buf.add(frame_bytes); ... }   // an arrival
//   buf.remove(frame_bytes);                                                   // its departure
//
// Who charges it: a switch's output queues in lossy mode (queue.h: the egress threshold, instead of the
// per-port capacity), and its ingresses with PFC (pfc.h: the dynamic XOFF threshold); frames in PFC
// headroom are held outside it, as headroom is reserved apart from the shared pool on real switches.
#pragma once

#include <algorithm>
#include <cstdint>

namespace megascale::sim {

struct SharedBufferConfig {
  uint64_t bytes = 0;  // B: the switch's shared pool (0: no shared buffer, static per-port limits)
  double alpha = 1.0;  // the dynamic threshold's factor, > 0 (1 and 1/2..8 are common settings)
};

class SharedBuffer {
 public:
  explicit SharedBuffer(const SharedBufferConfig& config) : cfg_(config) {}

  // The dynamic threshold now: alpha x free bytes.
  double threshold_bytes() const { return threshold_bytes(cfg_.alpha); }
  double threshold_bytes(double alpha) const { return alpha * static_cast<double>(free_bytes()); }
  // True if a queue (or ingress) holding `held_bytes` may take a frame of `frame_bytes`: the pool has
  // room and held + frame <= alpha x free, free counted before the frame. `alpha`: the config's, or
  // another factor for another kind of holder (PFC ingresses, pfc.h).
  bool admits(uint64_t held_bytes, uint64_t frame_bytes) const {
    return admits(held_bytes, frame_bytes, cfg_.alpha);
  }
  bool admits(uint64_t held_bytes, uint64_t frame_bytes, double alpha) const {
    return used_ + frame_bytes <= cfg_.bytes &&
           static_cast<double>(held_bytes + frame_bytes) <= threshold_bytes(alpha);
  }
  void add(uint64_t frame_bytes) {
    used_ += frame_bytes;
    max_used_ = std::max(max_used_, used_);
  }
  void remove(uint64_t frame_bytes) { used_ -= frame_bytes; }

  uint64_t used_bytes() const { return used_; }
  uint64_t free_bytes() const { return cfg_.bytes - used_; }
  uint64_t max_used_bytes() const { return max_used_; }
  const SharedBufferConfig& config() const { return cfg_; }

 private:
  SharedBufferConfig cfg_;
  uint64_t used_ = 0;
  uint64_t max_used_ = 0;
};

}  // namespace megascale::sim
