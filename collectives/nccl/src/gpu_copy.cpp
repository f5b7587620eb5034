// Copiers for MEGASCALE_GDR_COPY (gpu_copy.h): the CUDA driver's copy engines, loaded with dlopen, and a
// CPU emulation for hosts without a GPU.
#include "gpu_copy.h"

#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
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
    if (!abandoned_ && current()) {
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
    if (shadow != nullptr && !abandoned_ && current()) (void)api_.mem_free_host(shadow);
  }
  bool abandon() override {
    abandoned_ = true;
    return false;  // a copy the engine still holds may land in a shadow at any time
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
      return make_error(ErrorCode::kDevice, "no free mark (every CUDA event of the copier's pool is in use)");
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
    return make_error(ErrorCode::kDevice,
                      what + " failed: CUDA error " + std::to_string(r) + " (" + text + ")");
  }

  const CudaApi& api_;
  CUcontext ctx_;
  CUstream stream_;
  std::deque<Pending> pending_;
  std::vector<CUevent> free_events_;
  uint64_t last_mark_ = 0;
  uint64_t passed_ = 0;
  bool abandoned_ = false;
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
      return make_error(ErrorCode::kDevice,
                        "emulated shadow of " + std::to_string(bytes) + " bytes: out of memory");
    return p;
  }
  void free_shadow(void* shadow) override { std::free(shadow); }
  Status to_host(void* host, const void* gpu, size_t bytes) override { return queue(host, gpu, bytes); }
  Status to_device(void* gpu, const void* host, size_t bytes) override { return queue(gpu, host, bytes); }
  size_t free_marks() const override { return marks_ - in_use_; }
  Result<uint64_t> mark() override {
    if (in_use_ == marks_)
      return make_error(ErrorCode::kDevice, "no free mark (every mark of the copier's pool is in use)");
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
  bool abandon() override {
    queue_.clear();  // no copy runs after this: the shadows may go
    return true;
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

// A copier's limits (gpu_copy.h, CopyLimits) around the copier that moves the bytes: it times each mark
// from when it was made, gives up on a copy still not done after limits.timeout_ns, and holds back the
// marks after limits.stall_after (fault injection).
class LimitedCopier final : public Copier {
 public:
  LimitedCopier(std::unique_ptr<Copier> inner, CopyLimits limits)
      : inner_(std::move(inner)), limits_(limits) {}

  Result<void*> alloc_shadow(size_t bytes) override {
    if (failed_) return make_error(ErrorCode::kDevice, why_);
    return inner_->alloc_shadow(bytes);
  }
  void free_shadow(void* shadow) override {
    if (!failed_ || may_free_) inner_->free_shadow(shadow);  // else kept: a given-up copy may still land
  }
  Status to_host(void* host, const void* gpu, size_t bytes) override {
    if (failed_) return make_error(ErrorCode::kDevice, why_);
    ++unmarked_;
    return inner_->to_host(host, gpu, bytes);
  }
  Status to_device(void* gpu, const void* host, size_t bytes) override {
    if (failed_) return make_error(ErrorCode::kDevice, why_);
    ++unmarked_;
    return inner_->to_device(gpu, host, bytes);
  }
  size_t free_marks() const override { return failed_ ? 0 : inner_->free_marks(); }
  Result<uint64_t> mark() override {
    if (failed_) return make_error(ErrorCode::kDevice, why_);
    auto m = inner_->mark();
    if (!m) return m;
    made_.push_back({*m, Clock::now()});
    last_ = *m;
    unmarked_ = 0;
    return m;
  }
  Result<bool> passed(uint64_t m) override {
    if (failed_) return make_error(ErrorCode::kDevice, why_);
    // Marks pass in the order made: look at the oldest ones not yet seen to pass.
    while (!made_.empty()) {
      const Made& oldest = made_.front();
      if (!held(oldest.mark)) {
        auto done = inner_->passed(oldest.mark);
        if (!done) return done.error();
        if (*done) {
          passed_ = oldest.mark;
          made_.pop_front();
          continue;
        }
      }
      if (limits_.timeout_ns == 0) break;
      const auto waited =
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - oldest.at).count();
      if (waited > limits_.timeout_ns) return give_up(waited);
      break;
    }
    return m <= passed_;
  }
  Status drain() override {
    if (failed_) return make_error(ErrorCode::kDevice, why_);
    if (limits_.timeout_ns == 0 && limits_.stall_after == 0) return inner_->drain();  // no limit: wait
    // Copies queued after the last mark get one of their own, as soon as one is free.
    while (unmarked_ > 0) {
      if (inner_->free_marks() > 0) {
        if (auto m = mark(); !m) return m.error();
        break;
      }
      if (!made_.empty() && !wait_a_little(made_.front().mark)) return make_error(ErrorCode::kDevice, why_);
    }
    while (last_ > passed_) {
      if (!wait_a_little(last_)) return make_error(ErrorCode::kDevice, why_);
    }
    return {};
  }
  bool abandon() override { return inner_->abandon(); }

 private:
  using Clock = std::chrono::steady_clock;
  struct Made {
    uint64_t mark;
    Clock::time_point at;
  };
  // Whether `mark` is held back (the stall fault): never seen to pass.
  bool held(uint64_t mark) const { return limits_.stall_after > 0 && mark > limits_.stall_after; }
  // One look at whether `m` passed, with a short pause when not; false once the copier failed.
  bool wait_a_little(uint64_t m) {
    auto done = passed(m);
    if (!done) {
      if (why_.empty()) why_ = done.error().message;
      return false;
    }
    if (!*done) std::this_thread::sleep_for(std::chrono::microseconds(20));
    return true;
  }
  Error give_up(int64_t waited_ns) {
    char text[160];
    std::snprintf(text, sizeof text, "a GPU buffer copy was still not done %.1f s after it was queued",
                  static_cast<double>(waited_ns) / 1e9);
    why_ = std::string(text) +
           (held(made_.front().mark)
                ? " (MEGASCALE_FAULT_COPY_STALL=" + std::to_string(limits_.stall_after) +
                      ": every copy after the first " + std::to_string(limits_.stall_after) + " is held back)"
                : "") +
           " (MEGASCALE_GDR_COPY_TIMEOUT_MS=" + std::to_string(limits_.timeout_ns / 1'000'000) +
           "): the copy engine's queue is likely stuck behind GPU work that waits for this very copy (its "
           "stream sharing a hardware queue with a NCCL kernel: CUDA_DEVICE_MAX_CONNECTIONS set low, ranks "
           "sharing a GPU under MPS, or many streams); MEGASCALE_GDR_COPY=0 keeps NCCL's buffers in host "
           "memory";
    failed_ = true;
    may_free_ = inner_->abandon();
    if (!may_free_) why_ += ". The comm's shadows are kept, since the copy may still land";
    return make_error(ErrorCode::kDevice, why_);
  }

  std::unique_ptr<Copier> inner_;
  CopyLimits limits_;
  std::deque<Made> made_;  // marks not yet seen to pass, oldest first
  uint64_t last_ = 0;      // the newest mark
  uint64_t passed_ = 0;    // the newest mark seen to pass
  uint64_t unmarked_ = 0;  // copies queued since the last mark
  bool failed_ = false;    // a copy was given up on: every call fails with why_
  bool may_free_ = false;  // ... and the copier that moves the bytes will move none after it
  std::string why_;
};

}  // namespace

