// NCCL net plugin ABI version 9 (NCCL 2.24 and 2.25 prefer it; 2.26 .. 2.28 still accept it), exported
// as `ncclNetPlugin_v9`. FROZEN: field order and types are the ABI. Written from
// NCCL's net plugin headers for this version (its ext-net example).
//
// Relative to v8: isend/irecv sizes are size_t; properties gain forceFlush, vProps, maxP2pBytes and
// maxCollBytes; makeVDevice (NIC fusion) is added; irecv may see kOptionalRecvCompletion in *request.
#pragma once

#include "megascale/nccl/abi/common.h"

namespace megascale::nccl::abi {

struct NetPropertiesV9 {
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
};

struct NetV9 {
  const char* name;
  NetResult (*init)(NetDebugLogger logger);
  NetResult (*devices)(int* ndev);
  NetResult (*getProperties)(int dev, NetPropertiesV9* props);
  NetResult (*listen)(int dev, void* handle, void** listenComm);
  NetResult (*connect)(int dev, void* handle, void** sendComm, NetDeviceHandle** sendDevComm);
  NetResult (*accept)(void* listenComm, void** recvComm, NetDeviceHandle** recvDevComm);
  NetResult (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  NetResult (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                           void** mhandle);
  NetResult (*deregMr)(void* comm, void* mhandle);
  NetResult (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request);
  NetResult (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                     void** request);
  NetResult (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  NetResult (*test)(void* request, int* done, int* sizes);
  NetResult (*closeSend)(void* sendComm);
  NetResult (*closeRecv)(void* recvComm);
  NetResult (*closeListen)(void* listenComm);
  NetResult (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  NetResult (*irecvConsumed)(void* recvComm, int n, void* request);
  NetResult (*makeVDevice)(int* d, NetVDeviceProps* props);
};

#if UINTPTR_MAX == UINT64_MAX
// The LP64 layout (x86-64 and aarch64 Linux).
static_assert(offsetof(NetPropertiesV9, vProps) == 64);
static_assert(offsetof(NetPropertiesV9, maxCollBytes) == 96);
static_assert(sizeof(NetPropertiesV9) == 104);
static_assert(sizeof(NetV9) == 20 * sizeof(void*));
#endif

}  // namespace megascale::nccl::abi
