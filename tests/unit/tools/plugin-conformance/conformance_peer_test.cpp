// The conformance harness's peer process reads its arguments with CLI11: this program links the harness,
// so started again as /proc/self/exe with MEGASCALE_CONFORMANCE_PEER set it runs as the peer (before
// main) and exits; a bad or missing argument exits 2 naming the flag, good ones get as far as loading
// the plugin (exit 3 for a path that does not load).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "megascale/nccl/conformance.h"

namespace {

struct Outcome {
  int status = -1;  // exit status, or -1 if it did not exit
  std::string err;  // its standard error
};

Outcome run_peer(std::vector<std::string> args) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  args.insert(args.begin(), "megascale-conformance-peer");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    ::setenv("MEGASCALE_CONFORMANCE_PEER", "1", 1);
    ::execv("/proc/self/exe", argv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  Outcome out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) out.err.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFEXITED(status)) out.status = WEXITSTATUS(status);
  return out;
}

const std::vector<std::string> kGood = {
    "--mode",       "recv", "--abi",    "11", "--dev",    "0",
    "--in-fd",      "0",    "--out-fd", "1",  "--plugin", "/nonexistent/libnccl-net-none.so",
    "--time-scale", "2"};

TEST(ConformancePeerArgs, GoodArgumentsReachThePluginsLoad) {
  // The case list pulls the peer's code (and its constructor) into this program.
  ASSERT_FALSE(megascale::nccl::conformance::case_list().empty());
  const Outcome o = run_peer(kGood);
  EXPECT_EQ(o.status, 3) << o.err;  // parsed, then Net::load failed
}

TEST(ConformancePeerArgs, AnUnknownModeIsRefusedNamingTheFlag) {
  std::vector<std::string> args = kGood;
  args[1] = "sideways";
  const Outcome o = run_peer(args);
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("--mode"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("sideways"), std::string::npos) << o.err;
}

TEST(ConformancePeerArgs, AMissingPluginIsRefusedNamingTheFlag) {
  std::vector<std::string> args(kGood.begin(), kGood.begin() + 10);
  const Outcome o = run_peer(args);
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("--plugin"), std::string::npos) << o.err;
}

TEST(ConformancePeerArgs, AnAbiOutsideEightToElevenIsRefused) {
  std::vector<std::string> args = kGood;
  args[3] = "7";
  const Outcome o = run_peer(args);
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("--abi"), std::string::npos) << o.err;
}

}  // namespace
