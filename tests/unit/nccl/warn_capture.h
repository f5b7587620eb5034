// The WARN lines a net plugin loaded with dlopen logs through the NCCL logger a test passes it: the
// logger to pass, and what it collected since the last look. Shared by the plugin tests of this folder.
#pragma once

#include <gtest/gtest.h>

#include <cstdarg>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "megascale/nccl/abi/common.h"

namespace megascale::nccl::test {

inline std::mutex g_warn_mu;
inline std::vector<std::string> g_warns;

// NCCL's logger signature; keeps the WARN lines (the plugin may log from its own threads).
inline void warn_logger(abi::NetLogLevel level, unsigned long, const char*, int, const char* fmt, ...) {
  if (level != abi::kLogWarn) return;
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  std::lock_guard<std::mutex> lock(g_warn_mu);
  g_warns.emplace_back(line);
}

// The WARN lines logged since the last call.
inline std::vector<std::string> take_warns() {
  std::lock_guard<std::mutex> lock(g_warn_mu);
  std::vector<std::string> w;
  w.swap(g_warns);
  return w;
}

// Whether exactly one WARN was logged since the last look, and it contains `text`.
inline ::testing::AssertionResult warned(const std::string& text) {
  const std::vector<std::string> w = take_warns();
  if (w.size() == 1 && w[0].find(text) != std::string::npos) return ::testing::AssertionSuccess();
  std::string all;
  for (const std::string& s : w) all += "\n  WARN " + s;
  return ::testing::AssertionFailure()
         << w.size() << " WARN line(s), wanted one with '" << text << "':" << all;
}

}  // namespace megascale::nccl::test
