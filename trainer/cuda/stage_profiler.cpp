// StageProfiler (stage_profiler.h): a pool of CUDA events reused every step, read back at end_step.
#include "stage_profiler.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>

#include "cuda_check.h"
#include "megascale/trainer/exposure.h"

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
    case Stage::kTpAllGather:
      return "tp all-gather";
    case Stage::kTpReduceScatter:
      return "tp reduce-scatter";
    case Stage::kTpAllReduce:
      return "tp all-reduce";
    case Stage::kDpReduceScatter:
      return "dp reduce-scatter";
    case Stage::kDpAllGather:
      return "dp all-gather";
    case Stage::kDpAllReduce:
      return "dp all-reduce";
    case Stage::kPpSend:
      return "pp send";
    case Stage::kPpRecv:
      return "pp recv";
    case Stage::kPpAllReduce:
      return "pp all-reduce (wte, loss)";
    case Stage::kNormAllReduce:
      return "grad-norm all-reduce";
    case Stage::kCount:
      break;
  }
  return "?";
}

bool is_communication(Stage stage) {
  return stage >= Stage::kTpAllGather && stage < Stage::kCount;
}

StageProfiler::StageProfiler(cudaStream_t stream) : stream_(stream), lanes_{{stream, "compute"}} {
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

int StageProfiler::add_lane(cudaStream_t stream, const std::string& name) {
  lanes_.push_back({stream, name});
  return static_cast<int>(lanes_.size()) - 1;
}

void StageProfiler::begin_step() {
  marks_.clear();
  pool_used_ = 0;
  in_step_ = true;
  CUDA_CHECK(cudaEventRecord(step_start_, stream_));
}

void StageProfiler::begin(Stage stage, int lane) {
  Lane& l = lanes_.at(static_cast<size_t>(lane));
  if (!in_step_ || l.open) return;  // nested scopes count towards the outer one
  l.open = true;
  Mark m{stage, lane, event(), event()};
  CUDA_CHECK(cudaEventRecord(m.start, l.stream));
  marks_.push_back(m);
}

void StageProfiler::end(int lane) {
  Lane& l = lanes_.at(static_cast<size_t>(lane));
  if (!in_step_ || !l.open) return;
  l.open = false;
  for (auto it = marks_.rbegin(); it != marks_.rend(); ++it) {
    if (it->lane == lane) {
      CUDA_CHECK(cudaEventRecord(it->stop, l.stream));
      return;
    }
  }
}

void StageProfiler::end_step() {
  if (!in_step_) return;
  in_step_ = false;
  CUDA_CHECK(cudaEventRecord(step_stop_, stream_));
  CUDA_CHECK(cudaEventSynchronize(step_stop_));
  const auto now = std::chrono::steady_clock::now();  // CLOCK_MONOTONIC, the plugin's timelines' clock
  // The other lanes' last stages may outlast the step (the data-parallel all-gathers a step leaves for
  // the next forward): their events are read below, so the host waits for them too. A profiled step
  // thereby loses that prefetch's overlap with the next step; the unprofiled step time keeps it.
  for (size_t i = 1; i < lanes_.size(); ++i) CUDA_CHECK(cudaStreamSynchronize(lanes_[i].stream));
  float span = 0;
  CUDA_CHECK(cudaEventElapsedTime(&span, step_start_, step_stop_));
  span_ms_ += span;
  last_span_ms_ = span;
  last_exposed_ms_ = 0;
  // The step's start on the host's clock: its end was just now (give or take the synchronisation's
  // wake-up).
  const double start_us = std::chrono::duration<double, std::micro>(now.time_since_epoch()).count() -
                          1e3 * static_cast<double>(span);
  const bool trace = trace_steps_left_ > 0;
  std::vector<Interval> compute, compute_comm;
  std::vector<std::vector<Interval>> other_comm(lanes_.size());
  for (const Mark& m : marks_) {
    float ms = 0, from_start = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, m.start, m.stop));
    CUDA_CHECK(cudaEventElapsedTime(&from_start, step_start_, m.start));
    ms_[static_cast<int>(m.stage)] += ms;
    ++calls_[static_cast<int>(m.stage)];
    const Interval at{from_start, static_cast<double>(from_start) + ms};
    if (m.lane != 0) {
      other_comm[static_cast<size_t>(m.lane)].push_back(at);
    } else {
      (is_communication(m.stage) ? compute_comm : compute).push_back(at);
    }
    if (trace) {
      trace_.push_back(
          fmt::format(R"({{"name":"{}","cat":"{}","ph":"X","ts":{:.3f},"dur":{:.3f},"pid":{},"tid":{}}})",
                      stage_name(m.stage), is_communication(m.stage) ? "communication" : "compute",
                      start_us + 1e3 * static_cast<double>(from_start), 1e3 * static_cast<double>(ms),
                      trace_pid_, m.lane));
    }
  }
  if (trace) {
    trace_.push_back(
        fmt::format(R"({{"name":"step","cat":"step","ph":"X","ts":{:.3f},"dur":{:.3f},"pid":{},"tid":{}}})",
                    start_us, 1e3 * static_cast<double>(span), trace_pid_, lanes_.size()));
    --trace_steps_left_;
  }
  const Exposure x = exposure(compute, compute_comm, other_comm);
  last_exposed_ms_ = x.exposed;
  exposed_ms_ += x.exposed;
  overlapped_ms_ += x.overlapped;
  ++steps_;
}

