// Checkpoints: exact round trip of header and tensors, shape and name mismatches named with both shapes,
// truncation and corruption refused, resume compatibility, atomic replacement.
#include "megascale/trainer/checkpoint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <vector>

#include "../../support/temp_dir.h"

namespace megascale::trainer {
namespace {

using test::TempDir;

CheckpointHeader sample_header() {
  CheckpointHeader h;
  h.model = {.vocab_size = 257,
             .padded_vocab_size = 320,
             .max_seq_len = 64,
             .n_layer = 2,
             .n_head = 2,
             .d_model = 128,
             .parallel_block = true,
             .attention_window = 16};
  h.train = {.batch_size = 4,
             .seq_len = 64,
             .grad_accum_steps = 2,
             .total_steps = 500,
             .optimizer = OptimizerKind::kLamb,
             .dtype = ComputeDtype::kFp32,
             .seed = 0xDEADBEEFCAFEF00DULL};
  h.step = 1234;
  h.rng_state = {1, 0xFFFFFFFFFFFFFFFFULL, 42};
  h.loader = {3, 4096};
  h.layout = {.tp = 2, .pp = 2, .dp = 2};
  h.rank = {.tp = 1, .dp = 0, .pp = 1};
  return h;
}

// Values with every bit pattern class: negative, tiny, huge, NaN payload and -0 round-trip bit for bit.
std::vector<float> values(size_t n, float base) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = base + static_cast<float>(i) * 0.37f - 3.0f;
  if (n > 3) {
    v[0] = -0.0f;
    v[1] = 1e-40f;  // subnormal
    v[2] = std::numeric_limits<float>::quiet_NaN();
    v[3] = 3.4e38f;
  }
  return v;
}

struct Model {
  std::vector<float> wte = values(320 * 8, 1.0f);
  std::vector<float> qkvw = values(2 * 24 * 8, 2.0f);
  std::vector<float> m_wte = values(320 * 8, 3.0f);
  std::vector<TensorView> views() const {
    return {{"wte", {320, 8}, wte}, {"qkvw", {2, 24, 8}, qkvw}, {"adam_m.wte", {320, 8}, m_wte}};
  }
};

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(Checkpoint, RoundTripsHeaderAndTensorsBitForBit) {
  TempDir dir;
  Model saved;
  const std::string path = dir.file("ckpt.bin");
  ASSERT_TRUE(save_checkpoint(path, sample_header(), saved.views()));

  Model loaded;
  std::fill(loaded.wte.begin(), loaded.wte.end(), 0.0f);
  std::fill(loaded.qkvw.begin(), loaded.qkvw.end(), 0.0f);
  std::fill(loaded.m_wte.begin(), loaded.m_wte.end(), 0.0f);
  // Slots in another order than the file: matched by name.
  std::vector<TensorSlot> slots = {{"adam_m.wte", {320, 8}, loaded.m_wte},
                                   {"wte", {320, 8}, loaded.wte},
                                   {"qkvw", {2, 24, 8}, loaded.qkvw}};
  Result<CheckpointHeader> h = load_checkpoint(path, slots);
  ASSERT_TRUE(h) << h.error().message;
  const CheckpointHeader expected = sample_header();
  EXPECT_EQ(h->model, expected.model);
  EXPECT_EQ(h->train, expected.train);
  EXPECT_EQ(h->step, expected.step);
  EXPECT_EQ(h->rng_state, expected.rng_state);
  EXPECT_EQ(h->loader, expected.loader);
  EXPECT_EQ(h->layout, expected.layout);
  EXPECT_EQ(h->rank, expected.rank);
  EXPECT_TRUE(bitwise_equal(loaded.wte, saved.wte));
  EXPECT_TRUE(bitwise_equal(loaded.qkvw, saved.qkvw));
  EXPECT_TRUE(bitwise_equal(loaded.m_wte, saved.m_wte));

  Result<CheckpointHeader> only = read_checkpoint_header(path);
  ASSERT_TRUE(only) << only.error().message;
  EXPECT_EQ(only->step, 1234);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.str()), {}), 1);  // no temp file left
}

