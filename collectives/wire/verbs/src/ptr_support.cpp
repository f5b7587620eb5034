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
  constexpr const char* kHostOnly = "ptrSupport NCCL_PTR_HOST: ";
  PtrSupport out{.bits = kPtrHost, .reason = {}};
  if ((in.requested & (kPtrCuda | kPtrDmabuf)) == 0) {
    out.reason = std::string(kHostOnly) + "GPU buffers not requested";
  } else if (!in.enabled) {
    out.reason = std::string(kHostOnly) + "dma-buf disabled by MEGASCALE_DMABUF_ENABLE=0";
  } else if (!in.nic_dmabuf.ok()) {
    out.reason = std::string(kHostOnly) + "no dma-buf: " + in.nic_dmabuf.error().message;
  } else if (!in.cuda_dmabuf.ok()) {
    out.reason = std::string(kHostOnly) + "no dma-buf: " + in.cuda_dmabuf.error().message;
  } else {
    out.bits = kPtrHost | kPtrCuda | kPtrDmabuf;
    out.reason =
        "ptrSupport NCCL_PTR_HOST|NCCL_PTR_CUDA|NCCL_PTR_DMABUF: the NIC registers dma-bufs and the CUDA "
        "driver exports them";
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
