// CUDA memory exported as a dma-buf through the driver loaded at run time (cuda_dmabuf.h).
#include "megascale/wire/verbs/cuda_dmabuf.h"

#include <dlfcn.h>
#include <unistd.h>

#include <type_traits>

namespace megascale::wire::verbs {
namespace {

// The CUDA driver API's types and values used here, as cuda.h defines them (CUDA Driver API
// reference: cuMemGetHandleForAddressRange, CUdevice_attribute, CUresult).
using CUresult = int;
using CUdevice = int;
using CUcontext = struct CUctx_opaque*;
using CUdeviceptr = unsigned long long;
constexpr CUresult kCudaSuccess = 0;
constexpr CUresult kCudaErrorInvalidValue = 1;
constexpr CUresult kCudaErrorNoDevice = 100;
constexpr CUresult kCudaErrorNotSupported = 801;
constexpr int kDeviceAttributeDmaBufSupported = 124;  // CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED
constexpr int kMemRangeHandleTypeDmaBufFd = 1;        // CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD
constexpr int kDriverVersionWithDmabuf = 11070;       // CUDA 11.7: cuMemGetHandleForAddressRange

struct Api {
  CUresult (*init)(unsigned) = nullptr;
  CUresult (*driver_get_version)(int*) = nullptr;
  CUresult (*get_error_name)(CUresult, const char**) = nullptr;
  CUresult (*device_get_count)(int*) = nullptr;
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*device_get_attribute)(int*, int, CUdevice) = nullptr;
  CUresult (*primary_ctx_retain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*ctx_set_current)(CUcontext) = nullptr;
  CUresult (*mem_alloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*mem_free)(CUdeviceptr) = nullptr;
  // Absent from drivers older than CUDA 11.7: dmabuf_supported() says so.
  CUresult (*get_handle_for_address_range)(void*, CUdeviceptr, size_t, int, unsigned long long) = nullptr;
};

class Driver final : public CudaDriver {
 public:
  explicit Driver(Api api) : api_(api) {}

  std::string error_text(CUresult r) const {
    const char* name = nullptr;
    if (api_.get_error_name(r, &name) != kCudaSuccess || name == nullptr)
      return "CUDA error " + std::to_string(r);
    return std::string(name) + " (" + std::to_string(r) + ")";
  }

  Status dmabuf_supported() const override {
    int version = 0;
    if (CUresult r = api_.driver_get_version(&version); r != kCudaSuccess) {
      return make_error(ErrorCode::kDevice, "cuDriverGetVersion: " + error_text(r));
    }
    const std::string v = std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
    if (version < kDriverVersionWithDmabuf || api_.get_handle_for_address_range == nullptr) {
      return make_error(ErrorCode::kUnsupported,
                        "the CUDA driver (version " + v +
                            ") cannot export dma-bufs: cuMemGetHandleForAddressRange "
                            "needs a CUDA 11.7 or later driver");
    }
    int count = 0;
    if (CUresult r = api_.device_get_count(&count); r != kCudaSuccess) {
      return make_error(ErrorCode::kDevice, "cuDeviceGetCount: " + error_text(r));
    }
    if (count == 0) return make_error(ErrorCode::kUnsupported, "the CUDA driver sees no GPU");
    for (int i = 0; i < count; ++i) {
      CUdevice dev = 0;
      int supported = 0;
      if (CUresult r = api_.device_get(&dev, i); r != kCudaSuccess) {
        return make_error(ErrorCode::kDevice, "cuDeviceGet(" + std::to_string(i) + "): " + error_text(r));
      }
      if (CUresult r = api_.device_get_attribute(&supported, kDeviceAttributeDmaBufSupported, dev);
          r != kCudaSuccess) {
        return make_error(
            ErrorCode::kDevice,
            "GPU " + std::to_string(i) + ": cuDeviceGetAttribute(DMA_BUF_SUPPORTED): " + error_text(r));
      }
      if (supported == 0) {
        return make_error(ErrorCode::kUnsupported,
                          "GPU " + std::to_string(i) +
                              " cannot export dma-bufs (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED "
                              "is 0: it needs NVIDIA's open kernel modules, Linux 5.12 or "
                              "later, driver " +
                              v + ")");
      }
    }
    return {};
  }

  Result<CudaDmabuf> export_dmabuf(const void* ptr, size_t len) const override {
    if (api_.get_handle_for_address_range == nullptr) {
      return make_error(ErrorCode::kUnsupported,
                        "the CUDA driver has no cuMemGetHandleForAddressRange (needs CUDA 11.7 or later)");
    }
    const long page = sysconf(_SC_PAGESIZE);
    Result<DmabufSpan> span =
        dmabuf_span(reinterpret_cast<uint64_t>(ptr), len, page > 0 ? static_cast<uint64_t>(page) : 4096);
    if (!span) return span.error();
    int fd = -1;
    const CUresult r =
        api_.get_handle_for_address_range(&fd, span->base, span->len, kMemRangeHandleTypeDmaBufFd, 0);
    if (r != kCudaSuccess) {
      std::string why;
      if (r == kCudaErrorNotSupported) {
        why = ": this GPU or driver does not export dma-bufs";
      } else if (r == kCudaErrorInvalidValue) {
        why = ": not device memory, or its pages run past the allocation";
      }
      return make_error(ErrorCode::kDevice, "cuMemGetHandleForAddressRange(DMA_BUF_FD) of " +
                                                std::to_string(span->len) + " bytes at " +
                                                std::to_string(span->base) + ": " + error_text(r) + why);
    }
    return CudaDmabuf(fd, *span);
  }

