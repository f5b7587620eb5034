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
#include "megascale/trainer/model_shard.h"
#include "megascale/trainer/pipeline.h"
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
  GptImpl(const ModelConfig& model, int batch_size, int seq_len, const ModelParallel& par,
          std::vector<Pass> schedule)
      : cfg_(model),
        B_(batch_size),
        S_(seq_len),
        N_(batch_size * seq_len),
        tp_(par.layout.tp),
        tp_rank_(par.me.tp),
        n_(N_ / tp_),
        Cl_(model.d_model / tp_),
        Hl_(model.n_head / tp_),
        Vl_(model.padded_vocab_size / tp_),
        vocab_begin_(tp_rank_ * Vl_),
        pp_(par.layout.pp),
        pp_rank_(par.me.pp),
        vpp_(par.layout.vpp),
        Lc_(model.n_layer / (pp_ * vpp_)),
        micro_batches_(pp_ > 1 ? par.micro_batches : 1),
        schedule_(std::move(schedule)) {
    const StageShare stage = stage_share(par.layout, model.n_layer, pp_rank_);
    embedding_ = stage.embedding;
    head_ = stage.head;
    size_t offset = 0;
    for (const TpTensor& t : tp_parameter_tensors(model, tp_, stage)) {
      ModelTensor mt{t.name, t.shape, t.decayed, offset, static_cast<size_t>(t.numel())};
      // The partial-gradient tensors come first, then wpe, then the split ones (model_shard.h).
      if (t.partial_grad) partial_end_ = offset + mt.numel;
      // The gradient norm counts each tensor once over the job: 1/tp of a replicated one on each TP
      // rank, and nothing of the head's copy of wte (the embedding's counts it).
      const float weight = t.name == "wte" && pp_ > 1 && !embedding_ ? 0.0f
                           : tp_ > 1 && t.split == TpSplit::kReplicated ? 1.0f / static_cast<float>(tp_)
                                                                        : 1.0f;
      if (!norm_segments_.empty() && norm_segments_.back().weight == weight) {
        norm_segments_.back().end = offset + mt.numel;
      } else {
        norm_segments_.push_back({offset, offset + mt.numel, weight});
      }
      offset += (mt.numel + kTensorAlignElements - 1) / kTensorAlignElements * kTensorAlignElements;
      index_[mt.name] = tensors_.size();
      tensors_.push_back(mt);
      tp_tensors_.push_back(t);
      num_parameters_ += static_cast<int64_t>(mt.numel);
    }
    // Whole shards of aligned size for the data-parallel ranks: the flat buffer's tail is zero padding.
    const size_t unit = static_cast<size_t>(par.layout.dp) * kTensorAlignElements;
    floats_ = (offset + unit - 1) / unit * unit;
    // The segments cover the padding after each tensor (zeros) and the tail.
    for (size_t i = 0; i < norm_segments_.size(); ++i) {
      norm_segments_[i].end = i + 1 < norm_segments_.size() ? norm_segments_[i + 1].begin : floats_;
    }
    // zero_grads() clears everything but the matmul weights' gradients (~98% of the floats): their first
    // backward GEMM of a step writes them with beta = 0. These are the ranges it still clears. A pipeline
    // stage runs a chunk's first backward at different times for different chunks: it clears everything.
    size_t from = 0;
    for (const ModelTensor& t : tensors_) {
      if (!is_matmul_weight(t.name) || pp_ > 1) continue;
      if (t.offset > from) zero_ranges_.emplace_back(from, t.offset - from);
      from = t.offset + t.numel;
    }
    if (floats_ > from) zero_ranges_.emplace_back(from, floats_ - from);
    masters_ = device_alloc<float>(floats_);
    grads_ = device_alloc<float>(floats_);
    moment1_ = device_alloc<float>(floats_);
    moment2_ = device_alloc<float>(floats_);
    params_ = device_alloc<T>(floats_);

    // Activations, in regions: one region holds one chunk's Lc layers for one micro-batch in flight
    // (pp == 1: one region of every layer). A chunk gets as many regions as the schedule ever has its
    // micro-batches in flight at once.
    std::vector<int> live(static_cast<size_t>(vpp_), 0);
    slots_ = 1;
    for (const Pass& p : schedule_) {
      int& l = live[static_cast<size_t>(p.chunk)];
      l += p.kind == PassKind::kForward ? 1 : -1;
      slots_ = std::max(slots_, l);
    }
    const size_t R = static_cast<size_t>(slots_) * vpp_;
    for (int c = 0; c < vpp_; ++c) {
      for (int k = slots_ - 1; k >= 0; --k) free_regions_.push_back(c * slots_ + k);
    }
    // Sizes in elements. With tp > 1, n = N / tp rows are this rank's (sequence parallel) and the
    // column-parallel activations are 1/tp as wide; with tp == 1 every size is the one-GPU one.
    const size_t C = cfg_.d_model, Lc = Lc_, N = N_, n = n_, Cl = Cl_, m = micro_batches_;
    residual_ = device_alloc<T>(R * (Lc + 1) * n * C);
    mid_ = device_alloc<T>(R * Lc * n * C);
    ln1_ = device_alloc<T>(R * Lc * N * C);  // all-gathered (this rank's rows at tp_rank * n)
    ln2_ = device_alloc<T>(R * Lc * N * C);
    qkv_ = device_alloc<T>(R * Lc * N * 3 * Cl);
    atty_ = device_alloc<T>(R * Lc * N * Cl);
    fch_pre_ = device_alloc<T>(R * Lc * N * 4 * Cl);
    fch_ = device_alloc<T>(R * Lc * N * 4 * Cl);
    stats_ = device_alloc<float>(R * (2 * Lc + 1) * 2 * n);  // mean, rstd of ln1, ln2 per layer, then lnf
    lse_ = device_alloc<float>(R * Lc * N * Hl_);
    lnf_ = device_alloc<T>(N * C);
    logits_ = device_alloc<T>(N * Vl_);
    dres_ = device_alloc<T>(n * C);
    dbuf1_ = device_alloc<T>(N * C);
    dbuf2_ = device_alloc<T>(N * C);
    dqkv_ = device_alloc<T>(N * 3 * Cl);
    dfch_ = device_alloc<T>(N * 4 * Cl);
    full_ = tp_ > 1 ? device_alloc<T>(N * C) : nullptr;  // a row-parallel output's partial sum / a gathered dres
    vocab_stats_ = tp_ > 1 ? device_alloc<float>(3 * N) : nullptr;  // row max, sum of exp, target logit
    if (pp_ > 1) {  // per (micro-batch, chunk): the activation received, the gradient received and sent
      act_in_ = device_alloc<T>(m * vpp_ * n * C);
      grad_in_ = device_alloc<T>(m * vpp_ * n * C);
      grad_out_ = device_alloc<T>(m * vpp_ * n * C);
      loss_sum_ = device_alloc<float>(1);
      region_of_.assign(m * vpp_, -1);
    }
    tokens_ = device_alloc<int>(m * N);
    targets_ = device_alloc<int>(m * N);
    bucket_token_ = device_alloc<int>(m * N);
    bucket_offset_ = device_alloc<int>(m * (N + 1));
    positions_ = device_alloc<int>(m * N);
    buckets_.resize(m);
    losses_ = device_alloc<float>(N);
    const size_t scratch = std::max({layernorm_backward_scratch_floats(n_, cfg_.d_model),
                                     global_norm_scratch_floats(), lamb_scratch_floats(0)});
    scratch_ = device_alloc<float>(scratch);
    norm_ = device_alloc<float>(norm_segments_.size());
    lamb_sums_ = device_alloc<float>(2 * tensors_.size());
    sum_ = device_alloc<double>(1);
    attention_workspace_ = device_alloc<float>(
        attention_backward_workspace_bytes(B_, S_, Hl_, cfg_.head_dim()) / sizeof(float) + 1);
    // The bias-gradient fallback's row groups (64 rows) of the widest matmul (the LM head has no bias).
    matmul_ = matmul_create((N / 64 + 1) * 4 * C);
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    tp_comm_ = static_cast<ncclComm_t>(par.tp_comm);
    dp_comm_ = static_cast<ncclComm_t>(par.dp_comm);
    world_comm_ = static_cast<ncclComm_t>(par.world_comm);
    pp_comm_ = static_cast<ncclComm_t>(par.pp_comm);
    embedding_comm_ = static_cast<ncclComm_t>(par.embedding_comm);
    const void* p2p[] = {par.activation_send, par.activation_recv, par.gradient_send, par.gradient_recv};
    for (int i = 0; i < 4; ++i) {
      peers_[i].comm = static_cast<ncclComm_t>(const_cast<void*>(p2p[i]));
      if (peers_[i].comm == nullptr) continue;
      CUDA_CHECK(cudaStreamCreateWithFlags(&peers_[i].stream, cudaStreamNonBlocking));
      CUDA_CHECK(cudaEventCreateWithFlags(&peers_[i].done, cudaEventDisableTiming));
    }
    CUDA_CHECK(cudaEventCreateWithFlags(&computed_, cudaEventDisableTiming));
    dp_ = par.layout.dp;
    dp_rank_ = par.me.dp;
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
                                                act_in_,
                                                grad_in_,
                                                grad_out_,
                                                loss_sum_,
                                                tokens_,
                                                targets_,
                                                bucket_token_,
                                                bucket_offset_,
                                                positions_,
                                                losses_,
                                                scratch_,
                                                norm_,
                                                sum_,
                                                lamb_sums_,
                                                attention_workspace_}) {
      cudaFree(p);
    }
    for (Peer& p : peers_) {
      if (p.stream != nullptr) cudaStreamDestroy(p.stream);
      if (p.done != nullptr) cudaEventDestroy(p.done);
    }
    cudaEventDestroy(computed_);
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
      const auto held = index_.find(g.name);
      if (held == index_.end()) continue;  // another pipeline stage's
      const size_t i = held->second;
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
    require_whole_model("forward");
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
      for (size_t i = 0; i < inputs.size(); ++i) loss += forward_backward(inputs[i], targets[i], grad_scale) * grad_scale;
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
    // The next backward overwrites them (matmul_backward's overwrite_dweight); a pipeline stage cleared them all.
    weight_grads_stale_ = pp_ == 1;
  }

  StageProfiler* enable_stage_profiler() override {
    if (profiler_) return profiler_.get();
    profiler_ = std::make_unique<StageProfiler>(stream_);
    const char* names[] = {"pp activations out", "pp activations in", "pp gradients out", "pp gradients in"};
    for (int i = 0; i < 4; ++i) {
      if (peers_[i].stream != nullptr) peers_[i].lane = profiler_->add_lane(peers_[i].stream, names[i]);
    }
    return profiler_.get();
  }

  double grad_norm() override {
    zero_stale_weight_grads();
    if (pp_ > 1 && index_.count("wte") != 0) {
      // The embedding's and the LM head's copies of wte: each stage's gradient covers its own use.
      StageScope scope(profiler_.get(), Stage::kPpAllReduce);
      const ModelTensor& wte = tensors_[index_.at("wte")];
      nccl_check(ncclAllReduce(grads_ + wte.offset, grads_ + wte.offset, wte.numel, ncclFloat, ncclSum,
                               embedding_comm_, stream_),
                 "ncclAllReduce");
    }
    if (tp_ > 1) {
      // Sequence parallel: each rank's LayerNorm and bias gradients cover its own rows only.
      StageScope scope(profiler_.get(), Stage::kTpAllReduce);
      nccl_check(ncclAllReduce(grads_, grads_, partial_end_, ncclFloat, ncclSum, tp_comm_, stream_), "ncclAllReduce");
    }
    if (tp_ > 1 || dp_ > 1 || pp_ > 1) return parallel_grad_norm();
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
    staged(Stage::kDpAllReduce, [&] {
      nccl_check(ncclAllReduce(norm_, norm_, 1, ncclFloat, ncclAvg, dp_comm_, stream_), "ncclAllReduce");
    });
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
    const bool lamb = train.optimizer == OptimizerKind::kLamb;
    if (lamb && tp_ * pp_ * dp_ > 1) {
      parallel_lamb_step(train, s);
    } else if (dp_ > 1) {
      if (prof != nullptr) prof->begin(Stage::kOptimizer);
      sharded_adamw_step(train, s);
      if (prof != nullptr) prof->end();
    }
    if (dp_ > 1) {
      // ZeRO: every rank's masters whole again, and the compute copies from them.
      const size_t lo = static_cast<size_t>(dp_rank_) * shard_floats_;
      staged(Stage::kDpAllGather, [&] {
        nccl_check(ncclAllGather(masters_ + lo, masters_, shard_floats_, ncclFloat, dp_comm_, stream_),
                   "ncclAllGather");
      });
      staged(Stage::kOptimizer, [&] { copy_to_compute<T>(params_, masters_, floats_, stream_); });
      CUDA_CHECK(cudaStreamSynchronize(stream_));
      return;
    }
    if (lamb && tp_ * pp_ > 1) {
      CUDA_CHECK(cudaStreamSynchronize(stream_));
      return;
    }
    if (prof != nullptr) prof->begin(Stage::kOptimizer);
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
  // offset). Then each rank's weighted sum of squares over its shard (norm_segments_: replicated tensors
  // 1/tp, the head's copy of wte 0), summed over the job.
  double parallel_grad_norm() {
    size_t lo = 0, hi = floats_;
    if (dp_ > 1) {
      lo = static_cast<size_t>(dp_rank_) * shard_floats_;
      hi = lo + shard_floats_;
      StageScope scope(profiler_.get(), Stage::kDpReduceScatter);
      nccl_check(ncclReduceScatter(grads_, grads_ + lo, shard_floats_, ncclFloat, ncclAvg, dp_comm_, stream_),
                 "ncclReduceScatter");
    }
    std::vector<float> norms(norm_segments_.size(), 0.0f);
    {
      StageScope scope(profiler_.get(), Stage::kGradNorm);
      for (size_t i = 0; i < norm_segments_.size(); ++i) {
        const size_t b = std::max(lo, norm_segments_[i].begin), e = std::min(hi, norm_segments_[i].end);
        if (e > b) global_norm(norm_ + i, grads_ + b, e - b, scratch_, stream_);
      }
    }
    CUDA_CHECK(cudaMemcpyAsync(norms.data(), norm_, norms.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    double mine = 0;
    for (size_t i = 0; i < norm_segments_.size(); ++i) {
      const size_t b = std::max(lo, norm_segments_[i].begin), e = std::min(hi, norm_segments_[i].end);
      if (e > b) mine += double{norm_segments_[i].weight} * norms[i] * norms[i];
    }
    return std::sqrt(world_sum(mine));
  }

  double world_sum(double value) {
    CUDA_CHECK(cudaMemcpyAsync(sum_, &value, sizeof(double), cudaMemcpyHostToDevice, stream_));
    staged(Stage::kNormAllReduce, [&] {
      nccl_check(ncclAllReduce(sum_, sum_, 1, ncclDouble, ncclSum, world_comm_, stream_), "ncclAllReduce");
    });
    double total = 0;
    CUDA_CHECK(cudaMemcpyAsync(&total, sum_, sizeof(double), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return total;
  }

  // ZeRO-2's optimizer half: AdamW over the pieces of each tensor inside this rank's shard (the
  // moments outside it stay unused); optimizer_step then all-gathers the masters in place and refreshes
  // the compute copies from them.
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
  }

  // LAMB over pieces: each tensor's piece inside this rank's shard (all of it with dp == 1) updates its
  // moments and sums its ||w||^2 and ||u||^2; the sums are added over the data-parallel group (the other
  // pieces) and the tensor-parallel one (a split tensor's other slices; a replicated tensor's sums grow
  // by tp for both norms, leaving their ratio), so every piece steps by the whole tensor's trust ratio.
  // A pipeline stage's tensors are its own (wte's two copies are equal and get equal steps).
  void parallel_lamb_step(const TrainConfig& train, OptimizerStep s) {
    const size_t lo = dp_ > 1 ? static_cast<size_t>(dp_rank_) * shard_floats_ : 0;
    const size_t hi = dp_ > 1 ? lo + shard_floats_ : floats_;
    CUDA_CHECK(cudaMemsetAsync(lamb_sums_, 0, 2 * tensors_.size() * sizeof(float), stream_));
    staged(Stage::kOptimizer, [&] {
      for (size_t k = 0; k < tensors_.size(); ++k) {
        const ModelTensor& t = tensors_[k];
        const size_t b = std::max(lo, t.offset), e = std::min(hi, t.offset + t.numel);
        if (b >= e) continue;
        s.weight_decay = t.decayed ? static_cast<float>(train.weight_decay) : 0.0f;
        lamb_moments(masters_ + b, moment1_ + b, moment2_ + b, grads_ + b, e - b, s, lamb_sums_ + 2 * k, scratch_,
                     stream_);
      }
    });
    const size_t count = 2 * tensors_.size();
    if (dp_ > 1) {
      staged(Stage::kDpAllReduce, [&] {
        nccl_check(ncclAllReduce(lamb_sums_, lamb_sums_, count, ncclFloat, ncclSum, dp_comm_, stream_),
                   "ncclAllReduce");
      });
    }
    if (tp_ > 1) {
      staged(Stage::kTpAllReduce, [&] {
        nccl_check(ncclAllReduce(lamb_sums_, lamb_sums_, count, ncclFloat, ncclSum, tp_comm_, stream_),
                   "ncclAllReduce");
      });
    }
    staged(Stage::kOptimizer, [&] {
      for (size_t k = 0; k < tensors_.size(); ++k) {
        const ModelTensor& t = tensors_[k];
        const size_t b = std::max(lo, t.offset), e = std::min(hi, t.offset + t.numel);
        if (b < e) lamb_apply<T>(masters_ + b, params_ + b, grads_ + b, e - b, s.learning_rate, lamb_sums_ + 2 * k, stream_);
      }
    });
  }

  bool is_matmul_weight(const std::string& name) const {
    return (name == "wte" && head_) || name == "qkvw" || name == "attprojw" || name == "fcw" || name == "fcprojw";
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
    return layer < 0 ? t.offset : t.offset + static_cast<size_t>(layer) * (t.numel / (static_cast<size_t>(Lc_) * vpp_));
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

  void upload_batch(int mb, const int32_t* inputs_host, const int32_t* targets_host) {
    static_assert(sizeof(int32_t) == sizeof(int));
    StageScope scope(profiler_.get(), Stage::kHostCopies);
    CUDA_CHECK(cudaMemcpyAsync(tokens_ + static_cast<size_t>(mb) * N_, inputs_host, N_ * sizeof(int),
                               cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaMemcpyAsync(targets_ + static_cast<size_t>(mb) * N_, targets_host, N_ * sizeof(int),
                               cudaMemcpyHostToDevice, stream_));
  }

  // The embedding backward's token buckets of micro-batch mb. Vocabulary parallel: only the buckets of
  // this rank's tokens, renumbered from its first row (the buckets ascend by token, so they are one
  // contiguous run; their offsets still index `positions`). The host arrays live in buckets_[mb] until
  // the next step's copies, so the asynchronous copies never read freed memory.
  void upload_buckets(int mb, const int32_t* inputs_host) {
    StageScope scope(profiler_.get(), Stage::kHostCopies);
    HostBuckets& h = buckets_[static_cast<size_t>(mb)];
    TokenBuckets all = make_token_buckets(inputs_host, N_);
    const auto first = std::lower_bound(all.bucket_token.begin(), all.bucket_token.end(), vocab_begin_);
    const auto last = std::lower_bound(first, all.bucket_token.end(), vocab_begin_ + Vl_);
    const size_t b0 = static_cast<size_t>(first - all.bucket_token.begin());
    h.count = static_cast<int>(last - first);
    h.token.assign(first, last);
    for (int& t : h.token) t -= vocab_begin_;
    h.offset.assign(all.bucket_offset.begin() + static_cast<std::ptrdiff_t>(b0),
                    all.bucket_offset.begin() + static_cast<std::ptrdiff_t>(b0) + h.count + 1);
    h.positions = std::move(all.positions);
    const size_t base = static_cast<size_t>(mb);
    CUDA_CHECK(cudaMemcpyAsync(bucket_token_ + base * N_, h.token.data(), h.count * sizeof(int),
                               cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaMemcpyAsync(bucket_offset_ + base * (N_ + 1), h.offset.data(), (h.count + 1) * sizeof(int),
                               cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaMemcpyAsync(positions_ + base * N_, h.positions.data(), N_ * sizeof(int), cudaMemcpyHostToDevice,
                               stream_));
  }

  // One chunk's forward for micro-batch mb in activation region `region`: from the embedding on the first
  // virtual stage, else from residual entry 0 (the activation received). With tp ranks, N = B x S token
  // rows, n = N / tp of them this rank's (all of them with tp == 1, where every exchange below is a no-op
  // and the fused one-GPU epilogues run): the residual stream and the LayerNorms live on n rows; their
  // outputs are all-gathered into [N, C] for the column-parallel GEMMs (QKV, FC: this rank's heads and
  // 4C/tp columns); the row-parallel GEMMs (attproj, fcproj) give [N, C] partial sums, reduce-scattered
  // to n rows before their bias and the residual are added. The parallel block sums both projections'
  // partials before one reduce-scatter.
  void run_forward_chunk(int region, int chunk, int mb) {
    StageProfiler* const prof = profiler_.get();
    const int C = cfg_.d_model, D = cfg_.head_dim(), Cl = Cl_;
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    const bool tp = tp_ > 1;
    if (first_stage(chunk)) {
      StageScope scope(prof, Stage::kEncoderForward);
      const int* tokens = tokens_ + static_cast<size_t>(mb) * N_;
      if (!tp) {
        encoder_forward<T>(residual_at(region, 0), tokens, param("wte"), param("wpe"), B_, S_, C, stream_);
      } else {  // each rank its vocabulary rows (rank 0 adds wpe), summed and scattered by rows
        encoder_forward<T>(full_, tokens, param("wte"), tp_rank_ == 0 ? param("wpe") : nullptr, B_, S_, C,
                           stream_, vocab_begin_, vocab_begin_ + Vl_);
        reduce_scatter_rows(full_, residual_at(region, 0), C);
      }
    }
    for (int i = 0; i < Lc_; ++i) {
      const int l = chunk * Lc_ + i;  // this rank's layer (parameters)
      const T* x = residual_at(region, i);
      T* ln1 = ln1_ + at_layer(region, i, N_, C);
      T* ln2 = ln2_ + at_layer(region, i, N_, C);
      T* qkv = qkv_ + at_layer(region, i, N_, 3 * Cl);
      T* atty = atty_ + at_layer(region, i, N_, Cl);
      T* mid = mid_ + at_layer(region, i, n_, C);
      T* fch_pre = fch_pre_ + at_layer(region, i, N_, 4 * Cl);
      T* fch = fch_ + at_layer(region, i, N_, 4 * Cl);
      T* out = residual_at(region, i + 1);
      staged(Stage::kLayerNormForward, [&] {
        layernorm_forward<T>(mine(ln1, C), mean_of(region, 2 * i), rstd_of(region, 2 * i), x, param("ln1w", l),
                             param("ln1b", l), n_, C, stream_);
      });
      gather_rows(mine(ln1, C), ln1, C);
      staged(Stage::kMatmulQkvForward, [&] {
        matmul_forward<T>(matmul_, qkv, ln1, param("qkvw", l), param("qkvb", l), nullptr, nullptr, N_, C, 3 * Cl,
                          stream_);
      });
      staged(Stage::kAttentionForward, [&] {
        attention_forward<T>(atty, lse_ + at_layer(region, i, N_, Hl_), qkv, qkv + Cl, qkv + 2 * Cl, B_, S_, Hl_, D,
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
        layernorm_forward<T>(mine(ln2, C), mean_of(region, 2 * i + 1), rstd_of(region, 2 * i + 1), mlp_in,
                             param("ln2w", l), param("ln2b", l), n_, C, stream_);
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
  }

  // The last virtual stage's head on the chunk's output: the final LayerNorm, the LM head, the loss per
  // token row into losses_ and, with backward, its gradient back to the chunk's output in dres_ (dlogits
  // scaled by dloss_scale, through the LM head and the final LayerNorm).
  void run_head(int region, int mb, float dloss_scale, bool backward, bool overwrite) {
    const int C = cfg_.d_model;
    const int lnf = 2 * Lc_;
    const T* x = residual_at(region, Lc_);
    staged(Stage::kLayerNormForward, [&] {
      layernorm_forward<T>(mine(lnf_, C), mean_of(region, lnf), rstd_of(region, lnf), x, param("lnfw"),
                           param("lnfb"), n_, C, stream_);
    });
    gather_rows(mine(lnf_, C), lnf_, C);
    staged(Stage::kMatmulLmHeadForward, [&] {
      matmul_forward<T>(matmul_, logits_, lnf_, param("wte"), nullptr, nullptr, nullptr, N_, C, Vl_, stream_);
    });
    run_classifier(targets_ + static_cast<size_t>(mb) * N_, dloss_scale, backward);
    if (!backward) return;
    staged(Stage::kMatmulLmHeadBackward, [&] {
      matmul_backward<T>(matmul_, dbuf1_, grad("wte"), nullptr, logits_, lnf_, param("wte"), nullptr, false, N_, C,
                         Vl_, stream_, overwrite);
    });
    reduce_scatter_rows(dbuf1_, mine(dbuf1_, C), C);
    CUDA_CHECK(cudaMemsetAsync(dres_, 0, n_ * C * sizeof(T), stream_));
    // Sequential blocks: the LayerNorm backward also sums the residual gradient it leaves, the bias
    // gradient of the last layer's fcproj (see run_backward_chunk).
    const int last_layer = (vpp_ - 1) * Lc_ + Lc_ - 1;
    staged(Stage::kLayerNormBackward, [&] {
      layernorm_backward<T>(dres_, grad("lnfw"), grad("lnfb"), mine(dbuf1_, C), x, param("lnfw"),
                            mean_of(region, lnf), rstd_of(region, lnf), n_, C, scratch_, stream_,
                            cfg_.parallel_block ? nullptr : grad("fcprojb", last_layer));
    });
  }

  // The loss per token row into losses_ and, with write_dlogits, dlogits (scaled) in place of logits_.
  void run_classifier(const int* targets, float dloss_scale, bool write_dlogits) {
    const int V = cfg_.vocab_size;
    if (tp_ == 1) {
      staged(Stage::kClassifier, [&] {
        classifier_forward_backward<T>(logits_, losses_, targets, N_, V, cfg_.padded_vocab_size, dloss_scale,
                                       write_dlogits, stream_);
      });
      return;
    }
    float* row_max = vocab_stats_;
    float* sums = vocab_stats_ + N_;  // sum of exp, then the target's logit
    staged(Stage::kClassifier,
           [&] { classifier_vp_max<T>(logits_, row_max, N_, Vl_, vocab_begin_, V, stream_); });
    staged(Stage::kTpAllReduce, [&] {
      nccl_check(ncclAllReduce(row_max, row_max, N_, ncclFloat, ncclMax, tp_comm_, stream_), "ncclAllReduce");
    });
    staged(Stage::kClassifier,
           [&] { classifier_vp_sums<T>(logits_, row_max, sums, targets, N_, Vl_, vocab_begin_, V, stream_); });
    staged(Stage::kTpAllReduce, [&] {
      nccl_check(ncclAllReduce(sums, sums, 2 * static_cast<size_t>(N_), ncclFloat, ncclSum, tp_comm_, stream_),
                 "ncclAllReduce");
    });
    staged(Stage::kClassifier, [&] {
      classifier_vp_finish<T>(logits_, losses_, row_max, sums, targets, N_, Vl_, vocab_begin_, V, dloss_scale,
                              write_dlogits, stream_);
    });
  }

  // One chunk's backward for micro-batch mb from dres_ (the gradient of the chunk's output), leaving in
  // dres_ the gradient of its input, or on the first virtual stage running the embedding's backward. The
  // mirror of run_forward_chunk: dres lives on this rank's n rows; it is all-gathered before the
  // row-parallel GEMMs' backward, and the column-parallel GEMMs' input gradients (partial sums over the
  // rank's heads or columns) are reduce-scattered before the LayerNorms' backward.
  void run_backward_chunk(int region, int chunk, int mb, bool overwrite) {
    const int C = cfg_.d_model, D = cfg_.head_dim(), Cl = Cl_;
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    const bool tp = tp_ > 1;
    // Sequential blocks: each LayerNorm backward also sums the residual gradient it leaves, which is the
    // bias gradient of the projection that added into that residual (fcproj of the block below, attproj
    // of its own block), so those projections' backwards skip cuBLASLt's separate bias-gradient pass.
    // Below a chunk's first layer the block is another chunk's: its fcproj's bias gets its own sum there.
    const bool sequential = !cfg_.parallel_block;
    // dres on all N rows: itself, or all-gathered into full_.
    auto gathered_dres = [&]() -> T* {
      if (!tp) return dres_;
      gather_rows(dres_, full_, C);
      return full_;
    };
    for (int i = Lc_ - 1; i >= 0; --i) {
      const int l = chunk * Lc_ + i;
      const T* x = residual_at(region, i);
      const T* mid = mid_ + at_layer(region, i, n_, C);
      const T* qkv = qkv_ + at_layer(region, i, N_, 3 * Cl);
      const T* atty = atty_ + at_layer(region, i, N_, Cl);
      const T* ln1 = ln1_ + at_layer(region, i, N_, C);
      const T* ln2 = ln2_ + at_layer(region, i, N_, C);
      const T* fch = fch_ + at_layer(region, i, N_, 4 * Cl);
      const T* fch_pre = fch_pre_ + at_layer(region, i, N_, 4 * Cl);
      const float* lse = lse_ + at_layer(region, i, N_, Hl_);
      if (sequential && i == Lc_ - 1 && !last_stage(chunk)) {
        // The chunk's output gradient came from the next stage: fcproj's bias gradient is its sum here.
        column_sum<T>(grad("fcprojb", l), dres_, n_, C, stream_);
      }
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
                                mean_of(region, 2 * i + 1), rstd_of(region, 2 * i + 1), n_, C, scratch_, stream_);
        });
        staged(Stage::kLayerNormBackward, [&] {
          layernorm_backward<T>(dres_, grad("ln1w", l), grad("ln1b", l), mine(dbuf2_, C), x, param("ln1w", l),
                                mean_of(region, 2 * i), rstd_of(region, 2 * i), n_, C, scratch_, stream_);
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
                              mean_of(region, 2 * i + 1), rstd_of(region, 2 * i + 1), n_, C, scratch_, stream_,
                              grad("attprojb", l));
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
                              mean_of(region, 2 * i), rstd_of(region, 2 * i), n_, C, scratch_, stream_,
                              i > 0 ? grad("fcprojb", l - 1) : nullptr);
      });
    }
    if (!first_stage(chunk)) return;
    const HostBuckets& h = buckets_[static_cast<size_t>(mb)];
    const size_t base = static_cast<size_t>(mb);
    const T* demb = gathered_dres();  // wpe's gradient is then whole on every rank
    staged(Stage::kEncoderBackward, [&] {
      encoder_backward<T>(grad("wte"), grad("wpe"), demb, bucket_token_ + base * N_,
                          bucket_offset_ + base * (N_ + 1), positions_ + base * N_, h.count, B_, S_, C, stream_);
    });
  }

  // One optimizer step through the pipeline (pp > 1): the schedule's passes issued in order without
  // waiting. A received activation or gradient arrives on its own stream and communicator into a buffer
  // of its own (micro-batch, chunk), which the compute stream waits for; a send waits for the pass that
  // produced it on its own stream. So the only waits between stages are a pass's on its input. A
  // chunk's output activation is sent from its region, which its backward (after the next stage has
  // received it, since that backward needs the next stage's gradient) only frees.
  double pipeline_step(const std::vector<const int32_t*>& inputs, const std::vector<const int32_t*>& targets,
                       float grad_scale) {
    const int m = micro_batches_;
    if (static_cast<int>(inputs.size()) != m || static_cast<int>(targets.size()) != m) {
      std::fprintf(stderr, "train_step: %zu micro-batches given, the pipeline schedule has %d\n", inputs.size(), m);
      std::abort();
    }
    const size_t nc = static_cast<size_t>(n_) * cfg_.d_model;
    for (int mb = 0; mb < m; ++mb) {
      upload_batch(mb, inputs[static_cast<size_t>(mb)], targets[static_cast<size_t>(mb)]);
      if (embedding_) upload_buckets(mb, inputs[static_cast<size_t>(mb)]);
    }
    CUDA_CHECK(cudaMemsetAsync(loss_sum_, 0, sizeof(float), stream_));
    // The peers' streams start after everything before this step on the compute stream.
    CUDA_CHECK(cudaEventRecord(computed_, stream_));
    for (Peer& p : peers_) {
      if (p.stream != nullptr) CUDA_CHECK(cudaStreamWaitEvent(p.stream, computed_));
    }
    Peer& act_send = peers_[0];
    Peer& act_recv = peers_[1];
    Peer& grad_send = peers_[2];
    Peer& grad_recv = peers_[3];
    StageProfiler* const prof = profiler_.get();
    auto receive = [&](Peer& p, T* buffer) {
      {
        StageScope scope(prof, Stage::kPpRecv, p.lane);
        nccl_check(ncclRecv(buffer, nc, nccl_type(), 0, p.comm, p.stream), "ncclRecv");
      }
      CUDA_CHECK(cudaEventRecord(p.done, p.stream));
      CUDA_CHECK(cudaStreamWaitEvent(stream_, p.done));
    };
    auto send = [&](Peer& p, const T* buffer) {
      CUDA_CHECK(cudaEventRecord(computed_, stream_));
      CUDA_CHECK(cudaStreamWaitEvent(p.stream, computed_));
      StageScope scope(prof, Stage::kPpSend, p.lane);
      nccl_check(ncclSend(buffer, nc, nccl_type(), 1, p.comm, p.stream), "ncclSend");
    };
    for (const Pass& pass : schedule_) {
      const int c = pass.chunk, mb = pass.micro_batch;
      const size_t key = static_cast<size_t>(mb) * vpp_ + c;
      if (pass.kind == PassKind::kForward) {
        const int region = take_region(c);
        region_of_[key] = region;
        if (!first_stage(c)) {
          receive(act_recv, act_in_ + key * nc);
          CUDA_CHECK(cudaMemcpyAsync(residual_at(region, 0), act_in_ + key * nc, nc * sizeof(T),
                                     cudaMemcpyDeviceToDevice, stream_));
        }
        run_forward_chunk(region, c, mb);
        if (last_stage(c)) {
          run_head(region, mb, grad_scale / static_cast<float>(N_), true, false);
          loss_accumulate(loss_sum_, losses_, N_, grad_scale, stream_);
          CUDA_CHECK(cudaMemcpyAsync(grad_in_ + key * nc, dres_, nc * sizeof(T), cudaMemcpyDeviceToDevice, stream_));
        } else {
          send(act_send, residual_at(region, Lc_));
        }
      } else {
        const int region = region_of_[key];
        if (!last_stage(c)) receive(grad_recv, grad_in_ + key * nc);
        CUDA_CHECK(cudaMemcpyAsync(dres_, grad_in_ + key * nc, nc * sizeof(T), cudaMemcpyDeviceToDevice, stream_));
        run_backward_chunk(region, c, mb, false);
        if (!first_stage(c)) {
          CUDA_CHECK(cudaMemcpyAsync(grad_out_ + key * nc, dres_, nc * sizeof(T), cudaMemcpyDeviceToDevice, stream_));
          send(grad_send, grad_out_ + key * nc);
        }
        free_regions_.push_back(region);
      }
    }
    // Everything after (the norm, the optimizer, the next step's buffers) waits for the exchanges.
    for (Peer& p : peers_) {
      if (p.stream == nullptr) continue;
      CUDA_CHECK(cudaEventRecord(p.done, p.stream));
      CUDA_CHECK(cudaStreamWaitEvent(stream_, p.done));
    }
    // The loss is the last stage's: summed over the pipeline group, the others adding 0.
    staged(Stage::kPpAllReduce, [&] {
      nccl_check(ncclAllReduce(loss_sum_, loss_sum_, 1, ncclFloat, ncclSum, pp_comm_, stream_), "ncclAllReduce");
    });
    float loss = 0;
    CUDA_CHECK(cudaMemcpyAsync(&loss, loss_sum_, sizeof(float), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return loss;
  }

  void require_whole_model(const char* what) const {
    if (pp_ == 1) return;
    std::fprintf(stderr, "GptModel::%s needs the whole model on this rank (pp 1); a pipeline stage runs train_step\n",
                 what);
    std::abort();
  }

  // A free activation region of `chunk` (its regions are chunk * slots_ .. + slots_ - 1).
  int take_region(int chunk) {
    for (auto it = free_regions_.end(); it != free_regions_.begin();) {
      --it;
      if (*it / slots_ == chunk) {
        const int r = *it;
        free_regions_.erase(it);
        return r;
      }
    }
    std::fprintf(stderr, "pipeline: no free activation region for chunk %d (the schedule exceeds its in-flight count)\n",
                 chunk);
    std::abort();
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
  // Pipeline parallel: stages, this stage, chunks (virtual stages) per stage, layers per chunk,
  // micro-batches per step (1 when pp == 1), this stage's passes, what it holds.
  int pp_, pp_rank_, vpp_, Lc_, micro_batches_;
  std::vector<Pass> schedule_;
  bool embedding_ = true, head_ = true;
  int slots_ = 1;                  // activation regions per chunk
  std::vector<int> free_regions_;  // the regions not holding a micro-batch in flight
  std::vector<int> region_of_;     // (micro-batch, chunk) -> its region while in flight
  struct NormSegment {
    size_t begin, end;
    float weight;
  };
  std::vector<NormSegment> norm_segments_;  // the gradient norm's weight of each range of the buffer
  struct HostBuckets {
    std::vector<int> token, offset, positions;
    int count = 0;
  };
  std::vector<HostBuckets> buckets_;  // per micro-batch: the embedding backward's buckets (host copies)
  std::vector<ModelTensor> tensors_;
  std::vector<TpTensor> tp_tensors_;  // tensors_'s split (same order)
  size_t partial_end_ = 0;     // [0, partial_end_): gradients summed over the TP group
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
  T* act_in_ = nullptr;  // pp > 1, per (micro-batch, chunk): activations received
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
  cudaEvent_t computed_ = nullptr;  // the compute stream's progress, for the peers' streams to wait on
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
  const ParallelLayout& l = par.layout;
  const std::string where = "GptModel: " + describe(l) + ", rank (tp " + std::to_string(par.me.tp) + ", dp " +
                            std::to_string(par.me.dp) + ", pp " + std::to_string(par.me.pp) + "): ";
  // The layout against the model and this micro-batch (validate_layout checks the rest of the run).
  RunConfig run;
  run.model = model;
  run.train.batch_size = batch_size * l.dp;
  run.train.seq_len = seq_len;
  run.train.grad_accum_steps = par.micro_batches;
  if (Status s = validate_layout(l, run); !s) return Error{where + s.error().message};
  if (rank_of(l, par.me) < 0 || rank_of(l, par.me) >= l.world_size() || coords_of(l, rank_of(l, par.me)) != par.me) {
    return Error{where + "this rank is outside the layout"};
  }
  const bool first = par.me.pp == 0, last = par.me.pp == l.pp - 1, ring = l.vpp > 1;
  const bool missing = (l.world_size() > 1 && par.world_comm == nullptr) || (l.tp > 1 && par.tp_comm == nullptr) ||
                       (l.dp > 1 && par.dp_comm == nullptr) ||
                       (l.pp > 1 && (par.pp_comm == nullptr || ((first || last) && par.embedding_comm == nullptr) ||
                                     ((ring || !last) && (par.activation_send == nullptr || par.gradient_recv == nullptr)) ||
                                     ((ring || !first) && (par.activation_recv == nullptr || par.gradient_send == nullptr))));
  if (missing) return Error{where + "a communicator is missing"};
  std::vector<Pass> schedule;
  if (l.pp > 1) {
    auto passes = pipeline_schedule(l, par.me.pp, par.micro_batches);
    if (!passes) return Error{where + passes.error().message};
    schedule = std::move(*passes);
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) return Error{"GptModel: no CUDA device"};
  if (dtype == ComputeDtype::kFp32)
    return std::unique_ptr<GptModel>(new GptImpl<float>(model, batch_size, seq_len, par, std::move(schedule)));
  return std::unique_ptr<GptModel>(new GptImpl<__nv_bfloat16>(model, batch_size, seq_len, par, std::move(schedule)));
}

}  // namespace megascale::trainer
