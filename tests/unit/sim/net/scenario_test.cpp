// `megascale sim` scenarios: the shipped files load, a bad key or value is an error naming the file,
// line, key and value, and the same scenario and seed give the identical summary twice through the
// entry point the CLI uses (run_sim_scenario + summarize_run + format_summary).
#include "megascale/sim/scenario.h"

#include <gtest/gtest.h>

#include <string>

#include "../../../support/source_path.h"

namespace megascale::sim {
namespace {

const std::string kDir = megascale::test::source_path("configs/sim/");

constexpr const char* kGood = R"(name: t
fabric: star:9
host_gbps: 100
link_delay_us: 2
switch:
  buffer_bytes: 300000
  ecn: {kmin_bytes: 50000, kmax_bytes: 200000, pmax: 0.1}
  pfc: {enabled: true, xoff_bytes: 60000, xon_bytes: 40000}
ecmp: spray
controller: swift
lanes: 2
workload: {kind: incast, senders: 8, receiver: 8, bytes: 200000}
seed: 5
time_limit_ms: 50
)";

TEST(Scenario, GoodFileLoads) {
  auto s = parse_sim_scenario(kGood, "good.yaml");
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->fabric, "star");
  EXPECT_EQ(s->star_hosts, 9u);
  EXPECT_EQ(s->link_delay_ps, 2 * kPsPerUs);
  EXPECT_EQ(s->buffer_bytes, 300'000u);
  EXPECT_TRUE(s->red.enabled);
  EXPECT_EQ(s->red.kmax_bytes, 200'000u);
  EXPECT_DOUBLE_EQ(s->red.pmax, 0.1);
  EXPECT_TRUE(s->pfc.enabled);
  EXPECT_EQ(s->pfc.xon_bytes, 40'000u);
  EXPECT_TRUE(s->spray);
  EXPECT_EQ(s->controller, "swift");
  EXPECT_EQ(s->lanes, 2u);
  EXPECT_EQ(s->workload, SimScenario::Workload::incast);
  EXPECT_EQ(s->senders, 8u);
  EXPECT_EQ(s->bytes, 200'000u);
  EXPECT_EQ(s->seed, 5u);
  EXPECT_EQ(s->time_limit_ps, 50 * 1000 * kPsPerUs);
  for (const char* f : {"incast-small.yaml", "permutation-small.yaml", "cc-compare-incast-pfc.yaml",
                        "htsim-permutation-1024.yaml"}) {
    auto shipped = load_sim_scenario(kDir + f);
    EXPECT_TRUE(shipped.ok()) << f << ": " << (shipped.ok() ? "" : shipped.error().message);
  }
  // Fabrics live in configs/fabrics/ and are presets by their name.
  EXPECT_EQ(load_sim_scenario(kDir + "htsim-permutation-1024.yaml")->fabric, "fat-tree-k16");
}

TEST(Scenario, BadKeyAndBadValueNameFileLineKeyAndValue) {
  std::string bad_key = kGood;
  bad_key.replace(bad_key.find("lanes: 2"), 8, "lane: 2");
  auto a = parse_sim_scenario(bad_key, "bad.yaml");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.error().message.find("bad.yaml:11: lane: 2: unknown key"), std::string::npos)
      << a.error().message;

  std::string bad_value = kGood;
  bad_value.replace(bad_value.find("pmax: 0.1"), 9, "pmax: 1.5");
  auto b = parse_sim_scenario(bad_value, "bad.yaml");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().message.find("bad.yaml:7: pmax: 1.5: must be in [0, 1]"), std::string::npos)
      << b.error().message;

  std::string bad_kind = kGood;
  bad_kind.replace(bad_kind.find("kind: incast"), 12, "kind: ring");
  auto c = parse_sim_scenario(bad_kind, "bad.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find(
                "bad.yaml:12: kind: ring: must be incast, permutation, all-to-all, collective or poisson"),
            std::string::npos)
      << c.error().message;

  EXPECT_FALSE(parse_sim_scenario("fabric: nowhere-fabric\nworkload: {kind: permutation}\n", "x.yaml").ok());
  EXPECT_FALSE(parse_sim_scenario("fabric: star:9\n", "x.yaml").ok());  // no workload
  EXPECT_FALSE(parse_sim_scenario("fabric: [unclosed\n", "x.yaml").ok());
  // An unknown controller is found when the run starts, named with the file.
  auto s = parse_sim_scenario(kGood, "good.yaml");
  ASSERT_TRUE(s.ok());
  auto r = run_sim_scenario(*s, "no-such-controller", nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("good.yaml"), std::string::npos);
}

// Found by fuzz_sim_scenario (tests/fuzz/corpus/fuzz_sim_scenario/crash_*): each used to end the process.
TEST(Scenario, PathsTooLongAndAliasLoopsAreErrorsNotCrashes) {
  const std::string workload = "workload: {kind: incast, senders: 1, receiver: 0, bytes: 1}\n";
  // A name longer than the file system takes (ENAMETOOLONG): std::filesystem::exists threw.
  auto a = parse_sim_scenario("fabric: " + std::string(300, 'a') + "\n" + workload, "x.yaml");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.error().message.find("not a fabric preset"), std::string::npos) << a.error().message;
  auto b = parse_sim_scenario(
      "fabric: star:2\nworkload: {kind: poisson, load: 0.3, cdf: " + std::string(300, 'c') + "}\n", "x.yaml");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().message.find("no such file"), std::string::npos) << b.error().message;
  // A cc map that contains itself through an alias: the flattening recursed until the stack ran out.
  auto c = parse_sim_scenario("fabric: star:2\n" + workload + "cc: &c {rto: *c}\n", "x.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("x.yaml:3: rto: "), std::string::npos) << c.error().message;
  EXPECT_NE(c.error().message.find("cc: keys nest at most 3 deep"), std::string::npos) << c.error().message;
  // Aliases that repeat a map: refused past 1000 keys instead of flattened (40 x 40 x 40 here).
  std::string fan = "fabric: star:2\n" + workload + "cc:\n  a: &a {";
  for (int i = 0; i < 40; ++i) fan += (i ? ", k" : "k") + std::to_string(i) + ": 1";
  fan += "}\n  b: &b {";
  for (int i = 0; i < 40; ++i) fan += (i ? ", m" : "m") + std::to_string(i) + ": *a";
  fan += "}\n";
  for (int i = 0; i < 40; ++i) fan += "  x" + std::to_string(i) + ": *b\n";
  auto d = parse_sim_scenario(fan, "x.yaml");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message.find("cc: more than 1000 keys"), std::string::npos) << d.error().message;
  // Nested keys up to a preset's own depth still flatten.
  auto e =
      parse_sim_scenario("fabric: star:2\n" + workload + "cc: {hybrid: {swift: {beta: 0.5}}}\n", "x.yaml");
  ASSERT_TRUE(e.ok()) << e.error().message;
  ASSERT_EQ(e->cc_overrides.size(), 1u);
  EXPECT_EQ(e->cc_overrides[0].first, "hybrid.swift.beta");
}

