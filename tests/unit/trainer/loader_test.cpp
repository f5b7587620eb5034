// The data loader: window contents and shifting, shard wrap-around, prefetch equals synchronous reads,
// exact resume from a saved position, process ranks, and the errors.
#include "megascale/trainer/loader.h"

#include <gtest/gtest.h>

#include <fstream>
#include <vector>

#include "../../support/temp_dir.h"

namespace megascale::trainer {
namespace {

using test::TempDir;

// Token i of shard s is (s * 1000 + i) % 60000: every token says where it came from.
uint16_t token_at(int64_t shard, int64_t i) {
  return static_cast<uint16_t>((shard * 1000 + i) % 60000);
}

void write_shards(const TempDir& dir, const std::vector<int64_t>& sizes) {
  for (size_t s = 0; s < sizes.size(); ++s) {
    std::vector<uint16_t> tokens(static_cast<size_t>(sizes[s]));
    for (int64_t i = 0; i < sizes[s]; ++i)
      tokens[static_cast<size_t>(i)] = token_at(static_cast<int64_t>(s), i);
    ASSERT_TRUE(write_shard(dir.file("d_train_" + std::to_string(100 + s) + ".bin"), tokens));
  }
}

std::unique_ptr<DataLoader> open_or_die(const std::string& pattern, const LoaderOptions& options) {
  Result<std::unique_ptr<DataLoader>> loader = DataLoader::open(pattern, options);
  EXPECT_TRUE(loader) << (loader ? "" : loader.error().message);
  return loader ? std::move(*loader) : nullptr;
}

TEST(DataLoader, WindowsAreShiftedByOneAndWrapAcrossShards) {
  TempDir dir;
  write_shards(dir, {1000, 500});
  LoaderOptions options{.batch_size = 2, .seq_len = 8, .prefetch = false};
  auto loader = open_or_die(dir.file("d_train_*.bin"), options);
  ASSERT_NE(loader, nullptr);
  ASSERT_EQ(loader->shards().size(), 2u);
  EXPECT_EQ(loader->steps_per_epoch(), 999 / 16 + 499 / 16);

  Batch b;
  int64_t expected_shard = 0, expected_offset = 0, epoch = 0;
  for (int64_t step = 0; step < 3 * loader->steps_per_epoch() + 5; ++step) {
    ASSERT_EQ(loader->position(), (LoaderPosition{expected_shard, expected_offset}));
    ASSERT_TRUE(loader->next(b));
    ASSERT_EQ(b.inputs.size(), 16u);
    ASSERT_EQ(b.targets.size(), 16u);
    EXPECT_EQ(b.position, (LoaderPosition{expected_shard, expected_offset}));
    EXPECT_EQ(b.epoch, epoch);
    for (int64_t i = 0; i < 16; ++i) {
      ASSERT_EQ(b.inputs[static_cast<size_t>(i)], token_at(expected_shard, expected_offset + i));
      ASSERT_EQ(b.targets[static_cast<size_t>(i)], token_at(expected_shard, expected_offset + i + 1));
    }
    expected_offset += 16;
    const int64_t size = expected_shard == 0 ? 1000 : 500;
    if (expected_offset + 17 > size) {  // the tail is skipped
      expected_offset = 0;
      expected_shard = 1 - expected_shard;
      if (expected_shard == 0) ++epoch;
    }
  }
  EXPECT_EQ(epoch, 3);
}

// Reads `n` batches' inputs.
std::vector<std::vector<int32_t>> take(DataLoader& loader, int n) {
  std::vector<std::vector<int32_t>> out;
  Batch b;
  for (int i = 0; i < n; ++i) {
    Status s = loader.next(b);
    EXPECT_TRUE(s) << (s ? "" : s.error().message);
    out.push_back(b.inputs);
  }
  return out;
}

TEST(DataLoader, PrefetchGivesTheSameBatchesAsSynchronousReads) {
  TempDir dir;
  write_shards(dir, {700, 300, 900});
  LoaderOptions sync{.batch_size = 4, .seq_len = 16, .prefetch = false};
  LoaderOptions ahead = sync;
  ahead.prefetch = true;
  ahead.prefetch_depth = 3;
  auto a = open_or_die(dir.file("d_train_*.bin"), sync);
  auto b = open_or_die(dir.file("d_train_*.bin"), ahead);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(take(*a, 50), take(*b, 50));
  EXPECT_EQ(a->position(), b->position());
}

TEST(DataLoader, ResumedLoaderYieldsExactlyTheSameBatches) {
  TempDir dir;
  write_shards(dir, {700, 300, 900});
  for (bool prefetch : {false, true}) {
    SCOPED_TRACE(prefetch);
    LoaderOptions options{.batch_size = 4, .seq_len = 16, .prefetch = prefetch};
    auto first = open_or_die(dir.file("d_train_*.bin"), options);
    ASSERT_NE(first, nullptr);
    take(*first, 17);
    const LoaderPosition saved = first->position();
    const auto expected = take(*first, 40);  // crosses shard boundaries and the epoch wrap

    auto resumed = open_or_die(dir.file("d_train_*.bin"), options);
    ASSERT_NE(resumed, nullptr);
    take(*resumed, 3);  // read ahead elsewhere first: set_position must drop it
    ASSERT_TRUE(resumed->set_position(saved));
    EXPECT_EQ(take(*resumed, 40), expected);

    resumed->reset();
    Batch b;
    ASSERT_TRUE(resumed->next(b));
    EXPECT_EQ(b.position, (LoaderPosition{0, 0}));
    EXPECT_EQ(b.inputs[0], token_at(0, 0));
  }
}

TEST(DataLoader, ProcessesTakeAdjacentWindowsOfOneSpan) {
  TempDir dir;
  write_shards(dir, {1000});
  LoaderOptions r0{.batch_size = 2, .seq_len = 8, .process_rank = 0, .num_processes = 3};
  LoaderOptions r2 = r0;
  r2.process_rank = 2;
  auto a = open_or_die(dir.file("d_train_*.bin"), r0);
  auto c = open_or_die(dir.file("d_train_*.bin"), r2);
  ASSERT_TRUE(a && c);
  Batch ba, bc;
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(a->next(ba));
    ASSERT_TRUE(c->next(bc));
    EXPECT_EQ(ba.inputs[0], token_at(0, step * 48));
    EXPECT_EQ(bc.inputs[0], token_at(0, step * 48 + 32));
    EXPECT_EQ(bc.targets[15], token_at(0, step * 48 + 48));
  }
  EXPECT_EQ(a->position(), c->position());
}

TEST(DataLoader, OpenErrorsNameTheProblem) {
  TempDir dir;
  Result<std::unique_ptr<DataLoader>> none =
      DataLoader::open(dir.file("*.bin"), {.batch_size = 1, .seq_len = 4});
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().message, dir.file("*.bin") + ": no shard files match");

