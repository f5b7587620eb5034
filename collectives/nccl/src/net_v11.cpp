// ncclNetPlugin_v11: the newest table, a direct mapping onto the core (NCCL 2.28+ uses it in place).
#include "megascale/nccl/abi/net_v11.h"

#include "plugin.h"

namespace megascale::nccl {
namespace {

using namespace abi;

NetResult v11_init(void** ctx, uint64_t comm_id, NetCommConfig* config, NetDebugLogger logger,
                   NetProfilerCallback profiler) {
  (void)profiler;
  return core::init(ctx, comm_id, config != nullptr ? config->trafficClass : kTrafficClassUndef, logger);
}

NetResult v11_connect(void* ctx, int dev, void* handle, void** send_comm, NetDeviceHandle** send_dev_comm) {
  (void)send_dev_comm;  // host device type: NCCL asks for no device offload
  return core::connect(ctx, dev, kTrafficClassUndef, handle, send_comm);
}

NetResult v11_accept(void* listen_comm, void** recv_comm, NetDeviceHandle** recv_dev_comm) {
  (void)recv_dev_comm;
  return core::accept(listen_comm, recv_comm);
}

NetResult v11_isend(void* send_comm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                    void** request) {
  (void)phandle;
  return core::isend(send_comm, data, size, tag, mhandle, request);
}

NetResult v11_irecv(void* recv_comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                    void** phandles, void** request) {
  (void)phandles;
  return core::irecv(recv_comm, n, data, sizes, tags, mhandles, request);
}

NetResult v11_iflush(void* recv_comm, int n, void** data, int* sizes, void** mhandles, void** request) {
  return core::iflush(recv_comm, n, data, sizes, mhandles, request);
}

}  // namespace
}  // namespace megascale::nccl

extern "C" {
// The one exported symbol of this version (exports.map keeps every other symbol local).
__attribute__((visibility("default"))) megascale::nccl::abi::NetV11 ncclNetPlugin_v11 = {
    megascale::nccl::core::kPluginName,
    megascale::nccl::v11_init,
    megascale::nccl::core::devices,
    megascale::nccl::core::get_properties,
    megascale::nccl::core::listen,
    megascale::nccl::v11_connect,
    megascale::nccl::v11_accept,
    megascale::nccl::core::reg_mr,
    nullptr,  // regMrDmaBuf: host memory only
    megascale::nccl::core::dereg_mr,
    megascale::nccl::v11_isend,
    megascale::nccl::v11_irecv,
    megascale::nccl::v11_iflush,
    megascale::nccl::core::test,
    megascale::nccl::core::close_send,
    megascale::nccl::core::close_recv,
    megascale::nccl::core::close_listen,
    nullptr,  // getDeviceMr: no device offload
    megascale::nccl::core::irecv_consumed,
    nullptr,  // makeVDevice: physical devices only
    megascale::nccl::core::finalize,
    megascale::nccl::core::set_net_attr,
};
}  // extern "C"
