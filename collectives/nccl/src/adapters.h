// What the exported tables share: the calls whose ABI forms differ from the core's only in what they
// ignore or in const-ness, and the v12 properties copied into an older layout. Each net_vN.cpp keeps
// only what its version really changes (init, connect's traffic class, int sizes, profiler handles).
//
// Every entry of every table goes through guarded<fn>: the core returns errors as values, and whatever
// still throws (std::bad_alloc, a bug) becomes a WARN naming the call and ncclInternalError here rather
// than unwinding into NCCL's C frames, which terminates the process.
#pragma once

#include <exception>
#include <string_view>

#include "log.h"
#include "megascale/nccl/abi/net_v11.h"
#include "megascale/nccl/abi/net_v12.h"
#include "megascale/nccl/abi/net_v8.h"
#include "megascale/nccl/abi/net_v9.h"
#include "plugin.h"

namespace megascale::nccl {

namespace detail {

// The WARN for an exception that reached a table entry; `signature` is the guard's __PRETTY_FUNCTION__,
// which names the wrapped function ("[with auto Fn = megascale::nccl::core::listen; ...]").
inline abi::NetResult escaped(std::string_view signature, const char* what) noexcept {
  std::string_view call = signature;
  if (size_t at = signature.find("Fn = "); at != std::string_view::npos) {
    call = signature.substr(at + 5);
    call = call.substr(0, call.find_first_of(";]"));
  }
  MS_WARN("%.*s: internal error: %s", static_cast<int>(call.size()), call.data(), what);
  return abi::kNetInternalError;
}

template <auto Fn, class Signature = decltype(Fn)>
struct Guard;

template <auto Fn, class... Args>
struct Guard<Fn, abi::NetResult (*)(Args...)> {
  static abi::NetResult call(Args... args) noexcept {
    try {
      return Fn(args...);
    } catch (const std::exception& e) {
      return escaped(__PRETTY_FUNCTION__, e.what());
    } catch (...) {
      return escaped(__PRETTY_FUNCTION__, "an exception that is not a std::exception");
    }
  }
};

}  // namespace detail

// `fn` with every exception turned into a WARN and abi::kNetInternalError: what the tables export.
template <auto Fn>
inline constexpr auto guarded = &detail::Guard<Fn>::call;

// Fields every version from v8 has (the shared fields mean the same in every version; only the set
// of fields differs).
template <class Props>
void copy_base_props(const abi::NetPropertiesV12& p, Props* out) {
  out->name = p.name;
  out->pciPath = p.pciPath;
  out->guid = p.guid;
  out->ptrSupport = p.ptrSupport;
  out->regIsGlobal = p.regIsGlobal;
  out->speed = p.speed;
  out->port = p.port;
  out->latency = p.latency;
  out->maxComms = p.maxComms;
  out->maxRecvs = p.maxRecvs;
  out->netDeviceType = p.netDeviceType;
  out->netDeviceVersion = p.netDeviceVersion;
}

// v12's vProps (up to 8 members) in the v9..v11 layout (up to 4). False when it has more members than
// that layout holds: a virtual device an older NCCL cannot be told about.
inline bool narrow_vprops(const abi::NetVDevicePropsV12& in, abi::NetVDeviceProps* out) {
  if (in.ndevs < 0 || in.ndevs > abi::kMaxDevsPerNic) return false;
  *out = {};
  out->ndevs = in.ndevs;
  for (int i = 0; i < in.ndevs; ++i) out->devs[i] = in.devs[i];
  return true;
}

// The v12 properties in an older layout; railId and planeId have no place there and are dropped.
// False when vProps does not fit (see narrow_vprops).
template <class Props>
bool copy_v9_props(const abi::NetPropertiesV12& p, Props* out) {
  copy_base_props(p, out);
  out->forceFlush = p.forceFlush;
  out->maxP2pBytes = p.maxP2pBytes;
  out->maxCollBytes = p.maxCollBytes;
  return narrow_vprops(p.vProps, &out->vProps);
}

inline bool copy_props(const abi::NetPropertiesV12& p, abi::NetPropertiesV11* out) {
  out->maxMultiRequestSize = p.maxMultiRequestSize;
  return copy_v9_props(p, out);
}

inline bool copy_props(const abi::NetPropertiesV12& p, abi::NetPropertiesV9* out) {
  return copy_v9_props(p, out);
}

inline bool copy_props(const abi::NetPropertiesV12& p, abi::NetPropertiesV8* out) {
  copy_base_props(p, out);
  return true;
}

// getProperties of v8..v11: the v12 properties in the version's layout.
template <class Props>
abi::NetResult older_get_properties(int dev, Props* props) {
  if (props == nullptr) return core::get_properties(dev, nullptr);  // refused there, with its WARN
  abi::NetPropertiesV12 p;
  if (abi::NetResult r = core::get_properties(dev, &p); r != abi::kNetSuccess) return r;
  if (!copy_props(p, props)) {
    MS_WARN("getProperties: device %d fuses %d devices, more than this ABI version's %d", dev, p.vProps.ndevs,
            abi::kMaxDevsPerNic);
    return abi::kNetInternalError;
  }
  return abi::kNetSuccess;
}

// init and connect of v11 and v12: per-communicator contexts, the traffic class from init's config.
inline abi::NetResult context_init(void** ctx, uint64_t comm_id, abi::NetCommConfig* config,
                                   abi::NetDebugLogger logger, abi::NetProfilerCallback profiler) {
  (void)profiler;
  return core::init(ctx, comm_id, config != nullptr ? config->trafficClass : abi::kTrafficClassUndef, logger);
}
inline abi::NetResult context_connect(void* ctx, int dev, void* handle, void** send_comm,
                                      abi::NetDeviceHandle** send_dev_comm) {
  (void)send_dev_comm;  // host device type: NCCL asks for no device offload
  return core::connect(ctx, dev, abi::kTrafficClassUndef, handle, send_comm);
}

// init, listen and connect of v8..v10: the process-wide context (no per-communicator init). v10's
// connect, which carries a traffic class, is its own.
inline abi::NetResult legacy_init(abi::NetDebugLogger logger) {
  return core::legacy_init(logger);
}
inline abi::NetResult legacy_listen(int dev, void* handle, void** listen_comm) {
  return core::listen(core::legacy_context(), dev, handle, listen_comm);
}
inline abi::NetResult legacy_connect(int dev, void* handle, void** send_comm,
                                     abi::NetDeviceHandle** dev_comm) {
  (void)dev_comm;  // host device type: NCCL asks for no device offload
  return core::connect(core::legacy_context(), dev, abi::kTrafficClassUndef, handle, send_comm);
}

// accept and iflush of every version.
inline abi::NetResult table_accept(void* listen_comm, void** recv_comm, abi::NetDeviceHandle** dev_comm) {
  (void)dev_comm;
  return core::accept(listen_comm, recv_comm);
}
inline abi::NetResult table_iflush(void* recv_comm, int n, void** data, int* sizes, void** mhandles,
                                   void** request) {
  return core::iflush(recv_comm, n, data, sizes, mhandles, request);
}

// isend and irecv of v10..v12 (profiler handles, ignored).
inline abi::NetResult table_isend(void* send_comm, void* data, size_t size, int tag, void* mhandle,
                                  void* phandle, void** request) {
  (void)phandle;
  return core::isend(send_comm, data, size, tag, mhandle, request);
}
inline abi::NetResult table_irecv(void* recv_comm, int n, void** data, size_t* sizes, int* tags,
                                  void** mhandles, void** phandles, void** request) {
  (void)phandles;
  return core::irecv(recv_comm, n, data, sizes, tags, mhandles, request);
}

// irecv of v9 (no profiler handles).
inline abi::NetResult table_irecv_v9(void* recv_comm, int n, void** data, size_t* sizes, int* tags,
                                     void** mhandles, void** request) {
  return core::irecv(recv_comm, n, data, sizes, tags, mhandles, request);
}

}  // namespace megascale::nccl
