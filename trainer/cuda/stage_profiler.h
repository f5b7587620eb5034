// Where a training step's GPU time goes: CUDA events around each stage of the step (matmuls by role,
// attention forward and backward, LayerNorm, the classifier, the optimizer, ...), summed per stage over
// the profiled steps and printed as a table. Host-only code on the CUDA runtime; the model owns one and
// megascale-train turns it on with --profile (or MEGASCALE_TRAIN_PROFILE=1).
//
//   StageProfiler profiler(stream);
//   profiler.begin_step();
//   { StageScope scope(&profiler, Stage::kAttentionForward); attention_forward(...); }
//   profiler.end_step();          // synchronises the stream and adds this step's times
//   std::string table = profiler.table();
//
// Each stage is bracketed by two events on the model's single stream, so a stage's time is the GPU
// time from its first launch starting to its last one ending, including any gap in which the GPU waited
// for the host between them. The step's own span (first to last event) minus the stages' sum is shown
// as "unattributed": GPU idle between stages (host launch overhead, synchronisations) and anything
// outside a scope. Events serialise nothing on one stream, but recording ~200 of them costs host time,
// so profiled steps run a little slower than unprofiled ones (compare the step lines).
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <string>
#include <vector>

namespace megascale::trainer {

enum class Stage : int {
  kHostCopies,  // token, target and bucket uploads
  kEncoderForward,
  kLayerNormForward,
  kMatmulQkvForward,
  kAttentionForward,
  kMatmulAttProjForward,
  kMatmulFcForward,  // with the fused bias + GeLU epilogue
  kMatmulFcProjForward,
  kMatmulLmHeadForward,
  kClassifier,  // softmax + cross-entropy, dlogits in place
  kMatmulLmHeadBackward,
  kMatmulFcProjBackward,  // with the fused dGeLU epilogue
  kMatmulFcBackward,
  kMatmulAttProjBackward,
  kAttentionBackward,  // D_i, the kernel, the dQ conversion
  kMatmulQkvBackward,
  kLayerNormBackward,
  kEncoderBackward,
  kZeroGrads,
  kGradNorm,
  kOptimizer,
  kCount
};

/// The stage's name in the table.
const char* stage_name(Stage stage);

class StageProfiler {
 public:
  explicit StageProfiler(cudaStream_t stream);
  ~StageProfiler();
  StageProfiler(const StageProfiler&) = delete;
  StageProfiler& operator=(const StageProfiler&) = delete;

  /// Opens a step: records its start event. Scopes outside begin_step/end_step are ignored.
  void begin_step();
  /// Records the step's end, waits for the stream and adds every stage's time of this step.
  void end_step();
  /// Forgets the steps so far (the first step of a process warms up cuBLASLt and the allocator).
  void reset();

  void begin(Stage stage);
  void end();

  /// The table: per stage milliseconds per step, share of the step's GPU span, calls per step.
  std::string table() const;
  int steps() const { return steps_; }

 private:
  struct Mark {
    Stage stage;
    cudaEvent_t start, stop;
  };
  cudaEvent_t event();

  cudaStream_t stream_;
  std::vector<cudaEvent_t> pool_;
  size_t pool_used_ = 0;
  std::vector<Mark> marks_;
  bool in_step_ = false;
  bool open_ = false;
  cudaEvent_t step_start_ = nullptr, step_stop_ = nullptr;
  std::array<double, static_cast<int>(Stage::kCount)> ms_{};
  std::array<long, static_cast<int>(Stage::kCount)> calls_{};
  double span_ms_ = 0;
  int steps_ = 0;
};

/// Brackets one stage when a profiler is given (nullptr: does nothing).
class StageScope {
 public:
  StageScope(StageProfiler* profiler, Stage stage) : profiler_(profiler) {
    if (profiler_ != nullptr) profiler_->begin(stage);
  }
  ~StageScope() {
    if (profiler_ != nullptr) profiler_->end();
  }
  StageScope(const StageScope&) = delete;
  StageScope& operator=(const StageScope&) = delete;

 private:
  StageProfiler* profiler_;
};

}  // namespace megascale::trainer
