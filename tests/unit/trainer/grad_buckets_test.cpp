// Gradient buckets and ZeRO shards: buckets close at the size, tensors are never split, every bucket
// splits into dp equal aligned shards, and the shards' tensor pieces cover every element once.
#include "megascale/trainer/grad_buckets.h"

#include <gtest/gtest.h>

#include <map>

namespace megascale::trainer {
namespace {

TEST(GradBuckets, CloseAtTheSizeAndPadToEqualAlignedShards) {
  // Backward order: 100, 60, 300 (alone: larger than a bucket), 10, 5.
  const std::vector<BucketTensor> ts = {{"a", 100}, {"b", 60}, {"c", 300}, {"d", 10}, {"e", 5}};
  auto g = plan_grad_buckets(ts, /*dp=*/4, /*bucket_numel=*/150, /*align=*/8);
  ASSERT_TRUE(g) << g.error().message;
  ASSERT_EQ(g->buckets.size(), 3u);
  // a + b = 160 >= 150 closes the first; c alone; d + e the tail. Padded to multiples of 32.
  EXPECT_EQ(g->buckets[0].tensors, (std::vector<int>{0, 1}));
  EXPECT_EQ(g->buckets[0].used, 160);
  EXPECT_EQ(g->buckets[0].numel, 160);
  EXPECT_EQ(g->buckets[0].ready_after, 1);
  EXPECT_EQ(g->buckets[1].tensors, (std::vector<int>{2}));
  EXPECT_EQ(g->buckets[1].offset, 160);
  EXPECT_EQ(g->buckets[1].numel, 320);
  EXPECT_EQ(g->buckets[2].tensors, (std::vector<int>{3, 4}));
  EXPECT_EQ(g->buckets[2].offset, 480);
  EXPECT_EQ(g->buckets[2].used, 15);
  EXPECT_EQ(g->buckets[2].numel, 32);
  EXPECT_EQ(g->total_numel, 512);
  EXPECT_EQ(g->tensor_offset, (std::vector<int64_t>{0, 100, 160, 480, 490}));
  EXPECT_EQ(g->tensor_bucket, (std::vector<int>{0, 0, 1, 2, 2}));
  for (const GradBucket& b : g->buckets) {
    for (int r = 0; r < 4; ++r) {
      const ElementRange s = shard_of(b, 4, r);
      EXPECT_EQ(s.size(), b.numel / 4);
      EXPECT_EQ(s.begin % 8, 0);
    }
    EXPECT_EQ(shard_of(b, 4, 0).begin, b.offset);
    EXPECT_EQ(shard_of(b, 4, 3).end, b.offset + b.numel);
  }
}

TEST(GradBuckets, ShardPiecesCoverEveryElementOnceAndNoPadding) {
  std::vector<BucketTensor> ts;
  for (int i = 0; i < 17; ++i) ts.push_back({"t" + std::to_string(i), 1 + (i * 37) % 91});
  for (int dp : {1, 2, 3, 8}) {
    for (int64_t bucket : {1, 50, 200, 100000}) {
      auto g = plan_grad_buckets(ts, dp, bucket, 4);
      ASSERT_TRUE(g);
      std::map<int, std::vector<int>> hits;  // tensor -> times each element was covered
      for (size_t t = 0; t < ts.size(); ++t) hits[static_cast<int>(t)].assign(ts[t].numel, 0);
      for (const GradBucket& b : g->buckets) {
        int64_t shard_sum = 0;
        for (int r = 0; r < dp; ++r) {
          const ElementRange s = shard_of(b, dp, r);
          shard_sum += s.size();
          for (const TensorPiece& p : pieces_in(*g, s)) {
            EXPECT_GE(p.buffer_offset, s.begin);
            EXPECT_LE(p.buffer_offset + p.numel, s.end);
            EXPECT_EQ(p.buffer_offset, g->tensor_offset[p.tensor] + p.tensor_offset);
            for (int64_t e = 0; e < p.numel; ++e) ++hits[p.tensor][p.tensor_offset + e];
          }
        }
        EXPECT_EQ(shard_sum, b.numel);
      }
      for (const auto& [t, h] : hits) {
        for (size_t e = 0; e < h.size(); ++e) ASSERT_EQ(h[e], 1) << "dp " << dp << " tensor " << t << " element " << e;
      }
    }
  }
}

TEST(GradBuckets, ATensorAcrossAShardBoundaryIsCutIntoPieces) {
  auto g = plan_grad_buckets({{"w", 10}, {"b", 6}}, /*dp=*/2, /*bucket_numel=*/1000, /*align=*/1);
  ASSERT_TRUE(g);
  ASSERT_EQ(g->buckets.size(), 1u);
  EXPECT_EQ(pieces_in(*g, shard_of(g->buckets[0], 2, 0)), (std::vector<TensorPiece>{{0, 0, 0, 8}}));
  EXPECT_EQ(pieces_in(*g, shard_of(g->buckets[0], 2, 1)),
            (std::vector<TensorPiece>{{0, 8, 8, 2}, {1, 0, 10, 6}}));
}

TEST(GradBuckets, RefusesNamingTheProblem) {
  EXPECT_EQ(plan_grad_buckets({}, 2, 10, 1).error().message, "gradient buckets: no tensors");
  EXPECT_EQ(plan_grad_buckets({{"x", 4}, {"qkvw.3", 0}}, 2, 10, 1).error().message,
            "gradient buckets: tensor 1 ('qkvw.3') has 0 elements");
  EXPECT_FALSE(plan_grad_buckets({{"x", 4}}, 0, 10, 1));
  EXPECT_FALSE(plan_grad_buckets({{"x", 4}}, 2, 0, 1));
  EXPECT_FALSE(plan_grad_buckets({{"x", 4}}, 2, 10, 0));
}

}  // namespace
}  // namespace megascale::trainer
