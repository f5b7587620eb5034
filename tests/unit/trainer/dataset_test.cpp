// The embedded dataset: deterministic for a seed, every rule holds in the text, its achievable loss is far
// below the unigram entropy, and the shards it writes load through the data loader.
#include "megascale/trainer/dataset.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "../../support/source_path.h"
#include "megascale/trainer/config.h"
#include "megascale/trainer/loader.h"
#include "megascale/trainer/tokenizer.h"
#include "../../support/temp_dir.h"

namespace megascale::trainer {
namespace {

using test::TempDir;

TEST(SyntheticDataset, SameSeedSameTextOtherSeedOtherText) {
  SyntheticTextGenerator a(7), b(7), c(8);
  for (int i = 0; i < 50; ++i) {
    const std::string da = a.next_document();
    EXPECT_EQ(da, b.next_document());
    EXPECT_NE(da, c.next_document());
  }
  EXPECT_EQ(a.choice_entropy_nats(), b.choice_entropy_nats());
}

std::vector<std::string> words_of(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> w;
  for (std::string x; in >> x;) w.push_back(x);
  return w;
}

// Every line follows its task's rule: sums, differences and products are right, copies copy, reversals
// reverse, counts count, subjects agree with verbs.
TEST(SyntheticDataset, EveryLineFollowsItsRule) {
  SyntheticTextGenerator gen(123);
  std::map<std::string, int> kinds;
  for (int d = 0; d < 300; ++d) {
    std::istringstream doc(gen.next_document());
    for (std::string line; std::getline(doc, line);) {
      ASSERT_FALSE(line.empty());
      ASSERT_EQ(line.back(), '.') << line;
      long a = 0, b = 0, c = 0;
      char op = 0;
      if (std::sscanf(line.c_str(), "%ld %c %ld = %ld.", &a, &op, &b, &c) == 4) {
        ++kinds[std::string("arith") + op];
        EXPECT_EQ(c, op == '+' ? a + b : op == '-' ? a - b : a * b) << line;
        EXPECT_GE(c, 0) << line;
      } else if (line.starts_with("copy: ") || line.starts_with("reverse: ")) {
        const bool reverse = line.starts_with("reverse: ");
        ++kinds[reverse ? "reverse" : "copy"];
        const size_t arrow = line.find(". -> ");
        ASSERT_NE(arrow, std::string::npos) << line;
        std::vector<std::string> prompt =
            words_of(line.substr(line.find(": ") + 2, arrow - line.find(": ") - 2));
        std::vector<std::string> answer = words_of(line.substr(arrow + 5, line.size() - arrow - 6));
        if (reverse) std::reverse(prompt.begin(), prompt.end());
        EXPECT_EQ(prompt, answer) << line;
        EXPECT_GE(prompt.size(), 2u);
        EXPECT_LE(prompt.size(), 5u);
      } else if (line.starts_with("count: ")) {
        ++kinds["count"];
        std::vector<std::string> n = words_of(line.substr(7, line.size() - 8));
        ASSERT_GE(n.size(), 3u) << line;
        for (size_t i = 1; i < n.size(); ++i) EXPECT_EQ(std::stol(n[i]), std::stol(n[i - 1]) + 1) << line;
      } else {
        ++kinds["sentence"];
        std::vector<std::string> w = words_of(line);
        ASSERT_EQ(w.size(), 7u) << line;
        EXPECT_EQ(w[0], "the");
        // Plural nouns end in s or are "children"; their verbs then do not end in s.
        const bool plural_noun = w[2] == "children" || w[2].back() == 's';
        const bool singular_verb = w[3].back() == 's';
        EXPECT_NE(plural_noun, singular_verb) << line;
      }
    }
  }
  for (const char* k : {"arith+", "arith-", "arith*", "copy", "reverse", "count", "sentence"}) {
    EXPECT_GT(kinds[k], 50) << k;
  }
}

// The achievable loss (entropy of the generator's choices per token) against the unigram entropy of the
// same tokens: what a model that learned only byte frequencies would reach.
TEST(SyntheticDataset, AchievableLossIsFarBelowTheUnigramEntropy) {
  SyntheticTextGenerator gen(42);
  std::vector<int64_t> counts(kByteVocabSize, 0);
  int64_t tokens = 0;
  while (tokens < 500'000) {
    for (uint16_t t : byte_encode(gen.next_document())) ++counts[t];
    ++counts[kByteEotToken];
    tokens = 0;
    for (int64_t c : counts) tokens += c;
  }
  double unigram = 0;
  for (int64_t c : counts) {
    if (c > 0) unigram -= static_cast<double>(c) / tokens * std::log(static_cast<double>(c) / tokens);
  }
  const double achievable = gen.choice_entropy_nats() / static_cast<double>(tokens);
  std::printf("synthetic dataset: achievable loss %.3f nats/token, unigram entropy %.3f nats/token\n",
              achievable, unigram);
  EXPECT_GT(achievable, 0.1);  // not trivial either: there is something to predict
  EXPECT_LT(achievable, 0.5 * unigram);
}

TEST(SyntheticDataset, WritesLoadableShardsDeterministically) {
  TempDir dir1, dir2;
  DatasetOptions options{.seed = 5, .train_tokens = 60'000, .val_tokens = 10'000, .tokens_per_shard = 20'000};
  Result<DatasetFiles> a = write_synthetic_dataset(dir1.str(), options);
  ASSERT_TRUE(a) << a.error().message;
  Result<DatasetFiles> b = write_synthetic_dataset(dir2.str(), options);
  ASSERT_TRUE(b) << b.error().message;
  ASSERT_EQ(a->paths.size(), b->paths.size());
  EXPECT_GE(a->paths.size(), 4u);  // val + at least 3 train shards
  EXPECT_GE(a->train_tokens, 60'000);
  EXPECT_GE(a->val_tokens, 10'000);
  EXPECT_GT(a->train_choice_entropy_nats_per_token, 0.1);
  for (size_t i = 0; i < a->paths.size(); ++i) {
    Result<std::vector<uint16_t>> ta = read_shard_tokens(a->paths[i]);
    Result<std::vector<uint16_t>> tb = read_shard_tokens(b->paths[i]);
    ASSERT_TRUE(ta && tb);
    EXPECT_EQ(*ta, *tb) << a->paths[i];
    if (i > 0) {  // train shards: full ones up to 20k tokens, the last between 10k and 30k
      EXPECT_LE(static_cast<int64_t>(ta->size()), i + 1 < a->paths.size() ? 20'000 : 30'000);
      EXPECT_GE(static_cast<int64_t>(ta->size()), 10'000);
    }
    EXPECT_EQ(ta->back(), kByteEotToken);  // shards end at a document boundary
  }
  // Val is a different stream, not a prefix of train.
  Result<std::vector<uint16_t>> val = read_shard_tokens(a->paths[0]);
  Result<std::vector<uint16_t>> train = read_shard_tokens(a->paths[1]);
  ASSERT_TRUE(val && train);
  EXPECT_FALSE(std::equal(val->begin(), val->begin() + 1000, train->begin()));

  Result<std::unique_ptr<DataLoader>> loader =
      DataLoader::open(a->train_glob, {.batch_size = 4, .seq_len = 64, .vocab_size = kByteVocabSize});
  ASSERT_TRUE(loader) << loader.error().message;
  EXPECT_EQ((*loader)->shards().size(), a->paths.size() - 1);
  Batch batch;
  for (int i = 0; i < 100; ++i) ASSERT_TRUE((*loader)->next(batch));
}

TEST(SyntheticDataset, EnsureReusesAWholeDatasetAndRewritesABrokenOne) {
  TempDir dir;
  DatasetOptions options{.seed = 9, .train_tokens = 30'000, .val_tokens = 5'000, .tokens_per_shard = 10'000};
  Result<DatasetFiles> first = ensure_synthetic_dataset(dir.str(), options);
  ASSERT_TRUE(first) << first.error().message;
  const auto stamp = std::filesystem::last_write_time(first->paths[1]);
  Result<std::vector<uint16_t>> first_tokens = read_shard_tokens(first->paths[1]);
  ASSERT_TRUE(first_tokens);
  Result<DatasetFiles> again = ensure_synthetic_dataset(dir.str(), options);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->paths, first->paths);
  EXPECT_EQ(again->train_tokens, first->train_tokens);
  EXPECT_DOUBLE_EQ(again->train_choice_entropy_nats_per_token, first->train_choice_entropy_nats_per_token);
  EXPECT_EQ(std::filesystem::last_write_time(first->paths[1]), stamp);  // not rewritten

  std::filesystem::resize_file(first->paths[2], 1500);  // a broken shard: rewritten
  Result<DatasetFiles> repaired = ensure_synthetic_dataset(dir.str(), options);
  ASSERT_TRUE(repaired) << repaired.error().message;
  EXPECT_TRUE(read_shard_header(repaired->paths[2]));

  DatasetOptions other = options;
  other.seed = 10;  // other options: a new dataset, the old shards gone
  Result<DatasetFiles> fresh = ensure_synthetic_dataset(dir.str(), other);
  ASSERT_TRUE(fresh) << fresh.error().message;
  Result<std::vector<uint16_t>> now_first = read_shard_tokens(fresh->paths[1]);
  ASSERT_TRUE(now_first);
  EXPECT_NE(*now_first, *first_tokens);
}

// What the trainer does for configs/train/tiny.yaml: the default dataset, opened with the run's B x T.
TEST(SyntheticDataset, DefaultDatasetFeedsTheTinyConfig) {
  TempDir dir;
  Result<RunConfig> run = load_run_config(megascale::test::source_path("configs/train/tiny.yaml"));
  ASSERT_TRUE(run) << run.error().message;
  Result<DatasetFiles> files = ensure_synthetic_dataset(dir.str(), DatasetOptions{});
  ASSERT_TRUE(files) << files.error().message;
  EXPECT_GE(files->train_tokens, DatasetOptions{}.train_tokens);
  const LoaderOptions options{.batch_size = run->train.batch_size,
                              .seq_len = run->train.seq_len,
                              .vocab_size = run->model.vocab_size};
  for (const std::string& glob : {files->train_glob, files->val_glob}) {
    Result<std::unique_ptr<DataLoader>> loader = DataLoader::open(glob, options);
    ASSERT_TRUE(loader) << loader.error().message;
    Batch batch;
    ASSERT_TRUE((*loader)->next(batch));
    EXPECT_EQ(batch.inputs.size(), static_cast<size_t>(run->train.batch_size * run->train.seq_len));
  }
}

}  // namespace
}  // namespace megascale::trainer
