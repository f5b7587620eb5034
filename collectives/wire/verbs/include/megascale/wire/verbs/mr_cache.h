// A registration cache: memory regions registered once and found again for every later buffer they
// cover, so sends and receives from the same buffers (NCCL's, reused for the whole job) cost no
// ibv_reg_mr on the hot path. Pure over its callbacks, so its bookkeeping is tested without a device;
// ib_device.h gives the callbacks that call ibv_reg_mr / ibv_reg_dmabuf_mr / ibv_dereg_mr.
//
//   MrCache cache(register_fn, deregister_fn, register_dmabuf_fn);
//   Result<MrKeys> k = cache.find_or_register(addr, len);   // k->lkey for SGEs, k->rkey for peers
//   cache.invalidate(addr, len);                            // the application freed the buffer
//
//   // NCCL's regMr / regMrDmaBuf ... deregMr: a hold keeps the region until it is released.
//   Result<MrHold> h = cache.hold_dmabuf(gpu_addr, len, {.fd = fd, .offset = off});
//   cache.release(h->region);                               // the last hold deregisters it
//
// Two kinds of region, never confused: host memory (registered by address) and dma-buf memory (GPU
// memory exported as a dma-buf, registered by fd and offset with the process's address as its iova).
// A lookup of one kind never answers with a region of the other.
//
// Host regions are widened to whole pages (4 KiB), so neighbouring buffers share one registration.
// Dma-buf regions are registered exactly as given: a dma-buf covers one exporter's allocation, so a
// neighbour is another dma-buf and cannot share the registration, and widening past the dma-buf's end
// would be refused. Overlapping regions may coexist; a lookup takes any one of its kind that covers the
// whole range.
//
// Held regions: nothing tells the cache when memory is freed, and a dma-buf MR keeps the GPU memory
// behind it alive (a later allocation at the same address would find the old pages). So the owner of a
// buffer holds its registration (hold, hold_dmabuf) and releases it when it lets go of the buffer
// (release); the region's last hold released, it is deregistered at once. Regions found or made by
// find_or_register without a hold stay until invalidate or the cache's end.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <unordered_map>
#include <utility>

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

enum class MrKind : uint8_t { kHost, kDmabuf };

// Where a dma-buf region's bytes are: the dma-buf's file descriptor (still open at registration; the
// MR keeps its own reference, so the caller may close it afterwards) and the region's first byte's
// offset in it.
struct DmabufRef {
  int fd = -1;
  uint64_t offset = 0;
};

// A held registration: its keys and the region's id for release().
struct MrHold {
  MrKeys keys;
  uint64_t region = 0;
};

class MrCache {
 public:
  using RegisterFn = std::function<Result<Registration>(uint64_t addr, uint64_t len)>;
  // iova: the address the region has in this process (SGEs name it); len bytes from buf.offset in buf.fd.
  using RegisterDmabufFn = std::function<Result<Registration>(uint64_t iova, uint64_t len, DmabufRef buf)>;
  using DeregisterFn = std::function<void(void* handle)>;
  static constexpr uint64_t kPageBytes = 4096;

  // Without `reg_dmabuf` (null) every dma-buf registration fails, saying this cache has none.
  MrCache(RegisterFn reg, DeregisterFn dereg, RegisterDmabufFn reg_dmabuf = nullptr)
      : register_(std::move(reg)), register_dmabuf_(std::move(reg_dmabuf)), deregister_(std::move(dereg)) {}
  ~MrCache();
  MrCache(const MrCache&) = delete;
  MrCache& operator=(const MrCache&) = delete;

  // The keys of a host region covering [addr, addr + len); registers the page-aligned range when none
  // does. Errors: len 0, a range that wraps, or the registration's own error.
  Result<MrKeys> find_or_register(uint64_t addr, uint64_t len);
  // The keys of a dma-buf region covering [addr, addr + len) (addr: the memory's address in this
  // process, the MR's iova); registers exactly that range from `buf` when none does. Errors: as
  // find_or_register, a negative fd, no dma-buf callback, or the registration's own error.
  Result<MrKeys> find_or_register_dmabuf(uint64_t addr, uint64_t len, DmabufRef buf);

  // As the two above, and the region is held until release(region). Holds count: a region held n times
  // needs n releases.
  Result<MrHold> hold(uint64_t addr, uint64_t len);
  Result<MrHold> hold_dmabuf(uint64_t addr, uint64_t len, DmabufRef buf);
  // Drops one hold of `region`; at its last, deregisters it. False (and nothing done) for an id that
  // names no held region: never held, already released, or invalidated since.
  bool release(uint64_t region);

  // Deregisters every region of either kind that overlaps [addr, addr + len): its memory is going
  // away, held or not. No WR may still use them (the caller's obligation).
  void invalidate(uint64_t addr, uint64_t len);

  size_t regions() const { return regions_.size(); }
  size_t regions(MrKind kind) const;
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }

 private:
  struct Region {
    uint64_t end = 0;  // exclusive
    Registration reg;
    uint64_t id = 0;
    uint32_t holds = 0;
  };
  using Key = std::pair<MrKind, uint64_t>;  // kind, start
  using Regions = std::multimap<Key, Region>;

  Result<Regions::iterator> find_or_add(MrKind kind, uint64_t addr, uint64_t len, DmabufRef buf);
  void erase(Regions::iterator it);

  RegisterFn register_;
  RegisterDmabufFn register_dmabuf_;
  DeregisterFn deregister_;
  Regions regions_;
  std::unordered_map<uint64_t, Regions::iterator> by_id_;
  // Each kind's longest region's length: bounds the backward search.
  std::array<uint64_t, 2> longest_{};
  uint64_t next_id_ = 1;
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
};

}  // namespace megascale::wire::verbs
