// A case in a child process of its own (see isolate.h).
#include "isolate.h"

#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <new>

namespace megascale::nccl::conformance {
namespace {

CallBoard* g_board = nullptr;  // set in a case's child only
thread_local int t_slot = -1;

// Fatal signals the child records before they take their course.
constexpr int kFatalSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
struct sigaction g_previous[std::size(kFatalSignals)];

void on_fatal_signal(int sig, siginfo_t* info, void* /*context*/) {
  if (g_board != nullptr) {
    int none = 0;
    if (g_board->crash_signal.compare_exchange_strong(none, sig)) {
      const bool in_call = t_slot >= 0 && g_board->slot[t_slot].load() != 0;
      g_board->crash_in_call.store(in_call ? 1 : 0);
      g_board->crash_call.store(in_call ? g_board->slot[t_slot].load() : 0);
    }
  }
  // Back to what was there before (the default, or a sanitizer's handler). A fault raised by an
  // instruction happens again on return and reaches it; a signal that was sent (abort, kill) is sent
  // again, and is delivered once this handler returns.
  for (size_t i = 0; i < std::size(kFatalSignals); ++i) {
    if (kFatalSignals[i] == sig) ::sigaction(sig, &g_previous[i], nullptr);
  }
  if (info == nullptr || info->si_code <= 0) ::raise(sig);
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV";
    case SIGBUS:
      return "SIGBUS";
    case SIGILL:
      return "SIGILL";
    case SIGFPE:
      return "SIGFPE";
    case SIGABRT:
      return "SIGABRT";
    case SIGKILL:
      return "SIGKILL";
    case SIGTERM:
      return "SIGTERM";
    default:
      return nullptr;
  }
}

std::string describe_signal(int sig) {
  const char* name = signal_name(sig);
  return name != nullptr ? name : "signal " + std::to_string(sig);
}

std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", s);
  return text;
}

// ---- The pipe from the child: records of [type][4-byte length][payload]. ----

std::mutex g_pipe_mu;
int g_pipe_fd = -1;

void send_record(char type, const std::string& payload) {
  std::lock_guard<std::mutex> lock(g_pipe_mu);
  if (g_pipe_fd < 0) return;
  std::string rec(1, type);
  const uint32_t n = static_cast<uint32_t>(payload.size());
  rec.append(reinterpret_cast<const char*>(&n), sizeof n);
  rec += payload;
  const char* p = rec.data();
  size_t left = rec.size();
  while (left > 0) {
    const ssize_t w = ::write(g_pipe_fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    left -= static_cast<size_t>(w);
  }
}

// Whether the loopback interface "lo" is up with an address (a fresh network namespace has it down).
bool loopback_up() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return false;
  bool up = false;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    up = up || (a->ifa_addr != nullptr && std::strcmp(a->ifa_name, "lo") == 0 && (a->ifa_flags & IFF_UP) &&
                (a->ifa_addr->sa_family == AF_INET || a->ifa_addr->sa_family == AF_INET6));
  }
  ::freeifaddrs(list);
  return up;
}

// Loads and probes the plugin as NCCL does before it uses a net: init, devices, the device's
// properties. Fills env; an error is the load error.
Status probe(Env& env, const Options& options) {
  Context ctx(env.net);
  if (Status s = ctx.init(); !s) {
    std::string text = "init failed: " + s.error().message;
    for (const std::string& l : LogCapture::get().tail(3)) text += "\n  " + l;
    return make_error(text);
  }
  int n = 0;
  if (env.net.devices(&n) != abi::kNetSuccess || n < 1)
    return make_error("devices() failed or reported no device");
  send_record('D', std::to_string(n));
  env.dev = options.dev >= 0 ? options.dev : 0;
  if (options.dev < 0) {
    for (int d = 0; d < n; ++d) {
      DeviceProps p;
      if (env.net.properties(d, &p) == abi::kNetSuccess && p.name == "lo") env.dev = d;
    }
  }
  if (env.dev >= n || env.net.properties(env.dev, &env.props) != abi::kNetSuccess) {
    return make_error("device " + std::to_string(env.dev) + " is not usable (" + std::to_string(n) +
                      " devices)");
  }
  send_record('i', std::to_string(env.dev));
  send_record('d', env.props.name);
  return ctx.finalize();
}

