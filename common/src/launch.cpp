// Launcher variables, device plans and the one-host fork launcher (launch.h).
#include "megascale/common/launch.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

namespace megascale {

namespace {

// The launchers' variable names, in the order they are looked for.
struct LauncherVars {
  const char* source;
  const char* rank;
  const char* world_size;
  const char* local_rank;
  const char* local_world_size;  // nullptr: Slurm's, worked out apart
};
constexpr LauncherVars kLaunchers[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr},
};

Result<int> whole_number(const char* name, const char* text) {
  int v = 0;
  const char* end = text + std::strlen(text);
  auto [p, ec] = std::from_chars(text, end, v);
  if (ec != std::errc{} || p != end || p == text) {
    return make_error(ErrorCode::kInvalidArgument, fmt::format("{}={}: not a whole number", name, text));
  }
  return v;
}

// Optional variable: nullopt when unset.
Result<std::optional<int>> optional_number(const EnvLookup& env, const char* name) {
  const char* v = env(name);
  if (v == nullptr) return std::optional<int>{};
  auto n = whole_number(name, v);
  if (!n) return n.error();
  return std::optional<int>{*n};
}

// Slurm's tasks on this node: SLURM_NTASKS_PER_NODE, else the first count of SLURM_TASKS_PER_NODE
// ("4(x2),3": 4 tasks on each of the first two nodes, 3 on the third).
Result<std::optional<int>> slurm_local_size(const EnvLookup& env) {
  auto n = optional_number(env, "SLURM_NTASKS_PER_NODE");
  if (!n || n->has_value()) return n;
  const char* per_node = env("SLURM_TASKS_PER_NODE");
  if (per_node == nullptr) return std::optional<int>{};
  const std::string first(per_node, std::strcspn(per_node, "(,"));
  auto v = whole_number("SLURM_TASKS_PER_NODE", first.c_str());
  if (!v) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("SLURM_TASKS_PER_NODE={}: expected a count like 4 or 4(x2)", per_node));
  }
  return std::optional<int>{*v};
}

}  // namespace

Result<LaunchEnv> launch_env(const EnvLookup& env) {
  LaunchEnv out;
  out.source = "single process";
  for (const LauncherVars& l : kLaunchers) {
    if (env(l.rank) == nullptr && env(l.world_size) == nullptr) continue;
    if (env(l.rank) == nullptr || env(l.world_size) == nullptr) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("{} is set but {} is not: a {} launch sets both",
                                    env(l.rank) != nullptr ? l.rank : l.world_size,
                                    env(l.rank) != nullptr ? l.world_size : l.rank, l.source));
    }
    out.source = l.source;
    auto rank = whole_number(l.rank, env(l.rank));
    if (!rank) return rank.error();
    auto world = whole_number(l.world_size, env(l.world_size));
    if (!world) return world.error();
    auto local = optional_number(env, l.local_rank);
    if (!local) return local.error();
    auto local_size = l.local_world_size != nullptr ? optional_number(env, l.local_world_size) : slurm_local_size(env);
    if (!local_size) return local_size.error();
    out.rank = *rank;
    out.world_size = *world;
    // Without the local variables, every rank is taken to be on its own host.
    out.local_rank = local->value_or(0);
    out.local_world_size = local_size->value_or(1);
    if (out.world_size < 1) {
      return make_error(ErrorCode::kInvalidArgument, fmt::format("{}={}: must be >= 1", l.world_size, out.world_size));
    }
    if (out.rank < 0 || out.rank >= out.world_size) {
      return make_error(ErrorCode::kInvalidArgument, fmt::format("{}={}: must be in [0, {}={})", l.rank, out.rank,
                                                                 l.world_size, out.world_size));
    }
    const char* local_size_name = l.local_world_size != nullptr ? l.local_world_size : "SLURM_NTASKS_PER_NODE";
    if (out.local_world_size < 1 || out.local_world_size > out.world_size) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("{}={}: must be in [1, {}={}]", local_size_name, out.local_world_size,
                                    l.world_size, out.world_size));
    }
    if (out.local_rank < 0 || out.local_rank >= out.local_world_size) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("{}={}: must be in [0, {}={})", l.local_rank, out.local_rank, local_size_name,
                                    out.local_world_size));
    }
    break;
  }
  if (const char* addr = env("MASTER_ADDR"); addr != nullptr) out.master_addr = addr;
  auto port = optional_number(env, "MASTER_PORT");
  if (!port) return port.error();
  if (port->has_value()) {
    if (**port < 1 || **port > 65535) {
      return make_error(ErrorCode::kInvalidArgument, fmt::format("MASTER_PORT={}: must be in [1, 65535]", **port));
    }
    out.master_port = **port;
  }
  if (out.world_size > 1 && env("NCCL_COMM_ID") == nullptr && (out.master_addr.empty() || out.master_port == 0)) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("{} ranks ({}) but no bootstrap address: set MASTER_ADDR and MASTER_PORT (the "
                                  "host and a free port of rank 0), or NCCL_COMM_ID",
                                  out.world_size, out.source));
  }
  return out;
}

