// The GPT-2 decoder on one GPU: parameters, gradients and optimizer state carved from single
// allocations by the canonical tensor table (config.h: gpt_parameter_tensors), forward, backward with
// gradient accumulation, global-norm clipping and AdamW or LAMB. Plain C++ interface (no CUDA types),
// so train_main.cpp and the checkpoint code stay host-only.
//
//   Result<std::unique_ptr<GptModel>> model = GptModel::create(run.model, run.train.dtype, B, T);
//   (*model)->init_gpt2(run.train.seed);
//   (*model)->zero_grads();
//   double loss = (*model)->forward_backward(inputs, targets, 1.0f / grad_accum);   // per micro-step
//   double norm = (*model)->grad_norm();
//   (*model)->optimizer_step(run.train, lr, step + 1, norm);
//
// Parallel ranks (ModelParallel, filled from the job's layout and communicators):
// - Pipeline parallel: the rank holds the layers of its virtual stages (model_shard.h) and runs
//   train_step's passes in the schedule's order, keeping each in-flight micro-batch's activations; the
//   last virtual stage's forward also runs the loss and the head's backward. wte's two copies (first and
//   last stage) have their gradients summed.
// - Tensor parallel with sequence parallel (model_shard.h: Megatron-LM's split): the rank holds its
//   part of each split tensor; LayerNorms and residual adds run on its 1/tp of the token rows, all-gathered
//   before the column-parallel linears and reduce-scattered after the row-parallel ones; the embedding and
//   the loss are vocabulary parallel. Every rank of a TP group is given the same micro-batch.
// - Data parallel with a sharded optimizer (ZeRO-2: Rajbhandari et al., SC '20; grad_buckets.h): the
//   gradients are reduce-scattered (averaged) a layer's bucket at a time, during the backward with
//   ModelParallel::dp_overlap_comm, else in grad_norm(), so that this rank holds the mean gradient of
//   its piece of every slice; grad_norm() returns the whole gradient's norm; optimizer_step() steps the
//   masters and moments of those pieces only and all-gathers the masters bucket by bucket.
// The gradient norm is summed over every rank of the job (world_comm), each replicated tensor once.
// Architecture (Radford et al. 2019, pre-LN; tied LM head: logits = lnf(x) wte^T):
//   sequential block: x = x + Attn(LN1(x)); x = x + MLP(LN2(x))
//   parallel block:   x = x + Attn(LN1(x)) + MLP(LN2(x))  (MegaScale §3.1, PaLM/GPT-J style; we keep the
//                     two LayerNorms of the parameter table, as GPT-NeoX's parallel residual does, so a
//                     checkpoint has the same tensors in both modes and no parameter is dead)
//   attention: causal, or a sliding window of ModelConfig::attention_window keys.
// Numerics: fp32 masters, compute copies and activations in the compute dtype, fp32 gradients.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "megascale/common/result.h"
#include "megascale/trainer/config.h"
#include "megascale/trainer/parallel.h"

namespace megascale::trainer {

class StageProfiler;  // stage_profiler.h

// This rank's place in a parallel job and its NCCL communicators (ncclComm_t as void*, keeping NCCL's
// types out of this header). The defaults are one GPU alone.
struct ModelParallel {
  ParallelLayout layout;  // tp x pp (vpp) x dp
  RankCoords me;
  int micro_batches = 1;       // per optimizer step: the pipeline schedule's m (pp > 1)
  void* world_comm = nullptr;  // every rank (world > 1): the gradient norm's sum
  void* tp_comm = nullptr;     // tp > 1
  void* dp_comm = nullptr;     // dp > 1
  // dp > 1, optional: a second data-parallel communicator. Given, each layer's gradients are
  // reduce-scattered on a stream of their own as soon as the step's last backward through that layer
  // ends, and the optimizer's all-gathers run there too, each layer's ahead of the next forward through
  // it (MegaScale's data-parallel overlap and prefetch). Without it both run on the compute stream
  // after the backward and in the optimizer step.
  void* dp_overlap_comm = nullptr;
  // tp > 1, optional: a second tensor-parallel communicator. Given, each TP GEMM is cut into one block
  // of rows per rank and pipelined with its all-gather or reduction on a stream of their own (MegaScale's
  // TP overlap; model_impl.h: gather_then, matmul_then_reduce); without it the collective runs whole on
  // the compute stream.
  void* tp_overlap_comm = nullptr;
  void* pp_comm = nullptr;         // pp > 1: the step's loss, from the last stage
  void* embedding_comm = nullptr;  // pp > 1, first and last stage: the two copies of wte's gradient
  // pp > 1: two-rank communicators with the pipeline neighbours, one direction of one kind each (this
  // rank sends on *_send as its rank 0 to rank 1, receives on *_recv as rank 1 from rank 0):
  // activations to the next virtual stage and from the previous, gradients to the previous and from
  // the next. Null where this stage has no such neighbour.
  void* activation_send = nullptr;
  void* activation_recv = nullptr;
  void* gradient_send = nullptr;
  void* gradient_recv = nullptr;
  // pp > 1, vpp 1: the coupled baseline (pipeline.h: coupled_schedule), the sends and receives on the
  // compute stream, each send in one group with the next receive. Otherwise each exchange runs on a
  // stream of its own and a stage never waits on its neighbour's send (MegaScale §3.2).
  bool pp_coupled = false;
};

// One parameter tensor as laid out in the model's allocations.
struct ModelTensor {
  std::string name;
  std::vector<int64_t> shape;
  bool decayed = false;
  size_t offset = 0;  // elements from the start of each allocation (masters, grads, moments alike)
  size_t numel = 0;
};

class GptModel {
 public:
  // A model for micro-batches of at most batch_size x seq_len tokens; allocates everything up front.
  // Errors: a config that does not validate, seq_len > max_seq_len, a parallel layout that does not
  // divide the model (validate_layout) or lacks its communicators, or not enough GPU memory.
  static Result<std::unique_ptr<GptModel>> create(const ModelConfig& model, ComputeDtype dtype,
                                                  int batch_size, int seq_len,
                                                  const ModelParallel& parallel = {});
  virtual ~GptModel() = default;

