// GptModel's implementation (model.h): one template over the compute type, the layer sequence of
// GPT-2 in terms of the launchers of kernels.h. Buffers are carved from a few large allocations by
// offset tables, as llm.c's ParameterTensors/ActivationTensors are.
#include "model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nccl.h>

#include "cuda_check.h"
#include "kernels.h"
#include "megascale/trainer/tensor_parallel.h"
#include "stage_profiler.h"

namespace megascale::trainer {
namespace {

using namespace cuda;  // the kernels' launchers

constexpr size_t kTensorAlignElements = 128;  // 256 bytes of bf16, 512 of fp32: cuBLASLt's favourite

// splitmix64 (Steele et al. 2014) and Box-Muller: portable, so init is the same with any standard library.
struct InitRng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
  float normal(double std) {
    const double u1 = uniform(), u2 = uniform();
    return static_cast<float>(std * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
  }
};

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
  GptImpl(const ModelConfig& model, int batch_size, int seq_len, const ModelParallel& par)
      : cfg_(model),
        B_(batch_size),
        S_(seq_len),
        N_(batch_size * seq_len),
        tp_(par.tp),
        tp_rank_(par.tp_rank),
        n_(N_ / par.tp),
        Cl_(model.d_model / par.tp),
        Hl_(model.n_head / par.tp),
        Vl_(model.padded_vocab_size / par.tp),
        vocab_begin_(par.tp_rank * (model.padded_vocab_size / par.tp)) {
    size_t offset = 0;
    for (const TpTensor& t : tp_parameter_tensors(model, tp_)) {
      ModelTensor mt{t.name, t.shape, t.decayed, offset, static_cast<size_t>(t.numel())};
      // The partial-gradient tensors come first, then wpe, then the split ones (tensor_parallel.h).
      if (t.partial_grad) partial_end_ = offset + mt.numel;
      if (tp_ > 1 && t.split == TpSplit::kReplicated) replicated_end_ = offset + mt.numel;
      offset += (mt.numel + kTensorAlignElements - 1) / kTensorAlignElements * kTensorAlignElements;
      index_[mt.name] = tensors_.size();
      tensors_.push_back(mt);
      tp_tensors_.push_back(t);
      num_parameters_ += static_cast<int64_t>(mt.numel);
    }
    // Whole shards of aligned size for the data-parallel ranks: the flat buffer's tail is zero padding.
    const size_t unit = static_cast<size_t>(par.dp) * kTensorAlignElements;
    floats_ = (offset + unit - 1) / unit * unit;
    // zero_grads() clears everything but the matmul weights' gradients (~98% of the floats): their first
    // backward GEMM of a step writes them with beta = 0. These are the ranges it still clears.
    size_t from = 0;
    for (const ModelTensor& t : tensors_) {
      if (!is_matmul_weight(t.name)) continue;
      if (t.offset > from) zero_ranges_.emplace_back(from, t.offset - from);
      from = t.offset + t.numel;
    }
    if (floats_ > from) zero_ranges_.emplace_back(from, floats_ - from);
    masters_ = device_alloc<float>(floats_);
    grads_ = device_alloc<float>(floats_);
    moment1_ = device_alloc<float>(floats_);
    moment2_ = device_alloc<float>(floats_);
    params_ = device_alloc<T>(floats_);

    // Sizes in elements. With tp > 1, n = N / tp rows are this rank's (sequence parallel) and the
    // column-parallel activations are 1/tp as wide; with tp == 1 every size is the one-GPU one.
    const size_t C = cfg_.d_model, L = cfg_.n_layer, N = N_, n = n_, Cl = Cl_;
    residual_ = device_alloc<T>((L + 1) * n * C);
    mid_ = device_alloc<T>(L * n * C);
    ln1_ = device_alloc<T>(L * N * C);  // all-gathered (this rank's rows at tp_rank * n)
    ln2_ = device_alloc<T>(L * N * C);
    qkv_ = device_alloc<T>(L * N * 3 * Cl);
    atty_ = device_alloc<T>(L * N * Cl);
    fch_pre_ = device_alloc<T>(L * N * 4 * Cl);
    fch_ = device_alloc<T>(L * N * 4 * Cl);
    lnf_ = device_alloc<T>(N * C);
    logits_ = device_alloc<T>(N * Vl_);
    stats_ = device_alloc<float>((2 * L + 1) * 2 * n);  // mean, rstd of ln1, ln2 per layer, then lnf
    lse_ = device_alloc<float>(L * N * Hl_);
    dres_ = device_alloc<T>(n * C);
    dbuf1_ = device_alloc<T>(N * C);
    dbuf2_ = device_alloc<T>(N * C);
    dqkv_ = device_alloc<T>(N * 3 * Cl);
    dfch_ = device_alloc<T>(N * 4 * Cl);
    full_ = tp_ > 1 ? device_alloc<T>(N * C) : nullptr;  // a row-parallel output's partial sum / a gathered dres
    vocab_stats_ = tp_ > 1 ? device_alloc<float>(3 * N) : nullptr;  // row max, sum of exp, target logit
    tokens_ = device_alloc<int>(N);
    targets_ = device_alloc<int>(N);
    bucket_token_ = device_alloc<int>(N);
    bucket_offset_ = device_alloc<int>(N + 1);
    positions_ = device_alloc<int>(N);
    losses_ = device_alloc<float>(N);
    const size_t scratch = std::max({layernorm_backward_scratch_floats(n_, cfg_.d_model),
                                     global_norm_scratch_floats(), lamb_scratch_floats(0)});
    scratch_ = device_alloc<float>(scratch);
    norm_ = device_alloc<float>(2);
    sum_ = device_alloc<double>(1);
    attention_workspace_ = device_alloc<float>(
        attention_backward_workspace_bytes(B_, S_, Hl_, cfg_.head_dim()) / sizeof(float) + 1);
    // The bias-gradient fallback's row groups (64 rows) of the widest matmul (the LM head has no bias).
    matmul_ = matmul_create((N / 64 + 1) * 4 * C);
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    tp_comm_ = static_cast<ncclComm_t>(par.tp_comm);
    dp_comm_ = static_cast<ncclComm_t>(par.dp_comm);
    world_comm_ = static_cast<ncclComm_t>(par.world_comm);
    dp_ = par.dp;
    dp_rank_ = par.dp_rank;
    shard_floats_ = floats_ / static_cast<size_t>(dp_);
  }

