// Poisson flows from a flow-size CDF (flow_cdf.h): the shipped CDFs load with the means their points
// give; a bad CDF file is an error naming the file, line and why; samples follow the CDF; arrivals
// offer the target load within a few percent over a long window; flows start at their times in a
// simulation, and a Poisson scenario is deterministic for a seed; FCT size bins hold every flow once.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../../../support/source_path.h"
#include "megascale/congestion/config.h"
#include "megascale/sim/flow_cdf.h"
#include "megascale/sim/results.h"
#include "megascale/sim/scenario.h"

namespace megascale::sim {
namespace {

const std::string kCdfDir = megascale::test::source_path("configs/sim/cdf/");

TEST(FlowCdf, ShippedCdfsLoadWithTheirMeans) {
  auto web = FlowSizeCdf::load(kCdfDir + "web-search.txt");
  ASSERT_TRUE(web.ok()) << web.error().message;
  auto hadoop = FlowSizeCdf::load(kCdfDir + "hadoop.txt");
  ASSERT_TRUE(hadoop.ok()) << hadoop.error().message;
  // The means of the linear interpolation, computed from the files' points by hand:
  // web-search sum (p_i - p_{i-1})(x_i + x_{i-1})/2 = 1,711,250; Hadoop 120,420.75.
  EXPECT_NEAR(web->mean_bytes(), 1'711'250, 1);
  EXPECT_NEAR(hadoop->mean_bytes(), 120'420.75, 0.01);
  // Sampled sizes follow the CDF: the fraction under each point is its probability.
  Rng rng(11);
  const int n = 200'000;
  int under_10k = 0, under_1m = 0;
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    const uint64_t b = web->sample(rng);
    ASSERT_GE(b, 1u);
    ASSERT_LE(b, 30'000'000u);
    under_10k += b <= 10'000;
    under_1m += b <= 1'000'000;
    sum += static_cast<double>(b);
  }
  EXPECT_NEAR(under_10k / double{n}, 0.15, 0.005);
  EXPECT_NEAR(under_1m / double{n}, 0.70, 0.005);
  EXPECT_NEAR(sum / n / web->mean_bytes(), 1.0, 0.02);
}

TEST(FlowCdf, BadFilesNameTheLineAndWhy) {
  auto expect_error = [](const char* text, const std::string& want) {
    auto c = FlowSizeCdf::parse(text, "bad.txt");
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_NE(c.error().message.find(want), std::string::npos) << c.error().message;
  };
  expect_error("# sizes\n100 0.1\n50 0.5\n200 1\n", "bad.txt:3: '50 0.5': size_bytes must ascend");
  expect_error("100 10\n200 100\n",
               "bad.txt:1: '100 10': cumulative_probability must be in [0, 1] (a fraction");
  expect_error("100 0.5\n200 0.4\n300 1\n", "bad.txt:2: '200 0.4': cumulative_probability must not descend");
  expect_error("100 0.5\n200 0.9\n", "bad.txt:2: the last cumulative_probability must be 1");
  expect_error("100 abc\n200 1\n", "bad.txt:1: '100 abc': want two numbers");
  expect_error("100 0.5 7\n200 1\n", "bad.txt:1: '100 0.5 7': want two numbers");
  expect_error("200 1\n", "bad.txt: a flow-size CDF needs at least two points");
  EXPECT_FALSE(FlowSizeCdf::load("/nonexistent/cdf.txt").ok());
  // From a scenario: the file is checked when the run starts, named with the scenario's line.
  auto s = parse_sim_scenario(
      "fabric: star:4\nworkload: {kind: poisson, cdf: " + kCdfDir + "../poisson-web-search.yaml}\n",
      "p.yaml");
  ASSERT_TRUE(s.ok()) << s.error().message;
  auto r = run_sim_scenario(*s, "", nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("p.yaml:2: workload: "), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("want two numbers"), std::string::npos) << r.error().message;
  // A missing file is found when the scenario loads.
  auto m = parse_sim_scenario("fabric: star:4\nworkload: {kind: poisson, cdf: no-such.txt}\n", "p.yaml");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("p.yaml:2: cdf: no-such.txt: no such file"), std::string::npos)
      << m.error().message;
}

TEST(Poisson, OffersTheTargetLoadOverALongWindow) {
  auto cdf = FlowSizeCdf::load(kCdfDir + "hadoop.txt");
  ASSERT_TRUE(cdf.ok());
  const PoissonLoad p{
      .hosts = 16, .load = 0.4, .host_rate_bps = 100'000'000'000, .duration_ps = 100'000 * kPsPerUs};
  for (uint64_t seed : {1, 2, 3}) {
    Rng rng(seed);
    const std::vector<FlowSpec> flows = poisson_flows(p, *cdf, rng);
    // About 0.4 x 100G / 8 / 120 KB x 0.1 s = 4,150 flows a host.
    ASSERT_GT(flows.size(), 16u * 3'000);
    uint64_t bytes = 0;
    std::vector<uint64_t> per_host(p.hosts, 0);
    for (size_t i = 0; i < flows.size(); ++i) {
      const FlowSpec& f = flows[i];
      ASSERT_NE(f.src, f.dst);
      ASSERT_LT(f.dst, p.hosts);
      ASSERT_LT(f.start_ps, p.duration_ps);
      if (i > 0) {
        ASSERT_GE(f.start_ps, flows[i - 1].start_ps);
      }
      bytes += f.bytes;
      per_host[f.src] += f.bytes;
    }
    // Offered load: bytes over hosts x line rate x window. The sum's spread (compound Poisson, this
    // CDF's heavy tail) is ~2% here, so 8% is 4 standard deviations.
    const double load = static_cast<double>(bytes) * 8e12 / (16 * 100e9 * static_cast<double>(p.duration_ps));
    EXPECT_NEAR(load, 0.4, 0.4 * 0.08) << "seed " << seed;
    for (uint64_t b : per_host) EXPECT_GT(b, 0u);
  }
}

TEST(Poisson, FlowsStartAtTheirTimesAndTheScenarioIsDeterministic) {
  const std::string yaml =
      "fabric: star:8\n"
      "controller: swift\n"
      "lanes: 1\n"
      "workload: {kind: poisson, cdf: " +
      kCdfDir +
      "hadoop.txt, load: 0.3, duration_ms: 0.3, connections_per_pair: 2}\n"
      "results: {interval_us: 20, size_bins_bytes: [1000, 100000]}\n";
  auto s = parse_sim_scenario(yaml, "p.yaml");
  ASSERT_TRUE(s.ok()) << s.error().message;
  auto a = run_sim_scenario(*s, "", nullptr);
  ASSERT_TRUE(a.ok()) << a.error().message;
  const RunResult& r = a->result;
  ASSERT_GT(r.flows.size(), 20u);
  EXPECT_EQ(r.completed, r.flows.size());
  uint64_t bytes = 0;
  for (const FlowResult& f : r.flows) {
    EXPECT_EQ(f.started_ps, f.spec.start_ps);  // nothing to wait for: it starts on time
    bytes += f.spec.bytes;
  }
  EXPECT_LE(r.connections, 2u * 8 * 7);
  uint64_t delivered = 0;
  for (const SeriesPoint& p : r.series.points) delivered += p.delivered_bytes;
  EXPECT_EQ(delivered, bytes);

  const ScenarioSummary sa = summarize_run(*a);
  ASSERT_EQ(sa.size_bins.size(), 3u);
  size_t binned = 0;
  for (const SizeBin& b : sa.size_bins) binned += b.flows;
  EXPECT_EQ(binned, r.flows.size());
  EXPECT_GT(sa.offered_load, 0.0);

  auto b = run_sim_scenario(*s, "", nullptr);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(format_summary(sa), format_summary(summarize_run(*b)));
  for (size_t i = 0; i < r.flows.size(); ++i) EXPECT_EQ(r.flows[i].fct_ps, b->result.flows[i].fct_ps);
  SimScenario other = *s;
  other.seed = 2;
  auto c = run_sim_scenario(other, "", nullptr);
  ASSERT_TRUE(c.ok());
  auto fingerprint = [](const RunResult& x) {
    uint64_t h = x.flows.size();
    for (const FlowResult& f : x.flows) h = h * 31 + f.spec.bytes + f.spec.start_ps + f.spec.dst;
    return h;
  };
  EXPECT_NE(fingerprint(c->result), fingerprint(r));  // another seed, other flows
}

TEST(SizeBins, EveryFlowLandsInExactlyOneBin) {
  const std::vector<uint64_t> bytes{1, 999, 1000, 5000, 100'000, 7'000'000};
  const std::vector<TimePs> fct{10, 20, 30, 40, 50, 60}, ideal{10, 10, 10, 10, 10, 10};
  const std::vector<bool> done{true, true, true, false, true, true};
  auto bins = slowdown_by_size(bytes, fct, ideal, done, {1000, 100'000});
  ASSERT_EQ(bins.size(), 3u);
  EXPECT_EQ(bins[0].flows, 2u);  // [0, 1000): 1, 999
  EXPECT_EQ(bins[1].flows, 2u);  // [1000, 100000): 1000 (an edge starts its bin), 5000
  EXPECT_EQ(bins[2].flows, 2u);  // 100000, 7 MB
  EXPECT_EQ(bins[1].completed, 1u);
  EXPECT_DOUBLE_EQ(bins[0].slowdown_p50, 1.0);  // nearest rank of {1, 2}
  EXPECT_DOUBLE_EQ(bins[0].slowdown_p99, 2.0);
  EXPECT_DOUBLE_EQ(bins[1].slowdown_p99, 3.0);  // the incomplete flow is not in the percentiles
  EXPECT_EQ(bins[2].hi_bytes, UINT64_MAX);
}

TEST(Series, QueueBucketsCoverEveryBacklogWithinAQuarterOctave) {
  EXPECT_EQ(queue_bucket(0), 0u);
  EXPECT_EQ(queue_bucket_lo(0), 0u);
  EXPECT_EQ(queue_bucket(1), 1u);
  EXPECT_EQ(queue_bucket(1023), 1u);
  EXPECT_EQ(queue_bucket(1024), 2u);
  EXPECT_EQ(queue_bucket_lo(2), 1024u);
  for (uint64_t v = 1024; v < (uint64_t{1} << 40); v = v * 9 / 8 + 1) {
    const uint32_t b = queue_bucket(v);
    ASSERT_LE(queue_bucket_lo(b), v) << v;
    ASSERT_LT(v, queue_bucket_lo(b + 1)) << v;
    ASSERT_LE(static_cast<double>(queue_bucket_lo(b + 1)) / static_cast<double>(queue_bucket_lo(b)),
              1.25 + 1e-12);
  }
}

TEST(Series, PfcPauseTimeAndQueueSamplesAddUp) {
  // A lossless incast on a star: the series' pause time per interval adds up to the ports' totals.
  FabricConfig fc;
  fc.engine.cc = *cc::builtin_cc_config("fixed");
  fc.engine.lanes = 1;
  fc.switch_buffer_bytes = 200'000;
  fc.pfc = PfcConfig{.enabled = true, .xoff_bytes = 40'000, .xon_bytes = 20'000};
  auto fabric = build_star(fc, 9);
  ASSERT_TRUE(fabric.ok());
  auto r = run_flows(**fabric, incast_flows(8, 8, 300'000), 50'000 * kPsPerUs,
                     RunOptions{.series_interval_ps = 10 * kPsPerUs});
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->completed, 8u);
  ASSERT_GT(r->pfc_pauses, 0u);
  EXPECT_EQ(r->drops, 0u);
  TimePs series_paused = 0, ports_paused = 0;
  uint64_t ports_pauses = 0;
  for (const SeriesPoint& p : r->series.points) series_paused += p.paused_ps;
  size_t switch_ports = 0;
  for (const PortRecord& p : r->series.ports) {
    ports_paused += p.pfc_paused_ps;
    ports_pauses += p.pfc_pauses;
    switch_ports += !p.nic;
  }
  EXPECT_EQ(series_paused, r->pfc_paused_ps);
  EXPECT_EQ(ports_paused, r->pfc_paused_ps);
  EXPECT_EQ(r->series.ports.size(), (**fabric).queue_count());
  EXPECT_EQ(switch_ports, 9u);
  EXPECT_GT(ports_pauses, 0u);
  uint64_t samples = 0;
  for (uint64_t c : r->series.queue_histogram) samples += c;
  EXPECT_EQ(samples, r->series.points.size() * switch_ports);
  // The receiver's port queued: some samples are far from empty.
  EXPECT_GT(r->series.queue_histogram.size(), static_cast<size_t>(queue_bucket(10'000)));
}

}  // namespace
}  // namespace megascale::sim
