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
  char name[] = "megascale-conformance-peer";
  std::vector<char*> argv = {name};
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

// The peer's arguments as the harness passes them, with `mode` and `abi`, and --plugin unless left out.
std::vector<std::string> peer_args(const char* mode, const char* abi, bool with_plugin = true) {
  std::vector<std::string> a = {"--mode",  mode, "--abi",    abi, "--dev",        "0",
                                "--in-fd", "0",  "--out-fd", "1", "--time-scale", "2"};
  if (with_plugin) {
    a.emplace_back("--plugin");
    a.emplace_back("/nonexistent/libnccl-net-none.so");
  }
  return a;
}

TEST(ConformancePeerArgs, GoodArgumentsReachThePluginsLoad) {
  // The case list pulls the peer's code (and its constructor) into this program.
  ASSERT_FALSE(megascale::nccl::conformance::case_list().empty());
  const Outcome o = run_peer(peer_args("recv", "11"));
  EXPECT_EQ(o.status, 3) << o.err;  // parsed, then Net::load failed
}

TEST(ConformancePeerArgs, AnUnknownModeIsRefusedNamingTheFlag) {
  const Outcome o = run_peer(peer_args("sideways", "11"));
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("--mode"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("sideways"), std::string::npos) << o.err;
}

TEST(ConformancePeerArgs, AMissingPluginIsRefusedNamingTheFlag) {
  const Outcome o = run_peer(peer_args("send", "11", /*with_plugin=*/false));
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("--plugin"), std::string::npos) << o.err;
}

TEST(ConformancePeerArgs, AnAbiOutsideEightToTwelveIsRefused) {
  for (const char* abi : {"7", "13"}) {
    const Outcome o = run_peer(peer_args("recv", abi));
    EXPECT_EQ(o.status, 2) << abi;
    EXPECT_NE(o.err.find("--abi"), std::string::npos) << o.err;
  }
}

TEST(ConformancePeerArgs, AbiTwelveIsAccepted) {
  const Outcome o = run_peer(peer_args("recv", "12"));
  EXPECT_EQ(o.status, 3) << o.err;  // parsed, then Net::load failed (the plugin path does not exist)
}

}  // namespace
