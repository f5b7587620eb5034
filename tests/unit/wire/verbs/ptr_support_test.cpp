// The plugin's pointer-support decision: NCCL_PTR_HOST always; NCCL_PTR_CUDA | NCCL_PTR_DMABUF only
// with a direct data path, allowed by MEGASCALE_DMABUF_ENABLE, and both the NIC and the CUDA driver
// taking dma-bufs; else NCCL_PTR_CUDA alone through host shadows (MEGASCALE_GDR_COPY); the reason
// naming the first thing that fails and the NIC's probe. And the dma-buf probe's errno verdict.
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

constexpr const char* kNoPath =
    "direct NIC access to GPU memory needs a data path where the NIC writes into the posted buffers, which "
    "this wire does not have (the CPU copies every payload); dma-buf: ";

TEST(VerbsPtrSupport, DirectGpuBuffersOnlyWithAPathAndEverythingWorking) {
  const PtrSupport all = decide_ptr_support({.direct_placement = true});
  EXPECT_EQ(all.bits, kPtrHost | kPtrCuda | kPtrDmabuf);
  EXPECT_EQ(all.reason,
            "GPU buffers through dma-buf (NCCL_PTR_HOST|NCCL_PTR_CUDA|NCCL_PTR_DMABUF): the NIC reads and "
            "writes them through dma-buf MRs (it registers dma-bufs and the CUDA driver exports them)");
  // The direct path wins over host shadows: no copy where the NIC can place the bytes.
  EXPECT_EQ(decide_ptr_support({.gdr_copy = "1", .direct_placement = true}).bits,
            kPtrHost | kPtrCuda | kPtrDmabuf);
}

// The verbs wire today: the CPU copies every payload, so GPU buffers come only through host shadows,
// whatever the NIC's dma-buf probe says; the reason names both.
TEST(VerbsPtrSupport, WithoutADirectPathGpuBuffersNeedHostShadows) {
  const PtrSupport host = decide_ptr_support({});
  EXPECT_EQ(host.bits, kPtrHost);
  EXPECT_EQ(host.reason, "HOST only (NCCL_PTR_HOST): GPU buffers need MEGASCALE_GDR_COPY=1 (host shadows); " +
                             std::string(kNoPath) + "the NIC could register dma-bufs");
  EXPECT_EQ(decide_ptr_support({.gdr_copy = "0"}).bits, kPtrHost) << "0 is off";

  const PtrSupport emulate = decide_ptr_support({.gdr_copy = "emulate", .nic_dmabuf = kNicRefuses});
  EXPECT_EQ(emulate.bits, kPtrHost | kPtrCuda) << "no NCCL_PTR_DMABUF: the NIC never registers GPU memory";
  EXPECT_EQ(emulate.reason,
            "GPU buffers through host shadows (MEGASCALE_GDR_COPY=emulate; NCCL_PTR_HOST|NCCL_PTR_CUDA, the "
            "wire sees host memory only); " +
                std::string(kNoPath) + "rxe0 cannot register dma-bufs (provider)");

  // Probes that would pass change nothing without the path; the CUDA probe is not even named.
  const PtrSupport cuda = decide_ptr_support({.gdr_copy = "1", .cuda_dmabuf = kNoCuda});
  EXPECT_EQ(cuda.bits, kPtrHost | kPtrCuda);
  EXPECT_NE(cuda.reason.find("(MEGASCALE_GDR_COPY=1; "), std::string::npos) << cuda.reason;
  EXPECT_EQ(cuda.reason.find("libcuda"), std::string::npos) << cuda.reason;
}

TEST(VerbsPtrSupport, WithAPathTheFirstFailureIsNamed) {
  const PtrSupport off = decide_ptr_support(
      {.direct_placement = true, .enabled = false, .nic_dmabuf = kNicRefuses, .cuda_dmabuf = kNoCuda});
  EXPECT_EQ(off.bits, kPtrHost);
  EXPECT_EQ(off.reason,
            "HOST only (NCCL_PTR_HOST): GPU buffers need MEGASCALE_GDR_COPY=1 (host shadows); dma-buf "
            "disabled by MEGASCALE_DMABUF_ENABLE=0");

  const PtrSupport nic =
      decide_ptr_support({.direct_placement = true, .nic_dmabuf = kNicRefuses, .cuda_dmabuf = kNoCuda});
  EXPECT_EQ(nic.bits, kPtrHost);
  EXPECT_NE(nic.reason.find("; no dma-buf: rxe0 cannot register dma-bufs (provider)"), std::string::npos)
      << nic.reason;
  EXPECT_EQ(nic.reason.find("libcuda"), std::string::npos) << "only the first failure: " << nic.reason;

  // The CUDA driver not probed (left ok) because the NIC refused: still no dma-buf, for the NIC's reason.
  const PtrSupport lazy = decide_ptr_support({.direct_placement = true, .nic_dmabuf = kNicRefuses});
  EXPECT_EQ(lazy.bits, kPtrHost);
  EXPECT_EQ(lazy.reason, nic.reason);

  const PtrSupport cuda = decide_ptr_support({.direct_placement = true, .cuda_dmabuf = kNoCuda});
  EXPECT_EQ(cuda.bits, kPtrHost);
  EXPECT_NE(cuda.reason.find("; no dma-buf: cannot load libcuda.so.1 (the CUDA driver): gone"),
            std::string::npos)
      << cuda.reason;

  // A failed direct path falls back to host shadows where they are on.
  const PtrSupport shadows =
      decide_ptr_support({.gdr_copy = "emulate", .direct_placement = true, .cuda_dmabuf = kNoCuda});
  EXPECT_EQ(shadows.bits, kPtrHost | kPtrCuda);
  EXPECT_NE(shadows.reason.find("GPU buffers through host shadows (MEGASCALE_GDR_COPY=emulate;"),
            std::string::npos);
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
