// The plugin's pointer-support decision: NCCL_PTR_HOST always; NCCL_PTR_CUDA | NCCL_PTR_DMABUF only
// when asked for, allowed by MEGASCALE_DMABUF_ENABLE, and both the NIC and the CUDA driver take
// dma-bufs; the reason naming the first thing that fails. And the dma-buf probe's errno verdict.
#include "megascale/wire/verbs/ptr_support.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace megascale::wire::verbs {
namespace {

const Status kNicRefuses = make_error(ErrorCode::kUnsupported, "rxe0 cannot register dma-bufs (provider)");
const Status kNoCuda =
    make_error(ErrorCode::kUnsupported, "cannot load libcuda.so.1 (the CUDA driver): gone");

TEST(VerbsPtrSupport, ValuesAreNcclsBits) {
  // NCCL_PTR_HOST 0x1, NCCL_PTR_CUDA 0x2, NCCL_PTR_DMABUF 0x4 (NCCL's net.h, every ABI version).
  EXPECT_EQ(kPtrHost, 0x1);
  EXPECT_EQ(kPtrCuda, 0x2);
  EXPECT_EQ(kPtrDmabuf, 0x4);
}

TEST(VerbsPtrSupport, GpuBuffersOnlyWhenEverythingWorks) {
  const PtrSupport all = decide_ptr_support({});
  EXPECT_EQ(all.bits, kPtrHost | kPtrCuda | kPtrDmabuf);
  EXPECT_EQ(all.reason,
            "ptrSupport NCCL_PTR_HOST|NCCL_PTR_CUDA|NCCL_PTR_DMABUF: the NIC registers dma-bufs and the CUDA "
            "driver exports them");
  // Asking for either GPU bit asks for both (GPU memory reaches the NIC only through dma-buf here).
  EXPECT_EQ(decide_ptr_support({.requested = kPtrCuda}).bits, kPtrHost | kPtrCuda | kPtrDmabuf);
  EXPECT_EQ(decide_ptr_support({.requested = kPtrDmabuf}).bits, kPtrHost | kPtrCuda | kPtrDmabuf);
}

TEST(VerbsPtrSupport, HostOnlyWithTheFirstReason) {
  const PtrSupport not_asked = decide_ptr_support({.requested = kPtrHost, .nic_dmabuf = kNicRefuses});
  EXPECT_EQ(not_asked.bits, kPtrHost);
  EXPECT_EQ(not_asked.reason, "ptrSupport NCCL_PTR_HOST: GPU buffers not requested");
  // Unknown bits are not GPU bits.
  EXPECT_EQ(decide_ptr_support({.requested = 0x10}).bits, kPtrHost);

  const PtrSupport off =
      decide_ptr_support({.enabled = false, .nic_dmabuf = kNicRefuses, .cuda_dmabuf = kNoCuda});
  EXPECT_EQ(off.bits, kPtrHost);
  EXPECT_EQ(off.reason, "ptrSupport NCCL_PTR_HOST: dma-buf disabled by MEGASCALE_DMABUF_ENABLE=0");

  const PtrSupport nic = decide_ptr_support({.nic_dmabuf = kNicRefuses, .cuda_dmabuf = kNoCuda});
  EXPECT_EQ(nic.bits, kPtrHost);
  EXPECT_EQ(nic.reason, "ptrSupport NCCL_PTR_HOST: no dma-buf: rxe0 cannot register dma-bufs (provider)");

  // The CUDA driver not probed (left ok) because the NIC refused: still host only, for the NIC's reason.
  const PtrSupport lazy = decide_ptr_support({.nic_dmabuf = kNicRefuses});
  EXPECT_EQ(lazy.bits, kPtrHost);
  EXPECT_EQ(lazy.reason, nic.reason);

  const PtrSupport cuda = decide_ptr_support({.cuda_dmabuf = kNoCuda});
  EXPECT_EQ(cuda.bits, kPtrHost);
  EXPECT_EQ(cuda.reason,
            "ptrSupport NCCL_PTR_HOST: no dma-buf: cannot load libcuda.so.1 (the CUDA driver): gone");
}

TEST(VerbsPtrSupport, EnableFollowsNcclsConvention) {
  EXPECT_TRUE(*parse_dmabuf_enable(nullptr)) << "unset: on where supported (NCCL_DMABUF_ENABLE's default)";
  EXPECT_TRUE(*parse_dmabuf_enable(""));
  EXPECT_TRUE(*parse_dmabuf_enable("1"));
  EXPECT_FALSE(*parse_dmabuf_enable("0"));
  for (const char* bad : {"yes", "2", " 1", "true"}) {
    Result<bool> r = parse_dmabuf_enable(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().message,
              std::string("MEGASCALE_DMABUF_ENABLE=") + bad + ": expected 0 (host memory only) or 1");
  }
}

TEST(VerbsPtrSupport, ProbeVerdictFromErrno) {
  Status provider = dmabuf_probe_verdict("rxe0", EOPNOTSUPP);
  ASSERT_FALSE(provider.ok());
  EXPECT_EQ(provider.error().code, ErrorCode::kUnsupported);
  EXPECT_EQ(provider.error().message,
            "rxe0 cannot register dma-bufs (ibv_reg_dmabuf_mr: its provider does not support it)");
  Status kernel = dmabuf_probe_verdict("mlx5_0", EPROTONOSUPPORT);
  ASSERT_FALSE(kernel.ok());
  EXPECT_EQ(kernel.error().message,
            "mlx5_0 cannot register dma-bufs (ibv_reg_dmabuf_mr: the kernel has no such verb)");
  // The verb looked at the fd (-1) and refused it, or at the length: the device takes dma-bufs.
  EXPECT_TRUE(dmabuf_probe_verdict("mlx5_0", EBADF).ok());
  EXPECT_TRUE(dmabuf_probe_verdict("mlx5_0", EINVAL).ok());
  EXPECT_TRUE(dmabuf_probe_verdict("mlx5_0", 0).ok());
}

}  // namespace
}  // namespace megascale::wire::verbs
