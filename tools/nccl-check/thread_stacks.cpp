// write_thread_stacks (thread_stacks.h): each thread of the process is sent a signal whose handler
// writes its backtrace, one thread at a time.
#include "thread_stacks.h"

#include <dirent.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace megascale::gpucheck {
namespace {

std::atomic<int> g_fd{-1};
std::atomic<long> g_answered{0};  // the thread whose handler last finished writing

void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w <= 0) return;
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void on_signal(int) {
  void* frames[64];
  const int n = backtrace(frames, 64);
  // The first frames are this handler and the signal trampoline.
  backtrace_symbols_fd(frames, n, g_fd.load());
  g_answered.store(syscall(SYS_gettid));
}

std::string thread_name(const std::string& tid) {
  std::string name;
  if (std::FILE* f = std::fopen(("/proc/self/task/" + tid + "/comm").c_str(), "r")) {
    char buf[64] = {};
    if (std::fgets(buf, sizeof buf, f) != nullptr) name = buf;
    std::fclose(f);
  }
  while (!name.empty() && name.back() == '\n') name.pop_back();
  return name;
}

}  // namespace

int write_thread_stacks(int fd) {
  // One signal glibc leaves to programs, away from the ones NCCL, CUDA or an application may use.
  const int sig = SIGRTMIN + 7;
  std::vector<std::string> tids;
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (const dirent* e = ::readdir(d)) {
      if (e->d_name[0] != '.') tids.emplace_back(e->d_name);
    }
    ::closedir(d);
  }
  void* warm[1];
  backtrace(warm, 1);  // loads the unwinder now, not inside a handler
  struct sigaction action = {}, before = {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  if (::sigaction(sig, &action, &before) != 0) return 0;
  g_fd.store(fd);
  int wrote = 0;
  const long self = syscall(SYS_gettid);
  for (const std::string& tid : tids) {
    const long t = std::atol(tid.c_str());
    const std::string head =
        "--- thread " + tid + " \"" + thread_name(tid) + "\"" + (t == self ? " (this one)" : "") + "\n";
    write_all(fd, head.data(), head.size());
    if (t == self) {
      on_signal(sig);
    } else if (syscall(SYS_tgkill, ::getpid(), t, sig) != 0) {
      const std::string gone = "(gone)\n";
      write_all(fd, gone.data(), gone.size());
      continue;
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    while (g_answered.load() != t && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (g_answered.load() != t) {
      const std::string late =
          "(no answer within 200 ms: in an uninterruptible wait, or its signal is blocked)\n";
      write_all(fd, late.data(), late.size());
    } else {
      ++wrote;
    }
  }
  // A late handler may still run after this and write to fd: it stays open (the caller's), and the
  // handler stays until then too. Restored only once every thread answered.
  if (wrote == static_cast<int>(tids.size())) ::sigaction(sig, &before, nullptr);
  return wrote;
}

}  // namespace megascale::gpucheck