  ~GptImpl() override {
    matmul_destroy(matmul_);
    for (void* p : std::initializer_list<void*>{masters_,
                                                grads_,
                                                moment1_,
                                                moment2_,
                                                params_,
                                                residual_,
                                                mid_,
                                                ln1_,
                                                ln2_,
                                                qkv_,
                                                atty_,
                                                fch_pre_,
                                                fch_,
                                                lnf_,
                                                logits_,
                                                stats_,
                                                lse_,
                                                dres_,
                                                dbuf1_,
                                                dbuf2_,
                                                dqkv_,
                                                dfch_,
                                                full_,
                                                vocab_stats_,
                                                tokens_,
                                                targets_,
                                                bucket_token_,
                                                bucket_offset_,
                                                positions_,
                                                losses_,
                                                scratch_,
                                                norm_,
                                                sum_,
                                                attention_workspace_}) {
      cudaFree(p);
    }
    cudaStreamDestroy(stream_);
  }

  const ModelConfig& config() const override { return cfg_; }
  const std::vector<ModelTensor>& tensors() const override { return tensors_; }
  int64_t num_parameters() const override { return num_parameters_; }
  size_t buffer_floats() const override { return floats_; }

  void init_gpt2(uint64_t seed) override {
    // Drawn tensor by tensor in the one-GPU order, whatever this rank's layout, then this rank's part
    // kept: every layout starts from the one-GPU weights.
    std::vector<float> host(floats_, 0.0f);
    std::vector<float> whole;
    InitRng rng{seed};
    const double residual_std = 0.02 / std::sqrt(2.0 * cfg_.n_layer);
    for (const ParameterTensor& g : gpt_parameter_tensors(cfg_)) {
      whole.assign(static_cast<size_t>(g.numel()), 0.0f);
      const bool layernorm_weight = g.name == "ln1w" || g.name == "ln2w" || g.name == "lnfw";
      if (layernorm_weight) {
        std::fill(whole.begin(), whole.end(), 1.0f);
      } else if (g.shape.size() >= 2 && g.decayed) {  // matmul weights and embeddings; biases stay 0
        const double std = (g.name == "attprojw" || g.name == "fcprojw") ? residual_std : 0.02;
        for (float& x : whole) x = rng.normal(std);
      }
      const size_t i = index_.at(g.name);
      float* local = host.data() + tensors_[i].offset;
      for (const CopyRun& r : tp_copy_runs(tp_tensors_[i], tp_, tp_rank_)) {
        std::copy_n(whole.data() + r.global, r.count, local + r.local);
      }
    }
    upload(Buffer::kMasters, host);
    CUDA_CHECK(cudaMemset(moment1_, 0, floats_ * sizeof(float)));
    CUDA_CHECK(cudaMemset(moment2_, 0, floats_ * sizeof(float)));
  }

  double forward(const int32_t* inputs_host, const int32_t* targets_host) override {
    run_forward(inputs_host, targets_host);
    run_classifier(0.0f, false);
    return mean_loss();
  }

  double forward_backward(const int32_t* inputs_host, const int32_t* targets_host,
                          float grad_scale) override {
    run_forward(inputs_host, targets_host);
    run_classifier(grad_scale / static_cast<float>(N_), true);
    run_backward(inputs_host);
    return mean_loss();
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
    weight_grads_stale_ = true;  // the next backward overwrites them (matmul_backward's overwrite_dweight)
  }

  StageProfiler* enable_stage_profiler() override {
    if (!profiler_) profiler_ = std::make_unique<StageProfiler>(stream_);
    return profiler_.get();
  }

