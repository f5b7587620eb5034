// Copiers for MEGASCALE_GDR_COPY (gpu_copy.h): the CUDA driver's copy engines, loaded with dlopen, and a
// CPU emulation for hosts without a GPU.
#include "gpu_copy.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

namespace megascale::nccl {
namespace {

// The few CUDA driver API types and calls used here (CUDA Driver API reference: cuMemcpyDtoHAsync,
// cuEventQuery, cuMemHostAlloc ...), declared by hand so that the plugin builds without cuda.h.
using CUresult = int;
using CUcontext = struct CUctx_opaque*;
using CUstream = struct CUstream_opaque*;
using CUevent = struct CUevent_opaque*;
using CUdeviceptr = unsigned long long;
constexpr CUresult kCudaSuccess = 0;
constexpr CUresult kCudaNotReady = 600;  // CUDA_ERROR_NOT_READY
constexpr unsigned kStreamNonBlocking = 0x1;
constexpr unsigned kEventDisableTiming = 0x2;
constexpr unsigned kMemHostAllocPortable = 0x1;

struct CudaApi {
  CUresult (*init)(unsigned) = nullptr;
  CUresult (*ctx_get_current)(CUcontext*) = nullptr;
  CUresult (*ctx_set_current)(CUcontext) = nullptr;
  CUresult (*stream_create)(CUstream*, unsigned) = nullptr;
  CUresult (*stream_destroy)(CUstream) = nullptr;
  CUresult (*stream_synchronize)(CUstream) = nullptr;
  CUresult (*event_create)(CUevent*, unsigned) = nullptr;
  CUresult (*event_destroy)(CUevent) = nullptr;
  CUresult (*event_record)(CUevent, CUstream) = nullptr;
  CUresult (*event_query)(CUevent) = nullptr;
  CUresult (*memcpy_dtoh_async)(void*, CUdeviceptr, size_t, CUstream) = nullptr;
  CUresult (*memcpy_htod_async)(CUdeviceptr, const void*, size_t, CUstream) = nullptr;
  CUresult (*mem_host_alloc)(void**, size_t, unsigned) = nullptr;
  CUresult (*mem_free_host)(void*) = nullptr;
  CUresult (*get_error_string)(CUresult, const char**) = nullptr;
  std::string error;  // why it could not be loaded; empty once loaded
};

const CudaApi& cuda_api() {
  static CudaApi api;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* e = dlerror();
      api.error = std::string("cannot load libcuda.so.1 (the CUDA driver): ") + (e ? e : "unknown error");
      return;
    }
    std::string missing;
    auto get = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (fn == nullptr) missing += std::string(missing.empty() ? "" : ", ") + name;
    };
    get(api.init, "cuInit");
    get(api.ctx_get_current, "cuCtxGetCurrent");
    get(api.ctx_set_current, "cuCtxSetCurrent");
    get(api.stream_create, "cuStreamCreate");
    get(api.stream_destroy, "cuStreamDestroy_v2");
    get(api.stream_synchronize, "cuStreamSynchronize");
    get(api.event_create, "cuEventCreate");
    get(api.event_destroy, "cuEventDestroy_v2");
    get(api.event_record, "cuEventRecord");
    get(api.event_query, "cuEventQuery");
    get(api.memcpy_dtoh_async, "cuMemcpyDtoHAsync_v2");
    get(api.memcpy_htod_async, "cuMemcpyHtoDAsync_v2");
    get(api.mem_host_alloc, "cuMemHostAlloc");
    get(api.mem_free_host, "cuMemFreeHost");
    get(api.get_error_string, "cuGetErrorString");
    if (!missing.empty()) {
      api.error = "libcuda.so.1 lacks " + missing;
    } else if (CUresult r = api.init(0); r != kCudaSuccess) {
      api.error = "cuInit failed with CUDA error " + std::to_string(r);
    }
  });
  return api;
}

