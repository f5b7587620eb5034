// Checkpoints: one file holding everything a bit-exact resume needs: the model shape, the run's
// essentials, the step, the RNG state, the data loader's position and named fp32 tensors (master
// weights, optimizer moments; llm.c keeps the same set in model_*.bin + state_*.bin).
//
//   CheckpointHeader header{.model = run.model, .train = essentials_of(run.train), .step = step,
//                           .rng_state = {rng}, .loader = loader.position()};
//   std::vector<TensorView> tensors = {{"wte", {Vp, C}, host_wte}, {"adam_m.wte", {Vp, C}, host_m}, ...};
//   if (Status s = save_checkpoint(dir + "/ckpt_00001000.bin", header, tensors); !s) ...
//
//   std::vector<TensorSlot> slots = {{"wte", {Vp, C}, host_wte_out}, ...};   // what this run expects
//   Result<CheckpointHeader> loaded = load_checkpoint(path, slots);           // fills the spans
//
// A job of several ranks writes one file per rank (its own shard: its layers, its tensor-parallel
// slices, its loader position) into a directory, ckpt_00001000/rank_00003.bin (checkpoint_rank_path);
// each header names the layout and the rank, and a resume in another layout is refused naming both.
//
// Format (little-endian, version 3): "MSCKPT\0\0" (8 bytes), u32 version, u32 header bytes H, then H
// bytes of header fields (ModelConfig, TrainEssentials, step, RNG words, loader position, then the
// layout tp, pp, dp, vpp and the rank's tp, dp, pp coordinates, as i32; version 1 had no layout and is
// refused; version 2 is read unless it has dp > 1, whose ranks held the optimizer state in other
// places), u32 tensor
// count, then per tensor: u32 name length, name bytes, u32 rank, rank x i64 dims, i64 byte offset of its
// data; then the data blocks (fp32) in tensor order; last, a u64 FNV-1a hash of everything before it,
// so a truncated or corrupted file is refused rather than loaded. Written to a temp file in the same
// directory, flushed, then renamed over the target, so a crash leaves the old checkpoint or the new one.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "megascale/common/result.h"
#include "megascale/trainer/config.h"
#include "megascale/trainer/loader.h"
#include "megascale/trainer/parallel.h"

namespace megascale::trainer {

// What of TrainConfig decides the data order and the optimizer's meaning: a resume with other values
// would not continue the same run (check_resume_compatible says which differ).
struct TrainEssentials {
  int batch_size = 0;
  int seq_len = 0;
  int grad_accum_steps = 0;
  int total_steps = 0;
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  ComputeDtype dtype = ComputeDtype::kBf16;
  uint64_t seed = 0;
  bool operator==(const TrainEssentials&) const = default;
};

TrainEssentials essentials_of(const TrainConfig& train);

struct CheckpointHeader {
  ModelConfig model;
  TrainEssentials train;
  int64_t step = 0;                 // optimizer steps done; the resumed run's next step is this one
  std::vector<uint64_t> rng_state;  // any number of words (e.g. one splitmix64 state per stream)
  LoaderPosition loader;            // the training loader's position() after `step` steps
  ParallelLayout layout;            // the job that wrote it (one rank by default)
  RankCoords rank;                  // and which of its ranks this file is
};

// The file of world rank `rank` inside a several-rank checkpoint directory: "DIR/rank_00003.bin".
std::string checkpoint_rank_path(const std::string& dir, int rank);

// A tensor to save: a view of host memory (numel(shape) floats).
struct TensorView {
  std::string name;
  std::vector<int64_t> shape;
  std::span<const float> data;
};

// A tensor the caller expects to load, and where its data goes (numel(shape) floats).
struct TensorSlot {
  std::string name;
  std::vector<int64_t> shape;
  std::span<float> data;
};

// Writes atomically (temp + fsync + rename). Errors: a view whose span size differs from its shape's
// element count, duplicate names, I/O failure (naming the path and errno text).
Status save_checkpoint(const std::string& path, const CheckpointHeader& header,
                       std::span<const TensorView> tensors);

// Reads the header only (cheap; for `megascale-train --resume` to check shapes first).
Result<CheckpointHeader> read_checkpoint_header(const std::string& path);

// Reads the whole file, checks the hash, then matches `slots` by name: every slot must be in the file
// with the same shape, and the file must hold no tensor the caller did not ask for. Errors name the
// tensor and both shapes: "ckpt.bin: tensor 'qkvw': checkpoint has shape [12, 2304, 768], this run
// expects [24, 3072, 1024]". Nothing is written into the spans unless every name and shape matches; the
// content hash is checked as the data streams in, so on a corrupt file the error says the spans hold garbage.
Result<CheckpointHeader> load_checkpoint(const std::string& path, std::span<const TensorSlot> slots);

// OK when `header` can resume rank `rank` of a run of (model, train) in `layout`: same ModelConfig, the
// same essentials except total_steps (a run may be extended), the same layout and rank; else an error
// listing each field that differs, both values (re-sharding into another layout is not built).
Status check_resume_compatible(const CheckpointHeader& header, const ModelConfig& model, const TrainConfig& train,
                               const ParallelLayout& layout = {}, const RankCoords& rank = {});

// "[12, 2304, 768]"
std::string shape_string(std::span<const int64_t> shape);

}  // namespace megascale::trainer