TEST(Checkpoint, AnotherShapeIsRefusedNamingTheTensorAndBothShapes) {
  TempDir dir;
  Model saved;
  const std::string path = dir.file("ckpt.bin");
  ASSERT_TRUE(save_checkpoint(path, sample_header(), saved.views()));
  std::vector<float> wte(320 * 8, 7.0f), qkvw(3 * 24 * 8, 7.0f), m(320 * 8, 7.0f);
  std::vector<TensorSlot> slots = {
      {"wte", {320, 8}, wte}, {"qkvw", {3, 24, 8}, qkvw}, {"adam_m.wte", {320, 8}, m}};
  Result<CheckpointHeader> h = load_checkpoint(path, slots);
  ASSERT_FALSE(h);
  EXPECT_EQ(h.error().message,
            path + ": tensor 'qkvw': checkpoint has shape [2, 24, 8], this run expects [3, 24, 8]");
  EXPECT_TRUE(std::all_of(wte.begin(), wte.end(), [](float x) { return x == 7.0f; }));  // nothing written
}

TEST(Checkpoint, MissingAndUnexpectedTensorsAreNamed) {
  TempDir dir;
  Model saved;
  const std::string path = dir.file("ckpt.bin");
  ASSERT_TRUE(save_checkpoint(path, sample_header(), saved.views()));
  std::vector<float> wte(320 * 8), qkvw(2 * 24 * 8), v(320 * 8);
  std::vector<TensorSlot> slots = {
      {"wte", {320, 8}, wte}, {"qkvw", {2, 24, 8}, qkvw}, {"adam_v.wte", {320, 8}, v}};
  Result<CheckpointHeader> h = load_checkpoint(path, slots);
  ASSERT_FALSE(h);
  EXPECT_EQ(
      h.error().message,
      path + ": tensor 'adam_m.wte' (shape [320, 8]) is in the checkpoint but this run has no such tensor\n" +
          path + ": tensor 'adam_v.wte' (shape [320, 8]) is missing from the checkpoint");
}

TEST(Checkpoint, TruncatedOrCorruptFilesAreRefused) {
  TempDir dir;
  Model saved;
  const std::string path = dir.file("ckpt.bin");
  ASSERT_TRUE(save_checkpoint(path, sample_header(), saved.views()));
  const auto size = std::filesystem::file_size(path);
  std::vector<float> wte(320 * 8), qkvw(2 * 24 * 8), m(320 * 8);
  std::vector<TensorSlot> slots = {
      {"wte", {320, 8}, wte}, {"qkvw", {2, 24, 8}, qkvw}, {"adam_m.wte", {320, 8}, m}};

  // One flipped bit inside the tensor data.
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(size - 100));
    char c;
    f.get(c);
    f.seekp(static_cast<std::streamoff>(size - 100));
    f.put(static_cast<char>(c ^ 0x10));
  }
  Result<CheckpointHeader> corrupt = load_checkpoint(path, slots);
  ASSERT_FALSE(corrupt);
  EXPECT_NE(corrupt.error().message.find("content hash mismatch"), std::string::npos)
      << corrupt.error().message;

  std::filesystem::resize_file(path, size - 1000);
  Result<CheckpointHeader> truncated = load_checkpoint(path, slots);
  ASSERT_FALSE(truncated);
  EXPECT_NE(truncated.error().message.find("truncated checkpoint"), std::string::npos)
      << truncated.error().message;

  {
    std::ofstream other(dir.file("other.bin"), std::ios::binary);
    other << "definitely not a checkpoint";
  }
  Result<CheckpointHeader> magic = read_checkpoint_header(dir.file("other.bin"));
  ASSERT_FALSE(magic);
  EXPECT_EQ(magic.error().message, dir.file("other.bin") + ": not a megascale checkpoint (wrong magic)");

  Result<CheckpointHeader> absent = read_checkpoint_header(dir.file("absent.bin"));
  ASSERT_FALSE(absent);
  EXPECT_NE(absent.error().message.find("No such file"), std::string::npos);
}

// Version 3 moved data-parallel ranks' optimizer state (a piece of each layer's slice): a version-2 file
// of several data-parallel ranks is refused saying so; one of dp 1 is read; version 1 is refused.
TEST(Checkpoint, AnOlderVersionIsReadOnlyWhereItsLayoutMeansTheSame) {
  TempDir dir;
  Model saved;
  auto with_version = [&](uint32_t version, int dp) {
    CheckpointHeader h = sample_header();
    h.layout.dp = dp;
    h.rank.dp = 0;
    const std::string path = dir.file("v" + std::to_string(version) + "_dp" + std::to_string(dp) + ".bin");
    EXPECT_TRUE(save_checkpoint(path, h, saved.views()));
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    f.write(reinterpret_cast<const char*>(&version), 4);
    return path;
  };
  Result<CheckpointHeader> v2 = read_checkpoint_header(with_version(2, 2));
  ASSERT_FALSE(v2);
  EXPECT_NE(v2.error().message.find("checkpoint version 2 of 2 data-parallel ranks"), std::string::npos)
      << v2.error().message;
  EXPECT_NE(v2.error().message.find("resume with the build that wrote it"), std::string::npos);
  Result<CheckpointHeader> v2_dp1 = read_checkpoint_header(with_version(2, 1));
  ASSERT_TRUE(v2_dp1) << v2_dp1.error().message;
  EXPECT_EQ(v2_dp1->layout.dp, 1);
  EXPECT_EQ(v2_dp1->step, sample_header().step);
  Result<CheckpointHeader> v1 = read_checkpoint_header(with_version(1, 1));
  ASSERT_FALSE(v1);
  EXPECT_NE(v1.error().message.find("checkpoint version 1, this build reads version 3"), std::string::npos)
      << v1.error().message;
}