[[noreturn]] void child_main(const Options& options, const CaseInfo* info) {
  // The plugin reads its knobs once, at its first init: the short budget is set before it loads, in the
  // cases that wait for a dead peer's error (CaseInfo::takes_peer_away).
  if (info != nullptr && info->takes_peer_away)
    ::setenv("MEGASCALE_RETRY_BUDGET_S", std::to_string(options.retry_budget_s).c_str(), /*overwrite=*/0);
  // MegaScale lists lo only when nothing else is up; the default device is lo (conformance.h).
  if (options.dev < 0 && loopback_up()) ::setenv("MEGASCALE_IFNAME", "=lo", /*overwrite=*/0);
  set_time_scale(options.time_scale);
  LogCapture::get().set_verbose(options.verbose);
  LogCapture::get().set_sink(
      [](int level, const std::string& line) { send_record(level == abi::kLogWarn ? 'W' : 'L', line); });
  auto loaded = Net::load(options.plugin_path, options.abi_version);
  if (!loaded) {
    send_record('E', loaded.error().message);
    std::_Exit(0);
  }
  Net& net = **loaded;
  send_record('N', net.name());
  send_record('A', std::to_string(net.version()));
  Env env{std::shared_ptr<Net>(std::move(*loaded)), net, options, 0, {}, {}, {}};
  if (Status s = probe(env, options); !s) {
    send_record('E', s.error().message);
    std::_Exit(0);
  }
  send_record('K', "");
  if (info == nullptr) std::_Exit(0);
  send_record('M', "");  // the case starts: WARN lines from here on are the case's
  const auto t0 = Clock::now();
  Status s = info->fn(env);
  send_record('T', std::to_string(seconds_since(t0)));
  for (const Measurement& m : env.measurements) {
    char value[32];
    std::snprintf(value, sizeof value, "%.17g", m.value);
    send_record('V', m.name + "\t" + value);
  }
  if (s) {
    send_record('R', "P" + env.detail);
  } else if (s.error().message.rfind("SKIP: ", 0) == 0) {
    send_record('R', "S" + s.error().message.substr(6));
  } else {
    send_record('R', "F" + s.error().message);
  }
  std::fflush(nullptr);
  // A case that passed left the plugin finalized: exit as a program does, so that the plugin's static
  // destructors (and a sanitizer's leak check) run; whatever follows is reported too. One that failed
  // may have left the plugin in any state: leave at once.
  if (s) std::exit(0);
  std::_Exit(0);
}

void parse_records(std::string& buf, ChildOutcome& out, bool& after_mark) {
  size_t at = 0;
  while (buf.size() - at >= 5) {
    uint32_t n = 0;
    std::memcpy(&n, buf.data() + at + 1, sizeof n);
    if (buf.size() - at - 5 < n) break;
    const char type = buf[at];
    std::string payload = buf.substr(at + 5, n);
    at += 5 + n;
    switch (type) {
      case 'W':
        if (after_mark) out.warnings.push_back(payload);
        out.log.push_back(std::move(payload));
        break;
      case 'L':
        out.log.push_back(std::move(payload));
        break;
      case 'N':
        out.plugin_name = payload;
        break;
      case 'A':
        out.abi_version = std::atoi(payload.c_str());
        break;
      case 'D':
        out.devices = std::atoi(payload.c_str());
        break;
      case 'i':
        out.device_index = std::atoi(payload.c_str());
        break;
      case 'd':
        out.device_name = payload;
        break;
      case 'S':
        out.stage = std::move(payload);
        break;
      case 'V': {
        const size_t tab = payload.find('\t');
        if (tab != std::string::npos)
          out.measurements.push_back({payload.substr(0, tab), std::atof(payload.c_str() + tab + 1)});
        break;
      }
      case 'E':
        out.load_error = payload;
        break;
      case 'K':
        out.probed = true;
        break;
      case 'M':
        after_mark = true;
        break;
      case 'T':
        out.seconds = std::atof(payload.c_str());
        break;
      case 'R':
        out.verdict = payload.empty() ? 'F' : payload[0];
        out.detail = payload.empty() ? "" : payload.substr(1);
        break;
      default:
        break;
    }
  }
  buf.erase(0, at);
}

