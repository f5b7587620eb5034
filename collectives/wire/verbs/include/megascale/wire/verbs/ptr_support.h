// Which buffers the NCCL plugin may advertise for a verbs device (NetProperties::ptrSupport), decided
// from what the NIC and the CUDA driver can do and what the user allows. Pure: the probes' results go
// in, the bits and a line for the log come out; the plugin calls the probes (IbDevice::probe_dmabuf,
// cuda_dmabuf_supported) and logs the reason.
//
//   Result<bool> enable = parse_dmabuf_enable(std::getenv("MEGASCALE_DMABUF_ENABLE"));  // bad: refuse init
//   Status nic = dev->probe_dmabuf();
//   Status cuda = *enable && nic.ok() ? cuda_dmabuf_supported() : Status{};
//   PtrSupport ps = decide_ptr_support({.requested = kPtrHost | kPtrCuda | kPtrDmabuf,
//                                       .enabled = *enable, .nic_dmabuf = nic, .cuda_dmabuf = cuda});
//   props->ptrSupport = ps.bits;  INFO("%s", ps.reason.c_str());
//
// GPU buffers go to the NIC only through dma-buf here (ibv_reg_dmabuf_mr of the driver's export), so
// NCCL_PTR_CUDA and NCCL_PTR_DMABUF are advertised together or not at all: both need the NIC to accept
// dma-buf registration and the CUDA driver to export dma-bufs. NCCL_PTR_HOST is always advertised.
// Necessary, not sufficient: GPU buffers may be advertised only on a data path whose CPU never reads or
// writes their bytes (the NIC does, through the dma-buf MR). The engine copies a received payload into
// the posted receive with the CPU, so the verbs wire's receive side needs GPU placement (or the plugin's
// GPU copier) before the plugin advertises what this returns.
#pragma once

#include <cstdint>
#include <string>

#include "megascale/common/result.h"

namespace megascale::wire::verbs {

// NCCL_PTR_HOST, NCCL_PTR_CUDA, NCCL_PTR_DMABUF: NCCL's ptrSupport bits (net headers of every ABI
// version), repeated here so that the wire needs no NCCL header.
inline constexpr int kPtrHost = 0x1;
inline constexpr int kPtrCuda = 0x2;
inline constexpr int kPtrDmabuf = 0x4;

// MEGASCALE_DMABUF_ENABLE, after NCCL_DMABUF_ENABLE: unset, empty or "1" allows dma-buf (used where
// both sides support it), "0" forbids it. Anything else is an error naming the value.
Result<bool> parse_dmabuf_enable(const char* value);

struct PtrSupportInputs {
  // The bits the caller would advertise if everything worked. kPtrHost is implied; asking for kPtrCuda
  // or kPtrDmabuf asks for GPU buffers through dma-buf (both bits).
  int requested = kPtrHost | kPtrCuda | kPtrDmabuf;
  bool enabled = true;   // parse_dmabuf_enable
  Status nic_dmabuf{};   // IbDevice::probe_dmabuf(): ok, or why the NIC refuses dma-buf registration
  Status cuda_dmabuf{};  // cuda_dmabuf_supported(): ok, or why no dma-buf comes from the CUDA driver
};

struct PtrSupport {
  int bits = kPtrHost;
  std::string reason;  // one line for the log: what is advertised and why
};

// kPtrHost, plus kPtrCuda | kPtrDmabuf when they were requested, enabled, and both probes passed.
// Unknown bits in `requested` are ignored. The reason names the first thing that fails, in the order:
// not requested, disabled, the NIC, the CUDA driver. A probe after the first failure is not read, so a
// caller may leave cuda_dmabuf ok without probing when the NIC refuses or dma-buf is off: hosts that
// cannot use it never load libcuda.so.1.
PtrSupport decide_ptr_support(const PtrSupportInputs& in);

// The dma-buf capability probe's verdict for device `device`: ibv_reg_dmabuf_mr called with fd -1 and
// length 0 fails; with errno EOPNOTSUPP (the provider has no dma-buf registration) or EPROTONOSUPPORT
// (the kernel has no such verb) the device cannot register dma-bufs; any other errno (EBADF: the fd was
// looked at) means it can. `err` 0 means the call unexpectedly succeeded: it can.
Status dmabuf_probe_verdict(const std::string& device, int err);

}  // namespace megascale::wire::verbs
