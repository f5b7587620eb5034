// FLOPs accounting and the step line.
#include "megascale/trainer/mfu.h"

#include <gtest/gtest.h>

#include <string>

namespace megascale::trainer {
namespace {

ModelConfig gpt2_small() {
  return {.vocab_size = 50257,
          .padded_vocab_size = 50304,
          .max_seq_len = 1024,
          .n_layer = 12,
          .n_head = 12,
          .d_model = 768};
}

TEST(Mfu, CausalFlopsAreSixNPlusSixLCT) {
  ModelConfig m = gpt2_small();
  const double expected = 6.0 * 124'475'904 + 6.0 * 12 * 768 * 1024;
  EXPECT_DOUBLE_EQ(flops_per_token(m, 1024), expected);
  EXPECT_DOUBLE_EQ(attention_flops_per_token(m, 1024), 6.0 * 12 * 768 * 1024);
}

// The window term counts the (query, key) pairs a windowed causal mask keeps, by brute force.
TEST(Mfu, WindowTermCountsTheKeysEachQuerySees) {
  ModelConfig m = gpt2_small();
  for (int T : {64, 1000, 1024}) {
    for (int w : {1, 16, 63, 256, 1023}) {
      if (w >= T) continue;
      m.attention_window = w;
      int64_t pairs = 0;
      for (int i = 0; i < T; ++i) {
        for (int j = 0; j <= i; ++j) pairs += (i - w < j) ? 1 : 0;
      }
      const double expected = 12.0 * m.n_layer * m.d_model * static_cast<double>(pairs) / T;
      EXPECT_NEAR(attention_flops_per_token(m, T), expected, expected * 1e-12) << "T=" << T << " w=" << w;
    }
  }
  m.attention_window = 4096;  // wider than the sequence: plain causal
  EXPECT_DOUBLE_EQ(attention_flops_per_token(m, 1024), 6.0 * 12 * 768 * 1024);
}

TEST(Mfu, UtilizationAgainstTheH100Peak) {
  // 989 TFLOP of model work in one second is 100%.
  EXPECT_DOUBLE_EQ(model_flops_utilization(989e12 / 1000, 1000, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(achieved_flops_per_s(1e9, 2000, 0.5), 4e12);
  EXPECT_EQ(achieved_flops_per_s(1e9, 2000, 0.0), 0.0);
  EXPECT_NE(mfu_peak_statement().find("989 TFLOP/s"), std::string::npos);
  EXPECT_NE(mfu_peak_statement().find("H200"), std::string::npos);
}

TEST(Mfu, StepLineHasEveryField) {
  StepReport r{.step = 9,
               .total_steps = 1000,
               .loss = 2.345678,
               .grad_norm = 0.8123,
               .learning_rate = 6e-4,
               .step_ms = 50.0,
               .tokens = 16384};
  const double flops = 989e12 * 0.05 / 16384 * 0.25;  // a step that runs at 25% MFU
  EXPECT_EQ(format_step_line(r, flops),
            "step   10/1000 | loss 2.345678 | norm 0.8123 | lr 6.00e-04 | 50.00 ms | 327,680 tok/s | 247.2 "
            "TFLOP/s | 25.0% MFU");
  // The same tokens in the same time on 2 GPUs: half the FLOP/s and MFU each, the same tok/s.
  r.gpus = 2;
  EXPECT_EQ(format_step_line(r, flops),
            "step   10/1000 | loss 2.345678 | norm 0.8123 | lr 6.00e-04 | 50.00 ms | 327,680 tok/s | 123.6 "
            "TFLOP/s | 12.5% MFU");
}

}  // namespace
}  // namespace megascale::trainer
