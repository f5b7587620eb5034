// The bytes a rank sends per step by group: each term checked against its count by hand on a small model.
#include "megascale/trainer/comm_volume.h"

#include <gtest/gtest.h>

#include "megascale/trainer/model_shard.h"

namespace megascale::trainer {
namespace {

RunConfig small_run() {
  RunConfig r;
  r.model = {.vocab_size = 250,
             .padded_vocab_size = 256,
             .max_seq_len = 64,
             .n_layer = 4,
             .n_head = 4,
             .d_model = 32};
  r.train.batch_size = 8;
  r.train.seq_len = 64;
  r.train.grad_accum_steps = 4;
  r.train.dtype = ComputeDtype::kBf16;
  return r;
}

TEST(CommVolume, OneRankSendsNothing) {
  const CommVolume v = comm_volume(ParallelLayout{}, small_run());
  EXPECT_EQ(v.total(), 0.0);
}

TEST(CommVolume, DataParallelReduceScattersFp32AndGathersTheComputeType) {
  RunConfig r = small_run();
  const CommVolume v = comm_volume(ParallelLayout{.dp = 4}, r);
  const double floats = static_cast<double>(r.model.num_parameters());
  EXPECT_DOUBLE_EQ(v.dp_bytes, 3.0 / 4.0 * floats * (4.0 + 2.0));  // fp32 gradients, bf16 parameters
  r.train.dtype = ComputeDtype::kFp32;
  EXPECT_DOUBLE_EQ(comm_volume(ParallelLayout{.dp = 4}, r).dp_bytes, 3.0 / 4.0 * floats * (4.0 + 4.0));
  EXPECT_EQ(v.tp_bytes, 0.0);
  EXPECT_EQ(v.pp_bytes, 0.0);
}

TEST(CommVolume, TensorParallelCountsEightRowExchangesPerLayerAndTheEnds) {
  RunConfig r = small_run();
  const double N = 8 * 64, C = 32, b = 2, m = 4, ring = 0.5;
  double partial = 0;
  for (const TpTensor& t : tp_parameter_tensors(r.model, 2)) {
    if (t.partial_grad) partial += static_cast<double>(t.numel());
  }
  const double expected =
      ring * (4 * 8 * N * C * b * m + (4 * N * C * b + 2 * 3 * N * 4) * m) + 2 * ring * partial * 4;
  EXPECT_DOUBLE_EQ(comm_volume(ParallelLayout{.tp = 2}, r).tp_bytes, expected);
  r.model.parallel_block = true;  // one reduce-scatter forward and one all-gather backward fewer
  EXPECT_DOUBLE_EQ(comm_volume(ParallelLayout{.tp = 2}, r).tp_bytes, expected - ring * 4 * 2 * N * C * b * m);
}

TEST(CommVolume, PipelineCountsTheBusiestStagesSends) {
  const RunConfig r = small_run();
  const double act = 8 * 64 * 32 * 2.0;  // one micro-batch's [N, C] in bf16
  // pp 2: stage 0 sends activations, stage 1 gradients: one send per micro-batch each.
  EXPECT_DOUBLE_EQ(comm_volume(ParallelLayout{.pp = 2}, r).pp_bytes, 4 * act);
  // pp 4: a middle stage sends both.
  EXPECT_DOUBLE_EQ(comm_volume(ParallelLayout{.pp = 4}, r).pp_bytes, 2 * 4 * act);
  // pp 2, vpp 2: rank 0 holds virtual stages 0 and 2 (1 + 2 sends), rank 1 stages 1 and 3 (2 + 1).
  EXPECT_DOUBLE_EQ(comm_volume(ParallelLayout{.pp = 2, .vpp = 2}, r).pp_bytes, 3 * 4 * act);
  // With tp 2 each rank sends its half of the rows.
  EXPECT_DOUBLE_EQ(comm_volume(ParallelLayout{.tp = 2, .pp = 2}, r).pp_bytes, 4 * act / 2);
}

}  // namespace
}  // namespace megascale::trainer
