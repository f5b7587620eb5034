// NCCL net plugin ABI version 12 (NCCL 2.30 prefers it), exported as `ncclNetPlugin_v12`. FROZEN:
// field order and types are the ABI. Written from the field list of NCCL 2.30.7's net plugin header
// for this version; the offsets below are checked at compile time against that layout.
//
// Relative to v11: a virtual device may fuse up to 8 physical ones (NCCL_NET_MAX_DEVS_PER_NIC 8, was
// 4), which moves every property after vProps; the properties end with a rail id and a plane id
// (int16_t each, kNetIdUndef = unknown). The functions, their arguments, the comm config and the
// setNetAttr hints are those of v11. As for v11, NCCL uses this table in place (no copy).
//
//   NetPropertiesV12 p;
//   ncclNetPlugin_v12.getProperties(dev, &p);
//   if (p.railId != kNetIdUndef) ...   // NIC d sits on rail p.railId of a rail-optimised fabric
#pragma once

#include <cstddef>
#include <cstdint>

#include "megascale/nccl/abi/common.h"
#include "megascale/nccl/abi/net_v11.h"

namespace megascale::nccl::abi {

// NCCL_NET_MAX_DEVS_PER_NIC of v12: members a virtual device may fuse.
inline constexpr int kMaxDevsPerNicV12 = 8;
// NCCL_NET_ID_UNDEF: railId / planeId when the plugin does not know them (NCCL's own adapters for
// older plugins report this, and NCCL's rail-merge policy then leaves the NIC unmerged).
inline constexpr int16_t kNetIdUndef = -1;

// ncclNetVDeviceProps_v12_t: the members of a (virtual) device; a physical device d is {1, {d}}.
struct NetVDevicePropsV12 {
  int ndevs;
  int devs[kMaxDevsPerNicV12];
};

struct NetPropertiesV12 {
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
  NetVDevicePropsV12 vProps;    // physical device d: {1, {d}}
  size_t maxP2pBytes;           // largest p2p transfer, in (0, kMaxNetSizeBytes]
  size_t maxCollBytes;          // largest collNet transfer, same bounds
  int maxMultiRequestSize;      // requests per multi-request; 1
  int16_t railId;               // the NIC's rail (leaf switch index); kNetIdUndef = unknown
  int16_t planeId;              // the NIC's network plane; kNetIdUndef = unknown
};

// ncclNetCommAttr_v12_t and ncclNetAttr_v12_t have exactly the v11 layouts.
using NetCommAttrV12 = NetCommAttrV11;
using NetAttrV12 = NetAttrV11;

struct NetV12 {
  const char* name;
  NetResult (*init)(void** ctx, uint64_t commId, NetCommConfig* config, NetDebugLogger logger,
                    NetProfilerCallback profiler);
  NetResult (*devices)(int* ndev);
  NetResult (*getProperties)(int dev, NetPropertiesV12* props);
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
  NetResult (*makeVDevice)(int* d, NetVDevicePropsV12* props);
  NetResult (*finalize)(void* ctx);
  NetResult (*setNetAttr)(void* ctx, NetAttrV12* attr);
};

#if UINTPTR_MAX == UINT64_MAX
// The LP64 layout NCCL 2.30 compiles against (x86-64 and aarch64 Linux).
static_assert(sizeof(NetVDevicePropsV12) == 36);
static_assert(offsetof(NetPropertiesV12, vProps) == 64);
static_assert(offsetof(NetPropertiesV12, maxP2pBytes) == 104);
static_assert(offsetof(NetPropertiesV12, maxCollBytes) == 112);
static_assert(offsetof(NetPropertiesV12, maxMultiRequestSize) == 120);
static_assert(offsetof(NetPropertiesV12, railId) == 124);
static_assert(offsetof(NetPropertiesV12, planeId) == 126);
static_assert(sizeof(NetPropertiesV12) == 128);
// 21 entries after the name, in v11's order: only getProperties' and makeVDevice's argument types differ.
static_assert(sizeof(NetV12) == 22 * sizeof(void*));
static_assert(offsetof(NetV12, makeVDevice) == offsetof(NetV11, makeVDevice));
static_assert(offsetof(NetV12, setNetAttr) == 21 * sizeof(void*));
#endif

}  // namespace megascale::nccl::abi