TEST(Scenario, SameSeedGivesTheIdenticalSummaryTwice) {
  auto s = load_sim_scenario(kDir + "permutation-small.yaml");
  ASSERT_TRUE(s.ok()) << s.error().message;
  s->bytes = 300'000;  // keep the test fast
  int reports = 0;
  uint64_t delivered = 0;
  RunProgress progress{.report =
                           [&](const RunProgress::Sample& p) {
                             ++reports;
                             EXPECT_GE(p.delivered_bytes, delivered);  // a count that only grows
                             EXPECT_EQ(p.total_bytes, 32u * 300'000u);
                             delivered = p.delivered_bytes;
                           },
                       .interval_ps = 20 * kPsPerUs};
  auto a = run_sim_scenario(*s, "", &progress);
  auto b = run_sim_scenario(*s, "", nullptr);
  ASSERT_TRUE(a.ok()) << a.error().message;
  ASSERT_TRUE(b.ok());
  EXPECT_GT(reports, 1);
  EXPECT_GT(delivered, 0u);
  EXPECT_LE(delivered, 32u * 300'000u);
  const ScenarioSummary sa = summarize_run(*a), sb = summarize_run(*b);
  EXPECT_EQ(sa.completed, 32u);
  EXPECT_EQ(format_summary(sa), format_summary(sb));
  EXPECT_EQ(sa.events, sb.events);
  for (size_t i = 0; i < a->result.flows.size(); ++i)
    EXPECT_EQ(a->result.flows[i].fct_ps, b->result.flows[i].fct_ps);
  // Slowdown is FCT over the ideal: never below 1.
  EXPECT_GE(sa.slowdown_p50, 1.0);
  // Another seed is another permutation and another run.
  s->seed = 6;
  auto c = run_sim_scenario(*s, "", nullptr);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(summarize_run(*c).events, sa.events);
}

}  // namespace
}  // namespace megascale::sim

