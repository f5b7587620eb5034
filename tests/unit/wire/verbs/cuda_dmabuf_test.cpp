// CUDA memory as a dma-buf without CUDA at build time: the page-aligned span asked of the driver, and
// the loader's failure paths, each a clear reason and never a crash: no such library, a library that
// is not the CUDA driver, and this host's own libcuda.so.1 (absent on hosts without the driver). A
// stand-in driver (fake_cuda_driver.cpp) takes the loader through no GPU, an old driver, a GPU without
// dma-buf, the export's call and its refusals.
#include "megascale/wire/verbs/cuda_dmabuf.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

namespace megascale::wire::verbs {
namespace {

TEST(VerbsCudaDmabuf, SpanIsWholePagesAroundTheBuffer) {
  Result<DmabufSpan> s = dmabuf_span(0x7F0000001010, 0x100, 4096);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->base, 0x7F0000001000u);
  EXPECT_EQ(s->len, 0x1000u);
  EXPECT_EQ(s->offset, 0x10u);
  // Crossing a page boundary: both pages.
  s = dmabuf_span(0x1FF0, 0x20, 4096);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->base, 0x1000u);
  EXPECT_EQ(s->len, 0x2000u);
  EXPECT_EQ(s->offset, 0xFF0u);
  // Aligned already: unchanged. 64 KiB pages (arm64 hosts) round to 64 KiB.
  s = dmabuf_span(0x200000, 0x200000, 4096);
  EXPECT_EQ(s->base, 0x200000u);
  EXPECT_EQ(s->len, 0x200000u);
  EXPECT_EQ(s->offset, 0u);
  s = dmabuf_span(0x210000 + 8, 8, 65536);
  EXPECT_EQ(s->base, 0x210000u);
  EXPECT_EQ(s->len, 0x10000u);
  EXPECT_EQ(s->offset, 8u);
}

TEST(VerbsCudaDmabuf, SpanRefusesBadInputByName) {
  EXPECT_EQ(dmabuf_span(0x1000, 0, 4096).error().message, "dma-buf export of 0 bytes");
  EXPECT_EQ(dmabuf_span(UINT64_MAX - 8, 16, 4096).error().message, "dma-buf export range wraps");
  EXPECT_EQ(dmabuf_span(UINT64_MAX - 4096, 16, 4096).error().message, "dma-buf export range wraps")
      << "the end rounded up to its page would wrap";
  EXPECT_EQ(dmabuf_span(0x1000, 16, 3000).error().message, "page size 3000 is not a power of 2");
  EXPECT_EQ(dmabuf_span(0x1000, 16, 0).error().message, "page size 0 is not a power of 2");
}

TEST(VerbsCudaDmabuf, MissingLibraryIsAReason) {
  Result<std::unique_ptr<CudaDriver>> d = CudaDriver::load("libmegascale-no-such-driver.so.1");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().code, ErrorCode::kUnsupported);
  EXPECT_EQ(d.error().message.rfind("cannot load libmegascale-no-such-driver.so.1 (the CUDA driver): ", 0),
            0u)
      << d.error().message;
}

TEST(VerbsCudaDmabuf, ALibraryThatIsNotTheDriverIsAReason) {
  // The C library loads everywhere and has none of the driver's entry points.
  Result<std::unique_ptr<CudaDriver>> d = CudaDriver::load("libc.so.6");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().message.rfind(
                "libc.so.6 is not a usable CUDA driver: it lacks cuInit, cuDriverGetVersion, ", 0),
            0u)
      << d.error().message;
  EXPECT_EQ(d.error().message.find("cuMemGetHandleForAddressRange"), std::string::npos)
      << "optional: its absence is dmabuf_supported()'s reason, not a load failure";
}

TEST(VerbsCudaDmabuf, ThisHostsDriverFailsWithAReasonWhenAbsent) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib != nullptr) {
    dlclose(lib);
    GTEST_SKIP() << "this host has libcuda.so.1: dmabuf_device_test covers the driver";
  }
  Status s = cuda_dmabuf_supported();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ErrorCode::kUnsupported);
  EXPECT_EQ(s.error().message.rfind("cannot load libcuda.so.1 (the CUDA driver): ", 0), 0u)
      << s.error().message;
  // Every later call gives the same reason (the load is tried once).
  int host_buffer[4] = {};
  Result<CudaDmabuf> e = cuda_dmabuf_export(host_buffer, sizeof host_buffer);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().message, s.error().message);
  EXPECT_FALSE(cuda_driver().ok());
}

