// GPU buffers over a host datapath (MEGASCALE_GDR_COPY): with it on, the plugin advertises
// NCCL_PTR_CUDA, so that where NCCL would use GPUDirect RDMA (NCCL_NET_GDR_LEVEL) its network buffers
// stay in GPU memory and the plugin moves them through a pinned host shadow with the GPU's copy
// engines: a send's bytes are copied to the shadow before its parts go to the wire, a receive lands in
// the shadow and is copied to the GPU before test() says done. Without it NCCL's kernels read and write
// host memory across PCIe themselves, one thread block per channel, which caps a channel well below
// what the copy engines move (figures in docs/PERFORMANCE.md).
//
//   auto copier = make_copier(GdrCopyMode::kCuda, 64);        // on a thread with NCCL's CUDA context
//   void* shadow = *(*copier)->alloc_shadow(bytes);
//   (*copier)->to_host(shadow, gpu_ptr, n);                    // queued, in order
//   if ((*copier)->free_marks() > 0) mark = *(*copier)->mark();   // else try again at the next call
//   while (!*(*copier)->passed(mark)) { ... }                  // polled from test(); an error once a
//                                                              // copy takes longer than the limit
//
// Marks are CUDA events made once, with the copier: the data path creates no CUDA object. Creating one
// (cuEventCreate) takes the driver's context lock for writing, and an application thread in a pageable
// cudaMemcpy holds that lock while it waits for its stream, which waits for NCCL's kernel, which waits
// for the proxy thread inside test(): a deadlock, which NCCL's first small collectives reach. With
// every mark in use the data path waits.
//
// A copy that never finishes must not become a hang (a net's failures reach NCCL as errors): make_copier's
// copiers give up on a copy still not done `timeout_ns` after its mark (MEGASCALE_GDR_COPY_TIMEOUT_MS):
// passed() and drain() then fail, naming how long it waited and the likely cause, and every later call
// fails at once. Such a copy may still land, so the copier then frees no shadow and destroys no CUDA
// object (the memory stays with the process). A copy engine's queue can be stuck behind GPU work that
// waits for the copy: a stream whose hardware queue it shares with a NCCL kernel spinning on this very
// data (CUDA_DEVICE_MAX_CONNECTIONS set low, ranks sharing a GPU under MPS, many streams).
// `stall_after` (MEGASCALE_FAULT_COPY_STALL, fault injection): marks after that many are never seen to
// pass, as if their copies were stuck, so that the failure path can be checked on any host.
//
// The CUDA driver is loaded with dlopen (libcuda.so.1) the first time a copier is made, so the plugin
// loads and runs on hosts without CUDA, and nothing links against it. kEmulate copies with the CPU,
// one queued copy every other passed() call, and treats "GPU" pointers as host memory: the conformance
// harness drives the staged path with it on machines without a GPU (NCCL itself never needs it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "megascale/common/result.h"

namespace megascale::nccl {

enum class GdrCopyMode : uint8_t { kOff, kCuda, kEmulate };

// Copies between GPU buffers and their host shadows on one stream, completed in the order queued.
// Used by one thread at a time (the comm's, as NCCL calls it).
class Copier {
 public:
  virtual ~Copier() = default;
  virtual Result<void*> alloc_shadow(size_t bytes) = 0;  // pinned host memory for the copy engines
  virtual void free_shadow(void* shadow) = 0;            // kept (not freed) once a copy was given up on
  virtual Status to_host(void* host, const void* gpu, size_t bytes) = 0;
  virtual Status to_device(void* gpu, const void* host, size_t bytes) = 0;
  // A mark after every copy queued so far (marks increase), and whether they are all done. An error
  // names the failed call, or says no mark is free (free_marks() was 0: the caller's bug).
  virtual size_t free_marks() const = 0;
  virtual Result<uint64_t> mark() = 0;
  virtual Result<bool> passed(uint64_t mark) = 0;
  // Waits until every queued copy is done (before a shadow is freed or the comm goes); fails once a copy
  // was given up on.
  virtual Status drain() = 0;
  // After a copy was given up on: no queued copy may start later. Returns whether the shadows may then
  // be freed (no copy can still land in them); where not, nothing is freed or destroyed from then on.
  virtual bool abandon() = 0;
};

// What make_copier's copier gives up on, and when (see above). 0: never.
struct CopyLimits {
  int64_t timeout_ns = 10'000'000'000;  // MEGASCALE_GDR_COPY_TIMEOUT_MS (10 s)
  uint64_t stall_after = 0;             // MEGASCALE_FAULT_COPY_STALL
};

// A copier for `mode` (not kOff). kCuda takes the calling thread's current CUDA context (NCCL's: the
// proxy threads that call regMr and the data path have it set) and makes it current again wherever it
// is used; it fails, naming why, when libcuda cannot be loaded or no context is current.
// `marks`: the pool's size (at least 1). The plugin gives a comm one per part of each request it can
// have out (its request pool x its stripes): every send holds a mark per part until that part's copy
// has passed, so sends never wait for one; a receive's copies take one per batch, and a receive that finds
// none waits (the data path takes back the marks whose copies are done whenever it finds too few).
Result<std::unique_ptr<Copier>> make_copier(GdrCopyMode mode, size_t marks = 256, CopyLimits limits = {});

}  // namespace megascale::nccl
