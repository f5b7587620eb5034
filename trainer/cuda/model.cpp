// GptImpl's buffers, init and create() (model_impl.h).
#include "model_impl.h"

namespace megascale::trainer {
namespace detail {
namespace {

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

}  // namespace

template <class T>
GptImpl<T>::GptImpl(const ModelConfig& model, int batch_size, int seq_len, const ModelParallel& par,
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
  const std::vector<TpTensor> local = tp_parameter_tensors(model, tp_, stage);
  for (const TpTensor& t : local) {
    ModelTensor mt{t.name, t.shape, t.decayed, offset, static_cast<size_t>(t.numel())};
    // The partial-gradient tensors come first, then wpe, then the split ones (model_shard.h).
    if (t.partial_grad) partial_end_ = offset + mt.numel;
    // The gradient norm counts each tensor once over the job: 1/tp of a replicated one on each TP
    // rank, and nothing of the head's copy of wte (the embedding's counts it).
    norm_weight_.push_back(t.name == "wte" && pp_ > 1 && !embedding_    ? 0.0f
                           : tp_ > 1 && t.split == TpSplit::kReplicated ? 1.0f / static_cast<float>(tp_)
                                                                        : 1.0f);
    offset += (mt.numel + kTensorAlignElements - 1) / kTensorAlignElements * kTensorAlignElements;
    index_[mt.name] = tensors_.size();
    tensors_.push_back(mt);
    tp_tensors_.push_back(t);
    num_parameters_ += static_cast<int64_t>(mt.numel);
  }
  floats_ = offset;
  dp_ = par.layout.dp;
  dp_rank_ = par.me.dp;
  dp_plan_ = plan_grad_buckets(local, dp_).value();  // create() refused the layouts it cannot plan
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
  state_floats_ = dp_ > 1 ? static_cast<size_t>(dp_plan_.shard_numel) : floats_;
  moment1_ = device_alloc<float>(state_floats_);
  moment2_ = device_alloc<float>(state_floats_);
  params_ = device_alloc<T>(floats_);
  if (dp_ > 1) dp_flat_ = device_alloc<float>(static_cast<size_t>(dp_plan_.flat_numel));

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
  full_ =
      tp_ > 1 ? device_alloc<T>(N * C) : nullptr;  // a row-parallel output's partial sum / a gathered dres
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
  norm_ = device_alloc<float>(std::max(tensors_.size(), dp_plan_.slices.size()));
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
  if (tp_ > 1 && par.tp_overlap_comm != nullptr) {
    tp_overlap_comm_ = static_cast<ncclComm_t>(par.tp_overlap_comm);
    CUDA_CHECK(cudaStreamCreateWithFlags(&tp_stream_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&tp_done_, cudaEventDisableTiming));
  }
  if (dp_ > 1 && par.dp_overlap_comm != nullptr) {
    dp_overlap_comm_ = static_cast<ncclComm_t>(par.dp_overlap_comm);
    CUDA_CHECK(cudaStreamCreateWithFlags(&dp_stream_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&dp_done_, cudaEventDisableTiming));
    params_ready_.resize(static_cast<size_t>(dp_plan_.buckets()));
    for (cudaEvent_t& e : params_ready_) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  reduced_.assign(static_cast<size_t>(dp_plan_.buckets()), 0);
  if (par.pp_coupled && pp_ > 1) {
    auto coupled = coupled_schedule(par.layout, pp_rank_, micro_batches_);
    if (coupled) coupled_ = std::move(*coupled);
  }
  last_backward_.assign(static_cast<size_t>(vpp_), -1);
  for (size_t i = 0; i < schedule_.size(); ++i) {
    if (schedule_[i].kind == PassKind::kBackward)
      last_backward_[static_cast<size_t>(schedule_[i].chunk)] = static_cast<int>(i);
  }
}

template <class T>
GptImpl<T>::~GptImpl() {
  matmul_destroy(matmul_);
  for (void* p : std::initializer_list<void*>{masters_,      grads_,         moment1_,
                                              moment2_,      params_,        residual_,
                                              mid_,          ln1_,           ln2_,
                                              qkv_,          atty_,          fch_pre_,
                                              fch_,          lnf_,           logits_,
                                              stats_,        lse_,           dres_,
                                              dbuf1_,        dbuf2_,         dqkv_,
                                              dfch_,         full_,          vocab_stats_,
                                              act_in_,       grad_in_,       grad_out_,
                                              loss_sum_,     tokens_,        targets_,
                                              bucket_token_, bucket_offset_, positions_,
                                              losses_,       scratch_,       norm_,
                                              sum_,          lamb_sums_,     attention_workspace_,
                                              dp_flat_}) {
    cudaFree(p);
  }
  for (Peer& p : peers_) {
    if (p.stream != nullptr) cudaStreamDestroy(p.stream);
    if (p.done != nullptr) cudaEventDestroy(p.done);
  }
  if (tp_stream_ != nullptr) {
    cudaStreamSynchronize(tp_stream_);
    cudaStreamDestroy(tp_stream_);
    cudaEventDestroy(tp_done_);
  }
  if (dp_stream_ != nullptr) {
    cudaStreamSynchronize(dp_stream_);
    cudaStreamDestroy(dp_stream_);
    cudaEventDestroy(dp_done_);
    for (cudaEvent_t e : params_ready_) cudaEventDestroy(e);
  }
  cudaEventDestroy(computed_);
  cudaStreamDestroy(stream_);
}

template <class T>
void GptImpl<T>::init_gpt2(uint64_t seed) {
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
  CUDA_CHECK(cudaMemset(moment1_, 0, state_floats_ * sizeof(float)));
  CUDA_CHECK(cudaMemset(moment2_, 0, state_floats_ * sizeof(float)));
}

template class GptImpl<float>;
template class GptImpl<__nv_bfloat16>;

}  // namespace detail

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
  if (rank_of(l, par.me) < 0 || rank_of(l, par.me) >= l.world_size() ||
      coords_of(l, rank_of(l, par.me)) != par.me) {
    return Error{where + "this rank is outside the layout"};
  }
  const bool first = par.me.pp == 0, last = par.me.pp == l.pp - 1, ring = l.vpp > 1;
  const bool missing =
      (l.world_size() > 1 && par.world_comm == nullptr) || (l.tp > 1 && par.tp_comm == nullptr) ||
      (l.dp > 1 && par.dp_comm == nullptr) ||
      (l.pp > 1 && (par.pp_comm == nullptr || ((first || last) && par.embedding_comm == nullptr) ||
                    ((ring || !last) && (par.activation_send == nullptr || par.gradient_recv == nullptr)) ||
                    ((ring || !first) && (par.activation_recv == nullptr || par.gradient_send == nullptr))));
  if (missing) return Error{where + "a communicator is missing"};
  if (l.dp > 1) {
    auto plan =
        plan_grad_buckets(tp_parameter_tensors(model, l.tp, stage_share(l, model.n_layer, par.me.pp)), l.dp);
    if (!plan) return Error{where + plan.error().message};
  }
  std::vector<Pass> schedule;
  if (l.pp > 1) {
    auto passes = pipeline_schedule(l, par.me.pp, par.micro_batches);
    if (!passes) return Error{where + passes.error().message};
    schedule = std::move(*passes);
  }
  if (par.pp_coupled && (l.pp < 2 || l.vpp > 1)) {
    return Error{where + "--pp-coupled needs pp > 1 and vpp 1: the coupled baseline holds each send for the "
                         "next receive, which deadlocks in the interleaved order (pipeline.h: check_coupled)"};
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) return Error{"GptModel: no CUDA device"};
  if (dtype == ComputeDtype::kFp32)
    return std::unique_ptr<GptModel>(
        new detail::GptImpl<float>(model, batch_size, seq_len, par, std::move(schedule)));
  return std::unique_ptr<GptModel>(
      new detail::GptImpl<__nv_bfloat16>(model, batch_size, seq_len, par, std::move(schedule)));
}

}  // namespace megascale::trainer
