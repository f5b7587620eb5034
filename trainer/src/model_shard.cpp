#include "megascale/trainer/model_shard.h"

#include <algorithm>
#include <string_view>

namespace megascale::trainer {

int64_t TpTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

StageShare stage_share(const ParallelLayout& layout, int n_layer, int pp_rank) {
  StageShare s;
  for (int chunk = 0; chunk < layout.vpp; ++chunk) {
    const LayerRange r = layers_of(layout, n_layer, pp_rank, chunk);
    for (int l = r.begin; l < r.end; ++l) s.layers.push_back(l);
  }
  s.embedding = pp_rank == 0;            // virtual stage 0 is rank 0's chunk 0
  s.head = pp_rank == layout.pp - 1;     // the last is rank pp - 1's last chunk
  return s;
}

std::vector<TpTensor> tp_parameter_tensors(const ModelConfig& m, int tp, const StageShare& stage) {
  std::vector<int> layers = stage.layers;
  if (layers.empty()) {
    for (int l = 0; l < m.n_layer; ++l) layers.push_back(l);
  }
  const int64_t C = m.d_model, Vp = m.padded_vocab_size, maxT = m.max_seq_len;
  const int64_t L = m.n_layer;  // the one-GPU stack
  // The one-GPU table (config.h: gpt_parameter_tensors) with each tensor's split.
  struct Spec {
    const char* name;
    bool decayed;
    TpSplit split;
    int64_t layers, rows, cols;
    int parts;
  };
  const Spec specs[] = {
      {"wte", true, TpSplit::kRows, 1, Vp, C, 1},
      {"wpe", true, TpSplit::kReplicated, 1, maxT, C, 1},
      {"ln1w", false, TpSplit::kReplicated, L, C, 1, 1},
      {"ln1b", false, TpSplit::kReplicated, L, C, 1, 1},
      {"qkvw", true, TpSplit::kRows, L, 3 * C, C, 3},
      {"qkvb", false, TpSplit::kRows, L, 3 * C, 1, 3},
      {"attprojw", true, TpSplit::kColumns, L, C, C, 1},
      {"attprojb", false, TpSplit::kReplicated, L, C, 1, 1},
      {"ln2w", false, TpSplit::kReplicated, L, C, 1, 1},
      {"ln2b", false, TpSplit::kReplicated, L, C, 1, 1},
      {"fcw", true, TpSplit::kRows, L, 4 * C, C, 1},
      {"fcb", false, TpSplit::kRows, L, 4 * C, 1, 1},
      {"fcprojw", true, TpSplit::kColumns, L, C, 4 * C, 1},
      {"fcprojb", false, TpSplit::kReplicated, L, C, 1, 1},
      {"lnfw", false, TpSplit::kReplicated, 1, C, 1, 1},
      {"lnfb", false, TpSplit::kReplicated, 1, C, 1, 1},
  };
  std::vector<TpTensor> out;
  for (const Spec& s : specs) {
    const std::string_view name = s.name;
    if ((name == "wte" && !stage.embedding && !stage.head) || (name == "wpe" && !stage.embedding) ||
        ((name == "lnfw" || name == "lnfb") && !stage.head)) {
      continue;
    }
    TpTensor t;
    t.name = s.name;
    t.decayed = s.decayed;
    t.split = tp > 1 ? s.split : TpSplit::kReplicated;
    t.partial_grad = tp > 1 && t.split == TpSplit::kReplicated && t.name != "wpe";
    t.layers = s.layers;
    t.rows = s.rows;
    t.cols = s.cols;
    t.parts = s.parts;
    const int64_t rows = t.split == TpSplit::kRows ? s.rows / tp : s.rows;
    const int64_t cols = t.split == TpSplit::kColumns ? s.cols / tp : s.cols;
    // The one-GPU shapes: per-layer tensors are stacked ([L, ...]); wte, wpe, lnfw and lnfb are not.
    const bool stacked = name != "wte" && name != "wpe" && name != "lnfw" && name != "lnfb";
    if (stacked) {
      t.layer_ids = layers;
      t.shape.push_back(static_cast<int64_t>(layers.size()));
    }
    t.shape.push_back(rows);
    if (s.cols > 1) t.shape.push_back(cols);
    out.push_back(std::move(t));
  }
  if (tp > 1) {
    // Partial-gradient tensors first, then wpe, then the split ones (each group in one-GPU order).
    auto rank_of = [](const TpTensor& t) { return t.partial_grad ? 0 : t.split == TpSplit::kReplicated ? 1 : 2; };
    std::stable_sort(out.begin(), out.end(),
                     [&](const TpTensor& a, const TpTensor& b) { return rank_of(a) < rank_of(b); });
  }
  return out;
}

std::vector<CopyRun> tp_copy_runs(const TpTensor& t, int tp, int tp_rank) {
  std::vector<CopyRun> runs;
  // Local layer l is one-GPU layer g; the local part of a layer is 1/tp of it unless replicated.
  const int64_t local_layers = t.layer_ids.empty() ? t.layers : static_cast<int64_t>(t.layer_ids.size());
  for (int64_t l = 0; l < local_layers; ++l) {
    const int64_t g = t.layer_ids.empty() ? l : t.layer_ids[static_cast<size_t>(l)];
    switch (t.split) {
      case TpSplit::kReplicated:
        runs.push_back({g * t.rows * t.cols, l * t.rows * t.cols, t.rows * t.cols});
        break;
      case TpSplit::kRows: {
        const int64_t part_rows = t.rows / t.parts, local_part_rows = part_rows / tp;
        for (int p = 0; p < t.parts; ++p) {
          runs.push_back({(g * t.rows + p * part_rows + tp_rank * local_part_rows) * t.cols,
                          (l * (t.rows / tp) + p * local_part_rows) * t.cols, local_part_rows * t.cols});
        }
        break;
      }
      case TpSplit::kColumns: {
        const int64_t local_cols = t.cols / tp;
        for (int64_t r = 0; r < t.rows; ++r) {
          runs.push_back({(g * t.rows + r) * t.cols + tp_rank * local_cols, (l * t.rows + r) * local_cols,
                          local_cols});
        }
        break;
      }
    }
  }
  // Adjacent runs that continue each other in both layouts are one.
  std::vector<CopyRun> merged;
  for (const CopyRun& r : runs) {
    if (!merged.empty() && merged.back().global + merged.back().count == r.global &&
        merged.back().local + merged.back().count == r.local) {
      merged.back().count += r.count;
    } else {
      merged.push_back(r);
    }
  }
  return merged;
}

}  // namespace megascale::trainer
