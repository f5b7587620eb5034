#include "megascale/trainer/tensor_parallel.h"

#include <algorithm>
#include <string_view>

namespace megascale::trainer {

int64_t TpTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<TpTensor> tp_parameter_tensors(const ModelConfig& m, int tp) {
  const int64_t L = m.n_layer, C = m.d_model, Vp = m.padded_vocab_size, maxT = m.max_seq_len;
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
    const std::string_view name = s.name;
    const bool stacked = name != "wte" && name != "wpe" && name != "lnfw" && name != "lnfb";
    if (stacked) t.shape.push_back(s.layers);
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
  switch (t.split) {
    case TpSplit::kReplicated:
      runs.push_back({0, 0, t.layers * t.rows * t.cols});
      break;
    case TpSplit::kRows: {
      const int64_t part_rows = t.rows / t.parts, local_part_rows = part_rows / tp;
      for (int64_t l = 0; l < t.layers; ++l) {
        for (int p = 0; p < t.parts; ++p) {
          runs.push_back({(l * t.rows + p * part_rows + tp_rank * local_part_rows) * t.cols,
                          (l * (t.rows / tp) + p * local_part_rows) * t.cols, local_part_rows * t.cols});
        }
      }
      break;
    }
    case TpSplit::kColumns: {
      const int64_t local_cols = t.cols / tp;
      for (int64_t l = 0; l < t.layers; ++l) {
        for (int64_t r = 0; r < t.rows; ++r) {
          runs.push_back({(l * t.rows + r) * t.cols + tp_rank * local_cols, (l * t.rows + r) * local_cols,
                          local_cols});
        }
      }
      break;
    }
  }
  return runs;
}

}  // namespace megascale::trainer
