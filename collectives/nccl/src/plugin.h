// The plugin's version-neutral core: one implementation of every net call, in the newest ABI's terms
// (v12). The exported tables (net_v12.cpp .. net_v8.cpp) are thin adapters over these functions.
//
//   void* ctx = nullptr;
//   core::init(&ctx, comm_hash, abi::kTrafficClassUndef, logger);   // per communicator (v11, v12)
//   core::listen(ctx, dev, handle, &listen_comm);                   // NCCL's service thread
//   core::isend(send_comm, data, size, tag, mhandle, &request);     // NCCL's progress thread
//
// Every function returns an abi::NetResult and logs a WARN through NCCL's logger before returning an
// error. Pointers NCCL hands back (contexts, comms, requests, memory handles) are checked by a magic
// number before use.
#pragma once

#include <cstddef>
#include <cstdint>

#include "megascale/nccl/abi/common.h"
#include "megascale/nccl/abi/net_v12.h"

namespace megascale::nccl::core {

using abi::NetResult;

inline constexpr const char* kPluginName = "MegaScale";

// Per-communicator init (v11, v12). The first call reads and validates the MEGASCALE_* variables and finds
// the devices; a bad variable or no usable interface fails every init with a WARN naming the cause.
// traffic_class: NCCL's ncclConfig_t value or abi::kTrafficClassUndef.
NetResult init(void** ctx, uint64_t comm_id, int traffic_class, abi::NetDebugLogger logger);
// Ends a context (v11, v12). Null is fine (NCCL calls it after a failed init). Wires are torn down when the
// last context is finalized and no comm is open.
NetResult finalize(void* ctx);
// The process-wide context of the v8..v10 tables, created by their init (NCCL calls it once).
NetResult legacy_init(abi::NetDebugLogger logger);
void* legacy_context();

NetResult devices(int* ndev);
// The v12 properties; railId and planeId are abi::kNetIdUndef unless the device knows its rail/plane.
NetResult get_properties(int dev, abi::NetPropertiesV12* props);

NetResult listen(void* ctx, int dev, void* handle, void** listen_comm);
// traffic_class: the v10 per-connect value (abi::kTrafficClassUndef = the context's).
NetResult connect(void* ctx, int dev, int traffic_class, void* handle, void** send_comm);
NetResult accept(void* listen_comm, void** recv_comm);

NetResult reg_mr(void* comm, void* data, size_t size, int type, void** mhandle);
NetResult dereg_mr(void* comm, void* mhandle);

NetResult isend(void* send_comm, void* data, size_t size, int tag, void* mhandle, void** request);
NetResult irecv(void* recv_comm, int n, void** data, const size_t* sizes, const int* tags, void** mhandles,
                void** request);
NetResult iflush(void* recv_comm, int n, void** data, const int* sizes, void** mhandles, void** request);
NetResult test(void* request, int* done, int* sizes);
NetResult irecv_consumed(void* recv_comm, int n, void* request);

NetResult close_send(void* send_comm);
NetResult close_recv(void* recv_comm);
NetResult close_listen(void* listen_comm);

NetResult set_net_attr(void* ctx, abi::NetAttrV12* attr);

}  // namespace megascale::nccl::core