TEST(Checkpoint, SaveRefusesInconsistentViewsAndReplacesAtomically) {
  TempDir dir;
  std::vector<float> data(10, 1.0f);
  std::vector<TensorView> bad = {{"w", {3, 4}, data}};
  Status s = save_checkpoint(dir.file("c.bin"), sample_header(), bad);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("tensor 'w': shape [3, 4] has 12 elements but the data has 10"),
            std::string::npos);
  std::vector<TensorView> twice = {{"w", {10}, data}, {"w", {10}, data}};
  EXPECT_FALSE(save_checkpoint(dir.file("c.bin"), sample_header(), twice));
  EXPECT_FALSE(std::filesystem::exists(dir.file("c.bin")));

  // Overwriting keeps one file: the new one.
  std::vector<TensorView> good = {{"w", {10}, data}};
  ASSERT_TRUE(save_checkpoint(dir.file("c.bin"), sample_header(), good));
  CheckpointHeader later = sample_header();
  later.step = 2000;
  ASSERT_TRUE(save_checkpoint(dir.file("c.bin"), later, good));
  Result<CheckpointHeader> h = read_checkpoint_header(dir.file("c.bin"));
  ASSERT_TRUE(h);
  EXPECT_EQ(h->step, 2000);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.str()), {}), 1);
}

TEST(Checkpoint, ResumeCompatibilityListsEveryDifference) {
  const CheckpointHeader h = sample_header();
  TrainConfig train;
  train.batch_size = 4;
  train.seq_len = 64;
  train.grad_accum_steps = 2;
  train.steps = 9999;  // a longer run may resume an older checkpoint
  train.optimizer = OptimizerKind::kLamb;
  train.dtype = ComputeDtype::kFp32;
  train.seed = h.train.seed;
  EXPECT_TRUE(check_resume_compatible(h, h.model, train, h.layout, h.rank));

  ModelConfig model = h.model;
  model.n_layer = 3;
  train.batch_size = 8;
  Status s = check_resume_compatible(h, model, train, h.layout, h.rank);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message,
            "the checkpoint is from a different run:\n  model.n_layer: checkpoint 2, this run 3\n"
            "  train.batch_size: checkpoint 4, this run 8");
}

// A rank's shard resumes only the same rank of the same layout: another layout or rank is named, both ways.
TEST(Checkpoint, ResumeInAnotherLayoutOrRankIsRefusedNamingBoth) {
  const CheckpointHeader h = sample_header();  // rank (tp 1, dp 0, pp 1) of tp 2 x pp 2 x dp 2
  TrainConfig train;
  train.batch_size = h.train.batch_size;
  train.seq_len = h.train.seq_len;
  train.grad_accum_steps = h.train.grad_accum_steps;
  train.optimizer = h.train.optimizer;
  train.dtype = h.train.dtype;
  train.seed = h.train.seed;
  EXPECT_TRUE(check_resume_compatible(h, h.model, train, h.layout, h.rank));
  Status s = check_resume_compatible(h, h.model, train, ParallelLayout{.tp = 1, .pp = 2, .dp = 4}, h.rank);
  ASSERT_FALSE(s);
  EXPECT_EQ(
      s.error().message,
      "the checkpoint is from a different run:\n  layout: checkpoint tp 2 x pp 2 x dp 2 = 8 ranks, this run "
      "tp 1 x pp 2 x dp 4 = 8 ranks");
  s = check_resume_compatible(h, h.model, train, h.layout, RankCoords{.tp = 0, .dp = 0, .pp = 1});
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message,
            "the checkpoint is from a different run:\n  rank: checkpoint (tp 1, dp 0, pp 1), this run (tp 0, "
            "dp 0, pp 1)");
  EXPECT_EQ(checkpoint_rank_path("ck/ckpt_00000050", 3), "ck/ckpt_00000050/rank_00003.bin");
}

}  // namespace
}  // namespace megascale::trainer
