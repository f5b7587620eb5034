// NCCL net plugin ABI version 11 (NCCL 2.28 and 2.29 prefer it; 2.30 still accepts it), exported as
// `ncclNetPlugin_v11`. FROZEN: field order and types are the ABI. Written from
// NCCL's net plugin headers for this version (its ext-net example).
//
// Relative to v10: init is called once PER COMMUNICATOR and returns a context (`ctx`) that listen and
// connect receive; finalize(ctx) ends it (also after a failed init); the traffic class moves from
// connect to init's config; properties gain maxMultiRequestSize; setNetAttr passes optional hints
// about the communicator's traffic pattern. For v11 NCCL uses this table in place (no copy).
//
//   void* ctx = nullptr;
//   NetCommConfig cfg{kTrafficClassUndef};
//   if (ncclNetPlugin_v11.init(&ctx, comm_hash, &cfg, logger, nullptr) != kNetSuccess) ...
//   ncclNetPlugin_v11.listen(ctx, /*dev=*/0, handle, &listen_comm);
#pragma once

#include "megascale/nccl/abi/common.h"

namespace megascale::nccl::abi {

struct NetPropertiesV11 {
  char* name;                   // unique per device: NCCL's topology is keyed by it
  char* pciPath;                // /sys PCI path of the NIC; NULL = attach to the CPU
  uint64_t guid;                // devices with one guid are one physical port
  int ptrSupport;               // kPtrHost | kPtrCuda | kPtrDmabuf
  int regIsGlobal;              // 1: a registration is valid on every comm
  int forceFlush;               // 1: NCCL flushes every GPU-direct receive
  int speed;                    // Mbps
  int port;                     // port number on a multi-port NIC
  float latency;                // us; 0 = NCCL's default
  int maxComms;                 // most comms the device can hold
  int maxRecvs;                 // most buffers one grouped irecv may carry
  NetDeviceType netDeviceType;  // kNetDeviceHost
  int netDeviceVersion;         // kNetDeviceInvalidVersion with kNetDeviceHost
  NetVDeviceProps vProps;       // physical device d: {1, {d}}
  size_t maxP2pBytes;           // largest p2p transfer, in (0, kMaxNetSizeBytes]
  size_t maxCollBytes;          // largest collNet transfer, same bounds
  int maxMultiRequestSize;      // requests per multi-request; 1 (not read by NCCL 2.28)
};

// ncclNetCommAttr_v11_t: bounds on a communicator's peers and flows.
struct NetCommAttrV11 {
  int32_t maxConcurrentPeers;
  int32_t minConcurrentPeers;
  int32_t maxFlowsPerPeer;
  int32_t minFlowsPerPeer;
};

// ncclNetAttr_v11_t: setNetAttr's hints. op/algo/proto are bit masks of NCCL's enums; -1 = unset.
struct NetAttrV11 {
  NetCommAttrV11 sendCommAttr;
  NetCommAttrV11 recvCommAttr;
  uint32_t op;
  uint32_t algo;
  uint32_t proto;
};

struct NetV11 {
  const char* name;
  NetResult (*init)(void** ctx, uint64_t commId, NetCommConfig* config, NetDebugLogger logger,
                    NetProfilerCallback profiler);
  NetResult (*devices)(int* ndev);
  NetResult (*getProperties)(int dev, NetPropertiesV11* props);
  NetResult (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  NetResult (*connect)(void* ctx, int dev, void* handle, void** sendComm, NetDeviceHandle** sendDevComm);
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
  NetResult (*finalize)(void* ctx);
  NetResult (*setNetAttr)(void* ctx, NetAttrV11* attr);
};

#if UINTPTR_MAX == UINT64_MAX
// The LP64 layout NCCL 2.28 compiles against (x86-64 and aarch64 Linux).
static_assert(sizeof(NetVDeviceProps) == 20);
static_assert(offsetof(NetPropertiesV11, vProps) == 64);
static_assert(offsetof(NetPropertiesV11, maxP2pBytes) == 88);
static_assert(offsetof(NetPropertiesV11, maxMultiRequestSize) == 104);
static_assert(sizeof(NetPropertiesV11) == 112);
static_assert(sizeof(NetAttrV11) == 44);
static_assert(sizeof(NetV11) == 22 * sizeof(void*));
#endif

}  // namespace megascale::nccl::abi