namespace megascale::sim {
namespace {

// Swift's 5000-to-1 layout: several flows per incast sender, each its own flow spec (and, with
// connections_per_pair, its own connection); the shipped 5000-to-1 file loads with 50 x 100.
TEST(Scenario, IncastFlowsPerSender) {
  auto s = parse_sim_scenario(
      "fabric: star:6\nworkload: {kind: incast, senders: 4, receiver: 2, flows_per_sender: 3, "
      "connections_per_pair: 3, bytes: 1000}\n",
      "fps.yaml");
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->flows_per_sender, 3u);
  EXPECT_EQ(s->connections_per_pair, 3u);
  auto flows = scenario_flows(*s, 6, 100'000'000'000ULL, nullptr);
  ASSERT_TRUE(flows.ok()) << flows.error().message;
  ASSERT_EQ(flows->size(), 12u);
  std::vector<uint32_t> per_source(6, 0);
  for (const FlowSpec& f : *flows) {
    EXPECT_EQ(f.dst, 2u);
    EXPECT_NE(f.src, 2u);  // the receiver is skipped
    ++per_source[f.src];
  }
  EXPECT_EQ(per_source, (std::vector<uint32_t>{3, 3, 0, 3, 3, 0}));
  auto bad = parse_sim_scenario("fabric: star:6\nworkload: {kind: incast, senders: 4, flows_per_sender: 0}\n",
                                "bad.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("bad.yaml:2"), std::string::npos) << bad.error().message;
  EXPECT_NE(bad.error().message.find("flows_per_sender"), std::string::npos) << bad.error().message;
  auto paper = load_sim_scenario(kDir + "swift-incast-5000.yaml");
  ASSERT_TRUE(paper.ok()) << paper.error().message;
  EXPECT_EQ(paper->senders * paper->flows_per_sender, 5000u);
}

// A key written twice is refused with both lines (yaml-cpp keeps both; the parser would take the last).
TEST(Scenario, DuplicateKeyIsRefusedWithBothLines) {
  auto top = parse_sim_scenario(std::string(kGood) + "seed: 6\n", "dup.yaml");
  ASSERT_FALSE(top);
  EXPECT_NE(top.error().message.find("dup.yaml:15: duplicate key 'seed' (first on line 13)"),
            std::string::npos)
      << top.error().message;
  std::string nested = kGood;
  nested.replace(nested.find("  buffer_bytes: 300000\n"), 0, "  buffer_bytes: 1\n");
  auto inner = parse_sim_scenario(nested, "dup.yaml");
  ASSERT_FALSE(inner);
  EXPECT_NE(inner.error().message.find("dup.yaml:7: duplicate key 'switch.buffer_bytes' (first on line 6)"),
            std::string::npos)
      << inner.error().message;
}

// A cc section the run's controller does not read is a warning of the run (megascale sim prints it).
TEST(Scenario, ACcSectionTheControllerDoesNotReadIsAWarning) {
  auto s = parse_sim_scenario(std::string(kGood) + "cc:\n  dcqcn: {g: 0.5}\n", "unread.yaml");
  ASSERT_TRUE(s.ok()) << s.error().message;
  s->bytes = 20'000;  // keep the test fast
  auto run = run_sim_scenario(*s, "", nullptr);
  ASSERT_TRUE(run.ok()) << run.error().message;
  ASSERT_EQ(run->warnings.size(), 1u);
  EXPECT_EQ(run->warnings[0],
            "unread.yaml: controller swift: dcqcn.g is set, but the swift controller does not read the dcqcn "
            "section");
  auto as_dcqcn = run_sim_scenario(*s, "dcqcn-nic", nullptr);
  ASSERT_TRUE(as_dcqcn.ok()) << as_dcqcn.error().message;
  EXPECT_TRUE(as_dcqcn->warnings.empty());
}

}  // namespace
}  // namespace megascale::sim
