// GptImpl, GptModel's implementation (model.h): one template over the compute type, the layer
// sequence of GPT-2 in terms of the launchers of kernels.h. Buffers are carved from a few large
// allocations by offset tables, as llm.c's ParameterTensors/ActivationTensors are. Its members are
// defined in three files: model.cpp (buffers, init, create), model_layers.cpp (the forward and backward
// of a chunk of layers, the head, the loss), model_parallel.cpp (the gradient norm, the optimizers and
// the pipeline's step); each instantiates it for float and bf16.
#pragma once

#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cuda_check.h"
#include "kernels.h"
#include "megascale/trainer/grad_buckets.h"
#include "megascale/trainer/model_shard.h"
#include "megascale/trainer/pipeline.h"
#include "model.h"
#include "stage_profiler.h"

namespace megascale::trainer::detail {

using namespace cuda;  // the kernels' launchers

constexpr size_t kTensorAlignElements = 128;  // 256 bytes of bf16, 512 of fp32: cuBLASLt's favourite

template <class T>
T* device_alloc(size_t n) {
  T* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
  CUDA_CHECK(cudaMemset(p, 0, std::max<size_t>(n, 1) * sizeof(T)));
  return p;
}

template <class T>
class GptImpl final : public GptModel {
 public:
  GptImpl(const ModelConfig& model, int batch_size, int seq_len, const ModelParallel& par,
          std::vector<Pass> schedule);

  ~GptImpl() override;

  const ModelConfig& config() const override { return cfg_; }
  const std::vector<ModelTensor>& tensors() const override { return tensors_; }
  int64_t num_parameters() const override { return num_parameters_; }
  size_t buffer_floats() const override { return floats_; }

  void init_gpt2(uint64_t seed) override;

  double forward(const int32_t* inputs_host, const int32_t* targets_host) override {
    if (pp_ > 1) return pipeline_forward(inputs_host, targets_host);
    upload_batch(0, inputs_host, targets_host);
    run_forward_chunk(0, 0, 0);
    run_head(0, 0, 0.0f, false, false);
    return mean_loss();
  }

  double forward_backward(const int32_t* inputs_host, const int32_t* targets_host,
                          float grad_scale) override {
    require_whole_model("forward_backward");
    // The first backward after zero_grads() writes the weight gradients rather than adding to them.
    const bool overwrite = weight_grads_stale_;
    weight_grads_stale_ = false;
    upload_batch(0, inputs_host, targets_host);
    upload_buckets(0, inputs_host);
    run_forward_chunk(0, 0, 0);
    run_head(0, 0, grad_scale / static_cast<float>(N_), true, overwrite);
    run_backward_chunk(0, 0, 0, overwrite);
    return mean_loss();
  }

  double train_step(const std::vector<const int32_t*>& inputs, const std::vector<const int32_t*>& targets,
                    float grad_scale) override {
    if (pp_ == 1) {
      double loss = 0;
      for (size_t i = 0; i < inputs.size(); ++i) {
        final_backward_ = i + 1 == inputs.size();  // its layers' gradients are then final
        loss += forward_backward(inputs[i], targets[i], grad_scale) * grad_scale;
      }
      final_backward_ = false;
      return loss;
    }
    return pipeline_step(inputs, targets, grad_scale);
  }

