// A perf server fed an earlier run's datagrams: a relay on loopback records what a client sent during
// one complete run, and a stranger sends all of it to a fresh server before a real client comes. The
// server must not take the replay for a client (it would run the recorded session and exit, and the
// real client find nobody), and the real client's run must succeed.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "megascale/perf/run.h"

namespace megascale::perf {
namespace {

sockaddr_in loopback_addr(uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  return a;
}

int bound_socket(uint16_t* port) {
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in a = loopback_addr(0);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

uint16_t free_port() {
  uint16_t port = 0;
  close(bound_socket(&port));
  return port;
}

// Forwards one client's datagrams to the server and the server's back (one lane: one socket each
// side), recording what the client sent.
struct Relay {
  uint16_t port = 0;
  uint16_t server_port = 0;
  int fd = -1;
  std::atomic<bool> stop{false};
  std::vector<std::vector<uint8_t>> from_client;
  std::thread t;

  explicit Relay(uint16_t server) : server_port(server) {
    fd = bound_socket(&port);
    t = std::thread([this] { run(); });
  }
  ~Relay() {
    finish();
    close(fd);
  }
  void finish() {
    stop = true;
    if (t.joinable()) t.join();
  }
  void run() {
    sockaddr_in client{};
    bool have_client = false;
    std::vector<uint8_t> buf(70'000);
    while (!stop) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      sockaddr_in from{};
      socklen_t len = sizeof from;
      const ssize_t n = recvfrom(fd, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&from), &len);
      if (n <= 0) continue;
      if (ntohs(from.sin_port) == server_port) {
        if (have_client)
          sendto(fd, buf.data(), static_cast<size_t>(n), 0, reinterpret_cast<sockaddr*>(&client),
                 sizeof client);
        continue;
      }
      client = from;
      have_client = true;
      from_client.emplace_back(buf.begin(), buf.begin() + n);
      const sockaddr_in to = loopback_addr(server_port);
      sendto(fd, buf.data(), static_cast<size_t>(n), 0, reinterpret_cast<const sockaddr*>(&to), sizeof to);
    }
  }
};

PerfOptions server_options(uint16_t port) {
  PerfOptions o;
  o.cc = "fixed";
  o.port = port;
  o.port_given = true;
  o.lanes = 1;
  o.timeout_s = 10;
  o.explicit_flags = {"--lanes"};
  return o;
}

PerfOptions client_options(uint16_t port) {
  PerfOptions o = server_options(port);
  o.server = "127.0.0.1";
  o.test = PerfTest::kBw;
  o.size_bytes = 4096;
  o.iterations = 50;
  o.check = true;
  o.explicit_flags = {"-s", "-n", "--test", "--lanes", "--check"};
  return o;
}

// Runs the client until it reaches a server that is bound (a few tries).
PerfRun run_client(const PerfOptions& o) {
  PerfRun r;
  for (int attempt = 0; attempt < 20; ++attempt) {
    r = run_perf(o, PerfSink{});
    if (r.status == PerfStatus::kOk || r.error.find("no answer") == std::string::npos) break;
    usleep(100'000);
  }
  return r;
}

TEST(PerfReplay, AnEarlierRunReplayedIntoAFreshServerIsNotTakenForAClient) {
  // Run 1, through the relay.
  std::vector<std::vector<uint8_t>> captured;
  {
    const uint16_t port = free_port();
    PerfRun server_run;
    std::thread s([&] { server_run = run_perf(server_options(port), PerfSink{}); });
    usleep(200'000);
    Relay relay(port);
    const PerfRun client_run = run_client(client_options(relay.port));
    s.join();
    ASSERT_EQ(client_run.status, PerfStatus::kOk) << client_run.error;
    ASSERT_EQ(server_run.status, PerfStatus::kOk) << server_run.error;
    relay.finish();
    captured = relay.from_client;
  }
  ASSERT_GT(captured.size(), 10u);

  // Run 2: a fresh server gets the replay first, then a real client.
  const uint16_t port = free_port();
  PerfRun server_run;
  std::thread s([&] { server_run = run_perf(server_options(port), PerfSink{}); });
  usleep(300'000);
  uint16_t replayer_port = 0;
  const int replayer = bound_socket(&replayer_port);
  const sockaddr_in to = loopback_addr(port);
  for (const auto& d : captured) {
    sendto(replayer, d.data(), d.size(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof to);
    usleep(1'000);
  }
  usleep(300'000);
  const PerfRun client_run = run_client(client_options(port));
  s.join();
  close(replayer);
  ASSERT_EQ(client_run.status, PerfStatus::kOk)
      << "the real client after a replay: " << client_run.error << "\n(server: " << server_run.error << ")";
  EXPECT_EQ(server_run.status, PerfStatus::kOk) << server_run.error;
  ASSERT_FALSE(client_run.report.bw.empty());
  EXPECT_EQ(client_run.report.bw.at(0).verified_messages, 50u);
}

}  // namespace
}  // namespace megascale::perf
