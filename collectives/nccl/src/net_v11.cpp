// ncclNetPlugin_v11 (NCCL 2.28, 2.29): v12's calls with the properties in v11's layout (vProps of at
// most 4 members, no railId or planeId).
#include "megascale/nccl/abi/net_v11.h"

#include "adapters.h"

extern "C" {
// The one exported symbol of this version (exports.map keeps every other symbol local).
__attribute__((visibility("default"))) megascale::nccl::abi::NetV11 ncclNetPlugin_v11 = {
    megascale::nccl::core::kPluginName,
    megascale::nccl::guarded<&megascale::nccl::context_init>,
    megascale::nccl::guarded<&megascale::nccl::core::devices>,
    megascale::nccl::guarded<&megascale::nccl::older_get_properties<megascale::nccl::abi::NetPropertiesV11>>,
    megascale::nccl::guarded<&megascale::nccl::core::listen>,
    megascale::nccl::guarded<&megascale::nccl::context_connect>,
    megascale::nccl::guarded<&megascale::nccl::table_accept>,
    megascale::nccl::guarded<&megascale::nccl::core::reg_mr>,
    nullptr,  // regMrDmaBuf: never NCCL_PTR_DMABUF (GPU buffers: regMr's host shadows)
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
