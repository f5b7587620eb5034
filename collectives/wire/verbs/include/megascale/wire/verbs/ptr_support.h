// Which buffers the NCCL plugin may advertise for a verbs device (NetProperties::ptrSupport), decided
// from the plugin's GPU-buffer copier, the wire's data path, what the NIC and the CUDA driver can do and
// what the user allows. Pure: the probes' results go in, the bits and a line for the log come out; the
// plugin calls the probes (IbDevice::probe_dmabuf, cuda_dmabuf_supported) and logs the reason.
//
//   Status nic = dev->probe_dmabuf();  // cheap: one failing ibv_reg_dmabuf_mr
//   PtrSupport ps = decide_ptr_support({.gdr_copy = "emulate", .direct_placement = false, .nic_dmabuf =
//   nic}); props->ptrSupport = ps.bits;  INFO("%s", ps.reason.c_str());
//
// GPU buffers reach the plugin two ways:
// - through host shadows (MEGASCALE_GDR_COPY): the plugin copies between NCCL's GPU buffer and a host
//   shadow and hands the wire the shadow, so the wire sees host memory only: NCCL_PTR_HOST|NCCL_PTR_CUDA
//   on any wire;
// - directly: the NIC reads and writes the GPU buffer through a dma-buf MR (ibv_reg_dmabuf_mr of the CUDA
//   driver's export): NCCL_PTR_CUDA and NCCL_PTR_DMABUF together. This needs a data path whose CPU never
//   touches the payload: the NIC reads a send from the registered buffer and writes a receive into the
//   posted buffer. The verbs wire has none (UD receives land in bounce buffers, RC ones in its ring, and
//   the CPU copies them into the posted buffer), so the plugin passes direct_placement = false and the
//   dma-buf probes only say what a direct path could use.
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
  // MEGASCALE_GDR_COPY's value when the plugin takes GPU buffers through host shadows ("1", "emulate");
  // "" or "0" when it does not.
  std::string gdr_copy{};
  // Whether the wire's data path lets the NIC read sends from and write receives into the registered
  // buffers themselves, the CPU never touching the payload. False on the verbs wire (it copies).
  bool direct_placement = false;
  bool enabled = true;   // parse_dmabuf_enable
  Status nic_dmabuf{};   // IbDevice::probe_dmabuf(): ok, or why the NIC refuses dma-buf registration
  Status cuda_dmabuf{};  // cuda_dmabuf_supported(): ok, or why no dma-buf comes from the CUDA driver
};

struct PtrSupport {
  int bits = kPtrHost;
  std::string reason;  // one line for the log: what is advertised and why
};

// kPtrHost always; kPtrCuda | kPtrDmabuf when direct_placement, enabled and both probes passed; else
// kPtrCuda alone with host shadows (gdr_copy on). The reason says which of the three and, unless the
// direct path is taken, why not, naming the first thing that fails in the order: the data path, the
// switch, the NIC, the CUDA driver. Without a direct data path it still names the NIC probe's result
// (what a direct path could use). cuda_dmabuf is read only where everything before it passed, so a
// caller may leave it ok without probing: hosts that cannot use it never load libcuda.so.1.
PtrSupport decide_ptr_support(const PtrSupportInputs& in);

// The dma-buf capability probe's verdict for device `device`: ibv_reg_dmabuf_mr called with fd -1 and
// length 0 fails; with errno EOPNOTSUPP (the provider has no dma-buf registration) or EPROTONOSUPPORT
// (the kernel has no such verb) the device cannot register dma-bufs; any other errno (EBADF: the fd was
// looked at) means it can. `err` 0 means the call unexpectedly succeeded: it can.
Status dmabuf_probe_verdict(const std::string& device, int err);

}  // namespace megascale::wire::verbs
