// Gradient buckets and ZeRO pieces: each stacked tensor is cut into one slice per layer in that layer's
// bucket, the unstacked tensors go whole into the last bucket, the dp ranks' pieces of every slice cover
// each of its elements exactly once, and a slice dp does not divide is refused naming the tensor.
#include "megascale/trainer/grad_buckets.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

namespace megascale::trainer {
namespace {

ModelConfig small_model(int d_model = 32) {
  return {.vocab_size = 250,
          .padded_vocab_size = 256,
          .max_seq_len = 64,
          .n_layer = 4,
          .n_head = 4,
          .d_model = d_model};
}

TEST(GradBuckets, OneSlicePerLayerInThatLayersBucketTheRestInTheLast) {
  const std::vector<TpTensor> ts = tp_parameter_tensors(small_model(), 1);
  auto b = plan_grad_buckets(ts, 2);
  ASSERT_TRUE(b) << b.error().message;
  EXPECT_EQ(b->layers, 4);
  EXPECT_EQ(b->buckets(), 5);
  std::map<int, int64_t> covered;  // tensor -> elements in its slices
  std::map<int, std::set<int>> buckets_of;
  for (const GradSlice& s : b->slices) {
    const TpTensor& t = ts[static_cast<size_t>(s.tensor)];
    EXPECT_EQ(s.offset, covered[s.tensor]) << t.name << ": slices follow one another";
    covered[s.tensor] += s.numel;
    buckets_of[s.tensor].insert(s.bucket);
    if (t.layer_ids.empty()) {
      EXPECT_EQ(s.bucket, 4) << t.name;
      EXPECT_EQ(s.numel, t.numel()) << t.name;
    } else {
      EXPECT_EQ(s.numel * 4, t.numel()) << t.name;
      EXPECT_EQ(s.offset, s.bucket * s.numel) << t.name << ": layer j's slice is at j x its size";
    }
  }
  for (size_t k = 0; k < ts.size(); ++k) {
    EXPECT_EQ(covered[static_cast<int>(k)], ts[k].numel()) << ts[k].name;
    EXPECT_EQ(buckets_of[static_cast<int>(k)].size(), ts[k].layer_ids.empty() ? 1u : 4u) << ts[k].name;
  }
}

TEST(GradBuckets, TheRanksPiecesCoverEverySliceOnceAndTheirStateIsADpthOfIt) {
  for (int tp : {1, 2}) {
    for (int dp : {1, 2, 4, 8}) {
      const std::vector<TpTensor> ts = tp_parameter_tensors(small_model(), tp);
      auto b = plan_grad_buckets(ts, dp);
      ASSERT_TRUE(b) << b.error().message;
      int64_t state = 0, total = 0;
      for (const TpTensor& t : ts) total += t.numel();
      for (const GradSlice& s : b->slices) {
        EXPECT_EQ(s.shard_offset, state) << "a rank's pieces lie one after another in its optimizer state";
        state += s.numel / dp;
        int64_t next = s.offset;
        for (int r = 0; r < dp; ++r) {
          const ElementRange p = shard_of(s, dp, r);
          EXPECT_EQ(p.begin, next) << ts[static_cast<size_t>(s.tensor)].name << " rank " << r;
          EXPECT_EQ(p.size(), s.numel / dp);
          next = p.end;
        }
        EXPECT_EQ(next, s.offset + s.numel) << ts[static_cast<size_t>(s.tensor)].name;
      }
      EXPECT_EQ(b->shard_numel, state);
      EXPECT_EQ(b->shard_numel * dp, total) << "the optimizer state is 1/dp of the parameters";
    }
  }
}

// The staging buffer: each bucket's region holds dp blocks, rank r's block its pieces of the bucket's
// slices one after another, so that one reduce-scatter of the region leaves rank r its block; every
// element of every rank's piece of every slice has its own place, within its bucket's region.
TEST(GradBuckets, EachBucketsStagingRegionHoldsEveryRanksPiecesInRankMajorBlocks) {
  for (int tp : {1, 2}) {
    for (int dp : {1, 2, 4}) {
      SCOPED_TRACE(testing::Message() << "tp " << tp << " dp " << dp);
      const std::vector<TpTensor> ts = tp_parameter_tensors(small_model(), tp);
      auto b = plan_grad_buckets(ts, dp);
      ASSERT_TRUE(b) << b.error().message;
      ASSERT_EQ(b->regions.size(), static_cast<size_t>(b->buckets()));
      int64_t total = 0;
      for (const TpTensor& t : ts) total += t.numel();
      EXPECT_EQ(b->flat_numel, total) << "every slice's elements once";
      int64_t next = 0;
      for (const BucketRegion& r : b->regions) {
        EXPECT_EQ(r.begin, next) << "regions follow one another";
        EXPECT_GT(r.block, 0);
        next = r.begin + r.block * dp;
      }
      std::vector<int> seen(static_cast<size_t>(b->flat_numel), 0);
      std::map<int, int64_t> block_used;  // bucket -> a rank's elements so far
      for (const GradSlice& s : b->slices) {
        EXPECT_EQ(s.block_offset, block_used[s.bucket]) << "a bucket's slices in order within a block";
        block_used[s.bucket] += s.numel / dp;
        const BucketRegion& r = b->regions[static_cast<size_t>(s.bucket)];
        for (int rank = 0; rank < dp; ++rank) {
          for (int64_t i = 0; i < s.numel / dp; ++i) {
            const int64_t f = b->flat_element(s, rank, i);
            ASSERT_GE(f, r.begin + rank * r.block) << "rank " << rank << "'s piece stays in its block";
            ASSERT_LT(f, r.begin + (rank + 1) * r.block);
            ++seen[static_cast<size_t>(f)];
          }
        }
      }
      for (const auto& [bucket, used] : block_used)
        EXPECT_EQ(used, b->regions[static_cast<size_t>(bucket)].block);
      EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }))
          << "every staging element holds exactly one piece's element";
    }
  }
}

TEST(GradBuckets, APipelineStageBucketsItsOwnLayers) {
  const ModelConfig m = small_model();
  const ParallelLayout l{.tp = 1, .pp = 2, .dp = 2, .vpp = 1};
  const std::vector<TpTensor> last = tp_parameter_tensors(m, 1, stage_share(l, m.n_layer, 1));
  auto b = plan_grad_buckets(last, 2);
  ASSERT_TRUE(b) << b.error().message;
  EXPECT_EQ(b->layers, 2);
  int rest = 0;
  for (const GradSlice& s : b->slices) {
    EXPECT_LE(s.bucket, 2);
    rest += s.bucket == 2 ? 1 : 0;
  }
  EXPECT_EQ(rest, 3) << "the last stage's unstacked tensors: wte (the tied head), lnfw, lnfb";
}

TEST(GradBuckets, ASliceTheRanksDoNotDivideIsRefusedNamingTheTensor) {
  auto b = plan_grad_buckets(tp_parameter_tensors(small_model(36), 1), 8);
  ASSERT_FALSE(b);
  EXPECT_NE(b.error().message.find("'ln1w' has 36 elements a slice, which 8 does not divide"),
            std::string::npos)
      << b.error().message;
  EXPECT_FALSE(plan_grad_buckets(tp_parameter_tensors(small_model(), 1), 0));
}

}  // namespace
}  // namespace megascale::trainer
