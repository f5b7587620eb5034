// Logging through NCCL's logger, never stdout: the plugin's only output channel besides the stats files.
// NCCL hands its logger to init; until then (and when NCCL passes none) messages are dropped.
//
//   MS_WARN("MEGASCALE_TC=%s: not an integer in 0..255", text);           // always shown
//   MS_INFO(kSubsysNet, "connected to %s in %.1f ms", peer.c_str(), ms);  // NCCL_DEBUG=INFO
//
// Every message starts with "NET/MegaScale : ", as NCCL's own nets prefix theirs ("NET/IB : ").
// WARN goes out with NCCL's all-subsystems flag and the source file, INFO with the given subsystem flags
// and the function name: the conventions of NCCL's WARN and INFO macros.
#pragma once

#include "megascale/nccl/abi/common.h"

namespace megascale::nccl {

// Installs NCCL's logger (the first non-null one wins; NCCL passes the same function every time).
void set_logger(abi::NetDebugLogger logger);
abi::NetDebugLogger logger();

void log_warn(const char* file, int line, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
void log_info(unsigned long flags, const char* func, int line, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));

}  // namespace megascale::nccl

#define MS_WARN(...) ::megascale::nccl::log_warn(__FILE__, __LINE__, __VA_ARGS__)
#define MS_INFO(flags, ...) ::megascale::nccl::log_info((flags), __func__, __LINE__, __VA_ARGS__)
