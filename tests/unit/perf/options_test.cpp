// perf options: the -a sweep, per-row iteration defaults, buffers, and the flag checks (exit 2 cases).
#include "megascale/perf/options.h"

#include <gtest/gtest.h>

#include <string>

namespace megascale::perf {
namespace {

PerfOptions with(std::initializer_list<std::string_view> given) {
  PerfOptions o;
  for (std::string_view f : given) o.explicit_flags.insert(std::string(f));
  return o;
}

TEST(PerfSizes, SweepIsPowersOfTwoFrom2ToPerftestsTopAnd64MiBForBandwidth) {
  PerfOptions o;
  o.all_sizes = true;
  const auto lat = sizes_for(o, PerfTest::kLat);
  const auto bw = sizes_for(o, PerfTest::kBw);
  ASSERT_EQ(lat.size(), 23u);  // 2^1 .. 2^23, as perftest's -a
  ASSERT_EQ(bw.size(), 26u);   // 2^1 .. 2^26
  EXPECT_EQ(lat.front(), 2u);
  EXPECT_EQ(lat.back(), 8u << 20);
  EXPECT_EQ(bw.back(), 64u << 20);
  for (size_t i = 1; i < bw.size(); ++i) EXPECT_EQ(bw[i], 2 * bw[i - 1]);
}

TEST(PerfSizes, DefaultsArePerftestsAndSizeFlagWins) {
  PerfOptions o;
  EXPECT_EQ(sizes_for(o, PerfTest::kBw), std::vector<uint64_t>{65536});
  EXPECT_EQ(sizes_for(o, PerfTest::kLat), std::vector<uint64_t>{2});
  o.size_bytes = 1000;
  EXPECT_EQ(sizes_for(o, PerfTest::kBw), std::vector<uint64_t>{1000});
  EXPECT_EQ(sizes_for(o, PerfTest::kLat), std::vector<uint64_t>{1000});
}

TEST(PerfIterations, DefaultsAreCappedByBytesPerRowButNFlagIsExact) {
  PerfOptions o;
  EXPECT_EQ(iterations_for(o, PerfTest::kBw, 65536), 5000u);
  EXPECT_EQ(iterations_for(o, PerfTest::kLat, 2), 1000u);
  // 64 MiB: 2 GiB a row -> 32 messages.
  EXPECT_EQ(iterations_for(o, PerfTest::kBw, 64u << 20), 32u);
  // Never fewer than the minimum, even for the largest -s.
  EXPECT_EQ(iterations_for(o, PerfTest::kBw, kMaxSizeBytes), kMinDefaultIterations);
  o.iterations = 7;
  EXPECT_EQ(iterations_for(o, PerfTest::kBw, 64u << 20), 7u);
}

TEST(PerfBuffers, WindowIsBoundedByTheBufferBudget) {
  PerfOptions o;
  o.window = 128;
  o.buffer_budget_bytes = 256u << 20;
  EXPECT_EQ(buffers_for(o, 65536), 128u);    // the window fits
  EXPECT_EQ(buffers_for(o, 64u << 20), 4u);  // 256 MiB / 64 MiB
  EXPECT_EQ(buffers_for(o, 1u << 30), 1u);   // at least one
}

TEST(PerfBuffers, SmallMessagesTakeWholePagesOfTheBudget) {
  PerfOptions o;
  o.window = 1024;
  o.buffer_budget_bytes = 1u << 20;
  EXPECT_EQ(buffer_bytes(1, 2), 4096u);
  EXPECT_EQ(buffer_bytes(3, 4097), 3u * 8192);
  EXPECT_EQ(buffers_for(o, 2), 256u);  // 1 MiB of 4 KiB pages, not 1024 messages of 2 B
}

TEST(PerfBuffers, ABudgetTooSmallForOneMessageIsRefusedWithTheSizeItNeeds) {
  auto error_of = [](const PerfOptions& o) {
    Status s = validate_perf_options(o);
    return s ? std::string() : s.error().message;
  };
  PerfOptions big = with({"-s"});
  big.test = PerfTest::kBw;
  big.size_bytes = 1u << 30;
  big.buffer_budget_bytes = 1u << 20;
  EXPECT_NE(error_of(big).find("--buffer-mib 1: one bw message of 1073741824 B needs 1024 MiB of buffers per "
                               "side; give --buffer-mib 1024"),
            std::string::npos)
      << error_of(big);
  big.buffer_budget_bytes = 1024u << 20;
  EXPECT_EQ(error_of(big), "");

  PerfOptions sweep = with({"-a"});
  sweep.all_sizes = true;
  sweep.test = PerfTest::kBw;
  sweep.bidirectional = true;
  sweep.buffer_budget_bytes = 1u << 20;
  EXPECT_NE(error_of(sweep).find("needs 64 MiB of buffers per side each way"), std::string::npos)
      << error_of(sweep);

  // A latency row keeps five buffers on each side.
  PerfOptions lat = with({"-s"});
  lat.test = PerfTest::kLat;
  lat.size_bytes = 1u << 20;
  lat.buffer_budget_bytes = 4u << 20;
  EXPECT_NE(error_of(lat).find("a latency row's 5 buffers of 1048576 B need 5 MiB"), std::string::npos)
      << error_of(lat);
}

TEST(PerfValidate, TheUcxBaselineRunsBandwidthRowsOnLoopbackOnly) {
  auto error_of = [](const PerfOptions& o) {
    Status s = validate_perf_options(o);
    return s ? std::string() : s.error().message;
  };
  PerfOptions o;
  o.baseline_ucx = true;
  EXPECT_NE(error_of(o).find("--baseline ucx runs its rows in this process: it needs --loopback"),
            std::string::npos)
      << error_of(o);
  o.loopback = true;
  EXPECT_EQ(error_of(o), "");
  o.test = PerfTest::kLat;
  EXPECT_NE(error_of(o).find("drop --test lat"), std::string::npos) << error_of(o);
  o.test = PerfTest::kBw;
  o.bidirectional = true;
  EXPECT_NE(error_of(o).find("--baseline ucx and -b"), std::string::npos) << error_of(o);
  o.bidirectional = false;
  o.wire = PerfWire::kVerbsRc;
  EXPECT_NE(error_of(o).find("drop --wire"), std::string::npos) << error_of(o);
}

TEST(PerfValidate, DefaultsAreValid) {
  EXPECT_TRUE(validate_perf_options(PerfOptions{}));
}

TEST(PerfValidate, ConflictingAndOutOfRangeFlagsNameTheFlag) {
  auto error_of = [](const PerfOptions& o) {
    Status s = validate_perf_options(o);
    return s ? std::string() : s.error().message;
  };
  PerfOptions a = with({"-s"});
  a.all_sizes = true;
  a.size_bytes = 64;
  EXPECT_NE(error_of(a).find("-a and -s"), std::string::npos);

  PerfOptions nd = with({"-n", "-D"});
  nd.iterations = 10;
  nd.duration_s = 1;
  EXPECT_NE(error_of(nd).find("-n and -D"), std::string::npos);

  PerfOptions s0 = with({"-s"});
  s0.size_bytes = 0;
  EXPECT_NE(error_of(s0).find("-s 0"), std::string::npos);

  PerfOptions w;
  w.window = 0;
  EXPECT_NE(error_of(w).find("--window 0"), std::string::npos);
  PerfOptions lanes;
  lanes.lanes = 65;
  EXPECT_NE(error_of(lanes).find("--lanes 65"), std::string::npos);
  PerfOptions seg;
  seg.segment_bytes = 70000;
  EXPECT_NE(error_of(seg).find("--segment 70000"), std::string::npos);
  PerfOptions stall;
  stall.stall_us = 1'000'001;
  EXPECT_NE(error_of(stall).find("--stall-us 1000001"), std::string::npos);
  PerfOptions dscp;
  dscp.dscp = 64;
  EXPECT_NE(error_of(dscp).find("-T 256"), std::string::npos);
  PerfOptions neg;
  neg.duration_s = -1;
  EXPECT_NE(error_of(neg).find("-D -1"), std::string::npos);

  PerfOptions both;
  both.loopback = true;
  both.server = "10.0.0.2";
  EXPECT_NE(error_of(both).find("--loopback"), std::string::npos);

  PerfOptions port0;
  port0.port_given = true;
  port0.port = 0;
  EXPECT_NE(error_of(port0).find("-p 0"), std::string::npos);
  port0.loopback = true;  // an ephemeral port is fine when both sides are here
  EXPECT_TRUE(validate_perf_options(port0));

  PerfOptions high;
  high.port_given = true;
  high.port = 65534;
  high.lanes = 4;
  EXPECT_NE(error_of(high).find("past 65535"), std::string::npos);
}

// I/O threads beyond the CPUs run, with a warning that names the counts; none without I/O threads.
TEST(PerfWarnings, IoThreadsBeyondTheCpusAreNamed) {
  PerfOptions o;
  o.loopback = true;
  o.io_threads = 2;  // 2 sides x (1 + 2) = 6 spinning threads
  auto w = perf_warnings(o, 2);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("--io-threads 2: 6 polling threads"), std::string::npos) << w[0];
  EXPECT_NE(w[0].find("on 2 usable CPUs"), std::string::npos) << w[0];
  EXPECT_TRUE(perf_warnings(o, 6).empty());
  o.loopback = false;  // a server or client is one side: 3 threads
  o.server = "10.0.0.1";
  EXPECT_TRUE(perf_warnings(o, 3).empty());
  ASSERT_EQ(perf_warnings(o, 2).size(), 1u);
  EXPECT_NE(perf_warnings(o, 2)[0].find("3 polling threads (1 side x"), std::string::npos);
  o.io_threads = 0;  // the progress thread alone: nothing to warn about, even on one CPU
  EXPECT_TRUE(perf_warnings(o, 1).empty());
}

TEST(PerfValidate, RolesFollowTheArguments) {
  PerfOptions o;
  EXPECT_EQ(role_of(o), PerfRole::kServer);
  o.server = "host";
  EXPECT_EQ(role_of(o), PerfRole::kClient);
  o.server.clear();
  o.loopback = true;
  EXPECT_EQ(role_of(o), PerfRole::kLoopback);
}

TEST(PerfValidate, TestNamesParse) {
  EXPECT_EQ(*parse_perf_test("bw"), PerfTest::kBw);
  EXPECT_EQ(*parse_perf_test("lat"), PerfTest::kLat);
  EXPECT_EQ(*parse_perf_test("both"), PerfTest::kBoth);
  auto bad = parse_perf_test("bandwidth");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("bw, lat or both"), std::string::npos);
}

}  // namespace
}  // namespace megascale::perf
