// NCCL net plugin ABI version 10 (NCCL 2.26 and 2.27 prefer it; 2.28 still accepts it), exported as
// `ncclNetPlugin_v10`. FROZEN: field order and types are the ABI. Written from
// NCCL's net plugin headers for this version (its ext-net example).
//
// Relative to v9: init takes a profiler callback too, connect takes a per-connection NetCommConfig
// (the communicator's traffic class), isend/irecv take profiler handles. NCCL's v10 adapter calls init
// only once per process (reference counted) and never calls a finalize.
#pragma once

#include "megascale/nccl/abi/common.h"
#include "megascale/nccl/abi/net_v9.h"

namespace megascale::nccl::abi {

// The v10 properties have exactly the v9 layout.
using NetPropertiesV10 = NetPropertiesV9;

struct NetV10 {
  const char* name;
  NetResult (*init)(NetDebugLogger logger, NetProfilerCallback profiler);
  NetResult (*devices)(int* ndev);
  NetResult (*getProperties)(int dev, NetPropertiesV10* props);
  NetResult (*listen)(int dev, void* handle, void** listenComm);
  NetResult (*connect)(int dev, NetCommConfig* config, void* handle, void** sendComm,
                       NetDeviceHandle** sendDevComm);
  NetResult (*accept)(void* listenComm, void** recvComm, NetDeviceHandle** recvDevComm);
  NetResult (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  NetResult (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                           void** mhandle);
  NetResult (*deregMr)(void* comm, void* mhandle);
  NetResult (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                     void** request);
  NetResult (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                     void** phandles, void** request);
  NetResult (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  NetResult (*test)(void* request, int* done, int* sizes);
  NetResult (*closeSend)(void* sendComm);
  NetResult (*closeRecv)(void* recvComm);
  NetResult (*closeListen)(void* listenComm);
  NetResult (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  NetResult (*irecvConsumed)(void* recvComm, int n, void* request);
  NetResult (*makeVDevice)(int* d, NetVDeviceProps* props);
};

}  // namespace megascale::nccl::abi
