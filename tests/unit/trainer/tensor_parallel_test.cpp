// The tensor-parallel split of the GPT's parameters: tp 1 is the one-GPU table exactly; with tp > 1
// every element of a split tensor belongs to exactly one rank, replicated tensors are whole everywhere,
// Q, K and V are each split by heads, and the layout order puts the partial-gradient tensors first.
#include "megascale/trainer/tensor_parallel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

namespace megascale::trainer {
namespace {

ModelConfig small_model() {
  return {.vocab_size = 250, .padded_vocab_size = 256, .max_seq_len = 64, .n_layer = 3, .n_head = 4,
          .d_model = 32};
}

TEST(TensorParallel, OneRankIsTheOneGpuTable) {
  const ModelConfig m = small_model();
  const std::vector<ParameterTensor> one = gpt_parameter_tensors(m);
  const std::vector<TpTensor> tp1 = tp_parameter_tensors(m, 1);
  ASSERT_EQ(tp1.size(), one.size());
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_EQ(tp1[i].name, one[i].name);
    EXPECT_EQ(tp1[i].shape, one[i].shape) << one[i].name;
    EXPECT_EQ(tp1[i].decayed, one[i].decayed) << one[i].name;
    EXPECT_EQ(tp1[i].split, TpSplit::kReplicated);
    EXPECT_FALSE(tp1[i].partial_grad);
    EXPECT_EQ(tp_copy_runs(tp1[i], 1, 0), (std::vector<CopyRun>{{0, 0, one[i].numel()}}));
  }
}

TEST(TensorParallel, SplitTensorsArePartitionedAndReplicatedOnesAreWhole) {
  const ModelConfig m = small_model();
  std::map<std::string, int64_t> global_numel;
  for (const ParameterTensor& t : gpt_parameter_tensors(m)) global_numel[t.name] = t.numel();
  for (int tp : {2, 4}) {
    const std::vector<TpTensor> tensors = tp_parameter_tensors(m, tp);
    ASSERT_EQ(tensors.size(), global_numel.size());
    for (const TpTensor& t : tensors) {
      const int64_t n = global_numel.at(t.name);
      std::vector<int> owners(static_cast<size_t>(n), 0);
      for (int r = 0; r < tp; ++r) {
        const std::vector<CopyRun> runs = tp_copy_runs(t, tp, r);
        int64_t local_next = 0, covered = 0;
        for (const CopyRun& run : runs) {
          EXPECT_EQ(run.local, local_next) << t.name << ": local runs are contiguous and ascending";
          local_next = run.local + run.count;
          covered += run.count;
          ASSERT_LE(run.global + run.count, n) << t.name;
          for (int64_t i = 0; i < run.count; ++i) ++owners[static_cast<size_t>(run.global + i)];
        }
        EXPECT_EQ(covered, t.numel()) << t.name << " rank " << r;
      }
      const int expected = t.split == TpSplit::kReplicated ? tp : 1;
      for (size_t i = 0; i < owners.size(); ++i) {
        ASSERT_EQ(owners[i], expected) << t.name << " element " << i << " at tp " << tp;
      }
      EXPECT_EQ(t.numel() * (t.split == TpSplit::kReplicated ? 1 : tp), n) << t.name;
    }
  }
}

TEST(TensorParallel, EachOfQkvIsSplitByHeads) {
  const ModelConfig m = small_model();  // C = 32, 4 heads of 8
  const auto tensors = tp_parameter_tensors(m, 2);
  const TpTensor& qkvw = *std::find_if(tensors.begin(), tensors.end(), [](auto& t) { return t.name == "qkvw"; });
  EXPECT_EQ(qkvw.shape, (std::vector<int64_t>{3, 48, 32}));
  const std::vector<CopyRun> runs = tp_copy_runs(qkvw, 2, 1);
  ASSERT_EQ(runs.size(), 9u);  // 3 layers x Q, K, V
  // Layer 0: rank 1 holds rows 16..31 of Q, 48..63 of K (K starts at row 32), 80..95 of V.
  EXPECT_EQ(runs[0], (CopyRun{16 * 32, 0, 16 * 32}));
  EXPECT_EQ(runs[1], (CopyRun{48 * 32, 16 * 32, 16 * 32}));
  EXPECT_EQ(runs[2], (CopyRun{80 * 32, 32 * 32, 16 * 32}));
  EXPECT_EQ(runs[3].global, (96 + 16) * 32);  // layer 1 starts at row 96
  EXPECT_EQ(runs[3].local, 48 * 32);
}

TEST(TensorParallel, RowParallelWeightsSplitTheirInputColumns) {
  const ModelConfig m = small_model();
  const auto tensors = tp_parameter_tensors(m, 4);
  const TpTensor& fcproj =
      *std::find_if(tensors.begin(), tensors.end(), [](auto& t) { return t.name == "fcprojw"; });
  EXPECT_EQ(fcproj.shape, (std::vector<int64_t>{3, 32, 32}));  // [L, C, 4C / 4]
  const std::vector<CopyRun> runs = tp_copy_runs(fcproj, 4, 2);
  ASSERT_EQ(runs.size(), 3u * 32u);
  EXPECT_EQ(runs[0], (CopyRun{64, 0, 32}));         // row 0, columns 64..95
  EXPECT_EQ(runs[1], (CopyRun{128 + 64, 32, 32}));  // row 1
  const TpTensor& wte = *std::find_if(tensors.begin(), tensors.end(), [](auto& t) { return t.name == "wte"; });
  EXPECT_EQ(wte.shape, (std::vector<int64_t>{64, 32}));  // the vocabulary's rows 128..191 on rank 2
  EXPECT_EQ(tp_copy_runs(wte, 4, 2), (std::vector<CopyRun>{{128 * 32, 0, 64 * 32}}));
}

TEST(TensorParallel, PartialGradientTensorsComeFirstThenWpeThenSplitOnes) {
  const auto tensors = tp_parameter_tensors(small_model(), 2);
  std::vector<std::string> names;
  for (const TpTensor& t : tensors) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"ln1w", "ln1b", "attprojb", "ln2w", "ln2b", "fcprojb", "lnfw", "lnfb",
                                             "wpe", "wte", "qkvw", "qkvb", "attprojw", "fcw", "fcb", "fcprojw"}));
  for (const TpTensor& t : tensors) {
    EXPECT_EQ(t.partial_grad, t.split == TpSplit::kReplicated && t.name != "wpe") << t.name;
  }
}

}  // namespace
}  // namespace megascale::trainer