std::string nccl_comm_id(const LaunchEnv& launch, const EnvLookup& env) {
  if (const char* id = env("NCCL_COMM_ID"); id != nullptr) return id;
  if (launch.master_addr.empty() || launch.master_port == 0) return "";
  const bool v6 = launch.master_addr.find(':') != std::string::npos;
  return v6 ? fmt::format("[{}]:{}", launch.master_addr, launch.master_port)
            : fmt::format("{}:{}", launch.master_addr, launch.master_port);
}

Result<DevicePlan> plan_device(const LaunchEnv& launch, int gpu_count, const std::string& hostname) {
  if (gpu_count < 1) {
    return make_error(ErrorCode::kDevice, fmt::format("rank {}: no CUDA device visible", launch.rank));
  }
  DevicePlan plan;
  plan.device = launch.local_rank % gpu_count;
  if (launch.local_world_size > gpu_count) plan.nccl_hostid = fmt::format("{}-rank{}", hostname, launch.rank);
  return plan;
}

std::string describe(const RankExit& e) {
  if (e.signal != 0) {
    return fmt::format("rank {} was killed by signal {} ({}){}{}", e.rank, e.signal, strsignal(e.signal),
                       e.stopped_by_us ? " after another rank failed" : "",
                       e.was_stopped ? "; it was stopped (SIGSTOP or a debugger) when another rank failed, "
                                       "so the others were likely waiting for it"
                                     : "");
  }
  return fmt::format("rank {} exited with status {}", e.rank, e.exit_code);
}

namespace {

// A TCP port free on `addr` at the time of asking (the kernel's pick for port 0).
Result<int> free_port(const std::string& addr) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  if (inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1) {
    return make_error(ErrorCode::kInvalidArgument, fmt::format("master address '{}': not an IPv4 address", addr));
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return make_error(ErrorCode::kSystem, fmt::format("socket: {}", std::strerror(errno)));
  socklen_t len = sizeof(sa);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) return make_error(ErrorCode::kSystem, fmt::format("a free port on {}: {}", addr, std::strerror(err)));
  return static_cast<int>(ntohs(sa.sin_port));
}

// A rank's wait status into its exit record.
void record_status(RankExit& e, int status) {
  e.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
  e.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}

// Sends SIGTERM to the ranks still running, then SIGKILL to those left after `grace`, reaping each.
// Whether the process is stopped now (state T or t in /proc/PID/stat).
bool is_stopped(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t comm_end = line.rfind(')');  // the name may hold spaces and parentheses
  return comm_end != std::string::npos && comm_end + 2 < line.size() &&
         (line[comm_end + 2] == 'T' || line[comm_end + 2] == 't');
}

