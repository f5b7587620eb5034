// Collective workloads (collective.h): a ring all-reduce moves exactly 2(n-1)/n x size per rank and
// each step starts when the rank's previous receive is done; all-gather and reduce-scatter take n-1
// steps; trees reduce up then broadcast down, the double tree's inner ranks are the first tree's
// leaves; 3D-parallel groups are placed TP innermost, bad degrees are a clear error (also from a
// scenario file, with its line); a run's delivered-bytes series adds up to the flows' bytes; the same
// scenario and seed give the same run.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "../../../support/source_path.h"
#include "megascale/congestion/config.h"
#include "megascale/sim/collective.h"
#include "megascale/sim/scenario.h"

namespace megascale::sim {
namespace {

constexpr TimePs kLimit = 100 * 1000 * kPsPerUs;

FabricConfig star_config() {
  FabricConfig fc;
  fc.engine.cc = *cc::builtin_cc_config("swift");
  fc.engine.lanes = 1;
  fc.seed = 3;
  return fc;
}

TEST(Collective, RingAllReduceSendsTwoNMinusOneOverNOfTheSizePerRankInChainedSteps) {
  for (uint32_t n : {2u, 4u, 8u}) {
    std::vector<uint32_t> group;
    for (uint32_t r = 0; r < n; ++r) group.push_back(10 + 3 * r);  // any hosts, in rank order
    const uint64_t size = 8 * 3 * 5 * 7 * 1024;                    // divisible by every n here
    std::vector<FlowSpec> flows;
    ASSERT_TRUE(append_ring_flows(flows, group, CollectiveOp::all_reduce, size).ok());
    ASSERT_EQ(flows.size(), size_t{2} * (n - 1) * n);
    std::map<uint32_t, uint64_t> sent, received;
    for (size_t i = 0; i < flows.size(); ++i) {
      const FlowSpec& f = flows[i];
      sent[f.src] += f.bytes;
      received[f.dst] += f.bytes;
      const size_t step = i / n;
      if (step == 0) {
        EXPECT_TRUE(f.after.empty());
        continue;
      }
      // It waits for exactly one flow: the previous step's flow into its own source.
      ASSERT_EQ(f.after.size(), 1u);
      const FlowSpec& prev = flows[f.after[0]];
      EXPECT_EQ(f.after[0] / n, step - 1);
      EXPECT_EQ(prev.dst, f.src);
    }
    for (uint32_t h : group) {
      EXPECT_EQ(sent[h], 2 * (n - 1) * size / n) << "n " << n;
      EXPECT_EQ(received[h], 2 * (n - 1) * size / n);
      EXPECT_DOUBLE_EQ(static_cast<double>(sent[h]), ring_bytes_per_rank(CollectiveOp::all_reduce, n, size));
    }
  }
  std::vector<FlowSpec> ag, rs;
  ASSERT_TRUE(append_ring_flows(ag, {0, 1, 2, 3}, CollectiveOp::all_gather, 4000).ok());
  ASSERT_TRUE(append_ring_flows(rs, {0, 1, 2, 3}, CollectiveOp::reduce_scatter, 4000).ok());
  EXPECT_EQ(ag.size(), 12u);  // 3 steps x 4 ranks
  EXPECT_EQ(rs.size(), 12u);
  std::vector<FlowSpec> bad;
  EXPECT_FALSE(append_ring_flows(bad, {0}, CollectiveOp::all_reduce, 4000).ok());
  EXPECT_FALSE(append_ring_flows(bad, {0, 1, 2}, CollectiveOp::all_reduce, 2).ok());
}

TEST(Collective, RingStepsRunInOrderOnAFabricAndTheSeriesCountsEveryByte) {
  auto fabric = build_star(star_config(), 6);
  ASSERT_TRUE(fabric.ok()) << fabric.error().message;
  const uint32_t n = 6;
  const uint64_t size = 6 * 100'000;
  std::vector<FlowSpec> flows;
  ASSERT_TRUE(append_ring_flows(flows, {0, 1, 2, 3, 4, 5}, CollectiveOp::all_reduce, size).ok());
  auto r = run_flows(**fabric, flows, kLimit, RunOptions{.series_interval_ps = 5 * kPsPerUs});
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->completed, flows.size());
  for (size_t i = 0; i < flows.size(); ++i) {
    const FlowResult& f = r->flows[i];
    if (i < n) {
      EXPECT_EQ(f.started_ps, 0u);
    } else {
      // Started the instant the previous step's receive into its source completed, not before.
      const FlowResult& prev = r->flows[flows[i].after[0]];
      EXPECT_EQ(f.started_ps, prev.started_ps + prev.fct_ps) << "flow " << i;
    }
  }
  // The chain of 2(n-1) steps cannot end before 2(n-1) chunk serialisations.
  const TimePs chunk_ps = serialization_ps(size / n, 100'000'000'000);
  EXPECT_GT(r->makespan_ps, 2 * (n - 1) * chunk_ps);
  uint64_t delivered = 0;
  for (const SeriesPoint& p : r->series.points) delivered += p.delivered_bytes;
  EXPECT_EQ(delivered, 2 * (n - 1) * size);
  uint64_t per_receiver = 0;
  for (const ReceiverBytes& b : r->series.per_receiver) per_receiver += b.bytes;
  EXPECT_EQ(per_receiver, delivered);
  EXPECT_EQ(r->connections, n);  // one per ring edge, reused by every step
}

TEST(Collective, TreeReducesUpThenBroadcastsDownAndTheDoubleTreeSwapsInnerRanks) {
  std::vector<uint32_t> group{0, 1, 2, 3, 4, 5, 6, 7};
  std::vector<FlowSpec> one;
  ASSERT_TRUE(append_tree_all_reduce_flows(one, group, 80'000, 1, false).ok());
  ASSERT_EQ(one.size(), 14u);  // 7 edges up, 7 down
  std::set<uint32_t> inner;
  for (size_t i = 0; i < 7; ++i) {
    EXPECT_EQ(one[i].bytes, 80'000u);
    inner.insert(one[i].dst);                                           // parents
    for (uint32_t d : one[i].after) EXPECT_EQ(one[d].dst, one[i].src);  // its children's pieces
  }
  for (size_t i = 7; i < 14; ++i) {
    ASSERT_FALSE(one[i].after.empty());
    if (one[i].src == 0) {
      for (uint32_t d : one[i].after) EXPECT_EQ(one[d].dst, 0u);  // the root's reduced inputs
    } else {
      ASSERT_EQ(one[i].after.size(), 1u);
      EXPECT_EQ(one[one[i].after[0]].dst, one[i].src);  // forwarded after its parent's piece
      EXPECT_GE(one[i].after[0], 7u);
    }
  }
  EXPECT_EQ(inner, (std::set<uint32_t>{0, 1, 2, 3}));

  std::vector<FlowSpec> two;
  ASSERT_TRUE(append_tree_all_reduce_flows(two, group, 80'000, 2, true).ok());
  ASSERT_EQ(two.size(), 4 * 14u);  // 2 chunks x 2 trees
  std::set<uint32_t> inner2;
  uint64_t total = 0;
  for (size_t i = 14; i < 21; ++i) inner2.insert(two[i].dst);  // chunk 0, second tree, reduce half
  for (size_t i = 0; i < two.size(); i += 14) total += two[i].bytes;
  EXPECT_EQ(inner2, (std::set<uint32_t>{7, 6, 5, 4}));
  EXPECT_EQ(total, 80'000u);  // the pieces add up to the buffer

  auto fabric = build_star(star_config(), 8);
  ASSERT_TRUE(fabric.ok());
  auto r = run_flows(**fabric, two, kLimit);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->completed, two.size());
  for (size_t i = 0; i < two.size(); ++i) {
    for (uint32_t d : two[i].after) {
      EXPECT_GE(r->flows[i].started_ps, r->flows[d].started_ps + r->flows[d].fct_ps);
    }
  }
}

TEST(Collective, GroupsArePlacedTpInnermostAndBadDegreesAreAnError) {
  const Parallelism3D p{.tp = 2, .pp = 2, .dp = 2};
  using G = std::vector<std::vector<uint32_t>>;
  EXPECT_EQ(*parallel_groups(p, 8, ParallelGroup::tp), (G{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(*parallel_groups(p, 8, ParallelGroup::pp), (G{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(*parallel_groups(p, 8, ParallelGroup::dp), (G{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(parallel_groups(p, 8, ParallelGroup::all)->front().size(), 8u);
  auto bad = parallel_groups({.tp = 2, .pp = 2, .dp = 3}, 8, ParallelGroup::dp);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("tp 2 x pp 2 x dp 3 = 12 ranks, but there are 8 hosts"),
            std::string::npos)
      << bad.error().message;
  EXPECT_FALSE(parallel_groups({.tp = 0, .pp = 1, .dp = 8}, 8, ParallelGroup::dp).ok());

  // From a scenario: the error names the file and the workload's line.
  const char* yaml =
      "fabric: star:8\n"
      "controller: swift\n"
      "workload: {kind: collective, group: dp, tp: 2, pp: 2, dp: 3, bytes: 60000}\n";
  auto s = parse_sim_scenario(yaml, "dp.yaml");
  ASSERT_TRUE(s.ok()) << s.error().message;
  auto r = run_sim_scenario(*s, "", nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("dp.yaml:3: workload: tp 2 x pp 2 x dp 3 = 12 ranks"), std::string::npos)
      << r.error().message;
  // A tree all-gather is refused when the file loads.
  auto t = parse_sim_scenario(
      "fabric: star:8\nworkload: {kind: collective, op: all-gather, algorithm: tree}\n", "t.yaml");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message.find("t.yaml:2: workload: tree algorithms do all-reduce only"),
            std::string::npos)
      << t.error().message;
}

TEST(Collective, AllToAllSendsToEveryOtherHostOnce) {
  auto flows = all_to_all_flows({2, 4, 6, 8}, 1000);
  ASSERT_EQ(flows.size(), 12u);
  std::set<std::pair<uint32_t, uint32_t>> pairs;
  for (const FlowSpec& f : flows) {
    EXPECT_NE(f.src, f.dst);
    pairs.emplace(f.src, f.dst);
  }
  EXPECT_EQ(pairs.size(), 12u);
  EXPECT_NE(flows[0].dst, flows[3].dst);  // rotated: not everyone's first destination is the same
}

TEST(Collective, AFailedStepFailsTheStepsThatWaitForItAndTheRunEnds) {
  // A 4-rank ring on small-2tier's first 4 NICs; rank 1's link is down for good and the retry budget
  // is 1 ms: its flows fail ("peer unreachable"), the steps waiting for them fail without starting,
  // and the run ends then, not at the time limit.
  const char* yaml =
      "fabric: small-2tier\n"
      "controller: swift\n"
      "lanes: 1\n"
      "cc: {rto: {min_rto_us: 20, initial_rto_us: 100, retry_budget_s: 0.001}}\n"
      "workload: {kind: collective, op: all-reduce, group: all, hosts: 4, bytes: 320000}\n"
      "link_events: [{at_us: 0, link: \"h0:n1\", state: down}]\n"
      "time_limit_ms: 50\n";
  auto s = parse_sim_scenario(yaml, "f.yaml");
  ASSERT_TRUE(s.ok()) << s.error().message;
  auto r = run_sim_scenario(*s, "", nullptr);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const RunResult& res = r->result;
  ASSERT_EQ(res.flows.size(), 24u);  // 6 steps x 4 ranks
  EXPECT_EQ(res.completed + res.failed, res.flows.size());
  EXPECT_GT(res.failed, 0u);
  size_t waited = 0;
  for (const FlowResult& f : res.flows) {
    if (f.error.find("not started: flow ") == std::string::npos) continue;
    ++waited;
    EXPECT_TRUE(f.failed);
    EXPECT_EQ(f.fct_ps, 0u);  // never started
  }
  EXPECT_GT(waited, 0u);
  EXPECT_LT(res.simulated_ps - res.start_ps, 50 * 1000 * kPsPerUs);
}

TEST(Collective, PhasesOfAStepChainPerRankAndAPipelinePassChainsItsStages) {
  std::vector<FlowSpec> pipe;
  ASSERT_TRUE(append_pipeline_flows(pipe, {3, 1, 2, 0}, 5000).ok());
  ASSERT_EQ(pipe.size(), 3u);
  EXPECT_TRUE(pipe[0].after.empty());
  EXPECT_EQ(pipe[1].after, std::vector<uint32_t>{0});
  EXPECT_EQ(pipe[2].src, 2u);
  EXPECT_EQ(pipe[2].dst, 0u);
  EXPECT_FALSE(append_pipeline_flows(pipe, {3}, 5000).ok());

  // Phase 1: ring all-gather in TP pairs {0,1}..{6,7}; phase 2: ring all-reduce in DP groups {0,2,4,6},
  // {1,3,5,7}. A phase-2 first step waits for the last phase-1 flow into its source.
  const Parallelism3D p{.tp = 2, .pp = 1, .dp = 4};
  std::vector<FlowSpec> flows;
  const auto tp_groups = parallel_groups(p, 8, ParallelGroup::tp);
  const auto dp_groups = parallel_groups(p, 8, ParallelGroup::dp);
  ASSERT_TRUE(tp_groups.ok() && dp_groups.ok());
  for (const auto& g : *tp_groups)
    ASSERT_TRUE(append_ring_flows(flows, g, CollectiveOp::all_gather, 200'000).ok());
  const size_t begin = flows.size();
  ASSERT_EQ(begin, 8u);  // 4 pairs x 1 step x 2 ranks
  for (const auto& g : *dp_groups)
    ASSERT_TRUE(append_ring_flows(flows, g, CollectiveOp::all_reduce, 400'000).ok());
  std::vector<bool> was_first(flows.size(), false);  // ring step 0: nothing to wait for yet
  for (size_t i = begin; i < flows.size(); ++i) was_first[i] = flows[i].after.empty();
  chain_after_phase(flows, 0, begin);
  std::vector<size_t> firsts;
  for (size_t i = begin; i < flows.size(); ++i) {
    if (was_first[i]) {
      firsts.push_back(i);
      ASSERT_EQ(flows[i].after.size(), 1u) << i;  // a TP pair: one source into each rank
      EXPECT_LT(flows[i].after[0], begin);
      EXPECT_EQ(flows[flows[i].after[0]].dst, flows[i].src);
    } else {
      for (uint32_t d : flows[i].after) EXPECT_GE(d, begin);  // later steps keep their own chain
    }
  }
  EXPECT_EQ(firsts.size(), 8u);
  auto fabric = build_star(star_config(), 8);
  ASSERT_TRUE(fabric.ok());
  auto r = run_flows(**fabric, flows, kLimit);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->completed, flows.size());
  for (size_t i : firsts) {
    const FlowResult& dep = r->flows[flows[i].after[0]];
    EXPECT_EQ(r->flows[i].started_ps, dep.started_ps + dep.fct_ps);
  }

  // The same as a scenario; a phase's bad key names its line.
  const char* yaml =
      "fabric: star:8\n"
      "controller: swift\n"
      "workload:\n"
      "  kind: collective\n"
      "  tp: 2\n"
      "  pp: 2\n"
      "  phases:\n"
      "    - {group: tp, op: all-gather, bytes: 200000}\n"
      "    - {group: pp, op: send-recv, bytes: 100000}\n"
      "    - {group: dp, op: all-reduce, algorithm: double-tree, chunks: 2, bytes: 400000}\n";
  auto s = parse_sim_scenario(yaml, "step.yaml");
  ASSERT_TRUE(s.ok()) << s.error().message;
  ASSERT_EQ(s->phases.size(), 3u);
  EXPECT_EQ(s->phases[1].op, CollectiveOp::send_recv);
  EXPECT_EQ(s->phases[2].algorithm, CollectiveAlgorithm::double_tree);
  auto run = run_sim_scenario(*s, "", nullptr);
  ASSERT_TRUE(run.ok()) << run.error().message;
  const ScenarioSummary sum = summarize_run(*run);
  // 4 TP pairs x 2 flows, 4 PP pairs x 1 flow, 4 DP pairs x (2 trees x 2 chunks x 2 flows).
  EXPECT_EQ(sum.flows, 8u + 4 + 4 * 8);
  EXPECT_EQ(sum.completed, sum.flows);
  EXPECT_EQ(sum.collective_phases, 3u);
  EXPECT_GT(sum.collective_us, 0.0);
  std::string bad = yaml;
  bad.replace(bad.find("chunks: 2"), 9, "chunk: 2");
  auto b = parse_sim_scenario(bad, "step.yaml");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(
      b.error().message.find("step.yaml:10: chunk: 2: unknown key (group, op, algorithm, bytes, chunks)"),
      std::string::npos)
      << b.error().message;
}

TEST(Collective, EveryShippedScenarioLoads) {
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(megascale::test::source_path("configs/sim"))) {
    const std::string path = e.path().string();
    // Fabric files live beside the scenarios; a scenario names a workload.
    if (e.path().extension() != ".yaml" || path.find("fat-tree") != std::string::npos) continue;
    auto s = load_sim_scenario(path);
    EXPECT_TRUE(s.ok()) << path << ": " << (s.ok() ? "" : s.error().message);
    ++files;
  }
  EXPECT_GE(files, 16u);  // the scenarios this test was written against; more may be added
  auto ring = load_sim_scenario(megascale::test::source_path("configs/sim/ring-allreduce-dp.yaml"));
  ASSERT_TRUE(ring.ok());
  EXPECT_EQ(ring->workload, SimScenario::Workload::collective);
  EXPECT_EQ(ring->group, ParallelGroup::dp);
  EXPECT_EQ(ring->parallel.tp * ring->parallel.pp * ring->parallel.dp, 32u);
}

TEST(Collective, ScenarioRunIsDeterministicAndReportsBusBandwidth) {
  const char* yaml =
      "fabric: star:8\n"
      "controller: swift\n"
      "lanes: 1\n"
      "workload: {kind: collective, op: all-reduce, group: dp, tp: 2, pp: 1, bytes: 400000}\n"
      "results: {interval_us: 5}\n";
  auto s = parse_sim_scenario(yaml, "c.yaml");
  ASSERT_TRUE(s.ok()) << s.error().message;
  auto a = run_sim_scenario(*s, "", nullptr);
  auto b = run_sim_scenario(*s, "", nullptr);
  ASSERT_TRUE(a.ok()) << a.error().message;
  ASSERT_TRUE(b.ok());
  const ScenarioSummary sa = summarize_run(*a), sb = summarize_run(*b);
  EXPECT_EQ(sa.completed, 2u * 6 * 4);  // 2 DP groups of 4: 6 steps x 4 ranks each
  EXPECT_EQ(format_summary(sa), format_summary(sb));
  ASSERT_EQ(a->result.series.points.size(), b->result.series.points.size());
  for (size_t i = 0; i < a->result.series.points.size(); ++i)
    EXPECT_EQ(a->result.series.points[i].delivered_bytes, b->result.series.points[i].delivered_bytes);
  // busbw = algbw x 2(n-1)/n, below the 100G NIC.
  EXPECT_EQ(a->group_ranks, 4u);
  EXPECT_NEAR(sa.busbw_gbps, sa.algbw_gbps * 1.5, 1e-9);
  EXPECT_GT(sa.busbw_gbps, 10.0);
  EXPECT_LT(sa.busbw_gbps, 100.0);
}

}  // namespace
}  // namespace megascale::sim
