// `megascale coll`'s flags: nccl-tests' defaults and spellings parse into a plan (sizes swept, names
// resolved, all expanded), and each bad value is refused naming its flag.
#include <gtest/gtest.h>

#include "megascale/coll/options.h"

namespace megascale::coll {
namespace {

Result<CollPlan> parse(std::vector<std::string> args, CollOptions* out = nullptr) {
  CLI::App app;
  CollOptions o;
  add_coll_options(app, o);
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  app.parse(args);
  if (out != nullptr) *out = o;
  return plan_coll(o);
}

TEST(CollOptions, NcclTestsDefaultsAndFlags) {
  CollOptions o;
  auto p = parse({}, &o);
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_EQ(p->collectives, std::vector<Collective>{Collective::kAllReduce});
  EXPECT_EQ(p->sizes, std::vector<uint64_t>{32u << 20});
  EXPECT_EQ(p->types, std::vector<DataType>{DataType::kFloat});
  EXPECT_EQ(p->ops, std::vector<RedOp>{RedOp::kSum});
  EXPECT_EQ(o.iters, 20);
  EXPECT_EQ(o.check, 1);

  auto q = parse(
      {"all_gather", "reduce_scatter", "-b", "8", "-e", "128M", "-f", "2",  "-n", "50",       "-w",      "5",
       "-d",         "bfloat16",       "-z", "1", "-a", "3",    "-T", "30", "-J", "out.json", "--nproc", "8"},
      &o);
  ASSERT_TRUE(q) << q.error().message;
  EXPECT_EQ(q->collectives, (std::vector<Collective>{Collective::kAllGather, Collective::kReduceScatter}));
  EXPECT_EQ(q->sizes.size(), 25u) << "8 B .. 128 MiB by 2";
  EXPECT_EQ(q->sizes.back(), 128u << 20);
  EXPECT_EQ(q->types, std::vector<DataType>{DataType::kBfloat16});
  EXPECT_EQ(o.iters, 50);
  EXPECT_EQ(o.timeout_s, 30);
  EXPECT_EQ(o.json_path, "out.json");
  EXPECT_EQ(o.nproc, 8);

  auto all = parse({"all", "-d", "all", "-o", "all", "-r", "all"});
  ASSERT_TRUE(all) << all.error().message;
  EXPECT_EQ(all->collectives.size(), 7u);
  EXPECT_EQ(all->types.size(), 10u);
  EXPECT_EQ(all->ops.size(), 5u);
  EXPECT_TRUE(all->all_roots);

  auto per_iter = parse({"-I", "1", "-K", "3", "-n", "10"}, &o);
  ASSERT_TRUE(per_iter) << per_iter.error().message;
  EXPECT_EQ(o.per_iter_timing, 1);
  EXPECT_EQ(o.per_iter_skip, 3);
  auto graph = parse({"-G", "4"}, &o);
  ASSERT_TRUE(graph) << graph.error().message;
  EXPECT_EQ(o.cuda_graph, 4);

  auto split = parse({"--split", "mod:8"});
  ASSERT_TRUE(split) << split.error().message;
  EXPECT_EQ(split->split.kind, Split::Kind::kMod);
  EXPECT_EQ(split_color(split->split, 13, 5, 1), 5);
  EXPECT_EQ(split_color({Split::Kind::kRail, 0}, 13, 5, 1), 5);
  EXPECT_EQ(split_color({Split::Kind::kHost, 0}, 13, 5, 1), 1);
}

TEST(CollOptions, BadValuesAreRefusedNamingTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"gather"}, "collective 'gather'"},
      {{"-b", "1X"}, "-b: size '1X'"},
      {{"-b", "64", "-e", "8"}, "minimum size 64 B is above the maximum 8 B"},
      {{"-n", "0"}, "-n 0: must be at least 1"},
      {{"-a", "4"}, "-a 4: expected 0 (rank 0)"},
      {{"-z", "2"}, "-z 2"},
      {{"-d", "float8"}, "-d 'float8'"},
      {{"-o", "mulsum"}, "-o 'mulsum'"},
      {{"-r", "-1"}, "-r '-1'"},
      {{"--pairs-threshold", "1.5"}, "--pairs-threshold 1.5"},
      {{"--split", "mod:0"}, "--split 'mod:0'"},
      {{"--split", "rack"}, "--split 'rack'"},
      {{"--pairs", "--split", "rail"}, "--pairs and --split"},
      {{"-I", "2"}, "-I 2: expected 0 (off) or 1"},
      {{"-I", "1", "-n", "5", "-K", "5"}, "-K 5: expected 0 to 4"},
      {{"-K", "-1"}, "-K -1"},
      {{"-G", "-1"}, "-G -1: must be at least 0"},
      {{"-G", "2", "-I", "1"}, "-I with -G"},
      {{"-G", "2", "-z", "1"}, "-z 1 with -G"},
  };
  for (const auto& [args, message] : cases) {
    auto p = parse(args);
    ASSERT_FALSE(p) << message;
    EXPECT_NE(p.error().message.find(message), std::string::npos) << p.error().message;
  }
}

}  // namespace
}  // namespace megascale::coll
