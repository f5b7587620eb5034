// A small routed topology of network namespaces for the netns tests, and the processes they run in it.
//
//   senders ns (10.77.1.2) --veth-- router ns (10.77.1.1 | 10.77.2.1) --veth-- receiver ns (10.77.2.2)
//                                                        ^ bottleneck: TBF on the router's egress
//                                                          toward the receiver (data direction only)
//
//   std::string why;
//   if (!netns_usable(why)) GTEST_SKIP() << why;
//   NetnsTopology topo;                      // names carry our pid: concurrent runs never collide
//   ASSERT_TRUE(topo.create(why)) << why;    // destructor removes every namespace (and so every veth)
//   ASSERT_TRUE(topo.shape_bottleneck("1gbit", "32kb", "40ms", why)) << why;
//   Child rx = Child::spawn(topo.receiver_ns(), {peer, "recv", ...});
//   topo.set_bottleneck_up(false);           // a link flap
//
// Everything here shells out to ip(8) and tc(8), as an operator would: it documents the setup as well.
// Namespace names start with "msn<pid>"; namespaces left by a test process that died are removed by
// the next test's create() (their pid is gone), so a crash never leaks them for good.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "megascale/wire/udp.h"

namespace megascale::netns_test {

// Runs a shell command; returns its exit status (-1 if it could not run) and its output (stdout and
// stderr) in `output`.
inline int run_command(const std::string& command, std::string* output = nullptr) {
  FILE* f = popen((command + " 2>&1").c_str(), "r");
  if (f == nullptr) return -1;
  std::string text;
  char buf[512];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  const int status = pclose(f);
  if (output != nullptr) *output = text;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Whether this process may create namespaces, veths and TBF qdiscs; if not, `why` is a one-line reason.
inline bool netns_usable(std::string& why) {
  if (geteuid() != 0) {
    why = "needs root to create network namespaces (run the suite as root to include it)";
    return false;
  }
  std::string out;
  if (run_command("ip netns list", &out) != 0) {
    why = "`ip netns` unavailable: " + out.substr(0, out.find('\n'));
    return false;
  }
  if (run_command("tc -V", &out) != 0) {
    why = "tc(8) unavailable (apt-get install iproute2)";
    return false;
  }
  return true;
}

// A process started inside a namespace with `ip netns exec`, its stdout captured through a pipe (stderr
// goes to the test's own, so ctest shows it on failure).
class Child {
 public:
  Child() = default;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  Child(Child&& o) noexcept : pid_(o.pid_), fd_(o.fd_), out_(std::move(o.out_)), status_(o.status_) {
    o.pid_ = -1;
    o.fd_ = -1;
  }
  ~Child() { kill_now(); }

  static Child spawn(const std::string& ns, const std::vector<std::string>& argv) {
    Child c;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return c;
    std::vector<std::string> full = {"ip", "netns", "exec", ns};
    full.insert(full.end(), argv.begin(), argv.end());
    const pid_t pid = fork();
    if (pid == 0) {
      dup2(fds[1], STDOUT_FILENO);
      std::vector<char*> args;
      for (std::string& s : full) args.push_back(s.data());
      args.push_back(nullptr);
      execvp("ip", args.data());
      _exit(127);
    }
    close(fds[1]);
    if (pid < 0) {
      close(fds[0]);
      return c;
    }
    c.pid_ = pid;
    c.fd_ = fds[0];
    fcntl(c.fd_, F_SETFL, O_NONBLOCK);
    return c;
  }

  bool started() const { return pid_ > 0 || status_ != kRunning; }

  // Reads output until a complete line contains `needle`; false if the process ends or `deadline`
  // (wire clock) passes first.
  bool wait_for_line(const std::string& needle, TimeNs deadline) {
    for (;;) {
      const size_t at = out_.find(needle);
      if (at != std::string::npos && out_.find('\n', at) != std::string::npos) return true;
      if (!read_some(deadline)) return false;
    }
  }

  // Waits for the process to end, reading its output, until `deadline`; kills it then. Returns its exit
  // status, or -1 if it had to be killed (or never ran).
  int wait(TimeNs deadline) {
    while (read_some(deadline)) {
    }
    if (pid_ > 0 && status_ == kRunning) {
      // Output closed; the exit follows at once (or the deadline passed: kill).
      while (wire::UdpWire::now() < deadline) {
        if (reap(false)) break;
        usleep(10'000);
      }
      if (status_ == kRunning) kill_now();
    }
    return status_ == kRunning ? -1 : status_;
  }

  // The last non-empty line of output (the peer's JSON result).
  std::string last_line() const {
    size_t end = out_.find_last_not_of("\r\n");
    if (end == std::string::npos) return {};
    const size_t nl = out_.rfind('\n', end);
    const size_t start = nl == std::string::npos ? 0 : nl + 1;
    return out_.substr(start, end - start + 1);
  }
  const std::string& output() const { return out_; }

  void kill_now() {
    if (pid_ > 0 && status_ == kRunning) {
      ::kill(pid_, SIGKILL);
      reap(true);
      status_ = -1;
    }
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  static constexpr int kRunning = -1000;

  // One poll + read; false once the pipe is closed or the deadline passed.
  bool read_some(TimeNs deadline) {
    if (fd_ < 0) return false;
    const TimeNs left = deadline - wire::UdpWire::now();
    if (left <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    const int rc = poll(&p, 1, static_cast<int>(std::min<TimeNs>(left / kNsPerMs + 1, 100)));
    if (rc < 0 && errno != EINTR) return false;
    char buf[4096];
    for (;;) {
      const ssize_t n = read(fd_, buf, sizeof buf);
      if (n > 0) {
        out_.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n == 0) {
        close(fd_);
        fd_ = -1;
        return false;
      }
      return true;  // EAGAIN: nothing more now
    }
  }

  bool reap(bool block) {
    int st = 0;
    const pid_t r = waitpid(pid_, &st, block ? 0 : WNOHANG);
    if (r != pid_) return false;
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    pid_ = -1;
    return true;
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  std::string out_;
  int status_ = kRunning;
};

class NetnsTopology {
 public:
  static constexpr const char* kSenderAddr = "10.77.1.2";
  static constexpr const char* kReceiverAddr = "10.77.2.2";

  NetnsTopology() : tag_("msn" + std::to_string(getpid())) {}
  ~NetnsTopology() { destroy(); }
  NetnsTopology(const NetnsTopology&) = delete;
  NetnsTopology& operator=(const NetnsTopology&) = delete;

  const std::string senders_ns() const { return tag_ + "s"; }
  const std::string router_ns() const { return tag_ + "r"; }
  const std::string receiver_ns() const { return tag_ + "d"; }
  // The router's interface toward the receiver: where the bottleneck queue sits.
  const std::string bottleneck_dev() const { return tag_ + "c"; }

  // Builds the namespaces, veths (MTU 9000: 8 KiB segments fit a frame), addresses and routes.
  bool create(std::string& why) {
    remove_stale();
    created_ = true;
    const std::string s = senders_ns(), r = router_ns(), d = receiver_ns();
    const std::vector<std::string> steps = {
        "ip netns add " + s,
        "ip netns add " + r,
        "ip netns add " + d,
        "ip link add " + tag_ + "a netns " + s + " type veth peer name " + tag_ + "b netns " + r,
        "ip link add " + tag_ + "c netns " + r + " type veth peer name " + tag_ + "e netns " + d,
        "ip -n " + s + " link set lo up",
        "ip -n " + r + " link set lo up",
        "ip -n " + d + " link set lo up",
        "ip -n " + s + " link set " + tag_ + "a mtu 9000 up",
        "ip -n " + r + " link set " + tag_ + "b mtu 9000 up",
        "ip -n " + r + " link set " + tag_ + "c mtu 9000 up",
        "ip -n " + d + " link set " + tag_ + "e mtu 9000 up",
        "ip -n " + s + " addr add " + std::string(kSenderAddr) + "/24 dev " + tag_ + "a",
        "ip -n " + r + " addr add 10.77.1.1/24 dev " + tag_ + "b",
        "ip -n " + r + " addr add 10.77.2.1/24 dev " + tag_ + "c",
        "ip -n " + d + " addr add " + std::string(kReceiverAddr) + "/24 dev " + tag_ + "e",
        "ip -n " + s + " route add default via 10.77.1.1",
        "ip -n " + d + " route add default via 10.77.2.1",
        "ip netns exec " + r + " sysctl -qw net.ipv4.ip_forward=1",
    };
    for (const std::string& step : steps) {
      if (!run(step, why)) return false;
    }
    return true;
  }

  // A token-bucket bottleneck on the router's egress toward the receiver (tc-tbf(8) units: "1gbit",
  // "32kb", "40ms"). `latency` bounds the queue: it may hold rate * latency bytes before TBF drops.
  bool shape_bottleneck(const std::string& rate, const std::string& burst, const std::string& latency,
                        std::string& why) {
    return run("ip netns exec " + router_ns() + " tc qdisc replace dev " + bottleneck_dev() +
                   " root tbf rate " + rate + " burst " + burst + " latency " + latency,
               why);
  }

  // `tc -s qdisc` of the bottleneck: bytes sent, drops, backlog.
  std::string bottleneck_stats() const {
    std::string out;
    run_command("ip netns exec " + router_ns() + " tc -s qdisc show dev " + bottleneck_dev(), &out);
    return out;
  }

  // Takes the bottleneck link down (its route goes with it) or brings it back (the route returns).
  bool set_bottleneck_up(bool up, std::string& why) {
    return run("ip -n " + router_ns() + " link set " + bottleneck_dev() + (up ? " up" : " down"), why);
  }

  // Removes everything (the veths go with their namespaces). Safe to call twice.
  void destroy() {
    if (!created_) return;
    for (const std::string& ns : {senders_ns(), router_ns(), receiver_ns()}) {
      run_command("ip netns del " + ns);
    }
    created_ = false;
  }

 private:
  static bool run(const std::string& command, std::string& why) {
    std::string out;
    if (run_command(command, &out) == 0) return true;
    why = command + ": " + out.substr(0, out.find('\n'));
    return false;
  }

  // Namespaces named msn<pid>? whose pid no longer runs: left by a test process that was killed.
  static void remove_stale() {
    std::string list;
    if (run_command("ip netns list", &list) != 0) return;
    size_t pos = 0;
    while (pos < list.size()) {
      const size_t eol = list.find('\n', pos);
      const std::string line = list.substr(pos, eol == std::string::npos ? std::string::npos : eol - pos);
      pos = eol == std::string::npos ? list.size() : eol + 1;
      const std::string name = line.substr(0, line.find(' '));
      if (name.size() < 5 || name.compare(0, 3, "msn") != 0) continue;
      const std::string digits = name.substr(3, name.size() - 4);
      if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
      const pid_t pid = static_cast<pid_t>(std::strtol(digits.c_str(), nullptr, 10));
      if (pid != getpid() && ::kill(pid, 0) != 0 && errno == ESRCH) run_command("ip netns del " + name);
    }
  }

  std::string tag_;
  bool created_ = false;
};

}  // namespace megascale::netns_test
