// StageProfiler (stage_profiler.h): a pool of CUDA events reused every step, read back at end_step.
#include "stage_profiler.h"

#include <cstdio>

#include "cuda_check.h"

namespace megascale::trainer {

const char* stage_name(Stage stage) {
  switch (stage) {
    case Stage::kHostCopies:
      return "host->device copies";
    case Stage::kEncoderForward:
      return "encoder fwd";
    case Stage::kLayerNormForward:
      return "layernorm fwd";
    case Stage::kMatmulQkvForward:
      return "matmul qkv fwd";
    case Stage::kAttentionForward:
      return "attention fwd";
    case Stage::kMatmulAttProjForward:
      return "matmul attproj fwd";
    case Stage::kMatmulFcForward:
      return "matmul fc fwd (+gelu)";
    case Stage::kMatmulFcProjForward:
      return "matmul fcproj fwd";
    case Stage::kMatmulLmHeadForward:
      return "matmul lm-head fwd";
    case Stage::kClassifier:
      return "classifier (softmax+CE)";
    case Stage::kMatmulLmHeadBackward:
      return "matmul lm-head bwd";
    case Stage::kMatmulFcProjBackward:
      return "matmul fcproj bwd (+dgelu)";
    case Stage::kMatmulFcBackward:
      return "matmul fc bwd";
    case Stage::kMatmulAttProjBackward:
      return "matmul attproj bwd";
    case Stage::kAttentionBackward:
      return "attention bwd";
    case Stage::kMatmulQkvBackward:
      return "matmul qkv bwd";
    case Stage::kLayerNormBackward:
      return "layernorm bwd";
    case Stage::kEncoderBackward:
      return "encoder bwd";
    case Stage::kZeroGrads:
      return "zero grads";
    case Stage::kGradNorm:
      return "grad norm";
    case Stage::kOptimizer:
      return "optimizer";
    case Stage::kCount:
      break;
  }
  return "?";
}

StageProfiler::StageProfiler(cudaStream_t stream) : stream_(stream) {
  CUDA_CHECK(cudaEventCreate(&step_start_));
  CUDA_CHECK(cudaEventCreate(&step_stop_));
}

StageProfiler::~StageProfiler() {
  for (cudaEvent_t e : pool_) cudaEventDestroy(e);
  cudaEventDestroy(step_start_);
  cudaEventDestroy(step_stop_);
}

cudaEvent_t StageProfiler::event() {
  if (pool_used_ == pool_.size()) {
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreate(&e));
    pool_.push_back(e);
  }
  return pool_[pool_used_++];
}

void StageProfiler::begin_step() {
  marks_.clear();
  pool_used_ = 0;
  in_step_ = true;
  CUDA_CHECK(cudaEventRecord(step_start_, stream_));
}

void StageProfiler::begin(Stage stage) {
  if (!in_step_ || open_) return;  // nested scopes count towards the outer one
  open_ = true;
  Mark m{stage, event(), event()};
  CUDA_CHECK(cudaEventRecord(m.start, stream_));
  marks_.push_back(m);
}

void StageProfiler::end() {
  if (!in_step_ || !open_) return;
  open_ = false;
  CUDA_CHECK(cudaEventRecord(marks_.back().stop, stream_));
}

void StageProfiler::end_step() {
  if (!in_step_) return;
  in_step_ = false;
  CUDA_CHECK(cudaEventRecord(step_stop_, stream_));
  CUDA_CHECK(cudaEventSynchronize(step_stop_));
  float span = 0;
  CUDA_CHECK(cudaEventElapsedTime(&span, step_start_, step_stop_));
  span_ms_ += span;
  for (const Mark& m : marks_) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, m.start, m.stop));
    ms_[static_cast<int>(m.stage)] += ms;
    ++calls_[static_cast<int>(m.stage)];
  }
  ++steps_;
}

void StageProfiler::reset() {
  ms_.fill(0);
  calls_.fill(0);
  span_ms_ = 0;
  steps_ = 0;
}

std::string StageProfiler::table() const {
  if (steps_ == 0) return "stage profile: no profiled steps\n";
  std::string out;
  char line[160];
  std::snprintf(line, sizeof(line),
                "GPU time per step by stage (CUDA events; mean of %d steps; GPU span %.2f ms/step)\n", steps_,
                span_ms_ / steps_);
  out += line;
  std::snprintf(line, sizeof(line), "  %-28s %10s %7s %8s\n", "stage", "ms/step", "share", "calls");
  out += line;
  double attributed = 0;
  double matmul = 0;
  for (int i = 0; i < static_cast<int>(Stage::kCount); ++i) {
    if (calls_[i] == 0) continue;
    const double ms = ms_[i] / steps_;
    attributed += ms;
    if (std::string(stage_name(static_cast<Stage>(i))).rfind("matmul", 0) == 0) matmul += ms;
    std::snprintf(line, sizeof(line), "  %-28s %10.3f %6.1f%% %8.1f\n", stage_name(static_cast<Stage>(i)), ms,
                  100.0 * ms / (span_ms_ / steps_), static_cast<double>(calls_[i]) / steps_);
    out += line;
  }
  const double span = span_ms_ / steps_;
  std::snprintf(line, sizeof(line), "  %-28s %10.3f %6.1f%%\n", "unattributed (GPU idle, gaps)",
                span - attributed, 100.0 * (span - attributed) / span);
  out += line;
  std::snprintf(line, sizeof(line), "  %-28s %10.3f %6.1f%%   (all matmul rows)\n", "= matmuls", matmul,
                100.0 * matmul / span);
  out += line;
  return out;
}

}  // namespace megascale::trainer
