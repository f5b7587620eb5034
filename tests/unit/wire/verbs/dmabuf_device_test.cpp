// GPU memory registered with a real NIC through dma-buf: exported by the CUDA driver, registered
// through the device's MR cache, found again, and deregistered at its last release. Needs an RDMA device
// that takes dma-bufs and a GPU whose driver exports them; without either each test skips, saying which.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "megascale/wire/verbs/cuda_dmabuf.h"
#include "megascale/wire/verbs/ib_device.h"

namespace megascale::wire::verbs {
namespace {

// The first RDMA device on its first active port, or the reason there is none.
Result<std::unique_ptr<IbDevice>> open_first_device() {
  const std::vector<std::string> names = list_devices();
  if (names.empty()) return make_error(ErrorCode::kUnsupported, "no RDMA device (libibverbs lists none)");
  std::string errors;
  for (uint32_t port = 1; port <= 2; ++port) {
    Result<std::unique_ptr<IbDevice>> dev = IbDevice::open(names[0], port);
    if (dev.ok()) return dev;
    errors += (errors.empty() ? "" : "; ") + dev.error().message;
  }
  return make_error(ErrorCode::kUnsupported, errors);
}

TEST(VerbsDmabufDevice, ProbeGivesAVerdictNamingTheDevice) {
  Result<std::unique_ptr<IbDevice>> dev = open_first_device();
  if (!dev.ok()) GTEST_SKIP() << dev.error().message;
  Status s = (*dev)->probe_dmabuf();
  if (!s.ok()) {
    EXPECT_EQ(s.error().code, ErrorCode::kUnsupported);
    EXPECT_EQ(s.error().message.rfind((*dev)->name() + " cannot register dma-bufs", 0), 0u)
        << s.error().message;
  }
  std::printf("%s: dma-buf registration %s\n", (*dev)->name().c_str(),
              s.ok() ? "supported" : s.error().message.c_str());
  // A file that is no dma-buf: the cache's dma-buf registration reaches ibv_reg_dmabuf_mr, which
  // refuses it (the fd on a device that takes dma-bufs, the verb itself on one that does not).
  const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  Result<MrHold> h = (*dev)->mr_cache().hold_dmabuf(0x10000000, 4096, {.fd = fd, .offset = 0});
  ::close(fd);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.error().message.find("ibv_reg_dmabuf_mr"), std::string::npos) << h.error().message;
  EXPECT_EQ((*dev)->mr_cache().regions(), 0u);
}

TEST(VerbsDmabufDevice, RegistersGpuMemoryThroughDmabuf) {
  Result<std::unique_ptr<IbDevice>> dev = open_first_device();
  if (!dev.ok()) GTEST_SKIP() << dev.error().message;
  if (Status s = (*dev)->probe_dmabuf(); !s.ok()) GTEST_SKIP() << s.error().message;
  if (Status s = cuda_dmabuf_supported(); !s.ok()) GTEST_SKIP() << s.error().message;
  const CudaDriver* cuda = *cuda_driver();

  constexpr size_t kBytes = size_t{4} << 20;
  Result<void*> gpu = cuda->alloc_device(0, kBytes);
  ASSERT_TRUE(gpu.ok()) << gpu.error().message;
  // A buffer inside the allocation that is not page-aligned: the export covers its pages.
  char* buf = static_cast<char*>(*gpu) + 0x1010;
  const size_t len = kBytes / 2;
  {
    Result<CudaDmabuf> exported = cuda->export_dmabuf(buf, len);
    ASSERT_TRUE(exported.ok()) << exported.error().message;
    EXPECT_EQ(exported->offset(), 0x10u);
    MrCache& cache = (*dev)->mr_cache();
    Result<MrHold> held = cache.hold_dmabuf(reinterpret_cast<uint64_t>(buf), len,
                                            {.fd = exported->fd(), .offset = exported->offset()});
    ASSERT_TRUE(held.ok()) << held.error().message;
    EXPECT_NE(held->keys.lkey, 0u);
    Result<MrKeys> again =
        cache.find_or_register_dmabuf(reinterpret_cast<uint64_t>(buf) + 4096, 64, {.fd = 999});
    ASSERT_TRUE(again.ok()) << again.error().message;
    EXPECT_EQ(again->lkey, held->keys.lkey);
    EXPECT_EQ(cache.regions(MrKind::kDmabuf), 1u);
    EXPECT_TRUE(cache.release(held->region));
    EXPECT_EQ(cache.regions(MrKind::kDmabuf), 0u);
  }
  cuda->free_device(*gpu);
}

}  // namespace
}  // namespace megascale::wire::verbs
