// The peer cases: a child process (this program re-executed as the peer) transfers data with the
// harness through the plugin and is killed with SIGKILL mid-transfer (its socket closes: the plugin may
// hear so at once), or stopped with SIGSTOP (alive, its socket open, silent: only the plugin's own
// retry budget can tell); the harness's pending requests must then fail (ncclSystemError or
// ncclRemoteError from test or a post) within the retry budget, never hang.
//
// The child is recognised by MEGASCALE_CONFORMANCE_PEER in its environment; a constructor runs it
// before main() with the arguments it was given and exits:
//
//   megascale-conformance-peer --mode recv --abi 12 --dev 0 --in-fd 5 --out-fd 8 --time-scale 1
//                              --plugin build/collectives/nccl/libnccl-net-megascale.so
//
// Protocol on two pipes: the listening side writes its 128-byte handle; the child then writes one byte
// per message it completes ('m'), or 'E' if it fails.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cases.h"

extern char** environ;

namespace megascale::nccl::conformance {
namespace {

constexpr const char* kPeerEnv = "MEGASCALE_CONFORMANCE_PEER";
constexpr size_t kPeerMsg = 1 << 20;
constexpr int kPeerInflight = 8;

bool write_all(int fd, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, b, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    b += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Reads exactly n bytes within `timeout_s`.
bool read_all(int fd, void* p, size_t n, double timeout_s) {
  auto* b = static_cast<uint8_t*>(p);
  const Deadline deadline(timeout_s);
  while (n > 0) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, 100) <= 0) {
      if (deadline.passed()) return false;
      continue;
    }
    const ssize_t r = ::read(fd, b, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    b += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// Messages the child reported done so far (non-blocking); -1 if it reported an error.
int drain_progress(int fd, int* count) {
  uint8_t buf[256];
  for (;;) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, 0) <= 0) return *count;
    const ssize_t r = ::read(fd, buf, sizeof buf);
    if (r <= 0) return *count;
    for (ssize_t i = 0; i < r; ++i) {
      if (buf[i] == 'E') return -1;
      ++*count;
    }
  }
}

// ---- The child. ----

int run_peer(int argc, char** argv) {
  CLI::App app{"The peer process of the conformance cases (started by the harness, not by hand)",
               "megascale-conformance-peer"};
  std::string mode, path;
  int abi_version = 0, dev = 0, in_fd = -1, out_fd = -1;
  double scale = 0;
  app.add_option("--mode", mode, "recv: listen and receive; send: connect and send")
      ->required()
      ->check(CLI::IsMember({"send", "recv"}));
  app.add_option("--abi", abi_version, "ABI version the harness loaded")
      ->required()
      ->check(CLI::Range(8, 12));
  app.add_option("--dev", dev, "Device index")->required()->check(CLI::NonNegativeNumber);
  app.add_option("--in-fd", in_fd, "Pipe from the harness (the handle, for --mode send)")->required();
  app.add_option("--out-fd", out_fd, "Pipe to the harness (the handle, then progress bytes)")->required();
  app.add_option("--time-scale", scale, "Factor on the deadlines (0: this build's own)");
  app.add_option("--plugin", path, "The plugin .so")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    (void)app.exit(e);
    return 2;
  }
  set_time_scale(scale);
  auto net = Net::load(path, abi_version);
  if (!net) return 3;
  Net& n = **net;
  void* ctx = nullptr;
  if (n.init(&ctx) != abi::kNetSuccess) return 4;
  std::vector<uint8_t> buf(kPeerInflight * kPeerMsg, 0x5A);
  void* comm = nullptr;
  void* mr = nullptr;
  const bool receiver = mode == "recv";
  const Deadline setup(30);
  if (receiver) {
    uint8_t handle[abi::kNetHandleMaxBytes] = {};
    void* listen_comm = nullptr;
    if (n.listen(ctx, dev, handle, &listen_comm) != abi::kNetSuccess ||
        !write_all(out_fd, handle, sizeof handle))
      return 5;
    while (comm == nullptr) {
      if (n.accept(listen_comm, &comm) != abi::kNetSuccess || setup.passed()) return 6;
    }
  } else {
    uint8_t handle[abi::kNetHandleMaxBytes];
    if (!read_all(in_fd, handle, sizeof handle, 30)) return 7;
    while (comm == nullptr) {
      if (n.connect(ctx, dev, handle, &comm) != abi::kNetSuccess || setup.passed()) return 8;
    }
  }
  if (n.reg_mr(comm, buf.data(), buf.size(), abi::kPtrHost, &mr) != abi::kNetSuccess) return 9;
  void* reqs[kPeerInflight] = {};
  for (;;) {  // until killed
    for (int i = 0; i < kPeerInflight; ++i) {
      void* data = buf.data() + kPeerMsg * static_cast<size_t>(i);
      if (reqs[i] == nullptr) {
        NetResult r;
        if (receiver) {
          size_t size = kPeerMsg;
          int tag = 9;
          r = n.irecv(comm, 1, &data, &size, &tag, &mr, &reqs[i]);
        } else {
          r = n.isend(comm, data, kPeerMsg, 9, mr, &reqs[i]);
        }
        if (r != abi::kNetSuccess) {
          (void)write_all(out_fd, "E", 1);
          return 10;
        }
        continue;
      }
      int done = 0, sizes[8];
      if (n.test(reqs[i], &done, sizes) != abi::kNetSuccess) {
        (void)write_all(out_fd, "E", 1);
        return 11;
      }
      if (done) {
        reqs[i] = nullptr;
        if (!write_all(out_fd, "m", 1)) return 12;
      }
    }
  }
}