  write_shards(dir, {100});
  Result<std::unique_ptr<DataLoader>> small =
      DataLoader::open(dir.file("d_train_*.bin"), {.batch_size = 4, .seq_len = 32});
  ASSERT_FALSE(small);
  EXPECT_NE(small.error().message.find(
                "100 tokens, fewer than one step needs (1 processes x batch 4 x seq_len 32 + 1 = 129)"),
            std::string::npos)
      << small.error().message;

  Result<std::unique_ptr<DataLoader>> rank = DataLoader::open(
      dir.file("d_train_*.bin"), {.batch_size = 1, .seq_len = 4, .process_rank = 2, .num_processes = 2});
  ASSERT_FALSE(rank);
  EXPECT_NE(rank.error().message.find("process_rank 2"), std::string::npos);

  {
    std::ofstream bad(dir.file("d_train_999.bin"), std::ios::binary);
    bad << std::string(2000, '\0');
  }
  Result<std::unique_ptr<DataLoader>> header =
      DataLoader::open(dir.file("d_train_*.bin"), {.batch_size = 1, .seq_len = 4});
  ASSERT_FALSE(header);
  EXPECT_NE(header.error().message.find("d_train_999.bin: wrong magic 0"), std::string::npos)
      << header.error().message;
}

TEST(DataLoader, PositionFromOtherSizesIsRefused) {
  TempDir dir;
  write_shards(dir, {1000, 500});
  auto loader = open_or_die(dir.file("d_train_*.bin"), {.batch_size = 2, .seq_len = 8});
  ASSERT_NE(loader, nullptr);
  Status shard = loader->set_position({2, 0});
  ASSERT_FALSE(shard);
  EXPECT_NE(shard.error().message.find("position shard 2 is not in [0, 2)"), std::string::npos);
  Status offset = loader->set_position({0, 24});
  ASSERT_FALSE(offset);
  EXPECT_NE(offset.error().message.find("not the start of a step (a multiple of 16"), std::string::npos)
      << offset.error().message;
  EXPECT_FALSE(loader->set_position({1, 496}));  // a multiple of 16, but no whole step after it
  EXPECT_TRUE(loader->set_position({1, 480}));
}

TEST(DataLoader, OutOfVocabularyTokenIsAnErrorAndTheLoaderStaysThere) {
  TempDir dir;
  std::vector<uint16_t> tokens(200, 5);
  tokens[40] = 300;
  ASSERT_TRUE(write_shard(dir.file("v_train_0.bin"), tokens));
  for (bool prefetch : {false, true}) {
    SCOPED_TRACE(prefetch);
    auto loader = open_or_die(dir.file("v_train_*.bin"),
                              {.batch_size = 1, .seq_len = 32, .vocab_size = 257, .prefetch = prefetch});
    ASSERT_NE(loader, nullptr);
    Batch b;
    ASSERT_TRUE(loader->next(b));  // tokens [0, 33)
    Status s = loader->next(b);    // tokens [32, 65) hold the 300
    ASSERT_FALSE(s);
    EXPECT_NE(s.error().message.find("token 300 at offset 40 is outside the vocabulary (vocab_size 257)"),
              std::string::npos)
        << s.error().message;
    EXPECT_EQ(loader->position(), (LoaderPosition{0, 32}));
    EXPECT_FALSE(loader->next(b));  // still the same batch
  }
}

}  // namespace
}  // namespace megascale::trainer
