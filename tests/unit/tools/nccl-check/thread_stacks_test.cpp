// write_thread_stacks (tools/nccl-check/thread_stacks.h), nccl_check's hang report: every thread of the
// process, threads parked in a wait too, writes its own stack under a line with its id and name.
#include "thread_stacks.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace megascale::gpucheck {
namespace {

// The lines of `text` after the header naming `name`, up to the next header.
std::vector<std::string> section(const std::string& text, const std::string& name) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    if (line.rfind("--- thread ", 0) == 0) {
      inside = line.find("\"" + name + "\"") != std::string::npos;
      continue;
    }
    if (inside) lines.push_back(line);
  }
  return lines;
}

int frames(const std::vector<std::string>& lines) {
  int n = 0;
  for (const std::string& l : lines) n += l.find("[0x") != std::string::npos;
  return n;
}

TEST(ThreadStacks, EveryThreadWritesItsStackUnderItsName) {
  std::mutex m;
  std::condition_variable cv;
  bool go = false;
  int parked = 0;
  auto park = [&](const char* name) {
    pthread_setname_np(pthread_self(), name);
    std::unique_lock<std::mutex> lock(m);
    ++parked;
    cv.notify_all();
    cv.wait(lock, [&] { return go; });
  };
  std::thread a(park, "stacks-a"), b(park, "stacks-b");
  {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return parked == 2; });
  }
  char path[] = "/tmp/thread-stacks-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  const int wrote = write_thread_stacks(fd);
  ::close(fd);
  {
    std::lock_guard<std::mutex> lock(m);
    go = true;
  }
  cv.notify_all();
  a.join();
  b.join();
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::remove(path);
  const std::string s = text.str();
  EXPECT_GE(wrote, 3) << s;  // this thread and the two parked ones, at least
  EXPECT_NE(s.find("(this one)"), std::string::npos) << s;
  for (const char* name : {"stacks-a", "stacks-b"}) {
    const std::vector<std::string> lines = section(s, name);
    EXPECT_GE(frames(lines), 3) << name << " wrote no stack:\n" << s;
    for (const std::string& l : lines) EXPECT_EQ(l.find("no answer"), std::string::npos) << l;
  }
}

}  // namespace
}  // namespace megascale::gpucheck
