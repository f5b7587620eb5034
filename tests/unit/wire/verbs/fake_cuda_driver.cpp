// A stand-in for libcuda.so.1 for cuda_dmabuf_test: the entry points CudaDriver loads, each answering as
// the test sets it (fake_cuda_set), so that every path of the loader and the export runs on any host.
// Its codes and attribute numbers are the CUDA driver API's.
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>

namespace {

struct State {
  int init = 0;         // cuInit's result
  int version = 12040;  // cuDriverGetVersion
  int devices = 2;      // cuDeviceGetCount
  int dmabuf_attr = 1;  // CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED of the last device
  int export_result = 0;
  // The last export asked for.
  unsigned long long base = 0;
  size_t len = 0;
  int type = 0;
  unsigned long long flags = 0;
};
State g;

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void fake_cuda_set(int init, int version, int devices, int dmabuf_attr,
                                                          int export_result) {
  g = State{.init = init,
            .version = version,
            .devices = devices,
            .dmabuf_attr = dmabuf_attr,
            .export_result = export_result};
}
__attribute__((visibility("default"))) void fake_cuda_last_export(unsigned long long* base, size_t* len,
                                                                  int* type, unsigned long long* flags) {
  *base = g.base;
  *len = g.len;
  *type = g.type;
  *flags = g.flags;
}

__attribute__((visibility("default"))) int cuInit(unsigned) {
  return g.init;
}
__attribute__((visibility("default"))) int cuDriverGetVersion(int* v) {
  *v = g.version;
  return 0;
}
__attribute__((visibility("default"))) int cuGetErrorName(int r, const char** name) {
  switch (r) {
    case 0:
      *name = "CUDA_SUCCESS";
      return 0;
    case 1:
      *name = "CUDA_ERROR_INVALID_VALUE";
      return 0;
    case 100:
      *name = "CUDA_ERROR_NO_DEVICE";
      return 0;
    case 801:
      *name = "CUDA_ERROR_NOT_SUPPORTED";
      return 0;
    default:
      *name = nullptr;
      return 1;
  }
}
__attribute__((visibility("default"))) int cuDeviceGetCount(int* n) {
  *n = g.devices;
  return 0;
}
__attribute__((visibility("default"))) int cuDeviceGet(int* dev, int ordinal) {
  if (ordinal < 0 || ordinal >= g.devices) return 101;  // CUDA_ERROR_INVALID_DEVICE
  *dev = ordinal;
  return 0;
}
__attribute__((visibility("default"))) int cuDeviceGetAttribute(int* value, int attr, int dev) {
  if (attr != 124) return 1;
  *value = dev == g.devices - 1 ? g.dmabuf_attr : 1;
  return 0;
}
__attribute__((visibility("default"))) int cuDevicePrimaryCtxRetain(void** ctx, int) {
  *ctx = &g;
  return 0;
}
__attribute__((visibility("default"))) int cuCtxSetCurrent(void*) {
  return 0;
}
// Page-aligned, as the driver's allocations are.
__attribute__((visibility("default"))) int cuMemAlloc_v2(unsigned long long* p, size_t len) {
  void* mem = nullptr;
  if (posix_memalign(&mem, static_cast<size_t>(sysconf(_SC_PAGESIZE)), len) != 0) return 2;  // OUT_OF_MEMORY
  *p = reinterpret_cast<unsigned long long>(mem);
  return 0;
}
__attribute__((visibility("default"))) int cuMemFree_v2(unsigned long long p) {
  std::free(reinterpret_cast<void*>(p));
  return 0;
}
__attribute__((visibility("default"))) int cuMemGetHandleForAddressRange(void* handle,
                                                                         unsigned long long base, size_t len,
                                                                         int type, unsigned long long flags) {
  g.base = base;
  g.len = len;
  g.type = type;
  g.flags = flags;
  if (g.export_result != 0) return g.export_result;
  *static_cast<int*>(handle) = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  return 0;
}

}  // extern "C"
