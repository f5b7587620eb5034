// ncclNetPlugin_v9 (NCCL 2.24, 2.25): the process-wide legacy context; otherwise the core's calls.
#include "megascale/nccl/abi/net_v9.h"

#include "adapters.h"

extern "C" {
// The one exported symbol of this version (exports.map keeps every other symbol local).
__attribute__((visibility("default"))) megascale::nccl::abi::NetV9 ncclNetPlugin_v9 = {
    megascale::nccl::core::kPluginName,
    megascale::nccl::guarded<&megascale::nccl::legacy_init>,
    megascale::nccl::guarded<&megascale::nccl::core::devices>,
    megascale::nccl::guarded<&megascale::nccl::older_get_properties<megascale::nccl::abi::NetPropertiesV9>>,
    megascale::nccl::guarded<&megascale::nccl::legacy_listen>,
    megascale::nccl::guarded<&megascale::nccl::legacy_connect>,
    megascale::nccl::guarded<&megascale::nccl::table_accept>,
    megascale::nccl::guarded<&megascale::nccl::core::reg_mr>,
    nullptr,
    megascale::nccl::guarded<&megascale::nccl::core::dereg_mr>,
    megascale::nccl::guarded<&megascale::nccl::core::isend>,
    megascale::nccl::guarded<&megascale::nccl::table_irecv_v9>,
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