// On a GPU host: device memory exported as a dma-buf, or a reason why this driver cannot.
TEST(VerbsCudaDmabuf, ExportsGpuMemoryWhereTheDriverCan) {
  Result<const CudaDriver*> cuda = cuda_driver();
  if (!cuda.ok()) GTEST_SKIP() << cuda.error().message;
  if (Status s = (*cuda)->dmabuf_supported(); !s.ok()) {
    EXPECT_EQ(s.error().code, ErrorCode::kUnsupported) << s.error().message;
    GTEST_SKIP() << s.error().message;
  }
  constexpr size_t kBytes = size_t{2} << 20;
  Result<void*> gpu = (*cuda)->alloc_device(0, kBytes);
  ASSERT_TRUE(gpu.ok()) << gpu.error().message;
  char* buf = static_cast<char*>(*gpu) + 0x1010;
  {
    Result<CudaDmabuf> exported = (*cuda)->export_dmabuf(buf, 0x3000);
    ASSERT_TRUE(exported.ok()) << exported.error().message;
    EXPECT_GE(exported->fd(), 0);
    EXPECT_EQ(exported->offset(), 0x10u);
    EXPECT_EQ(exported->span().base, reinterpret_cast<uint64_t>(*gpu) + 0x1000);
    EXPECT_EQ(exported->span().len, 0x4000u);
    // The kernel names a dma-buf's file "dmabuf" (anon_inode:dmabuf or /dmabuf:...).
    char target[256] = {};
    const std::string link = "/proc/self/fd/" + std::to_string(exported->fd());
    ASSERT_GT(::readlink(link.c_str(), target, sizeof target - 1), 0);
    EXPECT_NE(std::string(target).find("dmabuf"), std::string::npos) << target;
    // Host memory is no device memory: a clear error naming the call.
    alignas(4096) static char host[8192];
    Result<CudaDmabuf> bad = (*cuda)->export_dmabuf(host, 16);
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.error().message.rfind("cuMemGetHandleForAddressRange(DMA_BUF_FD) of 4096 bytes at ", 0), 0u)
        << bad.error().message;
    EXPECT_NE(bad.error().message.find("CUDA_ERROR_INVALID_VALUE (1): not device memory"), std::string::npos)
        << bad.error().message;
  }
  (*cuda)->free_device(*gpu);
}

class VerbsCudaDmabufFake : public ::testing::Test {
 protected:
  using SetFn = void (*)(int init, int version, int devices, int dmabuf_attr, int export_result);
  using LastFn = void (*)(unsigned long long* base, size_t* len, int* type, unsigned long long* flags);
  static constexpr const char* kLib = MEGASCALE_FAKE_CUDA_DRIVER;

  void SetUp() override {
    lib_ = dlopen(kLib, RTLD_NOW | RTLD_LOCAL);  // the same handle CudaDriver::load gets
    ASSERT_NE(lib_, nullptr) << dlerror();
    set_ = reinterpret_cast<SetFn>(dlsym(lib_, "fake_cuda_set"));
    last_ = reinterpret_cast<LastFn>(dlsym(lib_, "fake_cuda_last_export"));
    ASSERT_TRUE(set_ != nullptr && last_ != nullptr);
  }
  void TearDown() override {
    if (lib_ != nullptr) dlclose(lib_);
  }
  // A driver loaded after the stand-in is told how to answer (0 = CUDA_SUCCESS).
  std::unique_ptr<CudaDriver> load(int init, int version, int devices, int dmabuf_attr, int export_result) {
    set_(init, version, devices, dmabuf_attr, export_result);
    Result<std::unique_ptr<CudaDriver>> d = CudaDriver::load(kLib);
    EXPECT_TRUE(d.ok()) << d.error().message;
    return d.ok() ? std::move(*d) : nullptr;
  }

  void* lib_ = nullptr;
  SetFn set_ = nullptr;
  LastFn last_ = nullptr;
};

TEST_F(VerbsCudaDmabufFake, NoGpuAtInit) {
  set_(100, 12040, 0, 1, 0);  // CUDA_ERROR_NO_DEVICE
  Result<std::unique_ptr<CudaDriver>> d = CudaDriver::load(kLib);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().code, ErrorCode::kUnsupported);
  EXPECT_EQ(d.error().message, "cuInit: CUDA_ERROR_NO_DEVICE (100): no GPU");
  set_(999, 12040, 1, 1, 0);  // a code without a name
  d = CudaDriver::load(kLib);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().code, ErrorCode::kDevice);
  EXPECT_EQ(d.error().message, "cuInit: CUDA error 999");
}

