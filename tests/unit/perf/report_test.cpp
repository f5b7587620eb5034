// perf's figures (bw average/peak/message rate, latency statistics), table lines and JSON keys.
#include "megascale/perf/report.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

namespace megascale::perf {
namespace {

std::vector<std::string> columns(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

TEST(PerfBwFigures, AverageIsBitsOverFirstPostToLastCompletion) {
  // 10 messages of 125000 B (1e6 bits), posted together, completing every 100 us from t=100 us:
  // 1e7 bits in 1 ms = 10 Gb/s; 10 messages in 1 ms = 0.01 Mpps.
  std::vector<TimeNs> posted(10, 0), completed;
  for (int i = 1; i <= 10; ++i) completed.push_back(i * 100'000);
  const BwFigures f = bw_figures(125000, posted, completed, 1);
  EXPECT_DOUBLE_EQ(f.bw_average_gbps, 10.0);
  EXPECT_DOUBLE_EQ(f.msg_rate_mpps, 0.01);
  EXPECT_DOUBLE_EQ(f.seconds, 1e-3);
}

TEST(PerfBwFigures, PeakIsTheBestRunOfConsecutiveCompletions) {
  // Eight messages of 1e6 bits posted at once (a full pipeline); completions 1 ms apart except that
  // messages 3..6 complete 100 us apart.
  const uint64_t size = 1'000'000 / 8;
  std::vector<TimeNs> posted(8, 0);
  std::vector<TimeNs> completed = {1'000'000, 2'000'000, 3'000'000, 3'100'000,
                                   3'200'000, 3'300'000, 3'400'000, 4'400'000};
  const BwFigures run4 = bw_figures(size, posted, completed, 4);
  // Best run of 4: messages 3..6, timed from message 2's completion at 3 ms to 3.4 ms: 4e6 bits in
  // 400 us = 10 Gb/s.
  EXPECT_NEAR(run4.bw_peak_gbps, 10.0, 1e-9);
  EXPECT_NEAR(run4.bw_average_gbps, 8e6 / 4'400'000.0, 1e-12);
  // A run of one: the best gap between completions, 100 us per 1e6 bits.
  EXPECT_NEAR(bw_figures(size, posted, completed, 1).bw_peak_gbps, 10.0, 1e-9);
  // The run over the whole row is the average.
  const BwFigures all = bw_figures(size, posted, completed, 8);
  EXPECT_DOUBLE_EQ(all.bw_peak_gbps, all.bw_average_gbps);
}

TEST(PerfBwFigures, EmptyRowIsZero) {
  const BwFigures f = bw_figures(100, {}, {}, 4);
  EXPECT_EQ(f.bw_average_gbps, 0);
  EXPECT_EQ(f.bw_peak_gbps, 0);
}

TEST(PerfBwFigures, BothDirectionsAddUpAndLastAsLongAsTheLongerSide) {
  BwFigures a{.bw_peak_gbps = 12, .bw_average_gbps = 10, .msg_rate_mpps = 0.5, .seconds = 2};
  BwFigures b{.bw_peak_gbps = 9, .bw_average_gbps = 8, .msg_rate_mpps = 0.25, .seconds = 3};
  const BwFigures s = sum_directions(a, b);
  EXPECT_DOUBLE_EQ(s.bw_peak_gbps, 21);
  EXPECT_DOUBLE_EQ(s.bw_average_gbps, 18);
  EXPECT_DOUBLE_EQ(s.msg_rate_mpps, 0.75);
  EXPECT_DOUBLE_EQ(s.seconds, 3);
  const BwFigures back = bw_figures_from_json(to_json(b));
  EXPECT_DOUBLE_EQ(back.bw_average_gbps, 8);
  EXPECT_DOUBLE_EQ(back.seconds, 3);
}

TEST(PerfLatFigures, StatisticsOfKnownSamples) {
  // 1..1000 us one-way (shuffled order must not matter).
  std::vector<TimeNs> v;
  for (int i = 1000; i >= 1; --i) v.push_back(i * 1000);
  const LatFigures f = lat_figures(v);
  EXPECT_DOUBLE_EQ(f.t_min_us, 1);
  EXPECT_DOUBLE_EQ(f.t_max_us, 1000);
  EXPECT_DOUBLE_EQ(f.t_avg_us, 500.5);
  EXPECT_DOUBLE_EQ(f.p50_us, 500);  // nearest rank: the 500th smallest
  EXPECT_DOUBLE_EQ(f.t_typical_us, f.p50_us);
  EXPECT_DOUBLE_EQ(f.p99_us, 990);
  EXPECT_DOUBLE_EQ(f.p999_us, 999);
  // Population standard deviation of 1..1000 = sqrt((1000^2 - 1) / 12).
  EXPECT_NEAR(f.t_stdev_us, 288.6749902572095, 1e-9);
}

TEST(PerfLatFigures, SingleSample) {
  const LatFigures f = lat_figures({7500});
  EXPECT_DOUBLE_EQ(f.t_min_us, 7.5);
  EXPECT_DOUBLE_EQ(f.p999_us, 7.5);
  EXPECT_DOUBLE_EQ(f.t_stdev_us, 0);
}

TEST(PerfTables, BwHeaderAndRowHavePerftestsColumns) {
  EXPECT_EQ(columns(bw_header()), (std::vector<std::string>{"#bytes", "#iterations", "BW", "peak[Gb/sec]",
                                                            "BW", "average[Gb/sec]", "MsgRate[Mpps]"}));
  BwRow r;
  r.size_bytes = 65536;
  r.iterations = 5000;
  r.figures.bw_peak_gbps = 12.345;
  r.figures.bw_average_gbps = 11.5;
  r.figures.msg_rate_mpps = 0.021935;
  EXPECT_EQ(columns(bw_row_line(r)),
            (std::vector<std::string>{"65536", "5000", "12.35", "11.50", "0.021935"}));
}

TEST(PerfTables, LatHeaderAndRowHavePerftestsColumns) {
  const auto h = columns(lat_header());
  ASSERT_GE(h.size(), 9u);
  EXPECT_EQ(h[0], "#bytes");
  EXPECT_EQ(h[2], "t_min[usec]");
  EXPECT_EQ(h[4], "t_typical[usec]");
  LatRow r;
  r.size_bytes = 2;
  r.iterations = 1000;
  r.figures = lat_figures({1000, 2000, 3000, 4000});
  EXPECT_EQ(columns(lat_row_line(r)),
            (std::vector<std::string>{"2", "1000", "1.00", "4.00", "2.00", "2.50", "1.12", "4.00", "4.00"}));
}

TEST(PerfTables, CountersLineNamesEveryCounterAndTheKernelDrops) {
  RowCounters c;
  c.same_host = true;
  c.total.retransmits_fast = 5;
  c.total.retransmits_rto = 2;
  c.total.timeouts = 1;
  c.total.ecn_marks = 11;
  c.total.cnps_received = 3;
  c.total.repaths = 1;
  c.total.sends_posted = 40;
  c.total.sends_waited_for_credit = 3;
  c.total.kernel.ok = true;
  c.total.kernel.rcvbuf_errors = 4;
  c.total.kernel.in_errors = 6;
  c.total.kernel.socket_drops = 4;
  c.total.rtt[engine::RttHistogram::bucket_of(20'000)] = 99;
  c.total.rtt[engine::RttHistogram::bucket_of(900'000)] = 1;
  c.total.rtt_max_ns = 900'000;
  const std::string line = counters_line(c);
  EXPECT_EQ(line.rfind(" # retx 7 (fast 5, rto 2), timeouts 1, ecn 11, cnp 3, repaths 1, ", 0), 0u) << line;
  EXPECT_NE(line.find("rtt p50 20.5 us p99 20.5 us"), std::string::npos) << line;  // 20 us's bucket edge
  EXPECT_NE(line.find("sends that waited for a credit 3 of 40"), std::string::npos) << line;
  EXPECT_NE(line.find("RcvbufErrors +4 InErrors +6, our sockets +4"), std::string::npos) << line;

  RowCounters unread;
  EXPECT_NE(counters_line(unread).find("kernel drops unknown"), std::string::npos);
  EXPECT_NE(counters_line(unread).find("rtt -"), std::string::npos);
}

TEST(PerfTables, CountersLineShowsInjectedFaultsAndJunk) {
  RowCounters c;
  EXPECT_EQ(counters_line(c).find("faults injected"), std::string::npos);  // injection off: not named
  EXPECT_NE(counters_line(c).find(", junk dropped 0"), std::string::npos) << counters_line(c);

  c.total.fault_offered = 1000;
  EXPECT_NE(counters_line(c).find(", faults injected 0 of 1000 datagrams"), std::string::npos)
      << counters_line(c);

  c.total.fault_dropped = 20;
  c.total.fault_duplicated = 5;
  c.total.fault_reordered = 7;
  c.total.fault_corrupted = 3;
  c.total.corrupt_dropped = 3;
  c.total.unknown_connection = 2;
  const std::string line = counters_line(c);
  EXPECT_NE(line.find(", faults injected 35 of 1000 datagrams (drop 20, duplicate 5, reorder 7, corrupt 3)"),
            std::string::npos)
      << line;
  EXPECT_NE(line.find(", junk dropped 5 (corrupt payload 3, unknown connection 2)"), std::string::npos)
      << line;

  BwRow row;
  row.counters = c;
  const nlohmann::json j = bw_row_json(row)["counters"];
  EXPECT_EQ(j["faults_injected"], 35);
  EXPECT_EQ(j["fault_datagrams"], 1000);
  EXPECT_EQ(j["fault_corrupted"], 3);
  EXPECT_EQ(j["junk_dropped"], 5);
}

TEST(PerfJson, RowsReadBackAsWritten) {
  BwRow b;
  b.size_bytes = 4096;
  b.iterations = 10;
  b.window = 8;
  b.verified_messages = 10;
  b.figures.bw_average_gbps = 3.5;
  b.bidirectional = true;
  b.forward.bw_average_gbps = 2.0;
  b.reverse.bw_average_gbps = 1.5;
  b.counters.client.retransmits_fast = 2;
  b.counters.server.fault_dropped = 4;
  b.counters.server.corrupt_dropped = 1;
  b.counters.total = sum_sides(b.counters.client, b.counters.server, false);
  auto back = bw_row_from_json(bw_row_json(b));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(bw_row_json(*back), bw_row_json(b));
  EXPECT_EQ(back->counters.total.fault_dropped, 4u);

  LatRow l;
  l.size_bytes = 2;
  l.iterations = 2;
  l.figures = lat_figures({2000, 4000});
  l.counters.client.unknown_connection = 3;
  l.counters.total = l.counters.client;
  auto lback = lat_row_from_json(lat_row_json(l));
  ASSERT_TRUE(lback) << lback.error().message;
  EXPECT_EQ(lat_row_json(*lback), lat_row_json(l));

  nlohmann::json broken = bw_row_json(b);
  broken.erase("size_bytes");
  auto bad = bw_row_from_json(broken);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("malformed bw row"), std::string::npos) << bad.error().message;
}

TEST(PerfJson, RowsNameTheirUnits) {
  BwRow b;
  b.size_bytes = 4096;
  b.iterations = 10;
  b.figures.bw_average_gbps = 3.5;
  b.counters.total.retransmits_fast = 2;
  const nlohmann::json jb = bw_row_json(b);
  for (const char* key :
       {"size_bytes", "iterations", "bw_peak_gbps", "bw_average_gbps", "msg_rate_mpps", "duration_s"}) {
    EXPECT_TRUE(jb.contains(key)) << key;
  }
  EXPECT_EQ(jb["size_bytes"], 4096);
  EXPECT_EQ(jb["bw_average_gbps"], 3.5);
  EXPECT_EQ(jb["counters"]["retransmits"], 2);
  EXPECT_EQ(jb["bidirectional"], false);
  EXPECT_FALSE(jb.contains("server_to_client"));
  BwRow both = b;
  both.bidirectional = true;
  both.reverse.bw_average_gbps = 1.5;
  const nlohmann::json jboth = bw_row_json(both);
  EXPECT_EQ(jboth["server_to_client"]["bw_average_gbps"], 1.5);
  EXPECT_TRUE(jboth.contains("client_to_server"));

  LatRow l;
  l.figures = lat_figures({2000, 4000});
  const nlohmann::json jl = lat_row_json(l);
  for (const char* key : {"size_bytes", "iterations", "t_min_us", "t_max_us", "t_typical_us", "t_avg_us",
                          "t_stdev_us", "t_p50_us", "t_p99_us", "t_p999_us"}) {
    EXPECT_TRUE(jl.contains(key)) << key;
  }
  EXPECT_EQ(jl["t_max_us"], 4.0);

  PerfReport r;
  r.bw.push_back(b);
  r.lat.push_back(l);
  const nlohmann::json doc = report_json(r);
  EXPECT_EQ(doc["bw"].size(), 1u);
  EXPECT_EQ(doc["lat"].size(), 1u);
  EXPECT_TRUE(doc.contains("config"));
}

}  // namespace
}  // namespace megascale::perf