Result<std::unique_ptr<Copier>> make_copier(GdrCopyMode mode, size_t marks, CopyLimits limits) {
  if (marks == 0) return make_error("a copier needs at least one mark");
  if (limits.timeout_ns < 0) return make_error("a copier's timeout cannot be negative");
  const auto limited = [&](std::unique_ptr<Copier> inner) -> Result<std::unique_ptr<Copier>> {
    return std::unique_ptr<Copier>(new LimitedCopier(std::move(inner), limits));
  };
  if (mode == GdrCopyMode::kEmulate) return limited(std::make_unique<EmulatedCopier>(marks));
  if (mode != GdrCopyMode::kCuda) return make_error("MEGASCALE_GDR_COPY is off: no copier");
  const CudaApi& api = cuda_api();
  if (!api.error.empty()) return make_error(ErrorCode::kDevice, api.error);
  CUcontext ctx = nullptr;
  if (api.ctx_get_current(&ctx) != kCudaSuccess || ctx == nullptr)
    return make_error(ErrorCode::kDevice,
                      "no CUDA context is current on the thread that registered GPU memory");
  CUstream stream = nullptr;
  if (CUresult r = api.stream_create(&stream, kStreamNonBlocking); r != kCudaSuccess)
    return make_error(ErrorCode::kDevice, "cuStreamCreate failed: CUDA error " + std::to_string(r));
  auto copier = std::make_unique<CudaCopier>(api, ctx, stream);
  if (Status s = copier->make_events(marks); !s) return s.error();
  return limited(std::move(copier));
}

}  // namespace megascale::nccl