// "init", "isend (2 threads) and test": the calls the board shows in progress.
std::string calls_in_progress(const CallBoard& board) {
  std::map<uint32_t, int> count;
  const int used = std::min(board.threads.load(), CallBoard::kSlots);
  for (int i = 0; i < used; ++i) {
    const uint32_t c = board.slot[i].load();
    if (c != 0) ++count[c];
  }
  std::string text;
  size_t k = 0;
  for (const auto& [c, n] : count) {
    if (k > 0) text += k + 1 == count.size() ? " and " : ", ";
    ++k;
    text += call_name(static_cast<Call>(c));
    if (n > 1) text += " (" + std::to_string(n) + " threads)";
  }
  return text;
}

}  // namespace

void note_stage(const std::string& stage) {
  send_record('S', stage);
}

const char* call_name(Call c) {
  static const char* const names[] = {"(none)",        "dlopen",    "init",        "finalize",     "devices",
                                      "getProperties", "listen",    "connect",     "accept",       "regMr",
                                      "deregMr",       "isend",     "irecv",       "iflush",       "test",
                                      "closeSend",     "closeRecv", "closeListen", "irecvConsumed"};
  static_assert(std::size(names) == static_cast<size_t>(Call::kCount));
  const auto i = static_cast<size_t>(c);
  return i < std::size(names) ? names[i] : "(unknown call)";
}

InCall::InCall(Call call) : slot_(nullptr) {
  if (g_board == nullptr) return;
  if (t_slot < 0) t_slot = std::min(g_board->threads.fetch_add(1), CallBoard::kSlots - 1);
  slot_ = &g_board->slot[t_slot];
  previous_ = slot_->exchange(static_cast<uint32_t>(call));
}

InCall::~InCall() {
  if (slot_ != nullptr) slot_->store(previous_);
}

