// A registration cache: memory regions registered once and found again for every later buffer they
// cover, so sends and receives from the same buffers (NCCL's, reused for the whole job) cost no
// ibv_reg_mr on the hot path. Pure over two callbacks, so its bookkeeping is tested without a device;
// ib_device.h gives the callbacks that call ibv_reg_mr / ibv_dereg_mr.
//
//   MrCache cache(register_fn, deregister_fn);
//   Result<MrKeys> k = cache.find_or_register(addr, len);   // k->lkey for SGEs, k->rkey for peers
//   cache.invalidate(addr, len);                            // the application freed the buffer
//
// Regions are widened to whole pages (4 KiB), so neighbouring buffers share one registration.
// Overlapping regions may coexist; a lookup takes any one that covers the whole range.
#pragma once

#include <cstdint>
#include <functional>
#include <map>

#include "megascale/common/result.h"

namespace megascale::wire::verbs {

struct MrKeys {
  uint32_t lkey = 0;
  uint32_t rkey = 0;
};

struct Registration {
  MrKeys keys;
  void* handle = nullptr;  // the struct ibv_mr*, handed back to deregister
};

class MrCache {
 public:
  using RegisterFn = std::function<Result<Registration>(uint64_t addr, uint64_t len)>;
  using DeregisterFn = std::function<void(void* handle)>;
  static constexpr uint64_t kPageBytes = 4096;

  MrCache(RegisterFn reg, DeregisterFn dereg) : register_(std::move(reg)), deregister_(std::move(dereg)) {}
  ~MrCache();
  MrCache(const MrCache&) = delete;
  MrCache& operator=(const MrCache&) = delete;

  // The keys of a region covering [addr, addr + len); registers the page-aligned range when none does.
  // Errors: len 0, a range that wraps, or the registration's own error.
  Result<MrKeys> find_or_register(uint64_t addr, uint64_t len);
  // Deregisters every region that overlaps [addr, addr + len): its memory is going away. No WR may
  // still use them (the caller's obligation).
  void invalidate(uint64_t addr, uint64_t len);

  size_t regions() const { return regions_.size(); }
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }

 private:
  struct Region {
    uint64_t end = 0;  // exclusive
    Registration reg;
  };
  RegisterFn register_;
  DeregisterFn deregister_;
  std::multimap<uint64_t, Region> regions_;  // by start
  uint64_t longest_ = 0;                     // the longest region's length: bounds the backward search
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
};

}  // namespace megascale::wire::verbs