  double grad_norm() override {
    zero_stale_weight_grads();
    if (tp_ > 1) {
      // Sequence parallel: each rank's LayerNorm and bias gradients cover its own rows only.
      StageScope scope(profiler_.get(), Stage::kGradNorm);
      nccl_check(ncclAllReduce(grads_, grads_, partial_end_, ncclFloat, ncclSum, tp_comm_, stream_), "ncclAllReduce");
    }
    if (tp_ > 1 || dp_ > 1) return parallel_grad_norm();
    // The padding between tensors holds zeros, so one pass over the whole allocation is exact.
    {
      StageScope scope(profiler_.get(), Stage::kGradNorm);
      global_norm(norm_, grads_, floats_, scratch_, stream_);
    }
    float host = 0;
    CUDA_CHECK(cudaMemcpyAsync(&host, norm_, sizeof(float), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return host;
  }

  double data_parallel_mean(double value) override {
    if (dp_ == 1) return value;
    const float mine = static_cast<float>(value);
    CUDA_CHECK(cudaMemcpyAsync(norm_, &mine, sizeof(float), cudaMemcpyHostToDevice, stream_));
    nccl_check(ncclAllReduce(norm_, norm_, 1, ncclFloat, ncclAvg, dp_comm_, stream_), "ncclAllReduce");
    float mean = 0;
    CUDA_CHECK(cudaMemcpyAsync(&mean, norm_, sizeof(float), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return mean;
  }

  void optimizer_step(const TrainConfig& train, double lr, int step, double norm) override {
    zero_stale_weight_grads();
    OptimizerStep s;
    s.learning_rate = static_cast<float>(lr);
    s.beta1 = static_cast<float>(train.beta1);
    s.beta2 = static_cast<float>(train.beta2);
    s.eps = static_cast<float>(train.eps);
    s.step = step;
    s.grad_scale =
        (train.grad_clip > 0 && norm > train.grad_clip) ? static_cast<float>(train.grad_clip / norm) : 1.0f;
    StageProfiler* const prof = profiler_.get();
    if (prof != nullptr) prof->begin(Stage::kOptimizer);
    if (dp_ > 1) {
      sharded_adamw_step(train, s);
      if (prof != nullptr) prof->end();
      CUDA_CHECK(cudaStreamSynchronize(stream_));
      return;
    }
    for (const ModelTensor& t : tensors_) {
      s.weight_decay = t.decayed ? static_cast<float>(train.weight_decay) : 0.0f;
      float* w = masters_ + t.offset;
      float* g = grads_ + t.offset;
      if (train.optimizer == OptimizerKind::kLamb) {
        lamb_update<T>(w, params_ + t.offset, moment1_ + t.offset, moment2_ + t.offset, g, t.numel, s,
                       scratch_, stream_);
      } else {
        adamw_update<T>(w, params_ + t.offset, moment1_ + t.offset, moment2_ + t.offset, g, t.numel, s,
                        stream_);
      }
    }
    if (prof != nullptr) prof->end();
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  std::vector<float> download(Buffer which) const override {
    if (which == Buffer::kGrads) zero_stale_weight_grads();
    std::vector<float> host(floats_);
    CUDA_CHECK(cudaMemcpyAsync(host.data(), buffer(which), floats_ * sizeof(float), cudaMemcpyDeviceToHost,
                               stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return host;
  }

  void upload(Buffer which, const std::vector<float>& values) override {
    if (which == Buffer::kGrads) weight_grads_stale_ = false;  // overwritten below (the padding stays 0)
    CUDA_CHECK(cudaMemcpyAsync(buffer(which), values.data(), std::min(values.size(), floats_) * sizeof(float),
                               cudaMemcpyHostToDevice, stream_));
    if (which == Buffer::kMasters) copy_to_compute<T>(params_, masters_, floats_, stream_);
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

 private:
  static void nccl_check(ncclResult_t r, const char* call) {
    if (r == ncclSuccess) return;
    std::fprintf(stderr, "NCCL error in %s: %s (%s)\n", call, ncclGetErrorString(r), ncclGetLastError(nullptr));
    std::abort();  // a collective half done leaves the group unusable, as a CUDA error leaves the device
  }

  // The norm of the whole job's gradient. With dp > 1 first ZeRO-2's gradient half: the averaged
  // gradient of this rank's shard, reduce-scattered in place (the shard's floats end up at their own
  // offset). Then each rank's sum of squares over its shard, the tensors every TP rank holds whole
  // counted 1/tp, summed over the job.
  double parallel_grad_norm() {
    size_t lo = 0, hi = floats_;
    if (dp_ > 1) {
      lo = static_cast<size_t>(dp_rank_) * shard_floats_;
      hi = lo + shard_floats_;
      StageScope scope(profiler_.get(), Stage::kGradNorm);
      nccl_check(ncclReduceScatter(grads_, grads_ + lo, shard_floats_, ncclFloat, ncclAvg, dp_comm_, stream_),
                 "ncclReduceScatter");
    }
    const size_t split = std::clamp(replicated_end_, lo, hi);
    float host[2] = {0, 0};
    {
      StageScope scope(profiler_.get(), Stage::kGradNorm);
      if (split > lo) global_norm(norm_, grads_ + lo, split - lo, scratch_, stream_);
      if (hi > split) global_norm(norm_ + 1, grads_ + split, hi - split, scratch_, stream_);
    }
    CUDA_CHECK(cudaMemcpyAsync(host, norm_, sizeof(host), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    const double replicated = split > lo ? double{host[0]} * host[0] : 0.0;
    const double own = hi > split ? double{host[1]} * host[1] : 0.0;
    return std::sqrt(world_sum(replicated / tp_ + own));
  }

  double world_sum(double value) {
    CUDA_CHECK(cudaMemcpyAsync(sum_, &value, sizeof(double), cudaMemcpyHostToDevice, stream_));
    nccl_check(ncclAllReduce(sum_, sum_, 1, ncclDouble, ncclSum, world_comm_, stream_), "ncclAllReduce");
    double total = 0;
    CUDA_CHECK(cudaMemcpyAsync(&total, sum_, sizeof(double), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return total;
  }

  // ZeRO-2's optimizer half: AdamW over the pieces of each tensor inside this rank's shard (the
  // moments outside it stay unused), then the masters all-gathered in place and the compute copies
  // refreshed from them.
  void sharded_adamw_step(const TrainConfig& train, OptimizerStep s) {
    const size_t lo = static_cast<size_t>(dp_rank_) * shard_floats_;
    const size_t hi = lo + shard_floats_;
    for (const ModelTensor& t : tensors_) {
      const size_t begin = std::max(lo, t.offset);
      const size_t end = std::min(hi, t.offset + t.numel);
      if (begin >= end) continue;
      s.weight_decay = t.decayed ? static_cast<float>(train.weight_decay) : 0.0f;
      adamw_update<T>(masters_ + begin, params_ + begin, moment1_ + begin, moment2_ + begin, grads_ + begin,
                      end - begin, s, stream_);
    }
    nccl_check(ncclAllGather(masters_ + lo, masters_, shard_floats_, ncclFloat, dp_comm_, stream_), "ncclAllGather");
    copy_to_compute<T>(params_, masters_, floats_, stream_);
  }

  static bool is_matmul_weight(const std::string& name) {
    return name == "wte" || name == "qkvw" || name == "attprojw" || name == "fcw" || name == "fcprojw";
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
    return layer < 0 ? t.offset : t.offset + static_cast<size_t>(layer) * (t.numel / cfg_.n_layer);
  }
  float* mean_of(int which) const { return stats_ + static_cast<size_t>(which) * 2 * n_; }
  float* rstd_of(int which) const { return mean_of(which) + n_; }
  // Layer l's block of a per-layer activation buffer of `rows` rows of `width` elements.
  static size_t at_layer(int layer, size_t rows, size_t width) { return static_cast<size_t>(layer) * rows * width; }
  // This rank's rows (sequence parallel) inside an [N, width] buffer; the buffer itself when tp == 1.
  template <class P>
  P* mine(P* full, size_t width) const {
    return full + static_cast<size_t>(tp_rank_) * n_ * width;
  }

  // The TP group's row exchanges, on the compute stream (no-ops with tp == 1, where local is full):
  // all-gather this rank's n rows of `width` into [N, width] (in place when local is mine(full)), and
  // reduce-scatter (sum) [N, width] partial sums into this rank's n rows.
  void gather_rows(const T* local, T* full, size_t width) {
    if (tp_ == 1) return;
    nccl_check(ncclAllGather(local, full, n_ * width, nccl_type(), tp_comm_, stream_), "ncclAllGather");
  }
  void reduce_scatter_rows(const T* full, T* local, size_t width) {
    if (tp_ == 1) return;
    nccl_check(ncclReduceScatter(full, local, n_ * width, nccl_type(), ncclSum, tp_comm_, stream_),
               "ncclReduceScatter");
  }
  static ncclDataType_t nccl_type() { return sizeof(T) == sizeof(float) ? ncclFloat : ncclBfloat16; }

  // The layer sequence with tp ranks. N = B x S token rows, n = N / tp of them this rank's (all of them
  // with tp == 1, where every exchange below is a no-op and the fused one-GPU epilogues run): the
  // residual stream and the LayerNorms live on n rows; their outputs are all-gathered into [N, C] for
  // the column-parallel GEMMs (QKV, FC: this rank's heads and 4C/tp columns); the row-parallel GEMMs
  // (attproj, fcproj) give [N, C] partial sums, reduce-scattered to n rows before their bias and the
  // residual are added. The parallel block sums both projections' partials before one reduce-scatter.
  void run_forward(const int32_t* inputs_host, const int32_t* targets_host) {
    static_assert(sizeof(int32_t) == sizeof(int));
    StageProfiler* const prof = profiler_.get();
    {
      StageScope scope(prof, Stage::kHostCopies);
      CUDA_CHECK(cudaMemcpyAsync(tokens_, inputs_host, N_ * sizeof(int), cudaMemcpyHostToDevice, stream_));
      CUDA_CHECK(cudaMemcpyAsync(targets_, targets_host, N_ * sizeof(int), cudaMemcpyHostToDevice, stream_));
    }
    const int C = cfg_.d_model, D = cfg_.head_dim(), Cl = Cl_;
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    const bool tp = tp_ > 1;
    {
      StageScope scope(prof, Stage::kEncoderForward);
      if (!tp) {
        encoder_forward<T>(residual_, tokens_, param("wte"), param("wpe"), B_, S_, C, stream_);
      } else {  // each rank its vocabulary rows (rank 0 adds wpe), summed and scattered by rows
        encoder_forward<T>(full_, tokens_, param("wte"), tp_rank_ == 0 ? param("wpe") : nullptr, B_, S_, C,
                           stream_, vocab_begin_, vocab_begin_ + Vl_);
        reduce_scatter_rows(full_, residual_, C);
      }
    }
    for (int l = 0; l < cfg_.n_layer; ++l) {
      const T* x = residual_ + at_layer(l, n_, C);
      T* ln1 = ln1_ + at_layer(l, N_, C);
      T* ln2 = ln2_ + at_layer(l, N_, C);
      T* qkv = qkv_ + at_layer(l, N_, 3 * Cl);
      T* atty = atty_ + at_layer(l, N_, Cl);
      T* mid = mid_ + at_layer(l, n_, C);
      T* fch_pre = fch_pre_ + at_layer(l, N_, 4 * Cl);
      T* fch = fch_ + at_layer(l, N_, 4 * Cl);
      T* out = residual_ + at_layer(l + 1, n_, C);
      staged(Stage::kLayerNormForward, [&] {
        layernorm_forward<T>(mine(ln1, C), mean_of(2 * l), rstd_of(2 * l), x, param("ln1w", l), param("ln1b", l),
                             n_, C, stream_);
      });
      gather_rows(mine(ln1, C), ln1, C);
      staged(Stage::kMatmulQkvForward, [&] {
        matmul_forward<T>(matmul_, qkv, ln1, param("qkvw", l), param("qkvb", l), nullptr, nullptr, N_, C, 3 * Cl,
                          stream_);
      });
      staged(Stage::kAttentionForward, [&] {
        attention_forward<T>(atty, lse_ + at_layer(l, N_, Hl_), qkv, qkv + Cl, qkv + 2 * Cl, B_, S_, Hl_, D,
                             3 * Cl, Cl, cfg_.attention_window, scale, stream_);
      });
      staged(Stage::kMatmulAttProjForward, [&] {
        if (!tp) {
          matmul_forward<T>(matmul_, mid, atty, param("attprojw", l), param("attprojb", l), x, nullptr, N_, C, C,
                            stream_);
        } else {
          matmul_forward<T>(matmul_, full_, atty, param("attprojw", l), nullptr, nullptr, nullptr, N_, Cl, C,
                            stream_);
        }
      });
      if (tp && !cfg_.parallel_block) {
        reduce_scatter_rows(full_, mid, C);
        residual_add<T>(mid, mid, param("attprojb", l), nullptr, x, n_, C, stream_);
      }
      // Sequential: the MLP reads the attention's output; parallel: it reads the block's input.
      const T* mlp_in = cfg_.parallel_block ? x : mid;
      staged(Stage::kLayerNormForward, [&] {
        layernorm_forward<T>(mine(ln2, C), mean_of(2 * l + 1), rstd_of(2 * l + 1), mlp_in, param("ln2w", l),
                             param("ln2b", l), n_, C, stream_);
      });
      gather_rows(mine(ln2, C), ln2, C);
      staged(Stage::kMatmulFcForward, [&] {
        matmul_forward<T>(matmul_, fch, ln2, param("fcw", l), param("fcb", l), nullptr, fch_pre, N_, C, 4 * Cl,
                          stream_);
      });
      staged(Stage::kMatmulFcProjForward, [&] {
        if (!tp) {
          matmul_forward<T>(matmul_, out, fch, param("fcprojw", l), param("fcprojb", l), mid, nullptr, N_, 4 * C,
                            C, stream_);
        } else {  // the parallel block adds the attention's partial sum, still in full_
          matmul_forward<T>(matmul_, full_, fch, param("fcprojw", l), nullptr,
                            cfg_.parallel_block ? full_ : nullptr, nullptr, N_, 4 * Cl, C, stream_);
        }
      });
      if (tp) {
        reduce_scatter_rows(full_, out, C);
        if (cfg_.parallel_block) {
          residual_add<T>(out, out, param("fcprojb", l), param("attprojb", l), x, n_, C, stream_);
        } else {
          residual_add<T>(out, out, param("fcprojb", l), nullptr, mid, n_, C, stream_);
        }
      }
    }
    const int lnf = 2 * cfg_.n_layer;
    staged(Stage::kLayerNormForward, [&] {
      layernorm_forward<T>(mine(lnf_, C), mean_of(lnf), rstd_of(lnf), residual_ + at_layer(cfg_.n_layer, n_, C),
                           param("lnfw"), param("lnfb"), n_, C, stream_);
    });
    gather_rows(mine(lnf_, C), lnf_, C);
    staged(Stage::kMatmulLmHeadForward, [&] {
      matmul_forward<T>(matmul_, logits_, lnf_, param("wte"), nullptr, nullptr, nullptr, N_, C, Vl_, stream_);
    });
  }

  // The loss per token row into losses_ and, with write_dlogits, dlogits (scaled) in place of logits_.
  void run_classifier(float dloss_scale, bool write_dlogits) {
    StageScope scope(profiler_.get(), Stage::kClassifier);
    const int V = cfg_.vocab_size;
    if (tp_ == 1) {
      classifier_forward_backward<T>(logits_, losses_, targets_, N_, V, cfg_.padded_vocab_size, dloss_scale,
                                     write_dlogits, stream_);
      return;
    }
    float* row_max = vocab_stats_;
    float* sums = vocab_stats_ + N_;  // sum of exp, then the target's logit
    classifier_vp_max<T>(logits_, row_max, N_, Vl_, vocab_begin_, V, stream_);
    nccl_check(ncclAllReduce(row_max, row_max, N_, ncclFloat, ncclMax, tp_comm_, stream_), "ncclAllReduce");
    classifier_vp_sums<T>(logits_, row_max, sums, targets_, N_, Vl_, vocab_begin_, V, stream_);
    nccl_check(ncclAllReduce(sums, sums, 2 * static_cast<size_t>(N_), ncclFloat, ncclSum, tp_comm_, stream_),
               "ncclAllReduce");
    classifier_vp_finish<T>(logits_, losses_, row_max, sums, targets_, N_, Vl_, vocab_begin_, V, dloss_scale,
                            write_dlogits, stream_);
  }

  // Expects dlogits in logits_ (the classifier's in-place gradient). The mirror of run_forward: the
  // residual stream's gradient dres lives on this rank's n rows; it is all-gathered before the
  // row-parallel GEMMs' backward, and the column-parallel GEMMs' input gradients (partial sums over the
  // rank's heads or columns) are reduce-scattered before the LayerNorms' backward.
  void run_backward(const int32_t* inputs_host) {
    const int C = cfg_.d_model, D = cfg_.head_dim(), L = cfg_.n_layer, Cl = Cl_;
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    const bool tp = tp_ > 1;
    // The first backward after zero_grads() writes the weight gradients rather than adding to them.
    const bool overwrite = weight_grads_stale_;
    weight_grads_stale_ = false;
    staged(Stage::kMatmulLmHeadBackward, [&] {
      matmul_backward<T>(matmul_, dbuf1_, grad("wte"), nullptr, logits_, lnf_, param("wte"), nullptr, false, N_, C,
                         Vl_, stream_, overwrite);
    });
    reduce_scatter_rows(dbuf1_, mine(dbuf1_, C), C);
    CUDA_CHECK(cudaMemsetAsync(dres_, 0, n_ * C * sizeof(T), stream_));
    // Sequential blocks: each LayerNorm backward also sums the residual gradient it leaves, which is the
    // bias gradient of the projection that added into that residual (fcproj of the block below, attproj
    // of its own block), so those projections' backwards skip cuBLASLt's separate bias-gradient pass.
    const bool sequential = !cfg_.parallel_block;
    auto proj_bias = [&](const char* name, int layer) { return sequential ? grad(name, layer) : nullptr; };
    staged(Stage::kLayerNormBackward, [&] {
      layernorm_backward<T>(dres_, grad("lnfw"), grad("lnfb"), mine(dbuf1_, C), residual_ + at_layer(L, n_, C),
                            param("lnfw"), mean_of(2 * L), rstd_of(2 * L), n_, C, scratch_, stream_,
                            proj_bias("fcprojb", L - 1));
    });
    // dres on all N rows: itself, or all-gathered into full_.
    auto gathered_dres = [&]() -> T* {
      if (!tp) return dres_;
      gather_rows(dres_, full_, C);
      return full_;
    };
    for (int l = L - 1; l >= 0; --l) {
      const T* x = residual_ + at_layer(l, n_, C);
      const T* mid = mid_ + at_layer(l, n_, C);
      const T* qkv = qkv_ + at_layer(l, N_, 3 * Cl);
      const T* atty = atty_ + at_layer(l, N_, Cl);
      const T* ln1 = ln1_ + at_layer(l, N_, C);
      const T* ln2 = ln2_ + at_layer(l, N_, C);
      const T* fch = fch_ + at_layer(l, N_, 4 * Cl);
      const T* fch_pre = fch_pre_ + at_layer(l, N_, 4 * Cl);
      const float* lse = lse_ + at_layer(l, N_, Hl_);
      if (tp && cfg_.parallel_block) {  // both projections' biases: dres summed over this rank's rows
        column_sum<T>(grad("fcprojb", l), dres_, n_, C, stream_);
        column_sum<T>(grad("attprojb", l), dres_, n_, C, stream_);
      }
      // MLP: dres is the gradient of the block output; the DGELU epilogue gives d(fch_pre) directly.
      const T* dout = gathered_dres();
      staged(Stage::kMatmulFcProjBackward, [&] {
        matmul_backward<T>(matmul_, dfch_, grad("fcprojw", l), sequential || tp ? nullptr : grad("fcprojb", l), dout,
                           fch, param("fcprojw", l), fch_pre, false, N_, 4 * Cl, C, stream_, overwrite);
      });
      if (cfg_.parallel_block) {
        // y = x + attproj(...) + fcproj(...): both branches see dres; both LayerNorms feed back into x.
        staged(Stage::kMatmulAttProjBackward, [&] {
          matmul_backward<T>(matmul_, dbuf2_, grad("attprojw", l), tp ? nullptr : grad("attprojb", l), dout, atty,
                             param("attprojw", l), nullptr, false, N_, Cl, C, stream_, overwrite);
        });
        staged(Stage::kMatmulFcBackward, [&] {
          matmul_backward<T>(matmul_, dbuf1_, grad("fcw", l), grad("fcb", l), dfch_, ln2, param("fcw", l), nullptr,
                             false, N_, C, 4 * Cl, stream_, overwrite);
        });
        staged(Stage::kAttentionBackward, [&] {
          attention_backward<T>(dqkv_, dqkv_ + Cl, dqkv_ + 2 * Cl, dbuf2_, atty, lse, qkv, qkv + Cl, qkv + 2 * Cl,
                                B_, S_, Hl_, D, 3 * Cl, Cl, cfg_.attention_window, scale, attention_workspace_,
                                stream_);
        });
        staged(Stage::kMatmulQkvBackward, [&] {
          matmul_backward<T>(matmul_, dbuf2_, grad("qkvw", l), grad("qkvb", l), dqkv_, ln1, param("qkvw", l),
                             nullptr, false, N_, C, 3 * Cl, stream_, overwrite);
        });
        reduce_scatter_rows(dbuf1_, mine(dbuf1_, C), C);
        reduce_scatter_rows(dbuf2_, mine(dbuf2_, C), C);
        staged(Stage::kLayerNormBackward, [&] {
          layernorm_backward<T>(dres_, grad("ln2w", l), grad("ln2b", l), mine(dbuf1_, C), x, param("ln2w", l),
                                mean_of(2 * l + 1), rstd_of(2 * l + 1), n_, C, scratch_, stream_);
        });
        staged(Stage::kLayerNormBackward, [&] {
          layernorm_backward<T>(dres_, grad("ln1w", l), grad("ln1b", l), mine(dbuf2_, C), x, param("ln1w", l),
                                mean_of(2 * l), rstd_of(2 * l), n_, C, scratch_, stream_);
        });
        continue;
      }
      staged(Stage::kMatmulFcBackward, [&] {
        matmul_backward<T>(matmul_, dbuf1_, grad("fcw", l), grad("fcb", l), dfch_, ln2, param("fcw", l), nullptr,
                           false, N_, C, 4 * Cl, stream_, overwrite);
      });
      reduce_scatter_rows(dbuf1_, mine(dbuf1_, C), C);
      staged(Stage::kLayerNormBackward, [&] {
        layernorm_backward<T>(dres_, grad("ln2w", l), grad("ln2b", l), mine(dbuf1_, C), mid, param("ln2w", l),
                              mean_of(2 * l + 1), rstd_of(2 * l + 1), n_, C, scratch_, stream_, grad("attprojb", l));
      });
      // dres is now the gradient of mid = x + attproj(atty).
      const T* dmid = gathered_dres();
      staged(Stage::kMatmulAttProjBackward, [&] {
        matmul_backward<T>(matmul_, dbuf2_, grad("attprojw", l), nullptr, dmid, atty, param("attprojw", l), nullptr,
                           false, N_, Cl, C, stream_, overwrite);
      });
      staged(Stage::kAttentionBackward, [&] {
        attention_backward<T>(dqkv_, dqkv_ + Cl, dqkv_ + 2 * Cl, dbuf2_, atty, lse, qkv, qkv + Cl, qkv + 2 * Cl, B_,
                              S_, Hl_, D, 3 * Cl, Cl, cfg_.attention_window, scale, attention_workspace_, stream_);
      });
      staged(Stage::kMatmulQkvBackward, [&] {
        matmul_backward<T>(matmul_, dbuf1_, grad("qkvw", l), grad("qkvb", l), dqkv_, ln1, param("qkvw", l), nullptr,
                           false, N_, C, 3 * Cl, stream_, overwrite);
      });
      reduce_scatter_rows(dbuf1_, mine(dbuf1_, C), C);
      staged(Stage::kLayerNormBackward, [&] {
        layernorm_backward<T>(dres_, grad("ln1w", l), grad("ln1b", l), mine(dbuf1_, C), x, param("ln1w", l),
                              mean_of(2 * l), rstd_of(2 * l), n_, C, scratch_, stream_,
                              l > 0 ? grad("fcprojb", l - 1) : nullptr);
      });
    }
    prof_begin(Stage::kHostCopies);
    // Vocabulary parallel: only the buckets of this rank's tokens, renumbered from its first row (the
    // buckets ascend by token, so they are one contiguous run; their offsets still index `positions`).
    const TokenBuckets buckets = make_token_buckets(inputs_host, N_);
    const auto first = std::lower_bound(buckets.bucket_token.begin(), buckets.bucket_token.end(), vocab_begin_);
    const auto last = std::lower_bound(first, buckets.bucket_token.end(), vocab_begin_ + Vl_);
    const size_t b0 = static_cast<size_t>(first - buckets.bucket_token.begin());
    const int num_buckets = static_cast<int>(last - first);
    std::vector<int> bucket_token(first, last);
    for (int& t : bucket_token) t -= vocab_begin_;
    CUDA_CHECK(cudaMemcpyAsync(bucket_token_, bucket_token.data(), num_buckets * sizeof(int), cudaMemcpyHostToDevice,
                               stream_));
    CUDA_CHECK(cudaMemcpyAsync(bucket_offset_, buckets.bucket_offset.data() + b0, (num_buckets + 1) * sizeof(int),
                               cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaMemcpyAsync(positions_, buckets.positions.data(), N_ * sizeof(int), cudaMemcpyHostToDevice,
                               stream_));
    prof_end();
    const T* demb = gathered_dres();  // wpe's gradient is then whole on every rank
    staged(Stage::kEncoderBackward, [&] {
      encoder_backward<T>(grad("wte"), grad("wpe"), demb, bucket_token_, bucket_offset_, positions_, num_buckets, B_,
                          S_, C, stream_);
    });
    // The buckets' host memory must outlive the asynchronous copies above.
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

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
  std::vector<ModelTensor> tensors_;
  std::vector<TpTensor> tp_tensors_;  // tensors_'s split (same order)
  size_t partial_end_ = 0;     // [0, partial_end_): gradients summed over the TP group
  size_t replicated_end_ = 0;  // [0, replicated_end_): tensors every TP rank holds whole (tp > 1)
  std::unordered_map<std::string, size_t> index_;
  int64_t num_parameters_ = 0;
  size_t floats_ = 0;
  std::vector<std::pair<size_t, size_t>> zero_ranges_;  // (offset, count): what zero_grads() clears
  mutable bool weight_grads_stale_ = false;  // zero_grads() ran and no backward has written them since
  float *masters_, *grads_, *moment1_, *moment2_;
  T* params_;
  T *residual_, *mid_, *ln1_, *ln2_, *qkv_, *atty_, *fch_pre_, *fch_, *lnf_, *logits_;
  float *stats_, *lse_;
  T *dres_, *dbuf1_, *dbuf2_, *dqkv_, *dfch_, *full_;
  float* vocab_stats_;
  int *tokens_, *targets_, *bucket_token_, *bucket_offset_, *positions_;
  float *losses_, *scratch_, *norm_, *attention_workspace_;
  double* sum_;
  MatmulContext matmul_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<StageProfiler> profiler_;  // set by enable_stage_profiler
  // The parallel groups' communicators; data parallel: size, this rank, the shard's floats.
  ncclComm_t tp_comm_ = nullptr, world_comm_ = nullptr;
  ncclComm_t dp_comm_ = nullptr;
  int dp_ = 1;
  int dp_rank_ = 0;
  size_t shard_floats_ = 0;
};

}  // namespace

Result<std::unique_ptr<GptModel>> GptModel::create(const ModelConfig& model, ComputeDtype dtype,
                                                   int batch_size, int seq_len, const ModelParallel& par) {
  if (Status s = validate_model_config(model); !s) return s.error();
  if (batch_size < 1 || seq_len < 1 || seq_len > model.max_seq_len) {
    return Error{"GptModel: batch " + std::to_string(batch_size) + " x seq_len " + std::to_string(seq_len) +
                 " out of range (seq_len must be in [1, max_seq_len = " + std::to_string(model.max_seq_len) +
                 "])"};
  }
  const std::string where = "GptModel: tp " + std::to_string(par.tp) + " (rank " + std::to_string(par.tp_rank) +
                            ") x dp " + std::to_string(par.dp) + " (rank " + std::to_string(par.dp_rank) + "): ";
  if (par.tp < 1 || par.dp < 1 || par.tp_rank < 0 || par.tp_rank >= par.tp || par.dp_rank < 0 ||
      par.dp_rank >= par.dp) {
    return Error{where + "sizes must be >= 1 and ranks inside them"};
  }
  if (model.n_head % par.tp != 0 || model.padded_vocab_size % par.tp != 0 || (batch_size * seq_len) % par.tp != 0) {
    return Error{where + "tp must divide n_head (" + std::to_string(model.n_head) + "), padded_vocab_size (" +
                 std::to_string(model.padded_vocab_size) + ") and the micro-batch's token rows (" +
                 std::to_string(batch_size * seq_len) + ")"};
  }
  if ((par.tp > 1 && par.tp_comm == nullptr) || (par.dp > 1 && par.dp_comm == nullptr) ||
      (par.tp * par.dp > 1 && par.world_comm == nullptr)) {
    return Error{where + "a communicator is missing"};
  }
  if (par.tp * par.dp > 1 && par.optimizer == OptimizerKind::kLamb) {
    return Error{where + "LAMB is not built for tensor or data parallel yet (its trust ratio needs per-tensor "
                         "norms across shards); use --optimizer adamw"};
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) return Error{"GptModel: no CUDA device"};
  if (dtype == ComputeDtype::kFp32)
    return std::unique_ptr<GptModel>(new GptImpl<float>(model, batch_size, seq_len, par));
  return std::unique_ptr<GptModel>(new GptImpl<__nv_bfloat16>(model, batch_size, seq_len, par));
}

}  // namespace megascale::trainer
