// The one place a failure's kind becomes NCCL's return code: every Error (or failed engine
// Completion) the plugin turns into an ncclResult_t goes through to_net_result, so a failure made in the
// engine, the wire or the plugin is reported the same way wherever it surfaces.
//
//   auto w = reg.wires_for(dev, dscp, k);
//   if (!w) { MS_WARN("listen: %s", w.error().message.c_str()); return to_net_result(w.error().code); }
#pragma once

#include "megascale/common/result.h"
#include "megascale/nccl/abi/common.h"

namespace megascale::nccl {

// kTimeout is a remote error: the peer stopped answering within the retry budget, which NCCL reports
// as ncclRemoteError. NCCL has no "unsupported": what the plugin cannot do is its internal error.
constexpr abi::NetResult to_net_result(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return abi::kNetInvalidArgument;
    case ErrorCode::kInvalidUsage:
      return abi::kNetInvalidUsage;
    case ErrorCode::kSystem:
      return abi::kNetSystemError;
    case ErrorCode::kRemote:
      return abi::kNetRemoteError;
    case ErrorCode::kTimeout:
      return abi::kNetRemoteError;
    case ErrorCode::kDevice:
      return abi::kNetUnhandledCudaError;
    case ErrorCode::kUnsupported:
      return abi::kNetInternalError;
    case ErrorCode::kInternal:
      return abi::kNetInternalError;
  }
  return abi::kNetInternalError;
}

}  // namespace megascale::nccl
