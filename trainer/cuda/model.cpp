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
  GptImpl(const ModelConfig& model, int batch_size, int seq_len, int data_parallel)
      : cfg_(model), B_(batch_size), S_(seq_len), N_(batch_size * seq_len) {
    size_t offset = 0;
    for (const ParameterTensor& t : gpt_parameter_tensors(model)) {
      ModelTensor mt{t.name, t.shape, t.decayed, offset, static_cast<size_t>(t.numel())};
      offset += (mt.numel + kTensorAlignElements - 1) / kTensorAlignElements * kTensorAlignElements;
      index_[mt.name] = tensors_.size();
      tensors_.push_back(mt);
      num_parameters_ += static_cast<int64_t>(mt.numel);
    }
    // Whole shards of aligned size for data_parallel ranks: the flat buffer's tail is zero padding.
    const size_t unit = static_cast<size_t>(data_parallel) * kTensorAlignElements;
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

    const size_t C = cfg_.d_model, L = cfg_.n_layer, N = N_, Vp = cfg_.padded_vocab_size;
    residual_ = device_alloc<T>((L + 1) * N * C);
    mid_ = device_alloc<T>(L * N * C);
    ln1_ = device_alloc<T>(L * N * C);
    ln2_ = device_alloc<T>(L * N * C);
    qkv_ = device_alloc<T>(L * N * 3 * C);
    atty_ = device_alloc<T>(L * N * C);
    fch_pre_ = device_alloc<T>(L * N * 4 * C);
    fch_ = device_alloc<T>(L * N * 4 * C);
    lnf_ = device_alloc<T>(N * C);
    logits_ = device_alloc<T>(N * Vp);
    stats_ = device_alloc<float>((2 * L + 1) * 2 * N);  // mean, rstd of ln1, ln2 per layer, then lnf
    lse_ = device_alloc<float>(L * N * cfg_.n_head);
    dres_ = device_alloc<T>(N * C);
    dbuf1_ = device_alloc<T>(N * C);
    dbuf2_ = device_alloc<T>(N * C);
    dqkv_ = device_alloc<T>(N * 3 * C);
    dfch_ = device_alloc<T>(N * 4 * C);
    tokens_ = device_alloc<int>(N);
    targets_ = device_alloc<int>(N);
    bucket_token_ = device_alloc<int>(N);
    bucket_offset_ = device_alloc<int>(N + 1);
    positions_ = device_alloc<int>(N);
    losses_ = device_alloc<float>(N);
    const size_t scratch = std::max({layernorm_backward_scratch_floats(N_, cfg_.d_model),
                                     global_norm_scratch_floats(), lamb_scratch_floats(0)});
    scratch_ = device_alloc<float>(scratch);
    norm_ = device_alloc<float>(1);
    attention_workspace_ = device_alloc<float>(
        attention_backward_workspace_bytes(B_, S_, cfg_.n_head, cfg_.head_dim()) / sizeof(float) + 1);
    // The bias-gradient fallback's row groups (64 rows) of the widest matmul (the LM head has no bias).
    matmul_ = matmul_create((N / 64 + 1) * 4 * C);
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
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
                                                tokens_,
                                                targets_,
                                                bucket_token_,
                                                bucket_offset_,
                                                positions_,
                                                losses_,
                                                scratch_,
                                                norm_,
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
    std::vector<float> host(floats_, 0.0f);
    InitRng rng{seed};
    const double residual_std = 0.02 / std::sqrt(2.0 * cfg_.n_layer);
    for (const ModelTensor& t : tensors_) {
      float* p = host.data() + t.offset;
      const bool layernorm_weight = t.name == "ln1w" || t.name == "ln2w" || t.name == "lnfw";
      if (layernorm_weight) {
        std::fill(p, p + t.numel, 1.0f);
      } else if (t.shape.size() >= 2 && t.decayed) {  // matmul weights and embeddings; biases stay 0
        const double std = (t.name == "attprojw" || t.name == "fcprojw") ? residual_std : 0.02;
        for (size_t i = 0; i < t.numel; ++i) p[i] = rng.normal(std);
      }
    }
    upload(Buffer::kMasters, host);
    CUDA_CHECK(cudaMemset(moment1_, 0, floats_ * sizeof(float)));
    CUDA_CHECK(cudaMemset(moment2_, 0, floats_ * sizeof(float)));
  }

  double forward(const int32_t* inputs_host, const int32_t* targets_host) override {
    run_forward(inputs_host, targets_host);
    {
      StageScope scope(profiler_.get(), Stage::kClassifier);
      classifier_forward_backward<T>(logits_, losses_, targets_, N_, cfg_.vocab_size, cfg_.padded_vocab_size,
                                     0.0f, false, stream_);
    }
    return mean_loss();
  }

  double forward_backward(const int32_t* inputs_host, const int32_t* targets_host,
                          float grad_scale) override {
    run_forward(inputs_host, targets_host);
    {
      StageScope scope(profiler_.get(), Stage::kClassifier);
      classifier_forward_backward<T>(logits_, losses_, targets_, N_, cfg_.vocab_size, cfg_.padded_vocab_size,
                                     grad_scale / static_cast<float>(N_), true, stream_);
    }
    run_backward(inputs_host);
    return mean_loss();
  }

  std::vector<float> logits() const override {
    const size_t n = static_cast<size_t>(N_) * cfg_.padded_vocab_size;
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
    if (dp_comm_ != nullptr) return sharded_grad_norm();
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

  Status attach_data_parallel(void* nccl_comm, int dp, int dp_rank, OptimizerKind optimizer) override {
    if (dp < 2 || dp_rank < 0 || dp_rank >= dp || floats_ % (static_cast<size_t>(dp) * kTensorAlignElements) != 0) {
      return Error{"data parallel: rank " + std::to_string(dp_rank) + " of " + std::to_string(dp) +
                   ": needs dp >= 2, a rank in [0, dp) and a model created for that dp"};
    }
    if (optimizer == OptimizerKind::kLamb) {
      return Error{"data parallel: LAMB is not sharded yet (its trust ratio needs per-tensor norms across "
                   "shards); use --optimizer adamw or dp 1"};
    }
    dp_comm_ = static_cast<ncclComm_t>(nccl_comm);
    dp_ = dp;
    dp_rank_ = dp_rank;
    shard_floats_ = floats_ / static_cast<size_t>(dp);
    return {};
  }

  double data_parallel_mean(double value) override {
    if (dp_comm_ == nullptr) return value;
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
    if (dp_comm_ != nullptr) {
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

  // ZeRO-2's gradient half: the averaged gradient of this rank's shard, reduce-scattered in place (the
  // shard's floats end up at their own offset), then the norm of the whole averaged gradient from the
  // shards' sums of squares.
  double sharded_grad_norm() {
    float* shard = grads_ + static_cast<size_t>(dp_rank_) * shard_floats_;
    {
      StageScope scope(profiler_.get(), Stage::kGradNorm);
      nccl_check(ncclReduceScatter(grads_, shard, shard_floats_, ncclFloat, ncclAvg, dp_comm_, stream_),
                 "ncclReduceScatter");
      global_norm(norm_, shard, shard_floats_, scratch_, stream_);
    }
    float local = 0;
    CUDA_CHECK(cudaMemcpyAsync(&local, norm_, sizeof(float), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    const double mean_square = data_parallel_mean(static_cast<double>(local) * local);
    return std::sqrt(mean_square * dp_);
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
  float* mean_of(int which) const { return stats_ + static_cast<size_t>(which) * 2 * N_; }
  float* rstd_of(int which) const { return mean_of(which) + N_; }
  size_t nc(int layer, int width = 1) const { return static_cast<size_t>(layer) * N_ * cfg_.d_model * width; }

  void run_forward(const int32_t* inputs_host, const int32_t* targets_host) {
    static_assert(sizeof(int32_t) == sizeof(int));
    StageProfiler* const prof = profiler_.get();
    {
      StageScope scope(prof, Stage::kHostCopies);
      CUDA_CHECK(cudaMemcpyAsync(tokens_, inputs_host, N_ * sizeof(int), cudaMemcpyHostToDevice, stream_));
      CUDA_CHECK(cudaMemcpyAsync(targets_, targets_host, N_ * sizeof(int), cudaMemcpyHostToDevice, stream_));
    }
    const int C = cfg_.d_model, H = cfg_.n_head, D = cfg_.head_dim();
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    {
      StageScope scope(prof, Stage::kEncoderForward);
      encoder_forward<T>(residual_, tokens_, param("wte"), param("wpe"), B_, S_, C, stream_);
    }
    for (int l = 0; l < cfg_.n_layer; ++l) {
      const T* x = residual_ + nc(l);
      T* ln1 = ln1_ + nc(l);
      T* ln2 = ln2_ + nc(l);
      T* qkv = qkv_ + nc(l, 3);
      T* atty = atty_ + nc(l);
      T* mid = mid_ + nc(l);
      T* fch_pre = fch_pre_ + nc(l, 4);
      T* fch = fch_ + nc(l, 4);
      T* out = residual_ + nc(l + 1);
      staged(Stage::kLayerNormForward, [&] {
        layernorm_forward<T>(ln1, mean_of(2 * l), rstd_of(2 * l), x, param("ln1w", l), param("ln1b", l), N_,
                             C, stream_);
      });
      staged(Stage::kMatmulQkvForward, [&] {
        matmul_forward<T>(matmul_, qkv, ln1, param("qkvw", l), param("qkvb", l), nullptr, nullptr, N_, C,
                          3 * C, stream_);
      });
      staged(Stage::kAttentionForward, [&] {
        attention_forward<T>(atty, lse_ + static_cast<size_t>(l) * N_ * H, qkv, qkv + C, qkv + 2 * C, B_, S_,
                             H, D, 3 * C, C, cfg_.attention_window, scale, stream_);
      });
      staged(Stage::kMatmulAttProjForward, [&] {
        matmul_forward<T>(matmul_, mid, atty, param("attprojw", l), param("attprojb", l), x, nullptr, N_, C,
                          C, stream_);
      });
      // Sequential: the MLP reads the attention's output; parallel: it reads the block's input.
      const T* mlp_in = cfg_.parallel_block ? x : mid;
      staged(Stage::kLayerNormForward, [&] {
        layernorm_forward<T>(ln2, mean_of(2 * l + 1), rstd_of(2 * l + 1), mlp_in, param("ln2w", l),
                             param("ln2b", l), N_, C, stream_);
      });
      staged(Stage::kMatmulFcForward, [&] {
        matmul_forward<T>(matmul_, fch, ln2, param("fcw", l), param("fcb", l), nullptr, fch_pre, N_, C, 4 * C,
                          stream_);
      });
      staged(Stage::kMatmulFcProjForward, [&] {
        matmul_forward<T>(matmul_, out, fch, param("fcprojw", l), param("fcprojb", l), mid, nullptr, N_,
                          4 * C, C, stream_);
      });
    }
    const int lnf = 2 * cfg_.n_layer;
    staged(Stage::kLayerNormForward, [&] {
      layernorm_forward<T>(lnf_, mean_of(lnf), rstd_of(lnf), residual_ + nc(cfg_.n_layer), param("lnfw"),
                           param("lnfb"), N_, C, stream_);
    });
    staged(Stage::kMatmulLmHeadForward, [&] {
      matmul_forward<T>(matmul_, logits_, lnf_, param("wte"), nullptr, nullptr, nullptr, N_, C,
                        cfg_.padded_vocab_size, stream_);
    });
  }

  // Expects dlogits in logits_ (the classifier's in-place gradient).
  void run_backward(const int32_t* inputs_host) {
    const int C = cfg_.d_model, H = cfg_.n_head, D = cfg_.head_dim(), L = cfg_.n_layer;
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    // The first backward after zero_grads() writes the weight gradients rather than adding to them.
    const bool overwrite = weight_grads_stale_;
    weight_grads_stale_ = false;
    staged(Stage::kMatmulLmHeadBackward, [&] {
      matmul_backward<T>(matmul_, dbuf1_, grad("wte"), nullptr, logits_, lnf_, param("wte"), nullptr, false,
                         N_, C, cfg_.padded_vocab_size, stream_, overwrite);
    });
    CUDA_CHECK(cudaMemsetAsync(dres_, 0, static_cast<size_t>(N_) * C * sizeof(T), stream_));
    // Sequential blocks: each LayerNorm backward also sums the residual gradient it leaves, which is the
    // bias gradient of the projection that added into that residual (fcproj of the block below, attproj
    // of its own block), so those projections' backwards skip cuBLASLt's separate bias-gradient pass.
    const bool sequential = !cfg_.parallel_block;
    auto proj_bias = [&](const char* name, int layer) { return sequential ? grad(name, layer) : nullptr; };
    staged(Stage::kLayerNormBackward, [&] {
      layernorm_backward<T>(dres_, grad("lnfw"), grad("lnfb"), dbuf1_, residual_ + nc(L), param("lnfw"),
                            mean_of(2 * L), rstd_of(2 * L), N_, C, scratch_, stream_,
                            proj_bias("fcprojb", L - 1));
    });
    for (int l = L - 1; l >= 0; --l) {
      const T* x = residual_ + nc(l);
      const T* mid = mid_ + nc(l);
      const T* qkv = qkv_ + nc(l, 3);
      const T* atty = atty_ + nc(l);
      const float* lse = lse_ + static_cast<size_t>(l) * N_ * H;
      // MLP: dres is the gradient of the block output; the DGELU epilogue gives d(fch_pre) directly.
      staged(Stage::kMatmulFcProjBackward, [&] {
        matmul_backward<T>(matmul_, dfch_, grad("fcprojw", l), sequential ? nullptr : grad("fcprojb", l),
                           dres_, fch_ + nc(l, 4), param("fcprojw", l), fch_pre_ + nc(l, 4), false, N_, 4 * C,
                           C, stream_, overwrite);
      });
      if (cfg_.parallel_block) {
        // y = x + attproj(...) + fcproj(...): both branches see dres; both LayerNorms feed back into x.
        staged(Stage::kMatmulAttProjBackward, [&] {
          matmul_backward<T>(matmul_, dbuf2_, grad("attprojw", l), grad("attprojb", l), dres_, atty,
                             param("attprojw", l), nullptr, false, N_, C, C, stream_, overwrite);
        });
        staged(Stage::kMatmulFcBackward, [&] {
          matmul_backward<T>(matmul_, dbuf1_, grad("fcw", l), grad("fcb", l), dfch_, ln2_ + nc(l),
                             param("fcw", l), nullptr, false, N_, C, 4 * C, stream_, overwrite);
        });
        staged(Stage::kAttentionBackward, [&] {
          attention_backward<T>(dqkv_, dqkv_ + C, dqkv_ + 2 * C, dbuf2_, atty, lse, qkv, qkv + C, qkv + 2 * C,
                                B_, S_, H, D, 3 * C, C, cfg_.attention_window, scale, attention_workspace_,
                                stream_);
        });
        staged(Stage::kMatmulQkvBackward, [&] {
          matmul_backward<T>(matmul_, dbuf2_, grad("qkvw", l), grad("qkvb", l), dqkv_, ln1_ + nc(l),
                             param("qkvw", l), nullptr, false, N_, C, 3 * C, stream_, overwrite);
        });
        staged(Stage::kLayerNormBackward, [&] {
          layernorm_backward<T>(dres_, grad("ln2w", l), grad("ln2b", l), dbuf1_, x, param("ln2w", l),
                                mean_of(2 * l + 1), rstd_of(2 * l + 1), N_, C, scratch_, stream_);
        });
        staged(Stage::kLayerNormBackward, [&] {
          layernorm_backward<T>(dres_, grad("ln1w", l), grad("ln1b", l), dbuf2_, x, param("ln1w", l),
                                mean_of(2 * l), rstd_of(2 * l), N_, C, scratch_, stream_);
        });
        continue;
      }
      staged(Stage::kMatmulFcBackward, [&] {
        matmul_backward<T>(matmul_, dbuf1_, grad("fcw", l), grad("fcb", l), dfch_, ln2_ + nc(l),
                           param("fcw", l), nullptr, false, N_, C, 4 * C, stream_, overwrite);
      });
      staged(Stage::kLayerNormBackward, [&] {
        layernorm_backward<T>(dres_, grad("ln2w", l), grad("ln2b", l), dbuf1_, mid, param("ln2w", l),
                              mean_of(2 * l + 1), rstd_of(2 * l + 1), N_, C, scratch_, stream_,
                              grad("attprojb", l));
      });
      // dres is now the gradient of mid = x + attproj(atty).
      staged(Stage::kMatmulAttProjBackward, [&] {
        matmul_backward<T>(matmul_, dbuf2_, grad("attprojw", l), nullptr, dres_, atty, param("attprojw", l),
                           nullptr, false, N_, C, C, stream_, overwrite);
      });
      staged(Stage::kAttentionBackward, [&] {
        attention_backward<T>(dqkv_, dqkv_ + C, dqkv_ + 2 * C, dbuf2_, atty, lse, qkv, qkv + C, qkv + 2 * C,
                              B_, S_, H, D, 3 * C, C, cfg_.attention_window, scale, attention_workspace_,
                              stream_);
      });
      staged(Stage::kMatmulQkvBackward, [&] {
        matmul_backward<T>(matmul_, dbuf1_, grad("qkvw", l), grad("qkvb", l), dqkv_, ln1_ + nc(l),
                           param("qkvw", l), nullptr, false, N_, C, 3 * C, stream_, overwrite);
      });
      staged(Stage::kLayerNormBackward, [&] {
        layernorm_backward<T>(dres_, grad("ln1w", l), grad("ln1b", l), dbuf1_, x, param("ln1w", l),
                              mean_of(2 * l), rstd_of(2 * l), N_, C, scratch_, stream_,
                              l > 0 ? grad("fcprojb", l - 1) : nullptr);
      });
    }
    prof_begin(Stage::kHostCopies);
    const TokenBuckets buckets = make_token_buckets(inputs_host, N_);
    const int num_buckets = static_cast<int>(buckets.bucket_token.size());
    CUDA_CHECK(cudaMemcpyAsync(bucket_token_, buckets.bucket_token.data(), num_buckets * sizeof(int),
                               cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaMemcpyAsync(bucket_offset_, buckets.bucket_offset.data(), (num_buckets + 1) * sizeof(int),
                               cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaMemcpyAsync(positions_, buckets.positions.data(), N_ * sizeof(int), cudaMemcpyHostToDevice,
                               stream_));
    prof_end();
    staged(Stage::kEncoderBackward, [&] {
      encoder_backward<T>(grad("wte"), grad("wpe"), dres_, bucket_token_, bucket_offset_, positions_,
                          num_buckets, B_, S_, C, stream_);
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
  std::vector<ModelTensor> tensors_;
  std::unordered_map<std::string, size_t> index_;
  int64_t num_parameters_ = 0;
  size_t floats_ = 0;
  std::vector<std::pair<size_t, size_t>> zero_ranges_;  // (offset, count): what zero_grads() clears
  mutable bool weight_grads_stale_ = false;  // zero_grads() ran and no backward has written them since
  float *masters_, *grads_, *moment1_, *moment2_;
  T* params_;
  T *residual_, *mid_, *ln1_, *ln2_, *qkv_, *atty_, *fch_pre_, *fch_, *lnf_, *logits_;
  float *stats_, *lse_;
  T *dres_, *dbuf1_, *dbuf2_, *dqkv_, *dfch_;
  int *tokens_, *targets_, *bucket_token_, *bucket_offset_, *positions_;
  float *losses_, *scratch_, *norm_, *attention_workspace_;
  MatmulContext matmul_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<StageProfiler> profiler_;  // set by enable_stage_profiler
  // Data parallel (attach_data_parallel): the group's communicator, size, this rank, the shard's floats.
  ncclComm_t dp_comm_ = nullptr;
  int dp_ = 1;
  int dp_rank_ = 0;
  size_t shard_floats_ = 0;
};

}  // namespace

Result<std::unique_ptr<GptModel>> GptModel::create(const ModelConfig& model, ComputeDtype dtype,
                                                   int batch_size, int seq_len, int data_parallel) {
  if (data_parallel < 1) return Error{"GptModel: data_parallel " + std::to_string(data_parallel) + ": must be >= 1"};
  if (Status s = validate_model_config(model); !s) return s.error();
  if (batch_size < 1 || seq_len < 1 || seq_len > model.max_seq_len) {
    return Error{"GptModel: batch " + std::to_string(batch_size) + " x seq_len " + std::to_string(seq_len) +
                 " out of range (seq_len must be in [1, max_seq_len = " + std::to_string(model.max_seq_len) +
                 "])"};
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) return Error{"GptModel: no CUDA device"};
  if (dtype == ComputeDtype::kFp32)
    return std::unique_ptr<GptModel>(new GptImpl<float>(model, batch_size, seq_len, data_parallel));
  return std::unique_ptr<GptModel>(new GptImpl<__nv_bfloat16>(model, batch_size, seq_len, data_parallel));
}

}  // namespace megascale::trainer
