// The plugin's pointer-support decision and the dma-buf probe's verdict (ptr_support.h).
#include "megascale/wire/verbs/ptr_support.h"

#include <cerrno>
#include <cstring>
#include <string_view>

namespace megascale::wire::verbs {

Result<bool> parse_dmabuf_enable(const char* value) {
  if (value == nullptr) return true;
  const std::string_view v(value);
  if (v.empty() || v == "1") return true;
  if (v == "0") return false;
  return make_error(ErrorCode::kInvalidArgument,
                    "MEGASCALE_DMABUF_ENABLE=" + std::string(v) + ": expected 0 (host memory only) or 1");
}

PtrSupport decide_ptr_support(const PtrSupportInputs& in) {
  // Why the NIC does not touch GPU memory itself, the first obstacle named.
  std::string no_direct;
  if (!in.direct_placement) {
    no_direct =
        "direct NIC access to GPU memory needs a data path where the NIC writes into the posted buffers, "
        "which this wire does not have (the CPU copies every payload); dma-buf: " +
        (in.nic_dmabuf.ok() ? std::string("the NIC could register dma-bufs") : in.nic_dmabuf.error().message);
  } else if (!in.enabled) {
    no_direct = "dma-buf disabled by MEGASCALE_DMABUF_ENABLE=0";
  } else if (!in.nic_dmabuf.ok()) {
    no_direct = "no dma-buf: " + in.nic_dmabuf.error().message;
  } else if (!in.cuda_dmabuf.ok()) {
    no_direct = "no dma-buf: " + in.cuda_dmabuf.error().message;
  }
  PtrSupport out;
  if (no_direct.empty()) {
    out.bits = kPtrHost | kPtrCuda | kPtrDmabuf;
    out.reason =
        "GPU buffers through dma-buf (NCCL_PTR_HOST|NCCL_PTR_CUDA|NCCL_PTR_DMABUF): the NIC reads and "
        "writes them through dma-buf MRs (it registers dma-bufs and the CUDA driver exports them)";
  } else if (!in.gdr_copy.empty() && in.gdr_copy != "0") {
    out.bits = kPtrHost | kPtrCuda;
    out.reason = "GPU buffers through host shadows (MEGASCALE_GDR_COPY=" + in.gdr_copy +
                 "; NCCL_PTR_HOST|NCCL_PTR_CUDA, the wire sees host memory only); " + no_direct;
  } else {
    out.bits = kPtrHost;
    out.reason =
        "HOST only (NCCL_PTR_HOST): GPU buffers need MEGASCALE_GDR_COPY=1 (host shadows); " + no_direct;
  }
  return out;
}

Status dmabuf_probe_verdict(const std::string& device, int err) {
  if (err == EOPNOTSUPP) {
    return make_error(
        ErrorCode::kUnsupported,
        device + " cannot register dma-bufs (ibv_reg_dmabuf_mr: its provider does not support it)");
  }
  if (err == EPROTONOSUPPORT) {
    return make_error(ErrorCode::kUnsupported,
                      device + " cannot register dma-bufs (ibv_reg_dmabuf_mr: the kernel has no such verb)");
  }
  return {};
}

}  // namespace megascale::wire::verbs
