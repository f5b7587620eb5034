// FLOPs accounting and the step line (mfu.h).
#include "megascale/trainer/mfu.h"

#include <fmt/format.h>

#include <algorithm>

namespace megascale::trainer {

double attention_flops_per_token(const ModelConfig& model, int seq_len) {
  const double T = seq_len;
  const int w = model.attention_window;
  // Keys per query, averaged over the T positions: T/2 for causal (llm.c's convention, not (T+1)/2);
  // for a window, sum_i min(i+1, w) / T = w - w(w-1)/(2T). Both give 12 L C x keys per token.
  double keys = T / 2;
  if (w > 0 && w < seq_len) keys = w - static_cast<double>(w) * (w - 1) / (2 * T);
  return 12.0 * model.n_layer * model.d_model * keys;
}

double flops_per_token(const ModelConfig& model, int seq_len) {
  return 6.0 * static_cast<double>(model.num_parameters()) + attention_flops_per_token(model, seq_len);
}

double achieved_flops_per_s(double flops_per_token, int64_t tokens, double seconds) {
  return seconds > 0 ? flops_per_token * static_cast<double>(tokens) / seconds : 0;
}

double model_flops_utilization(double flops_per_token, int64_t tokens, double seconds) {
  return achieved_flops_per_s(flops_per_token, tokens, seconds) / kH100H200PeakBf16Flops;
}

namespace {

// 1234567 -> "1,234,567": tok/s is easier to read grouped.
std::string grouped(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

}  // namespace

std::string format_step_line(const StepReport& r, double flops_per_token) {
  const double seconds = r.step_ms / 1e3;
  const double tokens_per_s = seconds > 0 ? static_cast<double>(r.tokens) / seconds : 0;
  const double flops = achieved_flops_per_s(flops_per_token, r.tokens, seconds) / std::max(r.gpus, 1);
  std::string step = r.total_steps > 0 ? fmt::format("step {:4d}/{}", r.step + 1, r.total_steps)
                                       : fmt::format("step {:4d}", r.step + 1);
  return fmt::format(
      "{} | loss {:.6f} | norm {:.4f} | lr {:.2e} | {:.2f} ms | {} tok/s | {:.1f} TFLOP/s | {:.1f}% MFU",
      step, r.loss, r.grad_norm, r.learning_rate, r.step_ms,
      grouped(static_cast<int64_t>(tokens_per_s + 0.5)), flops / 1e12,
      100.0 * flops / kH100H200PeakBf16Flops);
}

std::string mfu_peak_statement() {
  return fmt::format(
      "MFU = model FLOPs (6N + attention, per token, forward + backward) x tok/s / {:.0f} TFLOP/s, the dense "
      "bf16 peak of H100 SXM and H200 (other GPUs: the percentage is against that peak, not theirs)",
      kH100H200PeakBf16Flops / 1e12);
}

}  // namespace megascale::trainer
