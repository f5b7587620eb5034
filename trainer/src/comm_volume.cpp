#include "megascale/trainer/comm_volume.h"

#include "megascale/trainer/model_shard.h"

namespace megascale::trainer {

CommVolume comm_volume(const ParallelLayout& l, const RunConfig& run) {
  const ModelConfig& m = run.model;
  const TrainConfig& t = run.train;
  const double act = t.dtype == ComputeDtype::kFp32 ? 4.0 : 2.0;  // bytes of an activation element
  const double N = static_cast<double>(t.batch_size / l.dp) * t.seq_len;  // a micro-batch's token rows
  const double C = m.d_model;
  const double mb = t.grad_accum_steps;
  CommVolume v;
  if (l.tp > 1) {
    const double ring = static_cast<double>(l.tp - 1) / l.tp;
    // Per layer and micro-batch: a sequential block all-gathers two LayerNorm outputs and
    // reduce-scatters two projections forward, and the mirror backward (8 exchanges of [N, C]); the
    // parallel block shares one reduce-scatter forward and one all-gather backward (6).
    const double per_layer = (m.parallel_block ? 6.0 : 8.0) * N * C * act;
    const double layers = static_cast<double>(m.n_layer) / l.pp;
    double bytes = layers * per_layer * mb;
    // The embedding's reduce-scatter and its gradient's all-gather (first stage), the final LayerNorm's
    // all-gather and its gradient's reduce-scatter (last stage), and the loss's row statistics (fp32 max,
    // then sum of exp and target logit): the busiest stage is the one-stage case's upper bound.
    const double ends = (l.pp == 1 ? 4.0 : 2.0) * N * C * act + 2.0 * 3.0 * N * 4.0;
    bytes += ends * mb;
    bytes *= ring;
    // The replicated tensors' partial gradients (LayerNorms and row-parallel biases, fp32), once a step.
    double partial = 0;
    for (const TpTensor& x : tp_parameter_tensors(m, l.tp, stage_share(l, m.n_layer, 0))) {
      if (x.partial_grad) partial += static_cast<double>(x.numel());
    }
    bytes += 2.0 * ring * partial * 4.0;
    v.tp_bytes = bytes;
  }
  if (l.dp > 1) {
    // The rank's tensors (its stage's, its TP slices): the fp32 gradients reduce-scattered, then the
    // parameters all-gathered in the compute type.
    double floats = 0;
    for (const TpTensor& x : tp_parameter_tensors(m, l.tp, stage_share(l, m.n_layer, 0))) {
      floats += static_cast<double>(x.numel());
    }
    v.dp_bytes = static_cast<double>(l.dp - 1) / l.dp * floats * (4.0 + act);
  }
  if (l.pp > 1) {
    // A chunk sends its output forward unless it is the last virtual stage and its input's gradient back
    // unless it is the first; the busiest stage counts.
    const int last = l.pp * l.vpp - 1;
    int sends = 0;
    for (int s = 0; s < l.pp; ++s) {
      int mine = 0;
      for (int c = 0; c < l.vpp; ++c) {
        const int vs = c * l.pp + s;
        mine += (vs != last ? 1 : 0) + (vs != 0 ? 1 : 0);
      }
      sends = mine > sends ? mine : sends;
    }
    v.pp_bytes = sends * mb * (N / l.tp) * C * act;
  }
  return v;
}

}  // namespace megascale::trainer
