// NCCL logger holder and the WARN/INFO helpers (see log.h).
#include "log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>

namespace megascale::nccl {
namespace {

std::atomic<abi::NetDebugLogger> g_logger{nullptr};

constexpr const char* kPrefix = "NET/MegaScale : ";

void emit(abi::NetLogLevel level, unsigned long flags, const char* where, int line, const char* fmt,
          va_list args) {
  const abi::NetDebugLogger fn = g_logger.load(std::memory_order_acquire);
  if (fn == nullptr) return;
  char text[2048];
  const int prefix = std::snprintf(text, sizeof text, "%s", kPrefix);
  std::vsnprintf(text + prefix, sizeof text - static_cast<size_t>(prefix), fmt, args);
  fn(level, flags, where, line, "%s", text);
}

}  // namespace

void set_logger(abi::NetDebugLogger logger) {
  if (logger == nullptr) return;
  abi::NetDebugLogger expected = nullptr;
  g_logger.compare_exchange_strong(expected, logger, std::memory_order_acq_rel);
}

abi::NetDebugLogger logger() {
  return g_logger.load(std::memory_order_acquire);
}

void log_warn(const char* file, int line, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  emit(abi::kLogWarn, abi::kSubsysAll, file, line, fmt, args);
  va_end(args);
}

void log_info(unsigned long flags, const char* func, int line, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  emit(abi::kLogInfo, flags, func, line, fmt, args);
  va_end(args);
}

}  // namespace megascale::nccl
