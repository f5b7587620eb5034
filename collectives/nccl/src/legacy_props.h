// Copies the v11 properties into an older layout (the shared fields have the same meaning in every
// version; only the set of fields differs).
#pragma once

#include "megascale/nccl/abi/net_v11.h"
#include "megascale/nccl/abi/net_v8.h"
#include "megascale/nccl/abi/net_v9.h"

namespace megascale::nccl {

// Fields every version from v8 has.
template <class Props>
void copy_base_props(const abi::NetPropertiesV11& p, Props* out) {
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

inline void copy_props(const abi::NetPropertiesV11& p, abi::NetPropertiesV9* out) {
  copy_base_props(p, out);
  out->forceFlush = p.forceFlush;
  out->vProps = p.vProps;
  out->maxP2pBytes = p.maxP2pBytes;
  out->maxCollBytes = p.maxCollBytes;
}

inline void copy_props(const abi::NetPropertiesV11& p, abi::NetPropertiesV8* out) {
  copy_base_props(p, out);
}

}  // namespace megascale::nccl