  virtual const ModelConfig& config() const = 0;
  virtual const std::vector<ModelTensor>& tensors() const = 0;
  virtual int64_t num_parameters() const = 0;

  // GPT-2 init: N(0, 0.02) weights and embeddings, residual projections (attprojw, fcprojw) scaled by
  // 1/sqrt(2L) (Radford et al. 2019 §2.3), biases 0, LayerNorm weights 1. Seeded, host-side, so it is
  // the same on every GPU. Optimizer moments are zeroed.
  virtual void init_gpt2(uint64_t seed) = 0;

  // Mean cross-entropy over the micro-batch (tokens_host and targets_host: batch_size x seq_len ids).
  // forward_backward also accumulates the parameter gradients of loss * grad_scale (grad_scale =
  // 1 / grad_accum_steps averages the micro-steps). Both synchronise (the loss is read back). Both need
  // pp == 1 (a pipeline stage holds part of the layers: train_step).
  virtual double forward(const int32_t* inputs_host, const int32_t* targets_host) = 0;
  virtual double forward_backward(const int32_t* inputs_host, const int32_t* targets_host,
                                  float grad_scale) = 0;

  // One optimizer step's forward and backward passes over its micro-batches (inputs[i], targets[i]:
  // batch_size x seq_len ids each), gradients of loss * grad_scale accumulated; with pp > 1 in the
  // pipeline schedule's order (pipeline.h: 1F1B, or interleaved with vpp > 1), sends and receives on
  // their own streams and communicators so that no stage waits on its neighbour's send. Returns the sum
  // over micro-batches of their mean loss times grad_scale, on every rank of the pipeline. Synchronises
  // once at the end (once per micro-batch with pp == 1, which runs forward_backward for each).
  virtual double train_step(const std::vector<const int32_t*>& inputs,
                            const std::vector<const int32_t*>& targets, float grad_scale) = 0;

  // The logits of the last forward() (not forward_backward, which overwrites them with their
  // gradient), as fp32 [batch_size * seq_len, padded_vocab_size / tp]: this rank's vocabulary columns.
  virtual std::vector<float> logits() const = 0;

  virtual void zero_grads() = 0;
  virtual double grad_norm() = 0;  // ||g||_2 over every parameter gradient (of the whole job)

  // One AdamW or LAMB step at learning rate `lr` (LAMB's trust ratio over each whole tensor, whichever
  // ranks hold its pieces); `step` is 1-based (bias correction); gradients are
  // clipped to train.grad_clip using `grad_norm` (0 = off); weight decay on decayed tensors only.
  virtual void optimizer_step(const TrainConfig& train, double lr, int step, double grad_norm) = 0;

  // Host copies (fp32) of one whole allocation, in tensors() order and offsets (this rank's parts, with
  // tp > 1): what checkpoints and the PyTorch comparison read and write. kind: masters, grads, adam_m,
  // adam_v.
  enum class Buffer { kMasters, kGrads, kMoment1, kMoment2 };
  virtual std::vector<float> download(Buffer which) const = 0;
  // Writing masters refreshes the compute copies.
  virtual void upload(Buffer which, const std::vector<float>& values) = 0;
  virtual size_t buffer_floats() const = 0;  // with alignment padding between tensors

  // Turns on per-stage GPU timing (stage_profiler.h) and returns the profiler, owned by the model. The
  // caller brackets each optimizer step with its begin_step()/end_step(); the model's launches record
  // their stage's events only inside such a bracket. Profiling adds host work per launch: off by default.
  virtual StageProfiler* enable_stage_profiler() = 0;

  // The mean of `value` over the data-parallel group (the value itself when not attached). Synchronises.
  virtual double data_parallel_mean(double value) = 0;
};

}  // namespace megascale::trainer
