// ncclNetPlugin_v11: the newest table, a direct mapping onto the core (NCCL 2.28+ uses it in place).
#include "megascale/nccl/abi/net_v11.h"

#include "adapters.h"

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

}  // namespace
}  // namespace megascale::nccl

extern "C" {
// The one exported symbol of this version (exports.map keeps every other symbol local).
__attribute__((visibility("default"))) megascale::nccl::abi::NetV11 ncclNetPlugin_v11 = {
    megascale::nccl::core::kPluginName,
    megascale::nccl::guarded<&megascale::nccl::v11_init>,
    megascale::nccl::guarded<&megascale::nccl::core::devices>,
    megascale::nccl::guarded<&megascale::nccl::core::get_properties>,
    megascale::nccl::guarded<&megascale::nccl::core::listen>,
    megascale::nccl::guarded<&megascale::nccl::v11_connect>,
    megascale::nccl::guarded<&megascale::nccl::table_accept>,
    megascale::nccl::guarded<&megascale::nccl::core::reg_mr>,
    nullptr,  // regMrDmaBuf: host memory only
    megascale::nccl::guarded<&megascale::nccl::core::dereg_mr>,
    megascale::nccl::guarded<&megascale::nccl::table_isend>,
    megascale::nccl::guarded<&megascale::nccl::table_irecv>,
    megascale::nccl::guarded<&megascale::nccl::table_iflush>,
    megascale::nccl::guarded<&megascale::nccl::core::test>,
    megascale::nccl::guarded<&megascale::nccl::core::close_send>,
    megascale::nccl::guarded<&megascale::nccl::core::close_recv>,
    megascale::nccl::guarded<&megascale::nccl::core::close_listen>,
    nullptr,  // getDeviceMr: no device offload
    megascale::nccl::guarded<&megascale::nccl::core::irecv_consumed>,
    nullptr,  // makeVDevice: physical devices only
    megascale::nccl::guarded<&megascale::nccl::core::finalize>,
    megascale::nccl::guarded<&megascale::nccl::core::set_net_attr>,
};
}  // extern "C"