TEST_F(VerbsCudaDmabufFake, WhyNoDmabufIsNamed) {
  std::unique_ptr<CudaDriver> d = load(0, 11060, 1, 1, 0);
  ASSERT_NE(d, nullptr);
  Status s = d->dmabuf_supported();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ErrorCode::kUnsupported);
  EXPECT_EQ(s.error().message,
            "the CUDA driver (version 11.6) cannot export dma-bufs: cuMemGetHandleForAddressRange needs a "
            "CUDA 11.7 or later driver");

  d = load(0, 12040, 0, 1, 0);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->dmabuf_supported().error().message, "the CUDA driver sees no GPU");

  d = load(0, 12040, 3, 0, 0);  // the third GPU lacks it
  ASSERT_NE(d, nullptr);
  s = d->dmabuf_supported();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(
      s.error().message.rfind("GPU 2 cannot export dma-bufs (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0", 0),
      0u)
      << s.error().message;
  EXPECT_NE(s.error().message.find("driver 12.4"), std::string::npos) << s.error().message;

  d = load(0, 11070, 2, 1, 0);
  ASSERT_NE(d, nullptr);
  EXPECT_TRUE(d->dmabuf_supported().ok());
}

TEST_F(VerbsCudaDmabufFake, ExportAsksForWholePagesOfTheDmabufType) {
  std::unique_ptr<CudaDriver> d = load(0, 12040, 1, 1, 0);
  ASSERT_NE(d, nullptr);
  const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  Result<void*> mem = d->alloc_device(0, 8 * page);
  ASSERT_TRUE(mem.ok()) << mem.error().message;
  const uint64_t addr = reinterpret_cast<uint64_t>(*mem) + page + 0x10;
  {
    Result<CudaDmabuf> buf = d->export_dmabuf(reinterpret_cast<void*>(addr), 2 * page);
    ASSERT_TRUE(buf.ok()) << buf.error().message;
    EXPECT_GE(buf->fd(), 0);
    EXPECT_EQ(buf->offset(), 0x10u);
    unsigned long long base = 0, flags = 99;
    size_t len = 0;
    int type = 0;
    last_(&base, &len, &type, &flags);
    EXPECT_EQ(base, addr & ~(page - 1));
    EXPECT_EQ(len, 3 * page) << "2 pages from 16 bytes into one: 3 pages";
    EXPECT_EQ(type, 1) << "CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD";
    EXPECT_EQ(flags, 0u);
    EXPECT_EQ(buf->span().base, base);
    EXPECT_EQ(buf->span().len, len);
  }
  d->free_device(*mem);
  Result<void*> none = d->alloc_device(5, 16);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().message, "cuDeviceGet(5): CUDA error 101");
}

TEST_F(VerbsCudaDmabufFake, ExportRefusalsNameTheirLikelyCause) {
  static char mem[16];
  std::unique_ptr<CudaDriver> d = load(0, 12040, 1, 1, 801);
  ASSERT_NE(d, nullptr);
  Result<CudaDmabuf> r = d->export_dmabuf(mem, sizeof mem);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kDevice);
  EXPECT_NE(
      r.error().message.find(": CUDA_ERROR_NOT_SUPPORTED (801): this GPU or driver does not export dma-bufs"),
      std::string::npos)
      << r.error().message;
  d = load(0, 12040, 1, 1, 1);
  ASSERT_NE(d, nullptr);
  r = d->export_dmabuf(mem, sizeof mem);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(
      r.error().message.find(": CUDA_ERROR_INVALID_VALUE (1): not device memory, or its pages run past the "
                             "allocation"),
      std::string::npos)
      << r.error().message;
  EXPECT_EQ(d->export_dmabuf(mem, 0).error().message, "dma-buf export of 0 bytes");
}

TEST(VerbsCudaDmabuf, TheExportOwnsItsFd) {
  int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  {
    CudaDmabuf a(fd, {.base = 0x1000, .len = 0x1000, .offset = 8});
    CudaDmabuf b(std::move(a));
    EXPECT_EQ(a.fd(), -1);  // NOLINT(bugprone-use-after-move): moved-from state is specified
    EXPECT_EQ(b.fd(), fd);
    EXPECT_EQ(b.offset(), 8u);
    EXPECT_NE(::fcntl(fd, F_GETFD), -1);
  }
  EXPECT_EQ(::fcntl(fd, F_GETFD), -1) << "closed with its owner";
  // Assigned over: the old fd is closed, the new one kept.
  const int first = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const int second = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(first, 0);
  ASSERT_GE(second, 0);
  {
    CudaDmabuf a(first, {});
    a = CudaDmabuf(second, {.base = 0, .len = 4096, .offset = 4});
    EXPECT_EQ(::fcntl(first, F_GETFD), -1);
    EXPECT_EQ(a.fd(), second);
    EXPECT_EQ(a.offset(), 4u);
  }
  EXPECT_EQ(::fcntl(second, F_GETFD), -1);
}

}  // namespace
}  // namespace megascale::wire::verbs
