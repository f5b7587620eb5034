// configs/train/*.yaml and the config rules: exact parameter counts, every shipped config loads and
// validates, bad values and unknown keys are reported as FILE:LINE: key: value: why.
#include <gtest/gtest.h>

#include <string>

#include "../../support/source_path.h"
#include "megascale/trainer/config.h"

namespace megascale::trainer {
namespace {

const std::string kConfigDir = megascale::test::source_path("configs/train/");

// The closed form of the GPT-2 count: per layer 12C^2 + 13C (qkv 3C^2+3C, proj C^2+C, fc 4C^2+4C,
// fcproj 4C^2+C, two LayerNorms 4C), plus wte Vp*C, wpe T*C and the final LayerNorm 2C.
int64_t closed_form(const ModelConfig& m) {
  const int64_t L = m.n_layer, C = m.d_model;
  return L * (12 * C * C + 13 * C) + int64_t{m.padded_vocab_size} * C + int64_t{m.max_seq_len} * C + 2 * C;
}

TEST(TrainConfig, Gpt2SmallHasLlmcParameterCount) {
  Result<RunConfig> run = load_run_config(kConfigDir + "gpt2-124m.yaml");
  ASSERT_TRUE(run) << run.error().message;
  // llm.c train_gpt2.cu prints num_parameters: 124475904 for GPT-2 124M with the vocabulary padded to 50304.
  EXPECT_EQ(run->model.num_parameters(), 124'475'904);
  EXPECT_EQ(run->model.head_dim(), 64);
}

TEST(TrainConfig, EveryShippedConfigLoadsAndCountsExactly) {
  for (const char* name : {"tiny", "gpt2-124m", "gpt2-350m", "gpt-1.3b"}) {
    SCOPED_TRACE(name);
    Result<RunConfig> run = load_run_config(kConfigDir + name + ".yaml");
    ASSERT_TRUE(run) << run.error().message;
    EXPECT_EQ(run->name, name);
    EXPECT_TRUE(validate_run_config(*run));
    EXPECT_EQ(run->model.num_parameters(), closed_form(run->model));
    int64_t sum = 0;
    for (const ParameterTensor& t : gpt_parameter_tensors(run->model)) sum += t.numel();
    EXPECT_EQ(sum, run->model.num_parameters());
    EXPECT_LE(run->train.seq_len, run->model.max_seq_len);
  }
}

TEST(TrainConfig, OneBillionConfigSplitsHeadsByFourWithHeadDim128) {
  Result<RunConfig> run = load_run_config(kConfigDir + "gpt-1.3b.yaml");
  ASSERT_TRUE(run) << run.error().message;
  EXPECT_EQ(run->model.n_head % 4, 0);
  EXPECT_EQ(run->model.head_dim(), 128);
  EXPECT_GT(run->model.num_parameters(), 1'200'000'000);
  EXPECT_LT(run->model.num_parameters(), 1'400'000'000);
}

TEST(TrainConfig, TinyIsByteLevel) {
  Result<RunConfig> run = load_run_config(kConfigDir + "tiny.yaml");
  ASSERT_TRUE(run) << run.error().message;
  EXPECT_EQ(run->model.vocab_size, 257);
  EXPECT_EQ(run->model.padded_vocab_size, 320);
  EXPECT_TRUE(run->train.train_data.empty());
}

constexpr const char* kGoodModel =
    "model:\n"
    "  vocab_size: 257\n"
    "  max_seq_len: 128\n"
    "  n_layer: 2\n"
    "  n_head: 2\n"
    "  d_model: 128\n";

TEST(TrainConfig, DefaultsFillTheTrainSectionAndPadTheVocabulary) {
  Result<RunConfig> run = parse_run_config(std::string(kGoodModel) + "train:\n  seq_len: 64\n", "t.yaml");
  ASSERT_TRUE(run) << run.error().message;
  EXPECT_EQ(run->model.padded_vocab_size, 320);  // rounded up to a multiple of 64
  EXPECT_EQ(run->train.seq_len, 64);
  EXPECT_EQ(run->train.batch_size, TrainConfig{}.batch_size);
  EXPECT_EQ(run->train.optimizer, OptimizerKind::kAdamW);

  Result<RunConfig> no_train = parse_run_config(kGoodModel, "t.yaml");
  ASSERT_TRUE(no_train) << no_train.error().message;
  EXPECT_EQ(no_train->train.seq_len, 128);  // the model's full context
}

TEST(TrainConfig, ParsesEveryKind) {
  Result<RunConfig> run = parse_run_config(std::string(kGoodModel) +
                                               "  parallel_block: true\n"
                                               "  attention_window: 32\n"
                                               "train:\n"
                                               "  seq_len: 128\n"
                                               "  optimizer: lamb\n"
                                               "  dtype: fp32\n"
                                               "  seed: 18446744073709551615\n"
                                               "  learning_rate: 3e-4\n"
                                               "  checkpoint_every: 10\n"
                                               "  checkpoint_dir: /tmp/x\n",
                                           "t.yaml");
  ASSERT_TRUE(run) << run.error().message;
  EXPECT_TRUE(run->model.parallel_block);
  EXPECT_EQ(run->model.attention_window, 32);
  EXPECT_EQ(run->train.optimizer, OptimizerKind::kLamb);
  EXPECT_EQ(run->train.dtype, ComputeDtype::kFp32);
  EXPECT_EQ(run->train.seed, UINT64_MAX);
  EXPECT_DOUBLE_EQ(run->train.learning_rate, 3e-4);
  EXPECT_EQ(run->train.checkpoint_dir, "/tmp/x");
}

TEST(TrainConfig, HeadsThatDoNotDivideTheWidthAreRefusedWithFileAndLine) {
  Result<RunConfig> run = parse_run_config(
      "model:\n  vocab_size: 257\n  max_seq_len: 128\n  n_layer: 2\n  n_head: 5\n  d_model: 128\n",
      "bad.yaml");
  ASSERT_FALSE(run);
  EXPECT_EQ(run.error().message,
            "bad.yaml:5: model.n_head: 5: must divide model.d_model (128): heads split the width evenly");
}

TEST(TrainConfig, HeadDimOutsideTheKernelsIsRefused) {
  Result<RunConfig> run = parse_run_config(
      "model:\n  vocab_size: 257\n  max_seq_len: 128\n  n_layer: 2\n  n_head: 4\n  d_model: 128\n",
      "bad.yaml");
  ASSERT_FALSE(run);
  EXPECT_NE(run.error().message.find(
                "bad.yaml:5: model.n_head: 4: gives head_dim = d_model / n_head = 128 / 4 = 32"),
            std::string::npos)
      << run.error().message;
}

TEST(TrainConfig, SeqLenBeyondMaxAndOtherRangesAreAllListedInFileOrder) {
  Result<RunConfig> run = parse_run_config(std::string(kGoodModel) +
                                               "  attention_window: -1\n"
                                               "train:\n"
                                               "  seq_len: 512\n"
                                               "  beta2: 1.0\n"
                                               "  learning_rate: 0\n",
                                           "bad.yaml");
  ASSERT_FALSE(run);
  EXPECT_EQ(run.error().message,
            "bad.yaml:7: model.attention_window: -1: must be >= 0 (0 = full causal attention)\n"
            "bad.yaml:9: train.seq_len: 512: must be <= model.max_seq_len (128): wpe has that many rows\n"
            "bad.yaml:10: train.beta2: 1: must be in [0, 1)\n"
            "bad.yaml:11: train.learning_rate: 0: must be > 0");
}

TEST(TrainConfig, UnknownKeysTypesAndChoicesAreNamed) {
  Result<RunConfig> run = parse_run_config(std::string(kGoodModel) +
                                               "  n_heads: 2\n"
                                               "train:\n"
                                               "  batch_size: \"8\"\n"
                                               "  optimizer: sgd\n"
                                               "  steps: 1.5\n"
                                               "trian: {}\n",
                                           "bad.yaml");
  ASSERT_FALSE(run);
  const std::string& m = run.error().message;
  EXPECT_NE(m.find("bad.yaml:7: model.n_heads: unknown key; valid keys in 'model': vocab_size,"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("bad.yaml:9: train.batch_size: \"8\": expected a whole number"), std::string::npos) << m;
  EXPECT_NE(m.find("bad.yaml:10: train.optimizer: sgd: expected one of: adamw, lamb"), std::string::npos)
      << m;
  EXPECT_NE(m.find("bad.yaml:11: train.steps: 1.5: expected a whole number"), std::string::npos) << m;
  EXPECT_NE(m.find("bad.yaml:12: trian: unknown key; valid keys at the top level"), std::string::npos) << m;
}

TEST(TrainConfig, MissingRequiredKeysAndSyntaxErrors) {
  Result<RunConfig> missing = parse_run_config("model:\n  vocab_size: 257\n", "m.yaml");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("model.max_seq_len: missing (required)"), std::string::npos);
  EXPECT_NE(missing.error().message.find("model.d_model: missing (required)"), std::string::npos);

  Result<RunConfig> syntax = parse_run_config("model: {vocab_size: 257\n", "s.yaml");
  ASSERT_FALSE(syntax);
  EXPECT_EQ(syntax.error().message.rfind("s.yaml:", 0), 0u) << syntax.error().message;
  EXPECT_NE(syntax.error().message.find("YAML syntax error"), std::string::npos);

  Result<RunConfig> absent = load_run_config(kConfigDir + "no-such-config.yaml");
  ASSERT_FALSE(absent);
  EXPECT_NE(absent.error().message.find("file not found"), std::string::npos);
}

TEST(TrainConfig, ValidateInCodeGivesTheSameRules) {
  ModelConfig m{.vocab_size = 257,
                .padded_vocab_size = 256,
                .max_seq_len = 64,
                .n_layer = 1,
                .n_head = 3,
                .d_model = 192};
  Status s = validate_model_config(m);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("model.padded_vocab_size: 256: must be >= model.vocab_size (257)"),
            std::string::npos);
  m.padded_vocab_size = 320;
  EXPECT_TRUE(validate_model_config(m));  // 192 / 3 = 64

  RunConfig run{"x", m, TrainConfig{}};
  run.train.seq_len = 64;
  run.train.checkpoint_every = 5;
  Status t = validate_run_config(run);
  ASSERT_FALSE(t);
  EXPECT_NE(t.error().message.find("train.checkpoint_every: 5: needs train.checkpoint_dir"),
            std::string::npos);
}

TEST(TrainConfig, DescribeNamesTheShape) {
  Result<RunConfig> run = load_run_config(kConfigDir + "tiny.yaml");
  ASSERT_TRUE(run) << run.error().message;
  std::string d = describe(*run);
  EXPECT_NE(d.find("L=4 H=4 C=256 D=64"), std::string::npos) << d;
  EXPECT_NE(d.find("causal"), std::string::npos) << d;
}

// A repeated key, in a section or at the top level, is refused with both lines; the first is not
// silently shadowed by the second.
TEST(TrainConfig, DuplicateKeyIsRefusedWithBothLines) {
  Result<RunConfig> in_section = parse_run_config(std::string(kGoodModel) + "  n_layer: 4\n", "t.yaml");
  ASSERT_FALSE(in_section);
  EXPECT_NE(in_section.error().message.find("t.yaml:7: duplicate key 'model.n_layer' (first on line 4)"),
            std::string::npos)
      << in_section.error().message;
  Result<RunConfig> top =
      parse_run_config(std::string(kGoodModel) + "train:\n  seq_len: 64\nmodel:\n  n_layer: 4\n", "t.yaml");
  ASSERT_FALSE(top);
  EXPECT_NE(top.error().message.find("t.yaml:9: duplicate key 'model' (first on line 1)"), std::string::npos)
      << top.error().message;
}

}  // namespace
}  // namespace megascale::trainer
