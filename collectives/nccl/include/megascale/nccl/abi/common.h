// The parts of NCCL's net plugin ABI that every version shares: result codes, the logger and profiler
// callback types, debug levels and subsystem flags, the device-offload handle and the constants a
// plugin must respect. Written from NCCL's net plugin headers (its ext-net example), checked
// against nccl.h 2.28.9 (NCCL_VERSION_CODE 22809) for the result codes. FROZEN: these are the layouts
// NCCL 2.20 .. 2.30 compile against; never reorder or resize anything here.
//
//   using namespace megascale::nccl::abi;
//   NetResult r = net->listen(ctx, dev, handle, &listen_comm);   // through a NetV11 table
//   if (r != kNetSuccess) ...
//
// Everything is plain C layout (enums are int-sized, structs have no C++ members), so a table filled in
// C++ is what NCCL's C code reads.
#pragma once

#include <cstddef>
#include <cstdint>

namespace megascale::nccl::abi {

// ncclResult_t: the return code of every plugin function (an int-sized C enum in nccl.h).
enum NetResult : int {
  kNetSuccess = 0,
  kNetUnhandledCudaError = 1,
  kNetSystemError = 2,    // a system call or the network failed (NCCL's advice for network errors)
  kNetInternalError = 3,  // a bug or an impossible state inside the plugin
  kNetInvalidArgument = 4,
  kNetInvalidUsage = 5,
  kNetRemoteError = 6,  // the peer is gone or misbehaved (connection reset, unreachable)
  kNetInProgress = 7,
};

// ncclDebugLogLevel.
enum NetLogLevel : int {
  kLogNone = 0,
  kLogVersion = 1,
  kLogWarn = 2,
  kLogInfo = 3,
  kLogAbort = 4,
  kLogTrace = 5,
};

// ncclDebugLogSubSys: the `flags` argument of the logger (NCCL_DEBUG_SUBSYS filters on it).
inline constexpr unsigned long kSubsysInit = 0x1;
inline constexpr unsigned long kSubsysColl = 0x2;
inline constexpr unsigned long kSubsysP2p = 0x4;
inline constexpr unsigned long kSubsysShm = 0x8;
inline constexpr unsigned long kSubsysNet = 0x10;
inline constexpr unsigned long kSubsysGraph = 0x20;
inline constexpr unsigned long kSubsysTuning = 0x40;
inline constexpr unsigned long kSubsysEnv = 0x80;
inline constexpr unsigned long kSubsysAlloc = 0x100;
inline constexpr unsigned long kSubsysCall = 0x200;
inline constexpr unsigned long kSubsysProxy = 0x400;
inline constexpr unsigned long kSubsysNvls = 0x800;
inline constexpr unsigned long kSubsysBootstrap = 0x1000;
inline constexpr unsigned long kSubsysReg = 0x2000;
inline constexpr unsigned long kSubsysProfile = 0x4000;
inline constexpr unsigned long kSubsysRas = 0x8000;
inline constexpr unsigned long kSubsysAll = ~0UL;

// ncclDebugLogger_t: NCCL's printf-style logger. `file` is a source file for WARN and a function name
// for INFO (the convention of NCCL's own macros).
using NetDebugLogger = void (*)(NetLogLevel level, unsigned long flags, const char* file, int line,
                                const char* fmt, ...);

// ncclProfilerCallback_t (v10+): lets a plugin report events to NCCL's profiler. type: 0 start,
// 1 stop, 2 update, 3 update-and-stop. The megascale plugin does not call it.
using NetProfilerCallback = NetResult (*)(void** event_handle, int type, void* parent_handle,
                                          int64_t plugin_id, void* ext_data);

// Bits of NetProperties*::ptrSupport: which memory isend/irecv may be given.
inline constexpr int kPtrHost = 0x1;
inline constexpr int kPtrCuda = 0x2;
inline constexpr int kPtrDmabuf = 0x4;

// The listen handle NCCL ships to the peer through its bootstrap: at most this many bytes.
inline constexpr size_t kNetHandleMaxBytes = 128;
// Requests a comm must accept in flight (NCCL_NET_MAX_REQUESTS); a send comm takes this many times
// maxRecvs isends.
inline constexpr int kNetMaxRequests = 32;
// NCCL_NET_OPTIONAL_RECV_COMPLETION: the value *request may hold on entry to irecv (v9+) when the
// completion of that receive is optional (LL/LL128 with n == 1: the data carries its own flags).
inline constexpr uintptr_t kOptionalRecvCompletion = 0x1;
// NCCL_MAX_NET_SIZE_BYTES: the upper bound for maxP2pBytes and maxCollBytes (1 TiB).
inline constexpr size_t kMaxNetSizeBytes = size_t{1} << 40;
// NCCL_NET_MAX_DEVS_PER_NIC for v9 .. v11 (v12: kMaxDevsPerNicV12): members a virtual device may fuse.
inline constexpr int kMaxDevsPerNic = 4;
// NCCL_NET_TRAFFIC_CLASS_UNDEF: no traffic class configured.
inline constexpr int kTrafficClassUndef = -1;
// NCCL_STEPS: steps NCCL keeps in flight per connection.
inline constexpr int kNcclSteps = 8;

// ncclNetDeviceType: whether NCCL's GPU kernels need device-side help (HOST = none).
enum NetDeviceType : int {
  kNetDeviceHost = 0,
  kNetDeviceUnpack = 1,
};
// netDeviceVersion to report with kNetDeviceHost (NCCL_NET_DEVICE_INVALID_VERSION).
inline constexpr int kNetDeviceInvalidVersion = 0;

// ncclNetDeviceHandle_v7 .. v12: the device-offload handle (the same layout in every version used here).
struct NetDeviceHandle {
  NetDeviceType netDeviceType;
  int netDeviceVersion;
  void* handle;
  size_t size;
  int needsProxyProgress;
};

// ncclNetVDeviceProps_v9 .. v11: the members of a (virtual) device; a physical device d is {1, {d}}.
struct NetVDeviceProps {
  int ndevs;
  int devs[kMaxDevsPerNic];
};

// ncclNetCommConfig_v10 .. v12: per-communicator settings from ncclConfig_t.
struct NetCommConfig {
  int trafficClass;  // kTrafficClassUndef when the application set none
};

}  // namespace megascale::nccl::abi