  Result<void*> alloc_device(int ordinal, size_t len) const override {
    CUdevice dev = 0;
    CUcontext ctx = nullptr;
    CUdeviceptr p = 0;
    if (CUresult r = api_.device_get(&dev, ordinal); r != kCudaSuccess) {
      return make_error(ErrorCode::kDevice, "cuDeviceGet(" + std::to_string(ordinal) + "): " + error_text(r));
    }
    if (CUresult r = api_.primary_ctx_retain(&ctx, dev); r != kCudaSuccess) {
      return make_error(ErrorCode::kDevice, "cuDevicePrimaryCtxRetain: " + error_text(r));
    }
    if (CUresult r = api_.ctx_set_current(ctx); r != kCudaSuccess) {
      return make_error(ErrorCode::kDevice, "cuCtxSetCurrent: " + error_text(r));
    }
    if (CUresult r = api_.mem_alloc(&p, len); r != kCudaSuccess) {
      return make_error(ErrorCode::kDevice, "cuMemAlloc(" + std::to_string(len) + "): " + error_text(r));
    }
    return reinterpret_cast<void*>(p);
  }

  void free_device(void* ptr) const override {
    if (ptr != nullptr) (void)api_.mem_free(reinterpret_cast<CUdeviceptr>(ptr));
  }

 private:
  Api api_;
};

}  // namespace

Result<DmabufSpan> dmabuf_span(uint64_t addr, uint64_t len, uint64_t page_bytes) {
  if (page_bytes == 0 || (page_bytes & (page_bytes - 1)) != 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "page size " + std::to_string(page_bytes) + " is not a power of 2");
  }
  if (len == 0) return make_error(ErrorCode::kInvalidArgument, "dma-buf export of 0 bytes");
  const uint64_t mask = page_bytes - 1;
  if (addr + len < addr || addr + len > UINT64_MAX - mask) {
    return make_error(ErrorCode::kInvalidArgument, "dma-buf export range wraps");
  }
  const uint64_t base = addr & ~mask;
  const uint64_t end = (addr + len + mask) & ~mask;
  return DmabufSpan{.base = base, .len = end - base, .offset = addr - base};
}

CudaDmabuf::~CudaDmabuf() {
  if (fd_ >= 0) ::close(fd_);
}

CudaDmabuf& CudaDmabuf::operator=(CudaDmabuf&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    span_ = other.span_;
    other.fd_ = -1;
  }
  return *this;
}

Result<std::unique_ptr<CudaDriver>> CudaDriver::load(const std::string& library) {
  // Kept loaded for the process's life: MRs and contexts made through it outlive any one caller.
  void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = dlerror();
    return make_error(ErrorCode::kUnsupported, "cannot load " + library + " (the CUDA driver): " +
                                                   (e != nullptr ? e : "unknown error"));
  }
  Api api;
  std::string missing;
  auto get = [&](auto& fn, const char* name, bool required) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    if (fn == nullptr && required) missing += std::string(missing.empty() ? "" : ", ") + name;
  };
  get(api.init, "cuInit", true);
  get(api.driver_get_version, "cuDriverGetVersion", true);
  get(api.get_error_name, "cuGetErrorName", true);
  get(api.device_get_count, "cuDeviceGetCount", true);
  get(api.device_get, "cuDeviceGet", true);
  get(api.device_get_attribute, "cuDeviceGetAttribute", true);
  get(api.primary_ctx_retain, "cuDevicePrimaryCtxRetain", true);
  get(api.ctx_set_current, "cuCtxSetCurrent", true);
  get(api.mem_alloc, "cuMemAlloc_v2", true);
  get(api.mem_free, "cuMemFree_v2", true);
  get(api.get_handle_for_address_range, "cuMemGetHandleForAddressRange", false);
  if (!missing.empty()) {
    return make_error(ErrorCode::kUnsupported, library + " is not a usable CUDA driver: it lacks " + missing);
  }
  if (CUresult r = api.init(0); r != kCudaSuccess) {
    const char* name = nullptr;
    const std::string text = api.get_error_name(r, &name) == kCudaSuccess && name != nullptr
                                 ? std::string(name) + " (" + std::to_string(r) + ")"
                                 : "CUDA error " + std::to_string(r);
    return make_error(r == kCudaErrorNoDevice ? ErrorCode::kUnsupported : ErrorCode::kDevice,
                      "cuInit: " + text + (r == kCudaErrorNoDevice ? ": no GPU" : ""));
  }
  return std::unique_ptr<CudaDriver>(new Driver(api));
}

Result<const CudaDriver*> cuda_driver() {
  static const Result<std::unique_ptr<CudaDriver>> driver = CudaDriver::load("libcuda.so.1");
  if (!driver) return driver.error();
  return driver->get();
}

Status cuda_dmabuf_supported() {
  Result<const CudaDriver*> d = cuda_driver();
  if (!d) return d.error();
  return (*d)->dmabuf_supported();
}

Result<CudaDmabuf> cuda_dmabuf_export(const void* ptr, size_t len) {
  Result<const CudaDriver*> d = cuda_driver();
  if (!d) return d.error();
  return (*d)->export_dmabuf(ptr, len);
}

}  // namespace megascale::wire::verbs
