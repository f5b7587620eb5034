// `megascale perf` end to end on loopback: short bw and latency rows with every byte checked by the
// receiver, counters reported after each row, retransmissions counted under injected loss, and the
// server/client flag check and failure paths (exit 2 vs exit 1 cases). Rows are small and short.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "free_port.h"
#include "megascale/perf/run.h"

namespace megascale::perf {
namespace {

struct Captured {
  std::vector<std::string> lines;
  PerfSink sink() {
    return PerfSink{[this](const std::string& l) { lines.push_back(l); }, nullptr};
  }
  bool has_line_starting(const std::string& prefix) const {
    for (const std::string& l : lines) {
      if (l.rfind(prefix, 0) == 0) return true;
    }
    return false;
  }
};

// These tests check perf's logic, not congestion control: the fixed-window preset keeps them fast and
// steady on a loaded CI machine, where delay-based presets see the host's scheduling delays as queueing.
constexpr const char* kSteadyCc = "fixed";

PerfOptions loopback(std::initializer_list<std::string_view> given = {}) {
  PerfOptions o;
  o.loopback = true;
  o.cc = kSteadyCc;
  o.timeout_s = 20;
  for (std::string_view f : given) o.explicit_flags.insert(std::string(f));
  return o;
}

TEST(PerfLoopback, BandwidthRowsCheckEveryByteAndReportCounters) {
  PerfOptions o = loopback({"-s", "-n", "--check", "--test"});
  o.test = PerfTest::kBw;
  o.size_bytes = 10000;  // not a multiple of the segment: a short last segment
  o.iterations = 300;
  o.window = 16;
  o.check = true;
  Captured out;
  const PerfRun r = run_perf(o, out.sink());
  ASSERT_EQ(r.status, PerfStatus::kOk) << r.error;
  ASSERT_EQ(r.report.bw.size(), 1u);
  const BwRow& row = r.report.bw[0];
  EXPECT_EQ(row.size_bytes, 10000u);
  EXPECT_EQ(row.iterations, 300u);
  EXPECT_EQ(row.verified_messages, 300u);  // every message checked byte for byte by the server
  EXPECT_GT(row.figures.bw_average_gbps, 0);
  EXPECT_GE(row.figures.bw_peak_gbps, row.figures.bw_average_gbps);
  // Counters: the client's sends were acknowledged with RTT samples; the server received every byte.
  EXPECT_GT(rtt_total(row.counters.client.rtt), 0u);
  EXPECT_GE(row.counters.server.bytes_received, 300u * 10000u);
  EXPECT_GE(row.counters.client.bytes_sent, 300u * 10000u);
  EXPECT_GT(row.counters.total.datagrams_sent, 0u);
  EXPECT_TRUE(row.counters.same_host);
  // Printed: banner, header, the row, its counters line.
  EXPECT_TRUE(out.has_line_starting(" Transport       : udp ipv4"));
  EXPECT_TRUE(out.has_line_starting(" #bytes     #iterations    BW peak[Gb/sec]"));
  EXPECT_TRUE(out.has_line_starting(" 10000      300 "));
  EXPECT_TRUE(out.has_line_starting(" # retx "));
  EXPECT_EQ(r.report.config["negotiated_segment_bytes"], 4096);
}

TEST(PerfLoopback, BidirectionalRowsCheckBothDirectionsAndSumThem) {
  PerfOptions o = loopback({"-s", "-n", "--check", "--test", "-b"});
  o.test = PerfTest::kBw;
  o.bidirectional = true;
  o.size_bytes = 10000;
  o.iterations = 200;
  o.window = 16;
  o.check = true;
  Captured out;
  const PerfRun r = run_perf(o, out.sink());
  ASSERT_EQ(r.status, PerfStatus::kOk) << r.error;
  const BwRow& row = r.report.bw.at(0);
  EXPECT_TRUE(row.bidirectional);
  // Each side checked every byte of the other's 200 messages (keyed apart by direction).
  EXPECT_EQ(row.verified_messages, 400u);
  EXPECT_GT(row.forward.bw_average_gbps, 0);
  EXPECT_GT(row.reverse.bw_average_gbps, 0);
  EXPECT_DOUBLE_EQ(row.figures.bw_average_gbps, row.forward.bw_average_gbps + row.reverse.bw_average_gbps);
  // Both wires sent and received the row's bytes.
  EXPECT_GE(row.counters.client.bytes_sent, 200u * 10000u);
  EXPECT_GE(row.counters.server.bytes_sent, 200u * 10000u);
  EXPECT_GE(row.counters.client.bytes_received, 200u * 10000u);
  EXPECT_GE(row.counters.server.bytes_received, 200u * 10000u);
  EXPECT_TRUE(out.has_line_starting("                    megascale perf: bidirectional bandwidth"));
  EXPECT_TRUE(out.has_line_starting(" 10000      200 "));
  EXPECT_EQ(r.report.config["bidirectional"], true);
}

TEST(PerfLoopback, LatencyRowsAndSizeList) {
  PerfOptions o = loopback({"-n", "--test"});
  o.test = PerfTest::kLat;
  o.iterations = 50;
  o.all_sizes = false;
  o.size_bytes = 0;  // the default: 2 B
  Captured out;
  const PerfRun r = run_perf(o, out.sink());
  ASSERT_EQ(r.status, PerfStatus::kOk) << r.error;
  ASSERT_EQ(r.report.lat.size(), 1u);
  const LatRow& row = r.report.lat[0];
  EXPECT_EQ(row.size_bytes, 2u);
  EXPECT_EQ(row.iterations, 50u);
  // Pings checked by the server, pongs by the client, warm-up round trips included.
  EXPECT_GE(row.verified_messages, 100u);
  EXPECT_GT(row.figures.t_min_us, 0);
  EXPECT_LE(row.figures.t_min_us, row.figures.t_typical_us);
  EXPECT_LE(row.figures.t_typical_us, row.figures.p99_us);
  EXPECT_LE(row.figures.p99_us, row.figures.t_max_us);
  EXPECT_TRUE(out.has_line_starting(" 2          50 "));
  // Each side keeps its receives posted ahead (rows.cpp, LatRecvs): every timed ping and pong found
  // the peer's credit already there.
  EXPECT_EQ(row.counters.total.sends_posted, 100u);
  EXPECT_EQ(row.counters.total.sends_waited_for_credit, 0u);
}

TEST(PerfLoopback, DurationRowsRunAboutThatLong) {
  PerfOptions o = loopback({"-D", "-s", "--test"});
  o.test = PerfTest::kBw;
  o.size_bytes = 65536;
  o.duration_s = 1;
  Captured out;
  const PerfRun r = run_perf(o, out.sink());
  ASSERT_EQ(r.status, PerfStatus::kOk) << r.error;
  ASSERT_EQ(r.report.bw.size(), 1u);
  // Sized from a calibration run: loose bounds, this machine may be loaded.
  EXPECT_GT(r.report.bw[0].figures.seconds, 0.2);
  EXPECT_LT(r.report.bw[0].figures.seconds, 5.0);
  EXPECT_EQ(r.report.bw[0].verified_messages, r.report.bw[0].iterations);
}

TEST(PerfLoopback, InjectedLossIsRecoveredAndCounted) {
  setenv("MEGASCALE_FAULT_DROP", "0.02", 1);
  setenv("MEGASCALE_FAULT_SEED", "7", 1);
  PerfOptions o = loopback({"-s", "-n", "--check", "--test"});
  o.test = PerfTest::kBw;
  o.size_bytes = 65536;
  o.iterations = 100;
  o.check = true;
  Captured out;
  const PerfRun r = run_perf(o, out.sink());
  unsetenv("MEGASCALE_FAULT_DROP");
  unsetenv("MEGASCALE_FAULT_SEED");
  ASSERT_EQ(r.status, PerfStatus::kOk) << r.error;
  const BwRow& row = r.report.bw.at(0);
  EXPECT_EQ(row.verified_messages, 100u);
  EXPECT_GT(row.counters.total.fault_dropped, 0u);
  EXPECT_GT(row.counters.total.retransmits_fast + row.counters.total.retransmits_rto, 0u);
  EXPECT_NE(r.report.config["faults"].get<std::string>().find("drop 2%"), std::string::npos);
}

TEST(PerfLoopback, TableShowsTheFaultsInjectedAndTheJunkDropped) {
  setenv("MEGASCALE_FAULT_DROP", "0.02", 1);
  setenv("MEGASCALE_FAULT_CORRUPT", "0.02", 1);
  setenv("MEGASCALE_FAULT_SEED", "11", 1);
  PerfOptions o = loopback({"-s", "-n", "--check", "--test"});
  o.test = PerfTest::kBw;
  o.size_bytes = 65536;
  o.iterations = 100;
  o.check = true;
  Captured out;
  const PerfRun r = run_perf(o, out.sink());
  unsetenv("MEGASCALE_FAULT_DROP");
  unsetenv("MEGASCALE_FAULT_CORRUPT");
  unsetenv("MEGASCALE_FAULT_SEED");
  ASSERT_EQ(r.status, PerfStatus::kOk) << r.error;
  const SideCounters& t = r.report.bw.at(0).counters.total;
  ASSERT_GT(t.fault_dropped, 0u);
  ASSERT_GT(t.fault_corrupted, 0u);
  EXPECT_GT(junk_dropped(t), 0u);  // a flipped bit fails a CRC: the receiver drops the datagram
  std::string counters;
  for (const std::string& l : out.lines) {
    if (l.rfind(" # retx", 0) == 0) counters = l;
  }
  EXPECT_NE(counters.find(fmt::format(", faults injected {} of", faults_injected(t))), std::string::npos)
      << counters;
  EXPECT_NE(counters.find(fmt::format("drop {}", t.fault_dropped)), std::string::npos) << counters;
  EXPECT_NE(counters.find(fmt::format("corrupt {}", t.fault_corrupted)), std::string::npos) << counters;
  EXPECT_NE(counters.find(fmt::format("junk dropped {} (", junk_dropped(t))), std::string::npos) << counters;
}

TEST(PerfLoopback, BadOptionsAreUsageErrors) {
  PerfOptions o = loopback({"-s"});
  o.all_sizes = true;
  o.size_bytes = 8;
  PerfRun r = run_perf(o, PerfSink{});
  EXPECT_EQ(r.status, PerfStatus::kUsage);
  EXPECT_NE(r.error.find("-a and -s"), std::string::npos);

  PerfOptions cc = loopback();
  cc.cc = "no-such-preset";
  r = run_perf(cc, PerfSink{});
  EXPECT_EQ(r.status, PerfStatus::kUsage);
  EXPECT_NE(r.error.find("--cc no-such-preset"), std::string::npos);

  setenv("MEGASCALE_FAULT_DROP", "1.5", 1);
  r = run_perf(loopback(), PerfSink{});
  unsetenv("MEGASCALE_FAULT_DROP");
  EXPECT_EQ(r.status, PerfStatus::kUsage);
  EXPECT_NE(r.error.find("MEGASCALE_FAULT_DROP"), std::string::npos);

  PerfOptions lat_b = loopback({"--test", "-b"});
  lat_b.test = PerfTest::kLat;
  lat_b.bidirectional = true;
  r = run_perf(lat_b, PerfSink{});
  EXPECT_EQ(r.status, PerfStatus::kUsage);
  EXPECT_NE(r.error.find("-b with --test lat"), std::string::npos) << r.error;
}

TEST(PerfServerClient, DisagreeingFlagsStopBothSidesWithTheFlagNamed) {
  const uint16_t port = free_port();
  PerfOptions server;
  server.cc = kSteadyCc;
  server.port = port;
  server.port_given = true;
  server.lanes = 1;
  server.size_bytes = 1024;
  server.timeout_s = 10;
  server.explicit_flags = {"-s", "--lanes"};
  PerfRun server_run;
  std::thread t([&] { server_run = run_perf(server, PerfSink{}); });

  PerfOptions client = server;
  client.server = "127.0.0.1";
  client.size_bytes = 2048;
  client.explicit_flags = {"-s", "--lanes"};
  PerfRun client_run;
  // The server may not be bound yet: retry the connection a few times.
  for (int attempt = 0; attempt < 20; ++attempt) {
    client_run = run_perf(client, PerfSink{});
    if (client_run.status != PerfStatus::kFailed) break;
    usleep(100'000);
  }
  t.join();
  EXPECT_EQ(client_run.status, PerfStatus::kUsage) << client_run.error;
  EXPECT_NE(client_run.error.find("-s 1024 on the server, -s 2048 on the client"), std::string::npos)
      << client_run.error;
  EXPECT_EQ(server_run.status, PerfStatus::kUsage) << server_run.error;
}

TEST(PerfServerClient, ServerWithOnlyAPortRunsTheClientsTest) {
  const uint16_t port = free_port();
  PerfOptions server;
  server.cc = kSteadyCc;
  server.port = port;
  server.port_given = true;
  server.lanes = 1;
  server.timeout_s = 10;
  server.explicit_flags = {"--lanes"};
  Captured server_out;
  PerfRun server_run;
  std::thread t([&] { server_run = run_perf(server, server_out.sink()); });

  PerfOptions client = server;
  client.server = "127.0.0.1";
  client.test = PerfTest::kBw;
  client.size_bytes = 3000;
  client.iterations = 20;
  client.segment_bytes = 1400;
  client.explicit_flags = {"-s", "-n", "--test", "--lanes", "--segment"};
  PerfRun client_run;
  for (int attempt = 0; attempt < 3; ++attempt) {
    client_run = run_perf(client, PerfSink{});
    if (client_run.status == PerfStatus::kOk) break;
    usleep(100'000);
  }
  t.join();
  ASSERT_EQ(client_run.status, PerfStatus::kOk)
      << client_run.error << "\n(server: " << server_run.error << ")";
  ASSERT_EQ(server_run.status, PerfStatus::kOk) << server_run.error;
  EXPECT_EQ(client_run.report.bw.at(0).verified_messages, 20u);
  // The server offered the largest segment: the client's 1400 B was used.
  EXPECT_EQ(client_run.report.config["negotiated_segment_bytes"], 1400);
  // The server printed the rows the client reported.
  EXPECT_TRUE(server_out.has_line_starting(" 3000       20 "));
}

TEST(PerfServerClient, ServerReportHasTheRowsItPrinted) {
  const uint16_t port = free_port();
  PerfOptions server;
  server.cc = kSteadyCc;
  server.port = port;
  server.port_given = true;
  server.lanes = 1;
  server.timeout_s = 10;
  server.explicit_flags = {"--lanes"};
  PerfRun server_run;
  std::thread t([&] { server_run = run_perf(server, PerfSink{}); });

  PerfOptions client = server;
  client.server = "127.0.0.1";
  client.test = PerfTest::kBoth;
  client.size_bytes = 3000;
  client.iterations = 20;
  client.explicit_flags = {"-s", "-n", "--test", "--lanes"};
  PerfRun client_run;
  for (int attempt = 0; attempt < 3; ++attempt) {
    client_run = run_perf(client, PerfSink{});
    if (client_run.status == PerfStatus::kOk) break;
    usleep(100'000);
  }
  t.join();
  ASSERT_EQ(client_run.status, PerfStatus::kOk) << client_run.error;
  ASSERT_EQ(server_run.status, PerfStatus::kOk) << server_run.error;
  // The server's --json document has the rows its table printed, as the client measured them.
  const nlohmann::json doc = report_json(server_run.report);
  ASSERT_EQ(doc["bw"].size(), 1u) << doc.dump();
  ASSERT_EQ(doc["lat"].size(), 1u) << doc.dump();
  EXPECT_EQ(doc["bw"][0], report_json(client_run.report)["bw"][0]);
  EXPECT_EQ(doc["lat"][0], report_json(client_run.report)["lat"][0]);
  EXPECT_EQ(doc["bw"][0]["verified_messages"], 20);
  EXPECT_EQ(doc["config"]["test"], "both");
  EXPECT_NE(doc["config"]["mode"].get<std::string>().find("server on"), std::string::npos);
}

TEST(PerfServerClient, NoServerIsAFailureNamingTheConnection) {
  PerfOptions client;
  client.cc = kSteadyCc;
  client.server = "127.0.0.1";
  client.port = free_port();
  client.port_given = true;
  client.lanes = 1;
  client.timeout_s = 1;  // also bounds the connection attempt
  const PerfRun r = run_perf(client, PerfSink{});
  EXPECT_EQ(r.status, PerfStatus::kFailed);
  EXPECT_NE(r.error.find("connect to 127.0.0.1:"), std::string::npos) << r.error;
}

}  // namespace
}  // namespace megascale::perf
