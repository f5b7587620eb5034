// The bytes one rank sends per optimizer step in each parallel group, from the layout and the run alone:
// what the model's collectives and pipeline sends move (trainer/README.md, "Several ranks"), counted as
// NCCL's ring algorithms send them: an all-gather or reduce-scatter whose whole buffer is S bytes sends
// (n - 1) / n * S from each of n ranks, an all-reduce twice that; a pipeline send, its bytes. Divided by
// a net's measured bandwidth, it is the time that communication would take alone: what the exposed
// communication of a timeline (train-timeline-summary.py) is checked against. The one-float
// all-reduces (the loss, the gradient norm) and LAMB's per-tensor norms are left out.
//
//   CommVolume v = comm_volume(layout, run);
//   v.tp_bytes / 1e9 / bandwidth_gbytes_per_s   // seconds of TP communication per step, per rank
#pragma once

#include <cstdint>

#include "megascale/trainer/config.h"
#include "megascale/trainer/parallel.h"

namespace megascale::trainer {

struct CommVolume {
  double tp_bytes = 0;  // sequence-parallel all-gathers and reduce-scatters, the loss's and the
                        // replicated gradients' all-reduces
  double dp_bytes = 0;  // ZeRO's gradient reduce-scatter and master all-gather (fp32; the first stage's)
  double pp_bytes = 0;  // activations to the next stage and gradients to the previous (the busiest stage)
  double total() const { return tp_bytes + dp_bytes + pp_bytes; }
};

// For a rank of `layout` training `run` (run.train.batch_size is the global batch: each DP rank takes
// batch_size / dp sequences of every micro-batch; grad_accum_steps micro-batches a step). Assumes the
// layout is valid (validate_layout).
CommVolume comm_volume(const ParallelLayout& layout, const RunConfig& run);

}  // namespace megascale::trainer
