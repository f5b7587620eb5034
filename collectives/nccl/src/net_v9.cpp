// ncclNetPlugin_v9 (NCCL 2.24, 2.25): an adapter over the core with the process-wide legacy context.
#include "megascale/nccl/abi/net_v9.h"

#include "legacy_props.h"
#include "plugin.h"

namespace megascale::nccl {
namespace {

using namespace abi;

NetResult v9_init(NetDebugLogger logger) {
  return core::legacy_init(logger);
}

NetResult v9_get_properties(int dev, NetPropertiesV9* props) {
  if (props == nullptr) return kNetInvalidArgument;
  NetPropertiesV11 p;
  if (NetResult r = core::get_properties(dev, &p); r != kNetSuccess) return r;
  copy_props(p, props);
  return kNetSuccess;
}

NetResult v9_listen(int dev, void* handle, void** listen_comm) {
  return core::listen(core::legacy_context(), dev, handle, listen_comm);
}

NetResult v9_connect(int dev, void* handle, void** send_comm, NetDeviceHandle** dev_comm) {
  (void)dev_comm;
  return core::connect(core::legacy_context(), dev, kTrafficClassUndef, handle, send_comm);
}

NetResult v9_accept(void* listen_comm, void** recv_comm, NetDeviceHandle** dev_comm) {
  (void)dev_comm;
  return core::accept(listen_comm, recv_comm);
}

NetResult v9_irecv(void* recv_comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                   void** request) {
  return core::irecv(recv_comm, n, data, sizes, tags, mhandles, request);
}

NetResult v9_iflush(void* recv_comm, int n, void** data, int* sizes, void** mhandles, void** request) {
  return core::iflush(recv_comm, n, data, sizes, mhandles, request);
}

}  // namespace
}  // namespace megascale::nccl

extern "C" {
// The one exported symbol of this version (exports.map keeps every other symbol local).
__attribute__((visibility("default"))) megascale::nccl::abi::NetV9 ncclNetPlugin_v9 = {
    megascale::nccl::core::kPluginName,
    megascale::nccl::v9_init,
    megascale::nccl::core::devices,
    megascale::nccl::v9_get_properties,
    megascale::nccl::v9_listen,
    megascale::nccl::v9_connect,
    megascale::nccl::v9_accept,
    megascale::nccl::core::reg_mr,
    nullptr,
    megascale::nccl::core::dereg_mr,
    megascale::nccl::core::isend,
    megascale::nccl::v9_irecv,
    megascale::nccl::v9_iflush,
    megascale::nccl::core::test,
    megascale::nccl::core::close_send,
    megascale::nccl::core::close_recv,
    megascale::nccl::core::close_listen,
    nullptr,
    megascale::nccl::core::irecv_consumed,
    nullptr,
};
}  // extern "C"
