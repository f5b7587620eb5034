// How one rank of a tp x pp layout holds the GPT's parameters.
//
// Pipeline parallel: the rank holds the layers of its virtual stages (parallel.h: layers_of), stacked in
// its own order (chunk 0's layers, then chunk 1's, ...); the embedding (wte, wpe) where virtual stage 0
// is, the head (lnf, and wte for the tied LM head) where the last one is. With pp > 1 the two copies of
// wte are kept equal by summing their gradients (Megatron-LM's embedding group).
//
// Tensor parallel: Megatron-LM's split (Shoeybi et al. 2019, §3) with sequence parallel (Korthikanti
// et al. 2022), over tp ranks:
//
//   qkvw [L, 3C, C], qkvb [L, 3C]  column parallel: Q's, K's and V's rows each split by heads
//   fcw [L, 4C, C], fcb [L, 4C]    column parallel: the rows split
//   attprojw [L, C, C]             row parallel: the columns (input features) split
//   fcprojw [L, C, 4C]             row parallel
//   wte [Vp, C]                    vocabulary parallel: the rows split, for the embedding and the tied
//                                  LM head alike
//   the rest                       replicated: LayerNorms, the row-parallel layers' biases (added once,
//                                  after the reduce-scatter) and wpe
//
// With sequence parallel each rank runs the LayerNorms and residual adds on its own 1/tp of the token
// rows, so the replicated tensors' gradients are partial sums that the TP group all-reduces; wpe's is
// computed from the all-gathered embedding gradient, whole on every rank. A rank lays its tensors out
// with those partial ones first, then wpe, then the split ones (tp == 1: the one-GPU order exactly), so
// one all-reduce covers the partial gradients and one range the replicated tensors (counted once in
// the gradient norm).
//
//   std::vector<TpTensor> local = tp_parameter_tensors(model, 2, stage_share(layout, model.n_layer, me.pp));
//   for (const TpTensor& t : local)
//     for (const CopyRun& r : tp_copy_runs(t, 2, rank))   // global tensor -> this rank's part
//       std::copy_n(global_t + r.global, r.count, local_t + r.local);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "megascale/trainer/config.h"
#include "megascale/trainer/parallel.h"

namespace megascale::trainer {

enum class TpSplit {
  kReplicated,  // whole on every rank
  kRows,        // each of `parts` equal row blocks split in tp contiguous pieces
  kColumns,     // every row's columns split in tp contiguous pieces
};

struct TpTensor {
  std::string name;
  bool decayed = false;
  TpSplit split = TpSplit::kReplicated;
  bool partial_grad = false;  // replicated, and each rank's gradient covers only its own token rows
  // The one-GPU tensor as [layers, rows, cols] (cols 1 for a vector; layers 1 when not stacked), and
  // for kRows the number of equal row blocks split separately (3 for Q, K, V).
  int64_t layers = 1, rows = 1, cols = 1;
  int parts = 1;
  std::vector<int> layer_ids;  // stacked tensors: the one-GPU layer of each of this rank's layers
  std::vector<int64_t> shape;  // this rank's part, in the one-GPU tensor's rank of dimensions
  int64_t numel() const;       // this rank's part
};

// A pipeline rank's share of the model: its layers (one-GPU indices, in its own order) and whether it
// holds the embedding and the head. The default: everything.
struct StageShare {
  std::vector<int> layers;  // empty: all of them
  bool embedding = true;
  bool head = true;
};
StageShare stage_share(const ParallelLayout& layout, int n_layer, int pp_rank);

// The tensors of a rank, in its layout order (above): the stage's tensors only. tp must divide n_head
// and padded_vocab_size (validate_layout checks both).
std::vector<TpTensor> tp_parameter_tensors(const ModelConfig& model, int tp, const StageShare& stage = {});

// Contiguous copies between a tensor in its one-GPU layout and this rank's part of it (its layers, and
// tensor-parallel rank tp_rank's slice of them): `count`
// elements at `global` in the former are the ones at `local` in the latter (offsets in elements from
// each tensor's start). Ascending in both; their counts sum to t.numel().
struct CopyRun {
  int64_t global = 0;
  int64_t local = 0;
  int64_t count = 0;
  bool operator==(const CopyRun&) const = default;
};
std::vector<CopyRun> tp_copy_runs(const TpTensor& t, int tp, int tp_rank);

}  // namespace megascale::trainer
