// How a rank of tp x pp holds the GPT's parameters: tp 1 is the one-GPU table exactly; with tp > 1
// every element of a split tensor belongs to exactly one rank, replicated tensors are whole everywhere,
// Q, K and V are each split by heads, and the layout order puts the partial-gradient tensors first; a
// pipeline stage holds its virtual stages' layers, the embedding on the first and the head on the last,
// and the stages together hold every layer once.
#include "megascale/trainer/model_shard.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

namespace megascale::trainer {
namespace {

ModelConfig small_model() {
  return {.vocab_size = 250, .padded_vocab_size = 256, .max_seq_len = 64, .n_layer = 3, .n_head = 4,
          .d_model = 32};
}

TEST(ModelShard, OneRankIsTheOneGpuTable) {
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

TEST(ModelShard, SplitTensorsArePartitionedAndReplicatedOnesAreWhole) {
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

TEST(ModelShard, EachOfQkvIsSplitByHeads) {
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

TEST(ModelShard, RowParallelWeightsSplitTheirInputColumns) {
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

TEST(ModelShard, PartialGradientTensorsComeFirstThenWpeThenSplitOnes) {
  const auto tensors = tp_parameter_tensors(small_model(), 2);
  std::vector<std::string> names;
  for (const TpTensor& t : tensors) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"ln1w", "ln1b", "attprojb", "ln2w", "ln2b", "fcprojb", "lnfw", "lnfb",
                                             "wpe", "wte", "qkvw", "qkvb", "attprojw", "fcw", "fcb", "fcprojw"}));
  for (const TpTensor& t : tensors) {
    EXPECT_EQ(t.partial_grad, t.split == TpSplit::kReplicated && t.name != "wpe") << t.name;
  }
}

TEST(ModelShard, PipelineStagesHoldTheirChunksLayersAndTheEndsTheirTensors) {
  ModelConfig m = small_model();
  m.n_layer = 8;
  const ParallelLayout layout{.tp = 1, .pp = 2, .dp = 1, .vpp = 2};
  const StageShare first = stage_share(layout, m.n_layer, 0);
  const StageShare last = stage_share(layout, m.n_layer, 1);
  EXPECT_EQ(first.layers, (std::vector<int>{0, 1, 4, 5}));  // virtual stages 0 and 2
  EXPECT_EQ(last.layers, (std::vector<int>{2, 3, 6, 7}));   // virtual stages 1 and 3
  EXPECT_TRUE(first.embedding && !first.head);
  EXPECT_TRUE(!last.embedding && last.head);
  auto names = [&](const StageShare& s) {
    std::vector<std::string> n;
    for (const TpTensor& t : tp_parameter_tensors(m, 1, s)) n.push_back(t.name);
    return n;
  };
  EXPECT_EQ(names(first), (std::vector<std::string>{"wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw",
                                                    "attprojb", "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb"}));
  EXPECT_EQ(names(last), (std::vector<std::string>{"wte", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
                                                   "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw",
                                                   "lnfb"}));
  // Every layer of every stacked tensor is held by exactly one stage, at tp 2 too.
  for (int tp : {1, 2}) {
    std::map<std::string, std::vector<int>> owners;
    for (const ParameterTensor& t : gpt_parameter_tensors(m)) owners[t.name].assign(static_cast<size_t>(t.numel()), 0);
    for (int stage = 0; stage < 2; ++stage) {
      for (const TpTensor& t : tp_parameter_tensors(m, tp, stage_share(layout, m.n_layer, stage))) {
        if (t.layer_ids.empty()) continue;  // wte, wpe, lnf: not stacked
        EXPECT_EQ(t.shape[0], 4) << t.name;
        for (int r = 0; r < tp; ++r) {
          for (const CopyRun& run : tp_copy_runs(t, tp, r)) {
            for (int64_t i = 0; i < run.count; ++i) ++owners[t.name][static_cast<size_t>(run.global + i)];
          }
        }
      }
    }
    for (const auto& [name, count] : owners) {
      if (name == "wte" || name == "wpe" || name == "lnfw" || name == "lnfb") continue;
      const int expected = 1;
      for (size_t i = 0; i < count.size(); ++i) {
        const bool replicated = tp > 1 && (name.find("ln") == 0 || name == "attprojb" || name == "fcprojb");
        ASSERT_EQ(count[i], replicated ? tp * expected : expected) << name << " element " << i << " tp " << tp;
      }
    }
  }
  // Stage 1's local layer 2 is one-GPU layer 6: its ln1w run starts at 6 * C.
  const auto last_tensors = tp_parameter_tensors(m, 1, last);
  const TpTensor& ln1w = *std::find_if(last_tensors.begin(), last_tensors.end(), [](auto& t) { return t.name == "ln1w"; });
  const std::vector<CopyRun> runs = tp_copy_runs(ln1w, 1, 0);
  ASSERT_EQ(runs.size(), 2u);  // layers 2-3 and 6-7, each pair contiguous in both layouts
  EXPECT_EQ(runs[0], (CopyRun{2 * 32, 0, 2 * 32}));
  EXPECT_EQ(runs[1], (CopyRun{6 * 32, 2 * 32, 2 * 32}));
}

}  // namespace
}  // namespace megascale::trainer
