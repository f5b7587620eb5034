// `megascale coll`'s JSON: a row as an entry of nccl-tests' -J "results" (its keys and its root string),
// and the JSON line with every rank's time, the straggler (null with one rank) and the transport's
// counters.
#include <gtest/gtest.h>

#include "megascale/coll/report.h"

namespace megascale::coll {
namespace {

Row sample() {
  Row r;
  r.bytes = 1048576;
  r.count = 262144;
  r.type = DataType::kFloat;
  r.op = RedOp::kSum;
  r.root = 0;
  r.out_of_place = {
      .time_us = 100.5, .alg_gbs = 10.43, .bus_gbs = 18.26, .wrong = 0, .per_iter = std::nullopt};
  r.in_place = {
      .time_us = 99.0, .alg_gbs = 10.59, .bus_gbs = 18.54, .wrong = std::nullopt, .per_iter = std::nullopt};
  return r;
}

TEST(CollReport, NcclTestsResultsEntry) {
  const nlohmann::json j = result_json(sample(), "all_reduce", 20);
  EXPECT_EQ(j["size"], 1048576);
  EXPECT_EQ(j["count"], 262144);
  EXPECT_EQ(j["type"], "float");
  EXPECT_EQ(j["redop"], "sum");
  EXPECT_EQ(j["root"], "     0") << "nccl-tests writes the root as its %6i text";
  EXPECT_EQ(j["out_of_place"]["time"], 100.5);
  EXPECT_EQ(j["out_of_place"]["bus_bw"], 18.26);
  EXPECT_EQ(j["out_of_place"]["nwrong"], 0.0);
  EXPECT_TRUE(j["in_place"]["nwrong"].is_null());
  EXPECT_EQ(j["actual_iterations"], 20);
  EXPECT_EQ(j["experiment_name"], "all_reduce");
  EXPECT_FALSE(j.contains("out_of_place_per_iter")) << "only with -I";

  // -I: nccl-tests' per-iteration objects, and the JSON line's per_iter.
  Row row = sample();
  row.out_of_place.per_iter = iter_stats({{12, 10, 30}, {11, 20, 10}}, 1);
  const nlohmann::json k = result_json(row, "all_reduce", 3);
  const nlohmann::json& it = k["out_of_place_per_iter"];
  EXPECT_EQ(it["skipped_iterations"], 1);
  EXPECT_EQ(it["min_us"], 20.0);
  EXPECT_EQ(it["max_us"], 30.0);
  EXPECT_EQ(it["p99_us"], 30.0);
  EXPECT_EQ(it["times_us"], (std::vector<double>{12, 20, 30}));
  EXPECT_EQ(it["per_process_max_times_us"], (std::vector<std::vector<double>>{{12, 10, 30}, {11, 20, 10}}));
  for (const char* key : {"avg_us", "p50_us", "p95_us", "stdev_us", "cv_pct"})
    EXPECT_TRUE(it.contains(key)) << key;
  EXPECT_FALSE(k.contains("in_place_per_iter"));
  EXPECT_EQ(json_line(row, RowExtras{})["out_of_place"]["per_iter"]["p99_us"], 30.0);
}

TEST(CollReport, JsonLineWithRanksStragglerAndTransport) {
  RowExtras x;
  x.collective = Collective::kAllReduce;
  x.nranks = 4;
  x.net = "MegaScale";
  x.rank_time_us = {100, 101, 150, 99};
  x.transport = {{"retransmits", 3}};
  const nlohmann::json j = json_line(sample(), x);
  EXPECT_EQ(j["collective"], "all_reduce");
  EXPECT_EQ(j["ranks"], 4);
  EXPECT_EQ(j["net"], "MegaScale");
  EXPECT_EQ(j["root"], 0);
  EXPECT_EQ(j["out_of_place"]["busbw_gbs"], 18.26);
  EXPECT_EQ(j["out_of_place"]["wrong"], 0);
  EXPECT_TRUE(j["in_place"]["wrong"].is_null());
  EXPECT_EQ(j["rank_time_us"].size(), 4u);
  EXPECT_EQ(j["straggler"]["rank"], 2);
  EXPECT_DOUBLE_EQ(j["straggler"]["ratio"].get<double>(), 150.0 / 100.5);
  EXPECT_EQ(j["transport"]["retransmits"], 3);
  x.rank_time_us = {100};
  EXPECT_TRUE(json_line(sample(), x)["straggler"].is_null());
}

}  // namespace
}  // namespace megascale::coll
