// ncclNetPlugin_v8 (NCCL 2.20 .. 2.23): the process-wide legacy context and int sizes (NCCL's v8 path
// never passes a message of 2 GiB or more).
#include "megascale/nccl/abi/net_v8.h"

#include "adapters.h"
#include "log.h"
#include "transport.h"

namespace megascale::nccl {
namespace {

using namespace abi;

NetResult v8_isend(void* send_comm, void* data, int size, int tag, void* mhandle, void** request) {
  if (size < 0) {
    MS_WARN("isend: bad arguments (size %d)", size);
    return kNetInvalidArgument;
  }
  return core::isend(send_comm, data, static_cast<size_t>(size), tag, mhandle, request);
}

NetResult v8_irecv(void* recv_comm, int n, void** data, int* sizes, int* tags, void** mhandles,
                   void** request) {
  if (n < 1 || n > kMaxRecvs || sizes == nullptr)
    return core::irecv(recv_comm, n, data, nullptr, tags, mhandles, request);
  size_t wide[kMaxRecvs];
  for (int i = 0; i < n; ++i) {
    if (sizes[i] < 0) {
      MS_WARN("irecv: bad buffer %d (size %d)", i, sizes[i]);
      return kNetInvalidArgument;
    }
    wide[i] = static_cast<size_t>(sizes[i]);
  }
  return core::irecv(recv_comm, n, data, wide, tags, mhandles, request);
}

}  // namespace
}  // namespace megascale::nccl

extern "C" {
// The one exported symbol of this version (exports.map keeps every other symbol local).
__attribute__((visibility("default"))) megascale::nccl::abi::NetV8 ncclNetPlugin_v8 = {
    megascale::nccl::core::kPluginName,
    megascale::nccl::guarded<&megascale::nccl::legacy_init>,
    megascale::nccl::guarded<&megascale::nccl::core::devices>,
    megascale::nccl::guarded<&megascale::nccl::older_get_properties<megascale::nccl::abi::NetPropertiesV8>>,
    megascale::nccl::guarded<&megascale::nccl::legacy_listen>,
    megascale::nccl::guarded<&megascale::nccl::legacy_connect>,
    megascale::nccl::guarded<&megascale::nccl::table_accept>,
    megascale::nccl::guarded<&megascale::nccl::core::reg_mr>,
    nullptr,
    megascale::nccl::guarded<&megascale::nccl::core::dereg_mr>,
    megascale::nccl::guarded<&megascale::nccl::v8_isend>,
    megascale::nccl::guarded<&megascale::nccl::v8_irecv>,
    megascale::nccl::guarded<&megascale::nccl::table_iflush>,
    megascale::nccl::guarded<&megascale::nccl::core::test>,
    megascale::nccl::guarded<&megascale::nccl::core::close_send>,
    megascale::nccl::guarded<&megascale::nccl::core::close_recv>,
    megascale::nccl::guarded<&megascale::nccl::core::close_listen>,
    nullptr,
    megascale::nccl::guarded<&megascale::nccl::core::irecv_consumed>,
};
}  // extern "C"
