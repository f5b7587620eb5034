// The 3D layout of a training job's ranks: tensor parallel (tp, with sequence parallel), pipeline
// parallel (pp stages, each holding vpp virtual stages: interleaved 1F1B) and data parallel (dp), in
// MegaScale's order: TP innermost (a TP group's ranks are adjacent, so on one host and NVLink), then DP,
// then PP outermost (NSDI '24 §3.2 builds DP groups before PP groups, keeping DP traffic in a minipod):
//
//   rank = tp_rank + tp * (dp_rank + dp * pp_rank)
//
//   ParallelLayout layout{.tp = 2, .pp = 2, .dp = 2};
//   if (Status s = validate_layout(layout, run); !s) { ... }   // every violation, one per line
//   RankCoords me = coords_of(layout, rank);                    // {tp 1, dp 0, pp 1} for rank 5
//   std::vector<int> dp_peers = group_members(layout, Group::kData, rank);   // {5, 7}
//   SplitKey k = split_key(layout, Group::kData, rank);         // ncclCommSplit(world, k.color, k.key)
//   LayerRange layers = layers_of(layout, run.model.n_layer, me.pp, /*chunk=*/0);
#pragma once

#include <string>
#include <vector>

#include "megascale/common/result.h"
#include "megascale/trainer/config.h"

namespace megascale::trainer {

struct ParallelLayout {
  int tp = 1;   // tensor-parallel ranks (heads, MLP width and vocabulary split; sequence parallel)
  int pp = 1;   // pipeline stages
  int dp = 1;   // data-parallel replicas (each takes batch_size / dp sequences of every micro-batch)
  int vpp = 1;  // virtual stages (model chunks) per pipeline rank; > 1 = interleaved 1F1B

  int world_size() const { return tp * pp * dp; }
  bool operator==(const ParallelLayout&) const = default;
};

// A rank's position along each axis.
struct RankCoords {
  int tp = 0;
  int dp = 0;
  int pp = 0;
  bool operator==(const RankCoords&) const = default;
};

RankCoords coords_of(const ParallelLayout& layout, int rank);
int rank_of(const ParallelLayout& layout, const RankCoords& coords);

enum class Group { kTensor, kData, kPipeline };
std::string_view to_string(Group group);  // "tp", "dp", "pp"

// The world ranks of `rank`'s group of that kind, in group order: a member's index is its rank inside
// the group (its coordinate on that axis).
std::vector<int> group_members(const ParallelLayout& layout, Group group, int rank);

// ncclCommSplit's arguments that build `rank`'s group of that kind from the world communicator: color
// numbers the groups of that kind (ranks with equal color share a group), key orders the members.
struct SplitKey {
  int color = 0;
  int key = 0;
};
SplitKey split_key(const ParallelLayout& layout, Group group, int rank);

// The layers of one virtual stage: pipeline rank `pp_rank`'s chunk `chunk` is virtual stage
// chunk * pp + pp_rank, and the n_layer layers are split evenly over the pp * vpp virtual stages in
// order. The embedding sits before virtual stage 0, the final LayerNorm and the LM head after the last.
struct LayerRange {
  int begin = 0;  // first layer
  int end = 0;    // one past the last
  bool operator==(const LayerRange&) const = default;
};
LayerRange layers_of(const ParallelLayout& layout, int n_layer, int pp_rank, int chunk);

// Checks the layout on its own and against the run: sizes >= 1; tp divides n_head (heads split, so
// d_model and 4 * d_model too), padded_vocab_size (the vocabulary-parallel embedding and loss) and
// seq_len (sequence parallel); pp * vpp divides n_layer; vpp > 1 needs pp > 1 and grad_accum_steps (the
// micro-batches) a multiple of pp, as Megatron-Core's interleaved schedule does; dp divides batch_size.
// Every violation is listed, one per line, naming the values.
Status validate_layout(const ParallelLayout& layout, const RunConfig& run);

// "tp 2 x pp 2 x dp 2 = 8 ranks" (with " (vpp 2)" after pp when interleaved).
std::string describe(const ParallelLayout& layout);

}  // namespace megascale::trainer
