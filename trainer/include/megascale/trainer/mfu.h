// Model FLOPs utilisation and the per-step log line.
//
//   double flops = flops_per_token(run.model, run.train.seq_len);           // 6N + attention
//   StepReport r{.step = s, .total_steps = n, .loss = loss, .grad_norm = norm, .learning_rate = lr,
//                .step_ms = ms, .tokens = run.train.tokens_per_step()};
//   fmt::print("{}\n", format_step_line(r, flops));
//   // step   10/1000 | loss 2.3456 | norm 0.8123 | lr 6.00e-04 | 45.10 ms | 363,281 tok/s |
//   //   142.3 TFLOP/s | 14.4% MFU
//   fmt::print("{}\n", mfu_peak_statement());   // once, at start: what the MFU is relative to
//
// Accounting (llm.c train_gpt2.cu and current Megatron; Kaplan et al. 2020 §2.1): forward + backward is
// 3 x (2 FLOPs per multiply-add) per weight per token, 6N with N every parameter (wte counted once: it is
// also the LM head, whose matmul is real; the wpe and LayerNorm terms are too small to matter and are
// included as llm.c does). Attention scores and the weighted sum add 2 x 2 x C FLOPs per (query, key)
// pair forward, x3 with backward: 12 C per pair per layer. A causal query sees T/2 keys on average
// (llm.c's rounding), giving 6 L C T per token. With a window w < T, query i sees min(i + 1, w) keys,
// on average w - w(w - 1) / (2T); the term is 12 L C times that (about 12 L C w when w << T, twice the
// causal term at the same w, because a windowed query sees w keys, not w/2). Recompute FLOPs are not
// counted (model FLOPs, not hardware FLOPs; PaLM App. B).
#pragma once

#include <cstdint>
#include <string>

#include "megascale/trainer/config.h"

namespace megascale::trainer {

// Dense bf16 tensor-core peak of H100 SXM and H200 SXM (same GH100 die): 528 TCs at 1830 MHz, 988.8
// TFLOP/s (llm.c mfu.h; NVIDIA's 1979 figure is with 2:4 sparsity). fp32-mode runs are still reported
// against it, so MFU compares across modes.
inline constexpr double kH100H200PeakBf16Flops = 989e12;

// Model FLOPs of one token of forward + backward at sequence length `seq_len`.
double flops_per_token(const ModelConfig& model, int seq_len);

// The attention part alone (included in flops_per_token).
double attention_flops_per_token(const ModelConfig& model, int seq_len);

// FLOP/s achieved and the fraction of kH100H200PeakBf16Flops.
double achieved_flops_per_s(double flops_per_token, int64_t tokens, double seconds);
double model_flops_utilization(double flops_per_token, int64_t tokens, double seconds);

struct StepReport {
  int step = 0;         // 0-based optimizer step just done
  int total_steps = 0;  // for the "step 10/1000" field; 0 = not shown
  double loss = 0;
  double grad_norm = 0;  // before clipping
  double learning_rate = 0;
  double step_ms = 0;  // wall time of the step
  int64_t tokens = 0;  // tokens processed in the step, by all gpus
  int gpus = 1;        // the GPUs that did the work: TFLOP/s and MFU are per GPU
};

// One line, llm.c-style: "step   10/1000 | loss 2.3456 | norm 0.8123 | lr 6.00e-04 | 45.10 ms |
// 363,281 tok/s | 142.3 TFLOP/s | 14.4% MFU". step is printed 1-based like llm.c (step s+1 of n).
std::string format_step_line(const StepReport& report, double flops_per_token);

// "MFU is model FLOPs (6N + attention, per token) / 989 TFLOP/s, the dense bf16 peak of H100 SXM and H200"
std::string mfu_peak_statement();

}  // namespace megascale::trainer
