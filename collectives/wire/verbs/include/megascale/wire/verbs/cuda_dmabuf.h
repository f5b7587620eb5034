// CUDA memory as a dma-buf, for ibv_reg_dmabuf_mr: the CUDA driver's cuMemGetHandleForAddressRange
// (CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, CUDA 11.7 and later) exports a page-aligned range of device
// memory as a dma-buf file descriptor, which the NIC then registers (MrCache::hold_dmabuf).
//
//   if (Status s = cuda_dmabuf_supported(); !s) log(s.error().message);  // once, for ptrSupport
//   Result<CudaDmabuf> buf = cuda_dmabuf_export(gpu_ptr, bytes);         // NCCL's current context
//   cache.hold_dmabuf(reinterpret_cast<uint64_t>(gpu_ptr), bytes,
//                     {.fd = buf->fd(), .offset = buf->offset()});
//   // buf goes out of scope: its fd is closed; the MR keeps its own reference to the dma-buf.
//
// The driver (libcuda.so.1) is loaded with dlopen the first time, and its few entry points are declared
// here by hand, so this library neither links CUDA nor needs its headers, and it runs on hosts without
// CUDA: there every call fails with the reason (no libcuda.so.1, no GPU, an old driver, a GPU or kernel
// module without dma-buf export).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "megascale/common/result.h"

namespace megascale::wire::verbs {

// The range the driver is asked to export for [addr, addr + len): the driver takes only whole host
// pages (an address or length off a page boundary is CUDA_ERROR_INVALID_VALUE, as are pages that run
// past the allocation), so base is addr rounded down and len is the end rounded up; offset is
// addr - base, where the buffer starts in the dma-buf. Errors: len 0, a range that wraps, a page size
// that is not a power of 2.
struct DmabufSpan {
  uint64_t base = 0;
  uint64_t len = 0;
  uint64_t offset = 0;
};
Result<DmabufSpan> dmabuf_span(uint64_t addr, uint64_t len, uint64_t page_bytes);

// An exported dma-buf: owns its file descriptor (closed on destruction).
class CudaDmabuf {
 public:
  CudaDmabuf(int fd, DmabufSpan span) : fd_(fd), span_(span) {}
  ~CudaDmabuf();
  CudaDmabuf(CudaDmabuf&& other) noexcept : fd_(other.fd_), span_(other.span_) { other.fd_ = -1; }
  CudaDmabuf& operator=(CudaDmabuf&& other) noexcept;  // closes this one's fd first
  CudaDmabuf(const CudaDmabuf&) = delete;
  CudaDmabuf& operator=(const CudaDmabuf&) = delete;

  int fd() const { return fd_; }
  uint64_t offset() const { return span_.offset; }  // of the asked-for buffer in the dma-buf
  const DmabufSpan& span() const { return span_; }

 private:
  int fd_;
  DmabufSpan span_;
};

// The CUDA driver's entry points this needs, loaded from one library.
class CudaDriver {
 public:
  // dlopen(`library`) (the driver: "libcuda.so.1"), its entry points, cuInit. Errors name what is
  // missing: the library (with dlerror's text), its entry points, or cuInit's error (no GPU).
  static Result<std::unique_ptr<CudaDriver>> load(const std::string& library);
  virtual ~CudaDriver() = default;

  // Ok when dma-bufs can be exported: a driver of CUDA 11.7 or later with
  // cuMemGetHandleForAddressRange, and every visible GPU reporting CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED.
  // Otherwise the reason.
  virtual Status dmabuf_supported() const = 0;
  // Exports the pages under [ptr, ptr + len) of device memory (the current context's) as a dma-buf.
  // Errors name the range and the driver's error, with its likely cause.
  virtual Result<CudaDmabuf> export_dmabuf(const void* ptr, size_t len) const = 0;

  // For tests on a GPU host: device memory on GPU `ordinal` in its primary context, made current on
  // this thread; and its release.
  virtual Result<void*> alloc_device(int ordinal, size_t len) const = 0;
  virtual void free_device(void* ptr) const = 0;
};

// The process's driver (libcuda.so.1), loaded at the first call; the load's error at every call when it
// could not be loaded.
Result<const CudaDriver*> cuda_driver();
// cuda_driver()->dmabuf_supported(), or why the driver could not be loaded.
Status cuda_dmabuf_supported();
// cuda_driver()->export_dmabuf(ptr, len), or why the driver could not be loaded.
Result<CudaDmabuf> cuda_dmabuf_export(const void* ptr, size_t len);

}  // namespace megascale::wire::verbs
