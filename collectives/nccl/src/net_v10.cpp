// ncclNetPlugin_v10 (NCCL 2.26, 2.27): an adapter over the core with the process-wide legacy context
// (v10 has no per-communicator init or finalize) and the traffic class passed per connect.
#include "megascale/nccl/abi/net_v10.h"

#include "legacy_props.h"
#include "plugin.h"

namespace megascale::nccl {
namespace {

using namespace abi;

NetResult v10_init(NetDebugLogger logger, NetProfilerCallback profiler) {
  (void)profiler;
  return core::legacy_init(logger);
}

NetResult v10_get_properties(int dev, NetPropertiesV10* props) {
  if (props == nullptr) return kNetInvalidArgument;
  NetPropertiesV11 p;
  if (NetResult r = core::get_properties(dev, &p); r != kNetSuccess) return r;
  copy_props(p, props);
  return kNetSuccess;
}

NetResult v10_listen(int dev, void* handle, void** listen_comm) {
  return core::listen(core::legacy_context(), dev, handle, listen_comm);
}

NetResult v10_connect(int dev, NetCommConfig* config, void* handle, void** send_comm,
                      NetDeviceHandle** dev_comm) {
  (void)dev_comm;
  const int tc = config != nullptr ? config->trafficClass : kTrafficClassUndef;
  return core::connect(core::legacy_context(), dev, tc, handle, send_comm);
}

NetResult v10_accept(void* listen_comm, void** recv_comm, NetDeviceHandle** dev_comm) {
  (void)dev_comm;
  return core::accept(listen_comm, recv_comm);
}

NetResult v10_isend(void* send_comm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                    void** request) {
  (void)phandle;
  return core::isend(send_comm, data, size, tag, mhandle, request);
}

NetResult v10_irecv(void* recv_comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                    void** phandles, void** request) {
  (void)phandles;
  return core::irecv(recv_comm, n, data, sizes, tags, mhandles, request);
}

NetResult v10_iflush(void* recv_comm, int n, void** data, int* sizes, void** mhandles, void** request) {
  return core::iflush(recv_comm, n, data, sizes, mhandles, request);
}

}  // namespace
}  // namespace megascale::nccl

extern "C" {
// The one exported symbol of this version (exports.map keeps every other symbol local).
__attribute__((visibility("default"))) megascale::nccl::abi::NetV10 ncclNetPlugin_v10 = {
    megascale::nccl::core::kPluginName,
    megascale::nccl::v10_init,
    megascale::nccl::core::devices,
    megascale::nccl::v10_get_properties,
    megascale::nccl::v10_listen,
    megascale::nccl::v10_connect,
    megascale::nccl::v10_accept,
    megascale::nccl::core::reg_mr,
    nullptr,
    megascale::nccl::core::dereg_mr,
    megascale::nccl::v10_isend,
    megascale::nccl::v10_irecv,
    megascale::nccl::v10_iflush,
    megascale::nccl::core::test,
    megascale::nccl::core::close_send,
    megascale::nccl::core::close_recv,
    megascale::nccl::core::close_listen,
    nullptr,
    megascale::nccl::core::irecv_consumed,
    nullptr,
};
}  // extern "C"