void StageProfiler::enable_trace(long pid, const std::string& process, const std::string& host, int steps) {
  trace_pid_ = pid;
  trace_process_ = process;
  trace_host_ = host;
  trace_steps_left_ = steps;
}

std::string StageProfiler::trace_json() const {
  std::string out = fmt::format(
      R"({{"displayTimeUnit":"ms","otherData":{{"clock":"CLOCK_MONOTONIC","host":"{}","requests":0,"requests_not_kept":0}},"traceEvents":[)",
      trace_host_);
  out += fmt::format(R"({{"name":"process_name","ph":"M","pid":{},"args":{{"name":"{}"}}}})", trace_pid_,
                     trace_process_);
  out += fmt::format(R"(,{{"name":"process_sort_index","ph":"M","pid":{},"args":{{"sort_index":{}}}}})",
                     trace_pid_, trace_pid_);
  for (size_t i = 0; i <= lanes_.size(); ++i) {
    out += fmt::format(R"(,{{"name":"thread_name","ph":"M","pid":{},"tid":{},"args":{{"name":"{}"}}}})",
                       trace_pid_, i, i < lanes_.size() ? lanes_[i].name : std::string("steps"));
  }
  for (const std::string& e : trace_) out += "," + e;
  out += "]}\n";
  return out;
}

void StageProfiler::reset() {
  ms_.fill(0);
  calls_.fill(0);
  span_ms_ = 0;
  exposed_ms_ = 0;
  overlapped_ms_ = 0;
  steps_ = 0;
}

double StageProfiler::overlapped_ms_per_step() const {
  return steps_ == 0 ? 0.0 : overlapped_ms_ / steps_;
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
  const double exposed = exposed_ms_ / steps_;
  attributed -= overlapped_ms_per_step();  // the other lanes' time inside the compute stream's
  std::snprintf(line, sizeof(line), "  %-28s %10.3f %6.1f%%\n", "unattributed (GPU idle, gaps)",
                span - attributed, 100.0 * (span - attributed) / span);
  out += line;
  std::snprintf(line, sizeof(line), "  %-28s %10.3f %6.1f%%   (all matmul rows)\n", "= matmuls", matmul,
                100.0 * matmul / span);
  out += line;
  if (exposed > 0 || overlapped_ms_per_step() > 0) {
    std::snprintf(line, sizeof(line),
                  "  %-28s %10.3f %6.1f%%   (the compute stream's, and others' while it was idle)\n",
                  "= exposed communication", exposed, 100.0 * exposed / span);
    out += line;
    std::snprintf(line, sizeof(line),
                  "  %-28s %10.3f %7s   (on their own streams while the compute stream was busy)\n",
                  "= overlapped communication", overlapped_ms_per_step(), "");
    out += line;
  }
  return out;
}

}  // namespace megascale::trainer
