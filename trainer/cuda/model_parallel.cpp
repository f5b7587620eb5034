// GptImpl's parallel step (model_impl.h): the gradient norm over the job, AdamW and LAMB over shards
// and slices, and the pipeline's step.
#include "model_impl.h"

namespace megascale::trainer::detail {

template <class T>
double GptImpl<T>::grad_norm() {
  join_dp();  // the buckets reduce-scattered during the backward
  zero_stale_weight_grads();
  if (pp_ > 1 && index_.count("wte") != 0) {
    // The embedding's and the LM head's copies of wte: each stage's gradient covers its own use.
    StageScope scope(profiler_.get(), Stage::kPpAllReduce);
    const ModelTensor& wte = tensors_[index_.at("wte")];
    nccl_check(ncclAllReduce(grads_ + wte.offset, grads_ + wte.offset, wte.numel, ncclFloat, ncclSum,
                             embedding_comm_, stream_),
               "ncclAllReduce");
  }
  if (dp_ > 1) {
    StageScope scope(profiler_.get(), Stage::kDpReduceScatter);
    for (int b = 0; b < dp_plan_.buckets(); ++b) {
      if (reduced_[static_cast<size_t>(b)] == 0) reduce_scatter_bucket(b, dp_comm_, stream_);
    }
    std::fill(reduced_.begin(), reduced_.end(), 0);
  }
  if (tp_ > 1) {
    // Sequence parallel: each rank's LayerNorm and bias gradients cover its own rows only; they are
    // summed over the TP group (with dp > 1 this rank's pieces of them, which its TP peers share).
    StageScope scope(profiler_.get(), Stage::kTpAllReduce);
    if (dp_ == 1) {
      nccl_check(ncclAllReduce(grads_, grads_, partial_end_, ncclFloat, ncclSum, tp_comm_, stream_),
                 "ncclAllReduce");
    } else {
      nccl_check(ncclGroupStart(), "ncclGroupStart");
      for_each_piece(-1, [&](size_t, const ModelTensor& t, size_t b, size_t e, size_t) {
        if (t.offset >= partial_end_) return;
        nccl_check(ncclAllReduce(grads_ + b, grads_ + b, e - b, ncclFloat, ncclSum, tp_comm_, stream_),
                   "ncclAllReduce");
      });
      nccl_check(ncclGroupEnd(), "ncclGroupEnd");
    }
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

template <class T>
double GptImpl<T>::data_parallel_mean(double value) {
  if (dp_ == 1) return value;
  return reduce_scalar(static_cast<float>(value), ncclAvg, dp_comm_, Stage::kDpAllReduce);
}

template <class T>
void GptImpl<T>::optimizer_step(const TrainConfig& train, double lr, int step, double norm) {
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
  if (lamb && tp_ * pp_ * dp_ > 1) parallel_lamb_moments(train, s);
  if (dp_ > 1) {
    step_and_gather(train, s, lamb);
    // With dp overlap the all-gathers go on while the next step starts; its forward waits for each.
    if (dp_stream_ == nullptr) CUDA_CHECK(cudaStreamSynchronize(stream_));
    return;
  }
  if (lamb && tp_ * pp_ > 1) {
    staged(Stage::kOptimizer, [&] {
      for_each_piece(-1, [&](size_t k, const ModelTensor&, size_t b, size_t e, size_t) {
        lamb_apply<T>(masters_ + b, params_ + b, grads_ + b, e - b, s.learning_rate, lamb_sums_ + 2 * k,
                      stream_);
      });
    });
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return;
  }
  if (prof != nullptr) prof->begin(Stage::kOptimizer);
  for (const ModelTensor& t : tensors_) {
    s.weight_decay = t.decayed ? static_cast<float>(train.weight_decay) : 0.0f;
    float* w = masters_ + t.offset;
    float* g = grads_ + t.offset;
    if (train.optimizer == OptimizerKind::kLamb) {
      lamb_update<T>(w, params_ + t.offset, moment1_ + t.offset, moment2_ + t.offset, g, t.numel, s, scratch_,
                     stream_);
    } else {
      adamw_update<T>(w, params_ + t.offset, moment1_ + t.offset, moment2_ + t.offset, g, t.numel, s,
                      stream_);
    }
  }
  if (prof != nullptr) prof->end();
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

template <class T>
double GptImpl<T>::parallel_grad_norm() {
  std::vector<float> weights;
  {
    StageScope scope(profiler_.get(), Stage::kGradNorm);
    for_each_piece(-1, [&](size_t k, const ModelTensor&, size_t b, size_t e, size_t) {
      global_norm(norm_ + weights.size(), grads_ + b, e - b, scratch_, stream_);
      weights.push_back(norm_weight_[k]);
    });
  }
  std::vector<float> norms(weights.size(), 0.0f);
  CUDA_CHECK(
      cudaMemcpyAsync(norms.data(), norm_, norms.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  double mine = 0;
  for (size_t i = 0; i < norms.size(); ++i) mine += double{weights[i]} * norms[i] * norms[i];
  return std::sqrt(reduce_scalar(mine, ncclSum, world_comm_, Stage::kNormAllReduce));
}

// A bucket moves as one collective through its staging region (grad_buckets.h): its slices are copied
// in rank-major, one reduce-scatter leaves this rank its block, and its pieces are copied back to where
// the optimizer reads them. Each copy of a slice is one 2D memcpy (dp rows of its piece's length).
template <class T>
void GptImpl<T>::reduce_scatter_bucket(int bucket, ncclComm_t comm, cudaStream_t stream) {
  const BucketRegion& region = dp_plan_.regions[static_cast<size_t>(bucket)];
  for (const GradSlice& s : dp_plan_.slices) {
    if (s.bucket != bucket) continue;
    const size_t part = static_cast<size_t>(s.numel / dp_);
    CUDA_CHECK(cudaMemcpy2DAsync(dp_flat_ + dp_plan_.flat_element(s, 0, 0), region.block * sizeof(float),
                                 grads_ + tensors_[static_cast<size_t>(s.tensor)].offset + s.offset,
                                 part * sizeof(float), part * sizeof(float), static_cast<size_t>(dp_),
                                 cudaMemcpyDeviceToDevice, stream));
  }
  float* region_begin = dp_flat_ + region.begin;
  nccl_check(ncclReduceScatter(region_begin, region_begin + dp_rank_ * region.block,
                               static_cast<size_t>(region.block), ncclFloat, ncclAvg, comm, stream),
             "ncclReduceScatter");
  for (const GradSlice& s : dp_plan_.slices) {
    if (s.bucket != bucket) continue;
    const ElementRange mine = shard_of(s, dp_, dp_rank_);
    CUDA_CHECK(cudaMemcpyAsync(grads_ + tensors_[static_cast<size_t>(s.tensor)].offset + mine.begin,
                               dp_flat_ + dp_plan_.flat_element(s, dp_rank_, 0), mine.size() * sizeof(float),
                               cudaMemcpyDeviceToDevice, stream));
  }
}

// The optimizer wrote the rank's pieces of both the masters and the compute copy: the compute copy is
// what the next forward reads, so that is what is gathered, in the compute type (bf16 moves half the
// bytes fp32 masters would), through the bucket's staging region as T. The masters of the other ranks'
// pieces go stale here; gather_masters() brings them back for a checkpoint.
template <class T>
void GptImpl<T>::all_gather_bucket(int bucket, ncclComm_t comm, cudaStream_t stream) {
  const BucketRegion& region = dp_plan_.regions[static_cast<size_t>(bucket)];
  T* flat = reinterpret_cast<T*>(dp_flat_);  // sizeof(T) <= sizeof(float): the region fits as T
  for (const GradSlice& s : dp_plan_.slices) {
    if (s.bucket != bucket) continue;
    const ElementRange mine = shard_of(s, dp_, dp_rank_);
    CUDA_CHECK(cudaMemcpyAsync(flat + dp_plan_.flat_element(s, dp_rank_, 0),
                               params_ + tensors_[static_cast<size_t>(s.tensor)].offset + mine.begin,
                               mine.size() * sizeof(T), cudaMemcpyDeviceToDevice, stream));
  }
  T* region_begin = flat + region.begin;
  nccl_check(ncclAllGather(region_begin + dp_rank_ * region.block, region_begin,
                           static_cast<size_t>(region.block), nccl_type(), comm, stream),
             "ncclAllGather");
  for (const GradSlice& s : dp_plan_.slices) {
    if (s.bucket != bucket) continue;
    const size_t part = static_cast<size_t>(s.numel / dp_);
    CUDA_CHECK(cudaMemcpy2DAsync(params_ + tensors_[static_cast<size_t>(s.tensor)].offset + s.offset,
                                 part * sizeof(T), flat + dp_plan_.flat_element(s, 0, 0),
                                 region.block * sizeof(T), part * sizeof(T), static_cast<size_t>(dp_),
                                 cudaMemcpyDeviceToDevice, stream));
  }
}

template <class T>
void GptImpl<T>::gather_masters() const {
  if (dp_ == 1) return;
  nccl_check(ncclGroupStart(), "ncclGroupStart");
  for (const GradSlice& s : dp_plan_.slices) {
    float* slice = masters_ + tensors_[static_cast<size_t>(s.tensor)].offset + s.offset;
    const size_t part = static_cast<size_t>(s.numel / dp_);
    nccl_check(ncclAllGather(slice + dp_rank_ * part, slice, part, ncclFloat, dp_comm_, stream_),
               "ncclAllGather");
  }
  nccl_check(ncclGroupEnd(), "ncclGroupEnd");
}

template <class T>
void GptImpl<T>::step_and_gather(const TrainConfig& train, OptimizerStep s, bool lamb) {
  StageProfiler* const prof = profiler_.get();
  const int rest = rest_bucket();
  for (int i = 0; i < dp_plan_.buckets(); ++i) {
    const int bucket = i == 0 ? rest : i - 1;  // the forward's order
    staged(Stage::kOptimizer, [&] {
      for_each_piece(bucket, [&](size_t k, const ModelTensor& t, size_t b, size_t e, size_t m) {
        if (lamb) {
          lamb_apply<T>(masters_ + b, params_ + b, grads_ + b, e - b, s.learning_rate, lamb_sums_ + 2 * k,
                        stream_);
          return;
        }
        s.weight_decay = t.decayed ? static_cast<float>(train.weight_decay) : 0.0f;
        adamw_update<T>(masters_ + b, params_ + b, moment1_ + m, moment2_ + m, grads_ + b, e - b, s, stream_);
      });
    });
    if (dp_stream_ == nullptr) {
      staged(Stage::kDpAllGather, [&] { all_gather_bucket(bucket, dp_comm_, stream_); });
      continue;
    }
    CUDA_CHECK(cudaEventRecord(computed_, stream_));
    CUDA_CHECK(cudaStreamWaitEvent(dp_stream_, computed_));
    {
      StageScope scope(prof, Stage::kDpAllGather, dp_lane_);
      all_gather_bucket(bucket, dp_overlap_comm_, dp_stream_);
    }
    CUDA_CHECK(cudaEventRecord(params_ready_[static_cast<size_t>(bucket)], dp_stream_));
  }
}

template <class T>
void GptImpl<T>::parallel_lamb_moments(const TrainConfig& train, OptimizerStep s) {
  CUDA_CHECK(cudaMemsetAsync(lamb_sums_, 0, 2 * tensors_.size() * sizeof(float), stream_));
  staged(Stage::kOptimizer, [&] {
    for_each_piece(-1, [&](size_t k, const ModelTensor& t, size_t b, size_t e, size_t m) {
      s.weight_decay = t.decayed ? static_cast<float>(train.weight_decay) : 0.0f;
      lamb_moments(masters_ + b, moment1_ + m, moment2_ + m, grads_ + b, e - b, s, lamb_sums_ + 2 * k,
                   scratch_, stream_);
    });
  });
  const size_t count = 2 * tensors_.size();
  for (auto [size, comm, stage] :
       {std::tuple{dp_, dp_comm_, Stage::kDpAllReduce}, std::tuple{tp_, tp_comm_, Stage::kTpAllReduce}}) {
    if (size == 1) continue;
    staged(stage, [&] {
      nccl_check(ncclAllReduce(lamb_sums_, lamb_sums_, count, ncclFloat, ncclSum, comm, stream_),
                 "ncclAllReduce");
    });
  }
}

template <class T>
void GptImpl<T>::p2p_receive(Peer& p, T* buffer, size_t count) {
  {
    StageScope scope(profiler_.get(), Stage::kPpRecv, p.lane);
    nccl_check(ncclRecv(buffer, count, nccl_type(), 0, p.comm, p.stream), "ncclRecv");
  }
  CUDA_CHECK(cudaEventRecord(p.done, p.stream));
  CUDA_CHECK(cudaStreamWaitEvent(stream_, p.done));
}

template <class T>
void GptImpl<T>::p2p_send(Peer& p, const T* buffer, size_t count) {
  CUDA_CHECK(cudaEventRecord(computed_, stream_));
  CUDA_CHECK(cudaStreamWaitEvent(p.stream, computed_));
  StageScope scope(profiler_.get(), Stage::kPpSend, p.lane);
  nccl_check(ncclSend(buffer, count, nccl_type(), 1, p.comm, p.stream), "ncclSend");
}

template <class T>
void GptImpl<T>::pipeline_begin() {
  CUDA_CHECK(cudaMemsetAsync(loss_sum_, 0, sizeof(float), stream_));
  // The peers' streams start after everything issued before on the compute stream.
  CUDA_CHECK(cudaEventRecord(computed_, stream_));
  for (Peer& p : peers_) {
    if (p.stream != nullptr) CUDA_CHECK(cudaStreamWaitEvent(p.stream, computed_));
  }
}

template <class T>
double GptImpl<T>::pipeline_end() {
  // Everything after (the norm, the optimizer, the next step's buffers) waits for the exchanges.
  for (Peer& p : peers_) {
    if (p.stream == nullptr) continue;
    CUDA_CHECK(cudaEventRecord(p.done, p.stream));
    CUDA_CHECK(cudaStreamWaitEvent(stream_, p.done));
  }
  // The loss is the last stage's: summed over the pipeline group, the others adding 0.
  staged(Stage::kPpAllReduce, [&] {
    nccl_check(ncclAllReduce(loss_sum_, loss_sum_, 1, ncclFloat, ncclSum, pp_comm_, stream_),
               "ncclAllReduce");
  });
  float loss = 0;
  CUDA_CHECK(cudaMemcpyAsync(&loss, loss_sum_, sizeof(float), cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  return loss;
}

template <class T>
double GptImpl<T>::pipeline_forward(const int32_t* inputs_host, const int32_t* targets_host) {
  const size_t nc = static_cast<size_t>(n_) * cfg_.d_model;
  upload_batch(0, inputs_host, targets_host);
  pipeline_begin();
  // A region per chunk, all held until the sends from them are done.
  std::vector<int> regions;
  for (int c = 0; c < vpp_; ++c) {
    const int region = take_region(c);
    regions.push_back(region);
    if (!first_stage(c)) {
      p2p_receive(peers_[1], act_in_ + static_cast<size_t>(c) * nc, nc);
      CUDA_CHECK(cudaMemcpyAsync(residual_at(region, 0), act_in_ + static_cast<size_t>(c) * nc,
                                 nc * sizeof(T), cudaMemcpyDeviceToDevice, stream_));
    }
    run_forward_chunk(region, c, 0);
    if (last_stage(c)) {
      run_head(region, 0, 0.0f, false, false);
      loss_accumulate(loss_sum_, losses_, N_, 1.0f, stream_);
    } else {
      p2p_send(peers_[0], residual_at(region, Lc_), nc);
    }
  }
  const double loss = pipeline_end();
  for (int region : regions) free_regions_.push_back(region);
  return loss;
}

template <class T>
double GptImpl<T>::pipeline_step(const std::vector<const int32_t*>& inputs,
                                 const std::vector<const int32_t*>& targets, float grad_scale) {
  const int m = micro_batches_;
  if (static_cast<int>(inputs.size()) != m || static_cast<int>(targets.size()) != m) {
    std::fprintf(stderr, "train_step: %zu micro-batches given, the pipeline schedule has %d\n", inputs.size(),
                 m);
    std::abort();
  }
  const size_t nc = static_cast<size_t>(n_) * cfg_.d_model;
  for (int mb = 0; mb < m; ++mb) {
    upload_batch(mb, inputs[static_cast<size_t>(mb)], targets[static_cast<size_t>(mb)]);
    if (embedding_) upload_buckets(mb, inputs[static_cast<size_t>(mb)]);
  }
  pipeline_begin();
  Peer& act_send = peers_[0];
  Peer& act_recv = peers_[1];
  Peer& grad_send = peers_[2];
  Peer& grad_recv = peers_[3];
  StageProfiler* const prof = profiler_.get();
  auto receive = [&](Peer& p, T* buffer) { p2p_receive(p, buffer, nc); };
  auto send = [&](Peer& p, const T* buffer) { p2p_send(p, buffer, nc); };
  auto key_of = [&](const Pass& pass) { return static_cast<size_t>(pass.micro_batch) * vpp_ + pass.chunk; };
  // The passes' compute; the exchanges around them are the caller's.
  auto forward = [&](const Pass& pass) {
    const int c = pass.chunk, mb = pass.micro_batch;
    const size_t key = key_of(pass);
    const int region = take_region(c);
    region_of_[key] = region;
    if (!first_stage(c)) {
      CUDA_CHECK(cudaMemcpyAsync(residual_at(region, 0), act_in_ + key * nc, nc * sizeof(T),
                                 cudaMemcpyDeviceToDevice, stream_));
    }
    run_forward_chunk(region, c, mb);
    if (last_stage(c)) {
      run_head(region, mb, grad_scale / static_cast<float>(N_), true, false);
      loss_accumulate(loss_sum_, losses_, N_, grad_scale, stream_);
      CUDA_CHECK(
          cudaMemcpyAsync(grad_in_ + key * nc, dres_, nc * sizeof(T), cudaMemcpyDeviceToDevice, stream_));
    }
  };
  auto backward = [&](const Pass& pass, size_t index) {
    const int c = pass.chunk, mb = pass.micro_batch;
    const size_t key = key_of(pass);
    const int region = region_of_[key];
    CUDA_CHECK(
        cudaMemcpyAsync(dres_, grad_in_ + key * nc, nc * sizeof(T), cudaMemcpyDeviceToDevice, stream_));
    final_backward_ = static_cast<int>(index) == last_backward_[static_cast<size_t>(c)];
    run_backward_chunk(region, c, mb, false);
    final_backward_ = false;
    if (!first_stage(c)) {
      CUDA_CHECK(
          cudaMemcpyAsync(grad_out_ + key * nc, dres_, nc * sizeof(T), cudaMemcpyDeviceToDevice, stream_));
    }
    free_regions_.push_back(region);
  };
  if (coupled_.empty()) {
    // Decoupled: each exchange on its peer's stream; a receive holds the compute stream only until its
    // data is there, a send never.
    for (size_t index = 0; index < schedule_.size(); ++index) {
      const Pass& pass = schedule_[index];
      const size_t key = key_of(pass);
      if (pass.kind == PassKind::kForward) {
        if (!first_stage(pass.chunk)) receive(act_recv, act_in_ + key * nc);
        forward(pass);
        if (!last_stage(pass.chunk)) send(act_send, residual_at(region_of_[key], Lc_));
      } else {
        if (!last_stage(pass.chunk)) receive(grad_recv, grad_in_ + key * nc);
        backward(pass, index);
        if (!first_stage(pass.chunk)) send(grad_send, grad_out_ + key * nc);
      }
    }
  } else {
    // Coupled (--pp-coupled): each step's exchanges as one group on the compute stream, then its pass.
    size_t index = 0;
    for (const CoupledStep& step : coupled_) {
      if (!step.ops.empty()) {
        const bool receives = std::any_of(step.ops.begin(), step.ops.end(), [](const P2pOp& op) {
          return op.kind == P2pKind::kRecvActivation || op.kind == P2pKind::kRecvGradient;
        });
        StageScope scope(prof, receives ? Stage::kPpRecv : Stage::kPpSend);
        nccl_check(ncclGroupStart(), "ncclGroupStart");
        for (const P2pOp& op : step.ops) {
          const size_t key = static_cast<size_t>(op.micro_batch) * vpp_ + op.chunk;
          switch (op.kind) {
            case P2pKind::kSendActivation:
              nccl_check(
                  ncclSend(residual_at(region_of_[key], Lc_), nc, nccl_type(), 1, act_send.comm, stream_),
                  "ncclSend");
              break;
            case P2pKind::kRecvActivation:
              nccl_check(ncclRecv(act_in_ + key * nc, nc, nccl_type(), 0, act_recv.comm, stream_),
                         "ncclRecv");
              break;
            case P2pKind::kSendGradient:
              nccl_check(ncclSend(grad_out_ + key * nc, nc, nccl_type(), 1, grad_send.comm, stream_),
                         "ncclSend");
              break;
            case P2pKind::kRecvGradient:
              nccl_check(ncclRecv(grad_in_ + key * nc, nc, nccl_type(), 0, grad_recv.comm, stream_),
                         "ncclRecv");
              break;
          }
        }
        nccl_check(ncclGroupEnd(), "ncclGroupEnd");
      }
      if (!step.pass) continue;
      if (step.pass->kind == PassKind::kForward) {
        forward(*step.pass);
      } else {
        backward(*step.pass, index);
      }
      ++index;
    }
  }
  return pipeline_end();
}

template <class T>
int GptImpl<T>::take_region(int chunk) {
  for (auto it = free_regions_.end(); it != free_regions_.begin();) {
    --it;
    if (*it / slots_ == chunk) {
      const int r = *it;
      free_regions_.erase(it);
      return r;
    }
  }
  std::fprintf(
      stderr, "pipeline: no free activation region for chunk %d (the schedule exceeds its in-flight count)\n",
      chunk);
  std::abort();
}

template class GptImpl<float>;
template class GptImpl<__nv_bfloat16>;

}  // namespace megascale::trainer::detail
