// ncclNetPlugin_v10 (NCCL 2.26, 2.27): the process-wide legacy context (v10 has no per-communicator
// init or finalize) and the traffic class passed per connect.
#include "megascale/nccl/abi/net_v10.h"

#include "adapters.h"

namespace megascale::nccl {
namespace {

using namespace abi;

NetResult v10_init(NetDebugLogger logger, NetProfilerCallback profiler) {
  (void)profiler;
  return core::legacy_init(logger);
}

NetResult v10_connect(int dev, NetCommConfig* config, void* handle, void** send_comm,
                      NetDeviceHandle** dev_comm) {
  (void)dev_comm;
  const int tc = config != nullptr ? config->trafficClass : kTrafficClassUndef;
  return core::connect(core::legacy_context(), dev, tc, handle, send_comm);
}

}  // namespace
}  // namespace megascale::nccl

extern "C" {
// The one exported symbol of this version (exports.map keeps every other symbol local).
__attribute__((visibility("default"))) megascale::nccl::abi::NetV10 ncclNetPlugin_v10 = {
    megascale::nccl::core::kPluginName,
    megascale::nccl::guarded<&megascale::nccl::v10_init>,
    megascale::nccl::guarded<&megascale::nccl::core::devices>,
    megascale::nccl::guarded<&megascale::nccl::older_get_properties<megascale::nccl::abi::NetPropertiesV10>>,
    megascale::nccl::guarded<&megascale::nccl::legacy_listen>,
    megascale::nccl::guarded<&megascale::nccl::v10_connect>,
    megascale::nccl::guarded<&megascale::nccl::table_accept>,
    megascale::nccl::guarded<&megascale::nccl::core::reg_mr>,
    nullptr,
    megascale::nccl::guarded<&megascale::nccl::core::dereg_mr>,
    megascale::nccl::guarded<&megascale::nccl::table_isend>,
    megascale::nccl::guarded<&megascale::nccl::table_irecv>,
    megascale::nccl::guarded<&megascale::nccl::table_iflush>,
    megascale::nccl::guarded<&megascale::nccl::core::test>,
    megascale::nccl::guarded<&megascale::nccl::core::close_send>,
    megascale::nccl::guarded<&megascale::nccl::core::close_recv>,
    megascale::nccl::guarded<&megascale::nccl::core::close_listen>,
    nullptr,
    megascale::nccl::guarded<&megascale::nccl::core::irecv_consumed>,
    nullptr,
};
}  // extern "C"