class CudaCopier final : public Copier {
 public:
  CudaCopier(const CudaApi& api, CUcontext ctx, CUstream stream) : api_(api), ctx_(ctx), stream_(stream) {}
  ~CudaCopier() override {
    if (current()) {
      (void)api_.stream_synchronize(stream_);
      for (auto& p : pending_) (void)api_.event_destroy(p.event);
      for (CUevent e : free_events_) (void)api_.event_destroy(e);
      (void)api_.stream_destroy(stream_);
    }
  }

  Result<void*> alloc_shadow(size_t bytes) override {
    if (Status s = make_current(); !s) return s.error();
    void* p = nullptr;
    if (Status s = check(api_.mem_host_alloc(&p, bytes == 0 ? 1 : bytes, kMemHostAllocPortable),
                         "cuMemHostAlloc(" + std::to_string(bytes) + " bytes)");
        !s)
      return s.error();
    return p;
  }
  void free_shadow(void* shadow) override {
    if (shadow != nullptr && current()) (void)api_.mem_free_host(shadow);
  }
  Status to_host(void* host, const void* gpu, size_t bytes) override {
    if (Status s = make_current(); !s) return s;
    return check(api_.memcpy_dtoh_async(host, reinterpret_cast<CUdeviceptr>(gpu), bytes, stream_),
                 "cuMemcpyDtoHAsync");
  }
  Status to_device(void* gpu, const void* host, size_t bytes) override {
    if (Status s = make_current(); !s) return s;
    return check(api_.memcpy_htod_async(reinterpret_cast<CUdeviceptr>(gpu), host, bytes, stream_),
                 "cuMemcpyHtoDAsync");
  }
  // The pool of events (gpu_copy.h: made here, never in the data path).
  Status make_events(size_t n) {
    if (Status s = make_current(); !s) return s;
    free_events_.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      CUevent e = nullptr;
      if (Status s = check(api_.event_create(&e, kEventDisableTiming), "cuEventCreate"); !s) return s;
      free_events_.push_back(e);
    }
    return {};
  }
  size_t free_marks() const override { return free_events_.size(); }
  Result<uint64_t> mark() override {
    if (free_events_.empty())
      return make_error("no free mark (every CUDA event of the copier's pool is in use)");
    if (Status s = make_current(); !s) return s.error();
    CUevent e = free_events_.back();
    if (Status s = check(api_.event_record(e, stream_), "cuEventRecord"); !s) return s.error();
    free_events_.pop_back();
    pending_.push_back({++last_mark_, e});
    return last_mark_;
  }
  Result<bool> passed(uint64_t m) override {
    // The stream runs its copies in order: events finish in the order recorded.
    while (passed_ < m && !pending_.empty()) {
      if (Status s = make_current(); !s) return s.error();
      const CUresult r = api_.event_query(pending_.front().event);
      if (r == kCudaNotReady) return false;
      if (Status s = check(r, "cuEventQuery"); !s) return s.error();
      passed_ = pending_.front().mark;
      free_events_.push_back(pending_.front().event);
      pending_.pop_front();
    }
    return passed_ >= m;
  }
  Status drain() override {
    if (Status s = make_current(); !s) return s;
    if (Status s = check(api_.stream_synchronize(stream_), "cuStreamSynchronize"); !s) return s;
    auto done = passed(last_mark_);
    if (!done) return done.error();
    return {};
  }

 private:
  struct Pending {
    uint64_t mark;
    CUevent event;
  };
  bool current() { return make_current().ok(); }
  // NCCL's proxy threads have the device's context current; a thread that does not gets ours.
  Status make_current() {
    CUcontext cur = nullptr;
    if (api_.ctx_get_current(&cur) == kCudaSuccess && cur == ctx_) return {};
    return check(api_.ctx_set_current(ctx_), "cuCtxSetCurrent");
  }
  Status check(CUresult r, const std::string& what) {
    if (r == kCudaSuccess) return {};
    const char* text = nullptr;
    if (api_.get_error_string(r, &text) != kCudaSuccess || text == nullptr) text = "unknown";
    return make_error(what + " failed: CUDA error " + std::to_string(r) + " (" + text + ")");
  }

  const CudaApi& api_;
  CUcontext ctx_;
  CUstream stream_;
  std::deque<Pending> pending_;
  std::vector<CUevent> free_events_;
  uint64_t last_mark_ = 0;
  uint64_t passed_ = 0;
};