ChildOutcome run_in_child(const Options& options, const CaseInfo* info,
                          const std::function<void(const Progress&)>& progress) {
  ChildOutcome out;
  void* page = ::mmap(nullptr, sizeof(CallBoard), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) {
    out.failure = std::string("mmap of the call board failed: ") + std::strerror(errno);
    return out;
  }
  auto* board = new (page) CallBoard{};
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    ::munmap(page, sizeof(CallBoard));
    out.failure = std::string("pipe2 failed: ") + std::strerror(errno);
    return out;
  }
  std::fflush(nullptr);  // or the child would write the parent's buffered output again
  const pid_t parent = ::getpid();
  const auto t0 = Clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    // A process group of its own, so that the harness can kill it with any peer it started; and it
    // dies with the harness (a harness stopped by Ctrl-C leaves no spinning plugin behind).
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) std::_Exit(1);
    g_board = board;
    g_pipe_fd = fds[1];
    for (size_t i = 0; i < std::size(kFatalSignals); ++i) {
      struct sigaction sa {};
      sa.sa_sigaction = on_fatal_signal;
      sa.sa_flags = SA_SIGINFO;
      sigemptyset(&sa.sa_mask);
      ::sigaction(kFatalSignals[i], &sa, &g_previous[i]);
    }
    child_main(options, info);
  }
  ::close(fds[1]);
  if (pid < 0) {
    ::close(fds[0]);
    ::munmap(page, sizeof(CallBoard));
    out.failure = std::string("fork failed: ") + std::strerror(errno);
    return out;
  }
  ::setpgid(pid, pid);  // as the child does, whichever runs first

  std::string buf;
  bool after_mark = false, eof = false, exited = false, timed_out = false;
  siginfo_t how{};
  const Deadline deadline(options.case_timeout_s, /*scaled=*/false);
  auto report_progress = [&] {
    if (progress)
      progress({info != nullptr ? info->name : "", seconds_since(t0), out.stage, calls_in_progress(*board)});
  };
  report_progress();
  auto reported_at = Clock::now();
  while (!exited) {
    if (seconds_since(reported_at) >= options.progress_interval_s) {
      report_progress();
      reported_at = Clock::now();
    }
    if (!eof) {
      pollfd pfd{fds[0], POLLIN, 0};
      if (::poll(&pfd, 1, 50) > 0) {
        char chunk[8192];
        const ssize_t r = ::read(fds[0], chunk, sizeof chunk);
        if (r > 0) {
          buf.append(chunk, static_cast<size_t>(r));
          parse_records(buf, out, after_mark);
        } else if (r == 0 || errno != EINTR) {
          eof = true;
        }
      }
    } else {
      ::usleep(20 * 1000);
    }
    // The child stays a zombie (WNOWAIT) until its group is killed: its pid, the group's id, cannot be
    // reused meanwhile.
    how = {};
    if (::waitid(P_PID, static_cast<id_t>(pid), &how, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        how.si_pid == pid) {
      exited = true;
    } else if (deadline.passed()) {
      timed_out = true;
      break;
    }
  }
  const std::string in_progress = calls_in_progress(*board);
  ::kill(-pid, SIGKILL);  // the child if it overran, and any peer it left
  int status = 0;
  ::waitpid(pid, &status, 0);
  // What the child wrote before it ended.
  for (;;) {
    pollfd pfd{fds[0], POLLIN, 0};
    if (::poll(&pfd, 1, 0) <= 0) break;
    char chunk[8192];
    const ssize_t r = ::read(fds[0], chunk, sizeof chunk);
    if (r <= 0) break;
    buf.append(chunk, static_cast<size_t>(r));
    parse_records(buf, out, after_mark);
  }
  ::close(fds[0]);
  if (out.seconds == 0) out.seconds = seconds_since(t0);

  const int crash = board->crash_signal.load();
  const std::string crash_call =
      board->crash_in_call.load() ? call_name(static_cast<Call>(board->crash_call.load())) : "";
  const bool reported = out.verdict != 0 || !out.load_error.empty() || (info == nullptr && out.probed);
  const std::string timeout = seconds_text(options.case_timeout_s);
  if (timed_out && out.verdict != 0) {
    out.failure = "the case ended, then the process did not exit within " + timeout +
                  " s (the plugin's static destructors or exit handlers)";
  } else if (timed_out) {
    out.failure = in_progress.empty()
                      ? (info != nullptr ? "the case" : "the probe") +
                            std::string(" did not finish within ") + timeout +
                            " s (no plugin call was in progress: it kept waiting on the plugin)"
                      : in_progress + " did not return within " + timeout + " s";
  } else if (crash != 0 || WIFSIGNALED(status)) {
    const int sig = crash != 0 ? crash : WTERMSIG(status);
    out.failure =
        "killed by " + describe_signal(sig) +
        (!crash_call.empty() ? " in " + crash_call
         : crash != 0        ? " outside any plugin call (on a thread of the plugin's own, or in the harness)"
         : !in_progress.empty() ? " during " + in_progress
                                : "");
  } else if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
    out.failure = "exited with status " + std::to_string(WEXITSTATUS(status)) +
                  (!in_progress.empty() ? " during " + in_progress
                   : reported           ? " after the case (a sanitizer's report above?)"
                                        : "");
  } else if (!reported) {
    out.failure =
        "exited before it reported a result" + (!in_progress.empty() ? " (during " + in_progress + ")" : "");
  }
  board->~CallBoard();
  ::munmap(page, sizeof(CallBoard));
  return out;
}

}  // namespace megascale::nccl::conformance
