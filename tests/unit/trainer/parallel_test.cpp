// The 3D rank layout: MegaScale's order (TP innermost, then DP, then PP), groups that partition the
// world, ncclCommSplit keys, layer ranges of virtual stages, and the validation against a model.
#include "megascale/trainer/parallel.h"

#include <gtest/gtest.h>

#include <set>

namespace megascale::trainer {
namespace {

RunConfig run_124m() {
  RunConfig r;
  r.model = {.vocab_size = 50257, .padded_vocab_size = 50304, .max_seq_len = 1024, .n_layer = 12,
             .n_head = 12, .d_model = 768};
  r.train.batch_size = 16;
  r.train.seq_len = 1024;
  r.train.grad_accum_steps = 8;
  return r;
}

TEST(ParallelLayout, TensorRanksAreAdjacentThenDataThenPipeline) {
  const ParallelLayout l{.tp = 2, .pp = 2, .dp = 2};
  EXPECT_EQ(l.world_size(), 8);
  // rank = tp + 2 * (dp + 2 * pp)
  EXPECT_EQ(coords_of(l, 0), (RankCoords{0, 0, 0}));
  EXPECT_EQ(coords_of(l, 1), (RankCoords{1, 0, 0}));
  EXPECT_EQ(coords_of(l, 2), (RankCoords{0, 1, 0}));
  EXPECT_EQ(coords_of(l, 5), (RankCoords{1, 0, 1}));
  EXPECT_EQ(coords_of(l, 7), (RankCoords{1, 1, 1}));
  for (int r = 0; r < l.world_size(); ++r) EXPECT_EQ(rank_of(l, coords_of(l, r)), r);
  EXPECT_EQ(group_members(l, Group::kTensor, 5), (std::vector<int>{4, 5}));
  EXPECT_EQ(group_members(l, Group::kData, 5), (std::vector<int>{5, 7}));
  EXPECT_EQ(group_members(l, Group::kPipeline, 5), (std::vector<int>{1, 5}));
}

// For every kind, the groups partition the world, each rank sits at its own coordinate in its group, and
// the split keys agree with the groups (equal color exactly within a group, key = index in it).
TEST(ParallelLayout, GroupsPartitionTheWorldAndSplitKeysMatchThem) {
  for (const ParallelLayout& l : {ParallelLayout{.tp = 2, .pp = 3, .dp = 4}, ParallelLayout{.tp = 1, .pp = 1, .dp = 8},
                                  ParallelLayout{.tp = 4, .pp = 2, .dp = 1}, ParallelLayout{}}) {
    for (Group g : {Group::kTensor, Group::kData, Group::kPipeline}) {
      std::set<int> seen;
      for (int r = 0; r < l.world_size(); ++r) {
        const std::vector<int> members = group_members(l, g, r);
        const SplitKey k = split_key(l, g, r);
        EXPECT_EQ(members[k.key], r) << describe(l) << " " << to_string(g) << " rank " << r;
        for (int m : members) {
          EXPECT_EQ(group_members(l, g, m), members);
          EXPECT_EQ(split_key(l, g, m).color, k.color);
        }
        if (members.front() == r) {
          for (int m : members) EXPECT_TRUE(seen.insert(m).second) << m << " in two groups";
        }
      }
      EXPECT_EQ(static_cast<int>(seen.size()), l.world_size());
      // Distinct groups have distinct colors.
      std::set<int> colors;
      std::set<int> firsts;
      for (int r = 0; r < l.world_size(); ++r) {
        colors.insert(split_key(l, g, r).color);
        firsts.insert(group_members(l, g, r).front());
      }
      EXPECT_EQ(colors.size(), firsts.size());
    }
  }
}

TEST(ParallelLayout, VirtualStagesTakeLayersInOrderAcrossRanks) {
  // 12 layers over pp 2 x vpp 3: virtual stage c * 2 + s holds 2 layers.
  const ParallelLayout l{.pp = 2, .vpp = 3};
  EXPECT_EQ(layers_of(l, 12, 0, 0), (LayerRange{0, 2}));
  EXPECT_EQ(layers_of(l, 12, 1, 0), (LayerRange{2, 4}));
  EXPECT_EQ(layers_of(l, 12, 0, 1), (LayerRange{4, 6}));
  EXPECT_EQ(layers_of(l, 12, 1, 2), (LayerRange{10, 12}));
  // Every layer in exactly one virtual stage.
  std::vector<int> owner(12, 0);
  for (int s = 0; s < 2; ++s) {
    for (int c = 0; c < 3; ++c) {
      const LayerRange r = layers_of(l, 12, s, c);
      for (int i = r.begin; i < r.end; ++i) ++owner[i];
    }
  }
  for (int n : owner) EXPECT_EQ(n, 1);
}

TEST(ParallelLayout, AcceptsTheIssueLayoutsForTheShippedModels) {
  RunConfig r = run_124m();
  for (const ParallelLayout& l :
       {ParallelLayout{.tp = 2}, ParallelLayout{.pp = 2}, ParallelLayout{.dp = 2}, ParallelLayout{.tp = 2, .pp = 2},
        ParallelLayout{.tp = 2, .dp = 2}, ParallelLayout{.pp = 2, .dp = 2}, ParallelLayout{.tp = 2, .pp = 2, .dp = 2},
        ParallelLayout{.tp = 4, .pp = 2, .vpp = 2}}) {
    EXPECT_TRUE(validate_layout(l, r)) << describe(l) << ": " << validate_layout(l, r).error().message;
  }
  EXPECT_EQ(describe(ParallelLayout{.tp = 2, .pp = 2, .dp = 2}), "tp 2 x pp 2 x dp 2 = 8 ranks");
  EXPECT_EQ(describe(ParallelLayout{.pp = 2, .vpp = 3}), "tp 1 x pp 2 (vpp 3) x dp 1 = 2 ranks");
}

TEST(ParallelLayout, RefusesEveryBadDivisionNamingTheValues) {
  RunConfig r = run_124m();
  r.train.grad_accum_steps = 3;
  r.train.batch_size = 6;
  r.train.seq_len = 1002;
  // tp 8: 12 heads, 50304 rows (50304 / 8 = 6288: fine), 1002 tokens; pp 5 x vpp 2 over 12 layers;
  // 3 micro-batches for pp 5; dp 4 over a batch of 6.
  const Status s = validate_layout(ParallelLayout{.tp = 8, .pp = 5, .dp = 4, .vpp = 2}, r);
  ASSERT_FALSE(s);
  const std::string& m = s.error().message;
  EXPECT_NE(m.find("tp: 8: must divide model.n_head (12)"), std::string::npos) << m;
  EXPECT_EQ(m.find("padded_vocab_size"), std::string::npos) << m;
  EXPECT_NE(m.find("tp: 8: must divide train.seq_len (1002)"), std::string::npos) << m;
  EXPECT_NE(m.find("pp x vpp: 5 x 2: must divide model.n_layer (12)"), std::string::npos) << m;
  EXPECT_NE(m.find("(train.grad_accum_steps, 3) must be a multiple of pp (5)"), std::string::npos) << m;
  EXPECT_NE(m.find("dp: 4: must divide train.batch_size (6)"), std::string::npos) << m;

  r = run_124m();
  r.model.padded_vocab_size = 50260;
  const Status v = validate_layout(ParallelLayout{.tp = 8}, r);
  ASSERT_FALSE(v);
  EXPECT_NE(v.error().message.find("must divide model.padded_vocab_size (50260)"), std::string::npos);
  const Status zero = validate_layout(ParallelLayout{.tp = 0, .vpp = -1}, r);
  ASSERT_FALSE(zero);
  EXPECT_EQ(zero.error().message, "tp: 0: must be >= 1\nvpp: -1: must be >= 1");
  const Status lone = validate_layout(ParallelLayout{.vpp = 2}, r);
  ASSERT_FALSE(lone);
  EXPECT_NE(lone.error().message.find("vpp: 2: needs pp > 1"), std::string::npos);
}

}  // namespace
}  // namespace megascale::trainer
