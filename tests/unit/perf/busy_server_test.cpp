// A perf server serves one client at a time: a second client that comes while a run is in progress is
// told the server is busy (naming the server), and the first client's run goes on undisturbed.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>

#include "free_port.h"
#include "megascale/perf/run.h"

namespace megascale::perf {
namespace {

TEST(PerfBusyServer, ASecondClientIsToldTheServerIsBusyAndTheFirstCarriesOn) {
  const uint16_t port = free_port();
  PerfOptions server;
  server.cc = "fixed";
  server.port = port;
  server.port_given = true;
  server.lanes = 1;
  server.timeout_s = 20;
  server.explicit_flags = {"--lanes"};
  PerfRun server_run;
  std::thread s([&] { server_run = run_perf(server, PerfSink{}); });

  PerfOptions first = server;
  first.server = "127.0.0.1";
  first.test = PerfTest::kBw;
  first.size_bytes = 65536;
  first.duration_s = 4;
  first.check = true;
  first.explicit_flags = {"-s", "-D", "--test", "--lanes", "--check"};
  PerfRun first_run;
  std::atomic<bool> first_done{false};
  std::thread a([&] {
    for (int attempt = 0; attempt < 20; ++attempt) {  // the server may not be bound yet
      first_run = run_perf(first, PerfSink{});
      if (first_run.status != PerfStatus::kFailed || first_run.error.find("connect to") == std::string::npos)
        break;
      usleep(100'000);
    }
    first_done = true;
  });

  PerfOptions second = first;
  second.duration_s = 0;
  second.iterations = 10;
  second.timeout_s = 3;
  second.explicit_flags = {"-s", "-n", "--test", "--lanes", "--check"};
  PerfRun second_run;
  bool told_busy = false;
  while (!first_done && !told_busy) {
    usleep(300'000);
    second_run = run_perf(second, PerfSink{});
    told_busy = second_run.error.find("busy") != std::string::npos;
  }
  a.join();
  s.join();
  ASSERT_TRUE(told_busy) << "the second client was never told the server is busy; its last error: "
                         << second_run.error;
  EXPECT_EQ(second_run.status, PerfStatus::kFailed);
  EXPECT_NE(second_run.error.find("server 127.0.0.1 port " + std::to_string(port) + " is busy"),
            std::string::npos)
      << second_run.error;
  ASSERT_EQ(first_run.status, PerfStatus::kOk) << first_run.error << "\n(server: " << server_run.error << ")";
  EXPECT_EQ(server_run.status, PerfStatus::kOk) << server_run.error;
  ASSERT_FALSE(first_run.report.bw.empty());
  EXPECT_GT(first_run.report.bw.at(0).verified_messages, 0u);
}

}  // namespace
}  // namespace megascale::perf