  std::vector<float> logits() const override {
    const size_t n = static_cast<size_t>(N_) * Vl_;
    float* tmp = device_alloc<float>(n);
    copy_to_float<T>(tmp, logits_, n, stream_);
    std::vector<float> host(n);
    CUDA_CHECK(cudaMemcpyAsync(host.data(), tmp, n * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    CUDA_CHECK(cudaFree(tmp));
    return host;
  }

  void zero_grads() override {
    StageScope scope(profiler_.get(), Stage::kZeroGrads);
    for (const auto& [from, count] : zero_ranges_)
      CUDA_CHECK(cudaMemsetAsync(grads_ + from, 0, count * sizeof(float), stream_));
    // The next backward overwrites them (matmul_backward's overwrite_dweight); a pipeline stage cleared them
    // all.
    weight_grads_stale_ = pp_ == 1;
  }

  StageProfiler* enable_stage_profiler() override {
    if (profiler_) return profiler_.get();
    profiler_ = std::make_unique<StageProfiler>(stream_);
    const char* names[] = {"pp activations out", "pp activations in", "pp gradients out", "pp gradients in"};
    for (int i = 0; i < 4; ++i) {
      if (peers_[i].stream != nullptr) peers_[i].lane = profiler_->add_lane(peers_[i].stream, names[i]);
    }
    if (dp_stream_ != nullptr) dp_lane_ = profiler_->add_lane(dp_stream_, "dp gradients and parameters");
    if (tp_stream_ != nullptr) tp_lane_ = profiler_->add_lane(tp_stream_, "tp gathers and reductions");
    return profiler_.get();
  }

  double grad_norm() override;

  double data_parallel_mean(double value) override;

  void optimizer_step(const TrainConfig& train, double lr, int step, double norm) override;

  // kMasters with dp > 1 is a collective over the DP group (gather_masters).
  std::vector<float> download(Buffer which) const override {
    join_dp();
    if (which == Buffer::kGrads) zero_stale_weight_grads();
    if (which == Buffer::kMasters) gather_masters();
    std::vector<float> host(floats_);
    const bool state = which == Buffer::kMoment1 || which == Buffer::kMoment2;
    std::vector<float> compact(state ? state_floats_ : 0);
    float* to = state ? compact.data() : host.data();
    CUDA_CHECK(cudaMemcpyAsync(to, buffer(which), (state ? state_floats_ : floats_) * sizeof(float),
                               cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (state) {  // the rank's pieces in place, zeros elsewhere (dp 1: the whole state)
      for_each_piece(-1, [&](size_t, const ModelTensor&, size_t b, size_t e, size_t m) {
        std::copy_n(compact.data() + m, e - b, host.data() + b);
      });
    }
    return host;
  }

  void upload(Buffer which, const std::vector<float>& values) override {
    join_dp();
    if (which == Buffer::kGrads) weight_grads_stale_ = false;      // overwritten below (the padding stays 0)
    if (which == Buffer::kMoment1 || which == Buffer::kMoment2) {  // the rank's pieces only
      std::vector<float> compact(state_floats_, 0.0f);
      for_each_piece(-1, [&](size_t, const ModelTensor&, size_t b, size_t e, size_t m) {
        if (e <= values.size())
          std::copy(values.begin() + static_cast<std::ptrdiff_t>(b),
                    values.begin() + static_cast<std::ptrdiff_t>(e),
                    compact.begin() + static_cast<std::ptrdiff_t>(m));
      });
      CUDA_CHECK(cudaMemcpyAsync(buffer(which), compact.data(), state_floats_ * sizeof(float),
                                 cudaMemcpyHostToDevice, stream_));
      CUDA_CHECK(cudaStreamSynchronize(stream_));
      return;
    }
    CUDA_CHECK(cudaMemcpyAsync(buffer(which), values.data(), std::min(values.size(), floats_) * sizeof(float),
                               cudaMemcpyHostToDevice, stream_));
    if (which == Buffer::kMasters) copy_to_compute<T>(params_, masters_, floats_, stream_);
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

 private:
  static void nccl_check(ncclResult_t r, const char* call) {
    if (r == ncclSuccess) return;
    std::fprintf(stderr, "NCCL error in %s: %s (%s)\n", call, ncclGetErrorString(r),
                 ncclGetLastError(nullptr));
    std::abort();  // a collective half done leaves the group unusable, as a CUDA error leaves the device
  }

  // The norm of the whole job's gradient. With dp > 1 first ZeRO-2's gradient half: each bucket not yet
  // reduce-scattered during the backward is, so that this rank's pieces hold the group's mean gradient.
  // Then each rank's weighted sum of squares over its pieces (norm_weight_: replicated tensors 1/tp, the
  // head's copy of wte 0), summed over the job.
  double parallel_grad_norm();

  // `value` reduced by `op` over `comm` through the device (one value; synchronises).
  template <class V>
  V reduce_scalar(V value, ncclRedOp_t op, ncclComm_t comm, Stage stage) {
    static_assert(sizeof(V) <= sizeof(*sum_));
    CUDA_CHECK(cudaMemcpyAsync(sum_, &value, sizeof(V), cudaMemcpyHostToDevice, stream_));
    staged(stage, [&] {
      nccl_check(ncclAllReduce(sum_, sum_, 1, sizeof(V) == sizeof(double) ? ncclDouble : ncclFloat, op, comm,
                               stream_),
                 "ncclAllReduce");
    });
    V out{};
    CUDA_CHECK(cudaMemcpyAsync(&out, sum_, sizeof(V), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return out;
  }

  // f(k, tensor, begin, end, state) for each piece [begin, end) of the flat buffers this rank steps, in
  // tensor order, its optimizer state (the moments) at `state`: with dp > 1 its piece of each slice of
  // `bucket` (grad_buckets.h; -1: of every bucket), its state compact (shard_offset), else every tensor
  // whole, its state at the same offsets.
  template <class F>
  void for_each_piece(int bucket, F&& f) const {
    if (dp_ == 1) {
      for (size_t k = 0; k < tensors_.size(); ++k) {
        const ModelTensor& t = tensors_[k];
        f(k, t, t.offset, t.offset + t.numel, t.offset);
      }
      return;
    }
    for (const GradSlice& s : dp_plan_.slices) {
      if (bucket >= 0 && s.bucket != bucket) continue;
      const ModelTensor& t = tensors_[static_cast<size_t>(s.tensor)];
      const ElementRange r = shard_of(s, dp_, dp_rank_);
      f(static_cast<size_t>(s.tensor), t, t.offset + static_cast<size_t>(r.begin),
        t.offset + static_cast<size_t>(r.end), static_cast<size_t>(s.shard_offset));
    }
  }

  // ZeRO-2 over the data-parallel group, a bucket at a time, each bucket one NCCL group: the slices'
  // gradients reduce-scattered (averaged) in place, so that this rank's piece of each holds the mean;
  // the masters' pieces all-gathered in place and the slices' compute copies refreshed from them.
  void reduce_scatter_bucket(int bucket, ncclComm_t comm, cudaStream_t stream);
  void all_gather_bucket(int bucket, ncclComm_t comm, cudaStream_t stream);
  // dp > 1: every rank's pieces of the fp32 masters, all-gathered over the DP group on the compute
  // stream (a collective: every rank of the group calls it, as download(kMasters) does at a checkpoint).
  void gather_masters() const;

  // With dp overlap (a communicator and stream of its own): after layer `bucket`'s backward on the
  // step's last micro-batch (final_backward_), its bucket is reduce-scattered on dp_stream_ while the
  // backward goes on. join_dp() makes the compute stream wait for everything issued there; wait_params()
  // for the all-gather of a bucket the optimizer issued there, ahead of the forward that reads it.
  void bucket_done(int bucket) {
    if (dp_stream_ == nullptr || !final_backward_) return;
    CUDA_CHECK(cudaEventRecord(computed_, stream_));
    CUDA_CHECK(cudaStreamWaitEvent(dp_stream_, computed_));
    StageScope scope(profiler_.get(), Stage::kDpReduceScatter, dp_lane_);
    reduce_scatter_bucket(bucket, dp_overlap_comm_, dp_stream_);
    reduced_[static_cast<size_t>(bucket)] = 1;
  }
  void join_dp() const {
    if (dp_stream_ == nullptr) return;
    CUDA_CHECK(cudaEventRecord(dp_done_, dp_stream_));
    CUDA_CHECK(cudaStreamWaitEvent(stream_, dp_done_));
  }
  void wait_params(int bucket) const {
    if (dp_stream_ != nullptr)
      CUDA_CHECK(cudaStreamWaitEvent(stream_, params_ready_[static_cast<size_t>(bucket)]));
  }
  int rest_bucket() const { return dp_plan_.layers; }  // the unstacked tensors' bucket

  // ZeRO-2's optimizer half, bucket by bucket in the forward's order (the unstacked tensors, then the
  // layers): AdamW over this rank's pieces (the moments outside them stay unused), or LAMB's apply, then
  // the bucket all-gathered; with dp overlap on dp_stream_, marking params_ready_, and not waited for.
  void step_and_gather(const TrainConfig& train, OptimizerStep s, bool lamb);

  // LAMB's first half over pieces: each of this rank's pieces of a tensor (all of it with dp == 1)
  // updates its moments and adds its ||w||^2 and ||u||^2 to the tensor's sums; the sums are added over
  // the data-parallel group (the other pieces) and the tensor-parallel one (a split tensor's other
  // slices; a replicated tensor's sums grow by tp for both norms, leaving their ratio), so every piece
  // then steps by the whole tensor's trust ratio (lamb_apply). A pipeline stage's tensors are its own
  // (wte's two copies are equal and get equal steps).
  void parallel_lamb_moments(const TrainConfig& train, OptimizerStep s);

  bool is_matmul_weight(const std::string& name) const {
    return (name == "wte" && head_) || name == "qkvw" || name == "attprojw" || name == "fcw" ||
           name == "fcprojw";
  }
  // After zero_grads() and before any backward: makes the weight gradients the zeros they stand for.
  void zero_stale_weight_grads() const {
    if (!weight_grads_stale_) return;
    CUDA_CHECK(cudaMemsetAsync(grads_, 0, floats_ * sizeof(float), stream_));
    weight_grads_stale_ = false;
  }

  float* buffer(Buffer which) const {
    switch (which) {
      case Buffer::kMasters:
        return masters_;
      case Buffer::kGrads:
        return grads_;
      case Buffer::kMoment1:
        return moment1_;
      case Buffer::kMoment2:
        return moment2_;
    }
    return masters_;
  }

  // Parameter slices: whole tensor, or layer l of a stacked one.
  T* param(const char* name, int layer = -1) const { return params_ + slice(name, layer); }
  float* grad(const char* name, int layer = -1) const { return grads_ + slice(name, layer); }
  size_t slice(const char* name, int layer) const {
    const ModelTensor& t = tensors_[index_.at(name)];
    // Stacked tensors hold this rank's layers only: Lc per chunk, vpp chunks.
    return layer < 0 ? t.offset
                     : t.offset + static_cast<size_t>(layer) * (t.numel / (static_cast<size_t>(Lc_) * vpp_));
  }
  // Activation region r (one chunk of Lc layers, one micro-batch): layer i's LayerNorm statistics
  // (which = 2i for ln1, 2i + 1 for ln2, 2 Lc for lnf), its per-layer buffers and its residual stream
  // entries (entry i is layer i's input, entry Lc the chunk's output).
  float* mean_of(int region, int which) const {
    return stats_ + (static_cast<size_t>(region) * (2 * Lc_ + 1) + which) * 2 * n_;
  }
  float* rstd_of(int region, int which) const { return mean_of(region, which) + n_; }
  size_t at_layer(int region, int i, size_t rows, size_t width) const {
    return (static_cast<size_t>(region) * Lc_ + i) * rows * width;
  }
  T* residual_at(int region, int entry) const {
    return residual_ + (static_cast<size_t>(region) * (Lc_ + 1) + entry) * n_ * cfg_.d_model;
  }
  // This rank's rows (sequence parallel) inside an [N, width] buffer; the buffer itself when tp == 1.
  template <class P>
  P* mine(P* full, size_t width) const {
    return full + static_cast<size_t>(tp_rank_) * n_ * width;
  }
  bool first_stage(int chunk) const { return chunk == 0 && pp_rank_ == 0; }
  bool last_stage(int chunk) const { return chunk == vpp_ - 1 && pp_rank_ == pp_ - 1; }

  // The TP group's row exchanges, on the compute stream (no-ops with tp == 1, where local is full):
  // all-gather this rank's n rows of `width` into [N, width] (in place when local is mine(full)), and
  // reduce-scatter (sum) [N, width] partial sums into this rank's n rows.
  void gather_rows(const T* local, T* full, size_t width) {
    if (tp_ == 1) return;
    StageScope scope(profiler_.get(), Stage::kTpAllGather);
    nccl_check(ncclAllGather(local, full, n_ * width, nccl_type(), tp_comm_, stream_), "ncclAllGather");
  }
  void reduce_scatter_rows(const T* full, T* local, size_t width) {
    if (tp_ == 1) return;
    StageScope scope(profiler_.get(), Stage::kTpReduceScatter);
    nccl_check(ncclReduceScatter(full, local, n_ * width, nccl_type(), ncclSum, tp_comm_, stream_),
               "ncclReduceScatter");
  }
  static ncclDataType_t nccl_type() { return sizeof(T) == sizeof(float) ? ncclFloat : ncclBfloat16; }

  // A tensor-parallel GEMM with its row exchange, MegaScale's chunked overlap with --tp-overlap (a TP
  // communicator and stream of their own, tp_stream_), else the whole GEMM and the collective on the
  // compute stream. The GEMMs are row-wise, so a block of rows is a GEMM of its own; a backward's first
  // block gets `first` (its weight gradient may overwrite), the others accumulate.
  //
  // gather_then: f(row0, rows, in, first) runs the GEMMs reading rows [row0, row0 + rows) of the
  // all-gathered [N, width] input, `in` pointing at row row0. Overlapped: `local` (this rank's n rows)
  // is all-gathered into `full` on the TP stream while f runs on this rank's own rows straight from
  // `local`, then f runs on the other ranks' rows. (tp 1: f on `local`, all the rows.)
  template <class F>
  void gather_then(const T* local, T* full, size_t width, F&& f) {
    if (tp_ == 1) {
      f(size_t{0}, static_cast<size_t>(N_), local, true);
      return;
    }
    if (tp_stream_ == nullptr) {
      gather_rows(local, full, width);
      f(size_t{0}, static_cast<size_t>(N_), static_cast<const T*>(full), true);
      return;
    }
    on_tp_stream(Stage::kTpAllGather, [&] {
      nccl_check(ncclAllGather(local, full, n_ * width, nccl_type(), tp_overlap_comm_, tp_stream_),
                 "ncclAllGather");
    });
    const size_t own = static_cast<size_t>(tp_rank_) * n_, next = own + n_, N = N_;
    f(own, static_cast<size_t>(n_), local, true);
    wait_tp();
    if (own > 0) f(size_t{0}, own, static_cast<const T*>(full), false);
    if (next < N) f(next, N - next, static_cast<const T*>(full + next * width), false);
  }
  // matmul_then_reduce: f(row0, rows, first) writes rows [row0, row0 + rows) of the [N, width] partial
  // sums `partial`, which are summed over the TP group into each rank's n rows `local`. Overlapped: f
  // runs one rank's block of rows at a time, each block reduced onto its rank (ncclReduce, root j for
  // block j) on the TP stream while the next block computes. The caller calls wait_tp() before reading
  // `local`.
  template <class F>
  void matmul_then_reduce(T* partial, T* local, size_t width, F&& f) {
    if (tp_stream_ == nullptr) {
      f(size_t{0}, static_cast<size_t>(N_), true);
      reduce_scatter_rows(partial, local, width);
      return;
    }
    for (int j = 0; j < tp_; ++j) {
      const size_t row0 = static_cast<size_t>(j) * n_;
      f(row0, static_cast<size_t>(n_), j == 0);
      on_tp_stream(Stage::kTpReduceScatter, [&] {
        nccl_check(ncclReduce(partial + row0 * width, local, n_ * width, nccl_type(), ncclSum, j,
                              tp_overlap_comm_, tp_stream_),
                   "ncclReduce");
      });
    }
  }
  // Issues f's collective on the TP stream after everything issued so far on the compute stream.
  template <class F>
  void on_tp_stream(Stage stage, F&& f) {
    CUDA_CHECK(cudaEventRecord(computed_, stream_));
    CUDA_CHECK(cudaStreamWaitEvent(tp_stream_, computed_));
    StageScope scope(profiler_.get(), stage, tp_lane_);
    f();
  }
  // The compute stream waits for everything issued on the TP stream.
  void wait_tp() {
    if (tp_stream_ == nullptr) return;
    CUDA_CHECK(cudaEventRecord(tp_done_, tp_stream_));
    CUDA_CHECK(cudaStreamWaitEvent(stream_, tp_done_));
  }

  void upload_batch(int mb, const int32_t* inputs_host, const int32_t* targets_host);

  // The embedding backward's token buckets of micro-batch mb. Vocabulary parallel: only the buckets of
  // this rank's tokens, renumbered from its first row (the buckets ascend by token, so they are one
  // contiguous run; their offsets still index `positions`). The host arrays live in buckets_[mb] until
  // the next step's copies, so the asynchronous copies never read freed memory.
  void upload_buckets(int mb, const int32_t* inputs_host);

  // One chunk's forward for micro-batch mb in activation region `region`: from the embedding on the first
  // virtual stage, else from residual entry 0 (the activation received). With tp ranks, N = B x S token
  // rows, n = N / tp of them this rank's (all of them with tp == 1, where every exchange below is a no-op
  // and the fused one-GPU epilogues run): the residual stream and the LayerNorms live on n rows; their
  // outputs are all-gathered into [N, C] for the column-parallel GEMMs (QKV, FC: this rank's heads and
  // 4C/tp columns); the row-parallel GEMMs (attproj, fcproj) give [N, C] partial sums, reduce-scattered
  // to n rows before their bias and the residual are added. The parallel block sums both projections'
  // partials before one reduce-scatter.
  void run_forward_chunk(int region, int chunk, int mb);

  // The last virtual stage's head on the chunk's output: the final LayerNorm, the LM head, the loss per
  // token row into losses_ and, with backward, its gradient back to the chunk's output in dres_ (dlogits
  // scaled by dloss_scale, through the LM head and the final LayerNorm).
  void run_head(int region, int mb, float dloss_scale, bool backward, bool overwrite);

  // The loss per token row into losses_ and, with write_dlogits, dlogits (scaled) in place of logits_.
  void run_classifier(const int* targets, float dloss_scale, bool write_dlogits);

  // One chunk's backward for micro-batch mb from dres_ (the gradient of the chunk's output), leaving in
  // dres_ the gradient of its input, or on the first virtual stage running the embedding's backward. The
  // mirror of run_forward_chunk: dres lives on this rank's n rows; it is all-gathered before the
  // row-parallel GEMMs' backward, and the column-parallel GEMMs' input gradients (partial sums over the
  // rank's heads or columns) are reduce-scattered before the LayerNorms' backward.
  void run_backward_chunk(int region, int chunk, int mb, bool overwrite);

  // One optimizer step through the pipeline (pp > 1): the schedule's passes issued in order without
  // waiting. A received activation or gradient arrives on its own stream and communicator into a buffer
  // of its own (micro-batch, chunk), which the compute stream waits for; a send waits for the pass that
  // produced it on its own stream. So the only waits between stages are a pass's on its input. A
  // chunk's output activation is sent from its region, which its backward (after the next stage has
  // received it, since that backward needs the next stage's gradient) only frees.
  double pipeline_step(const std::vector<const int32_t*>& inputs, const std::vector<const int32_t*>& targets,
                       float grad_scale);
  // A validation batch's forward through the pipeline (forward() with pp > 1): its chunks in the virtual
  // stages' order, each stage receiving its input and sending its output as pipeline_step does; the
  // last stage's loss, summed over the pipeline group so that every stage returns it.
  double pipeline_forward(const int32_t* inputs_host, const int32_t* targets_host);
  // Around both: the loss sum cleared and the peers' streams after the compute stream's work so far;
  // then the compute stream after the peers' exchanges, and the last stage's loss summed over the
  // pipeline group, which every stage returns.
  void pipeline_begin();
  double pipeline_end();

  void require_whole_model(const char* what) const {
    if (pp_ == 1) return;
    std::fprintf(stderr,
                 "GptModel::%s needs the whole model on this rank (pp 1); a pipeline stage runs train_step\n",
                 what);
    std::abort();
  }

  // A free activation region of `chunk` (its regions are chunk * slots_ .. + slots_ - 1).
  int take_region(int chunk);

  // Runs f as one stage of the step profile (just runs it when profiling is off).
  template <class F>
  void staged(Stage stage, F&& f) {
    StageScope scope(profiler_.get(), stage);
    f();
  }
  void prof_begin(Stage stage) {
    if (profiler_) profiler_->begin(stage);
  }
  void prof_end() {
    if (profiler_) profiler_->end();
  }

  double mean_loss() {
    std::vector<float> host(N_);
    CUDA_CHECK(cudaMemcpyAsync(host.data(), losses_, N_ * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    double sum = 0;
    for (float x : host) sum += x;  // in order: deterministic
    return sum / N_;
  }

  ModelConfig cfg_;
  int B_, S_, N_;
  // Tensor parallel: ranks, this rank, its token rows (N / tp), width of its column-parallel slice
  // (C / tp), heads, vocabulary rows and the first of them.
  int tp_, tp_rank_, n_, Cl_, Hl_, Vl_, vocab_begin_;
  // Pipeline parallel: stages, this stage, chunks (virtual stages) per stage, layers per chunk,
  // micro-batches per step (1 when pp == 1), this stage's passes, what it holds.
  int pp_, pp_rank_, vpp_, Lc_, micro_batches_;
  std::vector<Pass> schedule_;
  bool embedding_ = true, head_ = true;
  int slots_ = 1;                   // activation regions per chunk
  std::vector<int> free_regions_;   // the regions not holding a micro-batch in flight
  std::vector<int> region_of_;      // (micro-batch, chunk) -> its region while in flight
  std::vector<float> norm_weight_;  // per tensor: its weight in the job's gradient norm
  GradBuckets dp_plan_;             // dp > 1: the slices and buckets of the sharded optimizer
  struct HostBuckets {
    std::vector<int> token, offset, positions;
    int count = 0;
  };
  std::vector<HostBuckets> buckets_;  // per micro-batch: the embedding backward's buckets (host copies)
  std::vector<ModelTensor> tensors_;
  std::vector<TpTensor> tp_tensors_;  // tensors_'s split (same order)
  size_t partial_end_ = 0;            // [0, partial_end_): gradients summed over the TP group
  std::unordered_map<std::string, size_t> index_;
  int64_t num_parameters_ = 0;
  size_t floats_ = 0;
  size_t state_floats_ = 0;  // the moments' floats: floats_, or with dp > 1 the rank's pieces (ZeRO)
  std::vector<std::pair<size_t, size_t>> zero_ranges_;  // (offset, count): what zero_grads() clears
  mutable bool weight_grads_stale_ = false;  // zero_grads() ran and no backward has written them since
  float *masters_, *grads_, *moment1_, *moment2_;
  T* params_;
  // dp > 1: the buckets' staging buffer (GradBuckets::flat_numel floats; a bucket's reduce-scatter in
  // fp32 and its all-gather in T use the same region, one after the other on one stream).
  float* dp_flat_ = nullptr;
  T *residual_, *mid_, *ln1_, *ln2_, *qkv_, *atty_, *fch_pre_, *fch_, *lnf_, *logits_;
  float *stats_, *lse_;
  T *dres_, *dbuf1_, *dbuf2_, *dqkv_, *dfch_, *full_;
  float* vocab_stats_;
  T* act_in_ = nullptr;    // pp > 1, per (micro-batch, chunk): activations received
  T* grad_in_ = nullptr;   // gradients received (or the head's, kept for the last chunk's backward)
  T* grad_out_ = nullptr;  // gradients sent
  float* loss_sum_ = nullptr;
  int *tokens_, *targets_, *bucket_token_, *bucket_offset_, *positions_;
  float *losses_, *scratch_, *norm_, *attention_workspace_;
  double* sum_;
  float* lamb_sums_;  // per tensor: ||w||^2, ||u||^2 of its pieces (parallel LAMB)
  MatmulContext matmul_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<StageProfiler> profiler_;  // set by enable_stage_profiler
  // The parallel groups' communicators; data parallel: size, this rank, the shard's floats.
  ncclComm_t tp_comm_ = nullptr, world_comm_ = nullptr, pp_comm_ = nullptr, embedding_comm_ = nullptr;
  // The pipeline neighbours (ModelParallel's order: activation send, receive, gradient send, receive),
  // each with its own stream and an event marking its last operation.
  struct Peer {
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
    cudaEvent_t done = nullptr;
    int lane = 0;  // its lane in the stage profiler
  };
  Peer peers_[4];
  // Decoupled exchanges on a peer's stream: a receive makes the compute stream wait for its data, a send
  // waits for what the compute stream issued before it, and never holds the compute stream.
  void p2p_receive(Peer& p, T* buffer, size_t count);
  void p2p_send(Peer& p, const T* buffer, size_t count);
  std::vector<CoupledStep> coupled_;  // --pp-coupled: the schedule with its exchanges (else empty)
  cudaEvent_t computed_ = nullptr;    // the compute stream's progress, for the peers' streams to wait on
  ncclComm_t dp_comm_ = nullptr;
  int dp_ = 1;
  int dp_rank_ = 0;
  // dp overlap (ModelParallel::dp_overlap_comm): its communicator and stream, per bucket whether this
  // step's reduce-scatter was issued and the event marking its parameters gathered, the profiler lane.
  // tp overlap (ModelParallel::tp_overlap_comm): its communicator, stream, last-operation event, lane.
  ncclComm_t tp_overlap_comm_ = nullptr;
  cudaStream_t tp_stream_ = nullptr;
  cudaEvent_t tp_done_ = nullptr;
  int tp_lane_ = 0;
  ncclComm_t dp_overlap_comm_ = nullptr;
  cudaStream_t dp_stream_ = nullptr;
  cudaEvent_t dp_done_ = nullptr;
  std::vector<char> reduced_;
  std::vector<cudaEvent_t> params_ready_;
  int dp_lane_ = 0;
  bool final_backward_ = false;     // the backward running is the last of its layers' this step
  std::vector<int> last_backward_;  // pp > 1, per chunk: the schedule's index of its last backward pass
};

}  // namespace megascale::trainer::detail