// glibc passes a constructor the program's argc and argv.
__attribute__((constructor)) void peer_entry(int argc, char** argv, char** /*envp*/) {
  if (std::getenv(kPeerEnv) == nullptr) return;
  std::_Exit(run_peer(argc, argv));
}

// ---- The parent. ----

struct Child {
  pid_t pid = -1;
  int to_child = -1;    // the child's in_fd, our end
  int from_child = -1;  // the child's out_fd, our end

  ~Child() {
    kill_now();
    if (to_child >= 0) ::close(to_child);
    if (from_child >= 0) ::close(from_child);
  }
  void kill_now() {
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    pid = -1;
  }
};

Status spawn(Env& env, const char* mode, Child& child) {
  int down[2], up[2];  // down: parent -> child, up: child -> parent
  MS_REQUIRE(::pipe2(down, O_CLOEXEC) == 0 && ::pipe2(up, O_CLOEXEC) == 0, "pipe2 failed");
  const std::string marker = std::string(kPeerEnv) + "=1";
  std::vector<std::string> args = {"megascale-conformance-peer",
                                   "--mode",
                                   mode,
                                   "--abi",
                                   std::to_string(env.net.version()),
                                   "--dev",
                                   std::to_string(env.dev),
                                   "--in-fd",
                                   std::to_string(down[0]),
                                   "--out-fd",
                                   std::to_string(up[1]),
                                   "--time-scale",
                                   std::to_string(time_scale()),
                                   "--plugin",
                                   env.options.plugin_path};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, kPeerEnv, std::strlen(kPeerEnv)) != 0) envp.push_back(*e);
  }
  envp.push_back(const_cast<char*>(marker.c_str()));
  envp.push_back(nullptr);
  const pid_t pid = ::fork();
  MS_REQUIRE(pid >= 0, "fork failed");
  if (pid == 0) {
    // Only async-signal-safe calls between fork and exec. The peer dies with its parent, the case's
    // process, whichever way that ends.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::fcntl(down[0], F_SETFD, 0);
    ::fcntl(up[1], F_SETFD, 0);
    ::execve("/proc/self/exe", argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(down[0]);
  ::close(up[1]);
  child.pid = pid;
  child.to_child = down[1];
  child.from_child = up[0];
  return {};
}

// How the peer is taken away mid-transfer.
enum class Silence { kKill, kStop };

// The buffers of transfer_until_error(). The caller keeps them until the comm is closed, as NCCL does:
// requests may still be posted when a transfer fails (on the other stripes of a striped comm), and the
// plugin may read or write them until closeSend/closeRecv returns.
std::vector<uint8_t> peer_buffers() {
  return std::vector<uint8_t>(kPeerInflight * kPeerMsg, 0x3C);
}

// Keeps `inflight` requests posted on `comm` (sends or receives) from `buf`, kills or stops the child
// once it has completed some messages, and requires an error from the plugin within the bound.
Status transfer_until_error(Env& env, Child& child, void* comm, std::vector<uint8_t>& buf, bool sending,
                            Silence how) {
  const char* signal_text = how == Silence::kKill ? "SIGKILL" : "SIGSTOP";
  const char* gone = how == Silence::kKill ? "killed" : "stopped";
  void* mr = nullptr;
  MS_CALL(env.net.reg_mr(comm, buf.data(), buf.size(), env.options.mem_type, &mr));
  void* reqs[kPeerInflight] = {};
  int peer_done = 0, our_done = 0;
  bool killed = false;
  Clock::time_point killed_at{};
  const double budget = env.options.retry_budget_s;
  // Keepalive/RTO detection plus scheduling slack (longer in a slow build).
  const double bound = 2 * budget + 3.0 * time_scale();
  const Deadline setup(60);
  note_stage(std::string("transfer with the peer process until it is ") + gone);
  NetResult failure = abi::kNetSuccess;
  std::string where;
  while (failure == abi::kNetSuccess) {
    if (!killed) {
      MS_REQUIRE(drain_progress(child.from_child, &peer_done) >= 0,
                 std::string("the peer process reported an error before it was ") + gone);
      if (peer_done >= 4 && our_done >= 4) {
        if (how == Silence::kKill) {
          child.kill_now();
        } else {
          ::kill(child.pid, SIGSTOP);  // reaped, once killed, by ~Child
        }
        killed = true;
        killed_at = Clock::now();
        note_stage(std::string("the peer process was ") + gone + " (" + signal_text +
                   "): waiting for an error from " + (sending ? "isend/test" : "irecv/test"));
      } else {
        MS_REQUIRE(!setup.passed(), "no traffic with the peer process within " +
                                        std::to_string(setup.seconds()) + " s (peer " +
                                        std::to_string(peer_done) + " messages, us " +
                                        std::to_string(our_done) + ")");
      }
    } else if (seconds_since(killed_at) > bound + 10) {
      (void)env.net.dereg_mr(comm, mr);
      return make_error("HANG: no error " + std::to_string(seconds_since(killed_at)) +
                        " s after the peer was " + gone + " (retry budget " + std::to_string(budget) + " s)");
    }
    for (int i = 0; i < kPeerInflight && failure == abi::kNetSuccess; ++i) {
      void* data = buf.data() + kPeerMsg * static_cast<size_t>(i);
      if (reqs[i] == nullptr) {
        if (sending) {
          failure = env.net.isend(comm, data, kPeerMsg, 9, mr, &reqs[i]);
        } else {
          size_t size = kPeerMsg;
          int tag = 9;
          failure = env.net.irecv(comm, 1, &data, &size, &tag, &mr, &reqs[i]);
        }
        where = sending ? "isend" : "irecv";
        continue;
      }
      int done = 0, sizes[8];
      failure = env.net.test(reqs[i], &done, sizes);
      where = "test";
      if (failure == abi::kNetSuccess && done) {
        reqs[i] = nullptr;
        ++our_done;
      }
    }
  }
  const double after = killed ? seconds_since(killed_at) : -1;
  (void)env.net.dereg_mr(comm, mr);
  MS_REQUIRE(killed,
             std::string(where) + " returned " + result_name(failure) + " before the peer was " + gone);
  MS_REQUIRE(failure == abi::kNetSystemError || failure == abi::kNetRemoteError,
             where + " returned " + result_name(failure) +
                 " (a network failure should be ncclSystemError or ncclRemoteError)");
  MS_REQUIRE(after <= bound, where + " reported the failure only " + std::to_string(after) + " s after " +
                                 signal_text + " (bound " + std::to_string(bound) +
                                 " s for a retry budget of " + std::to_string(budget) + " s)");
  char text[160];
  std::snprintf(text, sizeof text, "%s returned %s %.2f s after %s (retry budget %.1f s)", where.c_str(),
                result_name(failure), after, signal_text, budget);
  env.detail = text;
  measure(env, "error_after_s", after);
  measure(env, "retry_budget_s", budget);
  return {};
}

Status peer_gone_while_sending(Env& env, Silence how) {
  Context ctx(env.net);
  MS_TRY(ctx.init());
  Child child;
  MS_TRY(spawn(env, "recv", child));
  uint8_t handle[abi::kNetHandleMaxBytes];
  MS_REQUIRE(read_all(child.from_child, handle, sizeof handle, 30), "the peer process sent no handle");
  void* send_comm = nullptr;
  const Deadline deadline(30);
  while (send_comm == nullptr) {
    MS_CALL(env.net.connect(ctx.get(), env.dev, handle, &send_comm));
    MS_REQUIRE(!deadline.passed(), "connect to the peer process did not complete");
  }
  std::vector<uint8_t> buf = peer_buffers();  // freed only after closeSend, as NCCL frees its own
  Status s = transfer_until_error(env, child, send_comm, buf, /*sending=*/true, how);
  const auto t0 = Clock::now();
  MS_CALL(env.net.close_send(send_comm));
  MS_REQUIRE(seconds_since(t0) < 5 * time_scale(),
             "closeSend after the failure took " + std::to_string(seconds_since(t0)) + " s");
  MS_TRY(s);
  return ctx.finalize();
}

Status peer_gone_while_receiving(Env& env, Silence how) {
  Context ctx(env.net);
  MS_TRY(ctx.init());
  uint8_t handle[abi::kNetHandleMaxBytes] = {};
  void* listen_comm = nullptr;
  MS_CALL(env.net.listen(ctx.get(), env.dev, handle, &listen_comm));
  Child child;
  MS_TRY(spawn(env, "send", child));
  MS_REQUIRE(write_all(child.to_child, handle, sizeof handle),
             "could not send the handle to the peer process");
  void* recv_comm = nullptr;
  const Deadline deadline(30);
  while (recv_comm == nullptr) {
    MS_CALL(env.net.accept(listen_comm, &recv_comm));
    MS_REQUIRE(!deadline.passed(), "accept from the peer process did not complete");
  }
  std::vector<uint8_t> buf = peer_buffers();  // freed only after closeRecv, as NCCL frees its own
  Status s = transfer_until_error(env, child, recv_comm, buf, /*sending=*/false, how);
  const auto t0 = Clock::now();
  MS_CALL(env.net.close_recv(recv_comm));
  MS_CALL(env.net.close_listen(listen_comm));
  MS_REQUIRE(seconds_since(t0) < 5 * time_scale(),
             "closeRecv after the failure took " + std::to_string(seconds_since(t0)) + " s");
  MS_TRY(s);
  return ctx.finalize();
}

}  // namespace

Status case_peer_killed_while_sending(Env& env) {
  return peer_gone_while_sending(env, Silence::kKill);
}

Status case_peer_killed_while_receiving(Env& env) {
  return peer_gone_while_receiving(env, Silence::kKill);
}

Status case_peer_stopped_while_sending(Env& env) {
  return peer_gone_while_sending(env, Silence::kStop);
}

Status case_peer_stopped_while_receiving(Env& env) {
  return peer_gone_while_receiving(env, Silence::kStop);
}

}  // namespace megascale::nccl::conformance