// The CPU's version: "GPU" pointers are host memory; every other passed() call performs the oldest queued
// copy (so a caller that uses a copy before its mark has passed reads stale bytes, which tests catch).
class EmulatedCopier final : public Copier {
 public:
  explicit EmulatedCopier(size_t marks) : marks_(marks) {}
  ~EmulatedCopier() override { (void)drain(); }
  Result<void*> alloc_shadow(size_t bytes) override {
    void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096 + 4096);
    if (p == nullptr)
      return make_error("emulated shadow of " + std::to_string(bytes) + " bytes: out of memory");
    return p;
  }
  void free_shadow(void* shadow) override { std::free(shadow); }
  Status to_host(void* host, const void* gpu, size_t bytes) override { return queue(host, gpu, bytes); }
  Status to_device(void* gpu, const void* host, size_t bytes) override { return queue(gpu, host, bytes); }
  size_t free_marks() const override { return marks_ - in_use_; }
  Result<uint64_t> mark() override {
    if (in_use_ == marks_) return make_error("no free mark (every mark of the copier's pool is in use)");
    ++in_use_;
    queue_.push_back({nullptr, nullptr, 0, ++last_mark_});
    return last_mark_;
  }
  Result<bool> passed(uint64_t m) override {
    // Every other look performs a copy: one look never finds a fresh copy done.
    if (passed_ < m && !queue_.empty() && (++looks_ & 1) == 0) step();
    return passed_ >= m;
  }
  Status drain() override {
    while (!queue_.empty()) step();
    return {};
  }

 private:
  struct Copy {
    void* dst;
    const void* src;
    size_t bytes;
    uint64_t mark;  // nonzero: a mark, not a copy
  };
  Status queue(void* dst, const void* src, size_t bytes) {
    queue_.push_back({dst, src, bytes, 0});
    return {};
  }
  void step() {
    // One copy, then any marks right behind it.
    if (queue_.front().mark == 0) {
      const Copy& c = queue_.front();
      if (c.bytes > 0) std::memcpy(c.dst, c.src, c.bytes);
      queue_.pop_front();
    }
    while (!queue_.empty() && queue_.front().mark != 0) {
      passed_ = queue_.front().mark;
      queue_.pop_front();
      --in_use_;
    }
  }
  std::deque<Copy> queue_;
  size_t marks_;
  size_t in_use_ = 0;  // marks queued and not passed
  uint64_t last_mark_ = 0;
  uint64_t passed_ = 0;
  uint64_t looks_ = 0;
};

}  // namespace

Result<std::unique_ptr<Copier>> make_copier(GdrCopyMode mode, size_t marks) {
  if (marks == 0) return make_error("a copier needs at least one mark");
  if (mode == GdrCopyMode::kEmulate) return std::unique_ptr<Copier>(new EmulatedCopier(marks));
  if (mode != GdrCopyMode::kCuda) return make_error("MEGASCALE_GDR_COPY is off: no copier");
  const CudaApi& api = cuda_api();
  if (!api.error.empty()) return make_error(api.error);
  CUcontext ctx = nullptr;
  if (api.ctx_get_current(&ctx) != kCudaSuccess || ctx == nullptr)
    return make_error("no CUDA context is current on the thread that registered GPU memory");
  CUstream stream = nullptr;
  if (CUresult r = api.stream_create(&stream, kStreamNonBlocking); r != kCudaSuccess)
    return make_error("cuStreamCreate failed: CUDA error " + std::to_string(r));
  auto copier = std::make_unique<CudaCopier>(api, ctx, stream);
  if (Status s = copier->make_events(marks); !s) return s.error();
  return std::unique_ptr<Copier>(std::move(copier));
}

}  // namespace megascale::nccl
