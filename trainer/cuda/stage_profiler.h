// Where a training step's GPU time goes: CUDA events around each stage of the step (matmuls by role,
// attention forward and backward, LayerNorm, the classifier, the optimizer, and every collective and
// pipeline send or receive), summed per stage over the profiled steps and printed as a table, and
// optionally kept as a Chrome trace (one process per rank, one thread per stream) that Perfetto and
// chrome://tracing open; scripts/megascale-trace-merge.py merges the ranks' files (and the net plugin's
// request timelines) into one. Host-only code on the CUDA runtime; the model owns one and
// megascale-train turns it on with --profile (or MEGASCALE_TRAIN_PROFILE=1) or --timeline DIR.
//
//   StageProfiler profiler(stream);
//   profiler.begin_step();
//   { StageScope scope(&profiler, Stage::kAttentionForward); attention_forward(...); }
//   profiler.end_step();          // synchronises the stream and adds this step's times
//   std::string table = profiler.table();
//
// Exposed and overlapped communication follow exposure.h: communication stages on the compute stream
// are exposed (the compute waits for them); those on other streams (the data-parallel stream, a
// pipeline's sends and receives: add_lane) are overlapped while the compute stream is busy and exposed
// while it is idle.
//
// Each stage is bracketed by two events on its stream, so a stage's time is the GPU
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
  // Communication.
  kTpAllGather,      // sequence-parallel rows before a column-parallel GEMM
  kTpReduceScatter,  // a row-parallel GEMM's partial sums (and their gradients)
  kTpAllReduce,      // the vocabulary-parallel loss's row statistics, the replicated tensors' gradients
  kDpReduceScatter,  // ZeRO's gradients
  kDpAllGather,      // ZeRO's master weights
  kDpAllReduce,      // the loss's mean, LAMB's per-tensor norms
  kPpSend,           // a pipeline stage's activation or gradient to its neighbour
  kPpRecv,
  kPpAllReduce,      // the two copies of wte's gradient; the step's loss
  kNormAllReduce,    // the gradient norm's sum over the job
  kCount
};

/// The stage's name in the table.
const char* stage_name(Stage stage);
bool is_communication(Stage stage);

class StageProfiler {
 public:
  explicit StageProfiler(cudaStream_t stream);
  ~StageProfiler();
  StageProfiler(const StageProfiler&) = delete;
  StageProfiler& operator=(const StageProfiler&) = delete;

  /// Another stream whose stages are timed (lane 0 is the constructor's, "compute"); returns its lane.
  int add_lane(cudaStream_t stream, const std::string& name);

  /// Opens a step: records its start event. Scopes outside begin_step/end_step are ignored.
  void begin_step();
  /// Records the step's end, waits for the stream and adds every stage's time of this step. The other
  /// lanes' work must be ordered before the step's end on the compute stream (it waits for them).
  void end_step();
  /// Forgets the steps so far (the first step of a process warms up cuBLASLt and the allocator).
  void reset();

  void begin(Stage stage, int lane = 0);
  void end(int lane = 0);

  /// The table: per stage milliseconds per step, share of the step's GPU span, calls per step.
  std::string table() const;
  int steps() const { return steps_; }
  /// The last step's GPU span and its exposed communication (exposure.h), in ms.
  double last_span_ms() const { return last_span_ms_; }
  double last_exposed_ms() const { return last_exposed_ms_; }

  /// Keeps the next `steps` profiled steps as Chrome trace events of process `pid` (the OS's) named
  /// `process`, timestamps in microseconds of CLOCK_MONOTONIC, as the net plugin's request timelines
  /// (MEGASCALE_TRACE_FILE) have them: scripts/megascale-trace-merge.py merges both kinds, and the
  /// ranks of one host line up. Lanes are threads 0, 1, ...; the plugin's start at 100.
  void enable_trace(long pid, const std::string& process, const std::string& host, int steps);
  /// The trace so far: a Chrome trace JSON document ({"traceEvents": [...]}).
  std::string trace_json() const;

 private:
  struct Mark {
    Stage stage;
    int lane;
    cudaEvent_t start, stop;
  };
  struct Lane {
    cudaStream_t stream;
    std::string name;
    bool open = false;
  };
  cudaEvent_t event();

  cudaStream_t stream_;
  std::vector<Lane> lanes_;
  std::vector<cudaEvent_t> pool_;
  size_t pool_used_ = 0;
  std::vector<Mark> marks_;
  bool in_step_ = false;
  double last_span_ms_ = 0, last_exposed_ms_ = 0;
  // Trace: events kept (one JSON object each), steps still to keep, the process.
  std::vector<std::string> trace_;
  int trace_steps_left_ = 0;
  long trace_pid_ = 0;
  std::string trace_process_, trace_host_;
  cudaEvent_t step_start_ = nullptr, step_stop_ = nullptr;
  std::array<double, static_cast<int>(Stage::kCount)> ms_{};
  std::array<long, static_cast<int>(Stage::kCount)> calls_{};
  double span_ms_ = 0;
  double exposed_ms_ = 0;     // exposed communication (exposure.h), summed over the steps
  double overlapped_ms_ = 0;  // stages on the other lanes
  int steps_ = 0;
  double overlapped_ms_per_step() const;
};

/// Brackets one stage when a profiler is given (nullptr: does nothing).
class StageScope {
 public:
  StageScope(StageProfiler* profiler, Stage stage, int lane = 0) : profiler_(profiler), lane_(lane) {
    if (profiler_ != nullptr) profiler_->begin(stage, lane_);
  }
  ~StageScope() {
    if (profiler_ != nullptr) profiler_->end(lane_);
  }
  StageScope(const StageScope&) = delete;
  StageScope& operator=(const StageScope&) = delete;

 private:
  StageProfiler* profiler_;
  int lane_;
};

}  // namespace megascale::trainer