void stop_ranks(std::vector<pid_t>& pids, std::vector<RankExit>& exits, std::chrono::milliseconds grace) {
  for (size_t r = 0; r < pids.size(); ++r) {
    if (pids[r] <= 0) continue;
    exits[r].was_stopped = is_stopped(pids[r]);
    ::kill(pids[r], SIGTERM);
    ::kill(pids[r], SIGCONT);  // a stopped rank (SIGSTOP, a debugger) acts on its SIGTERM only once resumed
  }
  const auto deadline = std::chrono::steady_clock::now() + grace;
  bool left = true;
  while (left) {
    left = false;
    const bool late = std::chrono::steady_clock::now() >= deadline;
    for (size_t r = 0; r < pids.size(); ++r) {
      if (pids[r] <= 0) continue;
      int status = 0;
      const pid_t got = ::waitpid(pids[r], &status, WNOHANG);
      if (got == pids[r]) {
        record_status(exits[r], status);
        exits[r].stopped_by_us = true;
        pids[r] = 0;
        continue;
      }
      left = true;
      if (late) ::kill(pids[r], SIGKILL);
    }
    if (left) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// The signal that asked the launcher to stop (SIGTERM, SIGINT, SIGHUP), 0 while none has.
volatile sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

// While alive, turns SIGTERM, SIGINT and SIGHUP into g_stop_signal, which the launcher's wait loop
// checks: it stops its ranks instead of dying and leaving them running.
class StopSignals {
 public:
  StopSignals() {
    g_stop_signal = 0;
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &sa, &old_[i]);
  }
  ~StopSignals() {
    for (size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  static constexpr std::array<int, 3> kSignals = {SIGTERM, SIGINT, SIGHUP};
  std::array<struct sigaction, 3> old_{};
};

}  // namespace

Result<std::vector<RankExit>> run_local_ranks(const LocalLaunch& launch) {
  if (launch.nproc < 1) {
    return make_error(ErrorCode::kInvalidArgument, fmt::format("--nproc {}: must be >= 1", launch.nproc));
  }
  if (launch.argv.empty()) return make_error(ErrorCode::kInvalidArgument, "no program to run in each rank");
  int port = launch.master_port;
  if (port == 0) {
    auto p = free_port(launch.master_addr);
    if (!p) return p.error();
    port = *p;
  }
  std::vector<char*> argv;
  for (const std::string& a : launch.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<pid_t> pids(launch.nproc, 0);
  std::vector<RankExit> exits(launch.nproc);
  const StopSignals stop_signals;
  const pid_t launcher = ::getpid();
  for (int r = 0; r < launch.nproc; ++r) {
    exits[r].rank = r;
    // The variables are formatted before fork: the child only calls setenv and exec.
    const std::vector<std::pair<std::string, std::string>> vars = {
        {"RANK", std::to_string(r)},
        {"WORLD_SIZE", std::to_string(launch.nproc)},
        {"LOCAL_RANK", std::to_string(r)},
        {"LOCAL_WORLD_SIZE", std::to_string(launch.nproc)},
        {"MASTER_ADDR", launch.master_addr},
        {"MASTER_PORT", std::to_string(port)},
    };
    const pid_t pid = ::fork();
    if (pid < 0) {
      const int err = errno;
      stop_ranks(pids, exits, launch.grace);
      return make_error(ErrorCode::kSystem, fmt::format("fork for rank {}: {}", r, std::strerror(err)));
    }
    if (pid == 0) {
      // A rank dies with its launcher, however the launcher ends (SIGKILL included).
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != launcher) ::_exit(128 + SIGTERM);  // it ended before prctl
      for (int sig : {SIGTERM, SIGINT, SIGHUP}) ::signal(sig, SIG_DFL);
      for (const auto& [k, v] : vars) ::setenv(k.c_str(), v.c_str(), 1);
      ::execv(argv[0], argv.data());
      // Only async-signal-safe calls after a failed exec.
      static constexpr char kMsg[] = "megascale-train: exec of the rank's program failed\n";
      [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, kMsg, sizeof(kMsg) - 1);
      ::_exit(127);
    }
    pids[r] = pid;
  }
  int running = launch.nproc;
  while (running > 0) {
    int status = 0;
    // Polled, so that a stop signal arriving just before a blocking wait() cannot be missed.
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (g_stop_signal != 0) {  // the launcher was asked to stop: so are its ranks
      if (pid > 0) {
        for (int r = 0; r < launch.nproc; ++r) {
          if (pids[r] == pid) {
            record_status(exits[r], status);
            pids[r] = 0;
          }
        }
      }
      stop_ranks(pids, exits, launch.grace);
      return make_error(ErrorCode::kSystem,
                        fmt::format("stopped by signal {} ({}); its ranks were stopped too", int{g_stop_signal},
                                    strsignal(g_stop_signal)));
    }
    if (pid == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;  // no children left
    }
    int r = 0;
    while (r < launch.nproc && pids[r] != pid) ++r;
    if (r == launch.nproc) continue;  // not one of ours
    pids[r] = 0;
    --running;
    record_status(exits[r], status);
    if (exits[r].exit_code != 0 || exits[r].signal != 0) {
      stop_ranks(pids, exits, launch.grace);
      break;
    }
  }
  return exits;
}

int run_self_ranks(int nproc, std::vector<std::string> argv, const std::string& who) {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) {
    fmt::print(stderr, "--nproc: cannot find this program (/proc/self/exe): {}\n", ec.message());
    return 2;
  }
  if (argv.empty()) argv.emplace_back();
  argv[0] = self.string();
  LocalLaunch l;
  l.nproc = nproc;
  l.argv = std::move(argv);
  auto exits = run_local_ranks(l);
  if (!exits) {
    fmt::print(stderr, "--nproc: {}\n", exits.error().message);
    return 2;
  }
  int failed = 0;
  for (const RankExit& e : *exits) {
    if (e.exit_code == 0 && e.signal == 0) continue;
    fmt::print(stderr, "{}: {}\n", who, describe(e));
    ++failed;
  }
  return failed == 0 ? 0 : 1;
}

void exit_after(std::chrono::milliseconds after, int code, std::string why) {
  std::thread([after, code, why = std::move(why)] {
    std::this_thread::sleep_for(after);
    std::fputs(why.c_str(), stderr);
    std::fputc('\n', stderr);
    std::fflush(stderr);
    std::_Exit(code);
  }).detach();
}

}  // namespace megascale
