// nccl-tests' arithmetic: each collective's counts for a sweep size, algbw and busbw by the documented
// formulas (nccl-tests doc/PERFORMANCE.md), sizes with K/M/G, the sweep by step and by factor, and the
// names parsed and refused.
#include "megascale/coll/coll.h"

#include <gtest/gtest.h>

namespace megascale::coll {
namespace {

TEST(CollShape, EachCollectiveSharesTheSweepSizeAsNcclTestsDoes) {
  // 1 MiB of float over 8 ranks: 262144 elements, 32768 a rank's part.
  const Shape ar = shape_of(Collective::kAllReduce, 1 << 20, 4, 8);
  EXPECT_EQ(ar.param_count, 262144u);
  EXPECT_EQ(ar.bytes(4), 1u << 20);
  const Shape ag = shape_of(Collective::kAllGather, 1 << 20, 4, 8);
  EXPECT_EQ(ag.send_count, 32768u);
  EXPECT_EQ(ag.recv_count, 262144u);
  EXPECT_EQ(ag.param_count, 32768u);
  EXPECT_EQ(ag.bytes(4), 1u << 20) << "the size column: the larger buffer";
  EXPECT_EQ(ag.send_inplace_stride, 32768u);
  const Shape rs = shape_of(Collective::kReduceScatter, 1 << 20, 4, 8);
  EXPECT_EQ(rs.send_count, 262144u);
  EXPECT_EQ(rs.recv_count, 32768u);
  EXPECT_EQ(rs.param_count, 32768u);
  EXPECT_EQ(rs.recv_inplace_stride, 32768u);
  const Shape a2a = shape_of(Collective::kAlltoAll, 1 << 20, 4, 8);
  EXPECT_EQ(a2a.send_count, 262144u);
  EXPECT_EQ(a2a.param_count, 32768u);
  // A size that does not divide: 100 B of float over 3 ranks is 25 elements, 8 a part, 24 gathered.
  const Shape odd = shape_of(Collective::kAllGather, 100, 4, 3);
  EXPECT_EQ(odd.param_count, 8u);
  EXPECT_EQ(odd.bytes(4), 96u);
  // A part is whole 16-byte units (nccl-tests 2.19): 8 B of float over 2 ranks is an empty row, 32 B
  // over 8 ranks too; 128 B of int8 over 3 ranks is 32 a part, not 42; doubles go in pairs.
  EXPECT_EQ(shape_of(Collective::kAllGather, 8, 4, 2).param_count, 0u);
  EXPECT_EQ(shape_of(Collective::kAllGather, 8, 4, 2).bytes(4), 0u);
  EXPECT_EQ(shape_of(Collective::kReduceScatter, 32, 4, 8).param_count, 0u);
  EXPECT_EQ(shape_of(Collective::kAlltoAll, 128, 1, 3).param_count, 32u);
  EXPECT_EQ(shape_of(Collective::kAllGather, 40, 8, 2).param_count, 2u);
  EXPECT_EQ(shape_of(Collective::kAllReduce, 8, 4, 2).param_count, 2u) << "whole-buffer collectives keep it";
  for (Collective c : {Collective::kBroadcast, Collective::kReduce, Collective::kSendRecv}) {
    EXPECT_EQ(shape_of(c, 4096, 2, 4).param_count, 2048u) << name(c);
  }
}

TEST(CollBandwidth, TheFormulasOfNcclTestsPerformanceMd) {
  // 1 GB moved in 1 s is 1 GB/s of algbw for all_reduce; the bus factor is 2 (n - 1) / n.
  const Bandwidth ar = bandwidth(Collective::kAllReduce, 250'000'000, 4, 1.0, 8);
  EXPECT_DOUBLE_EQ(ar.alg_gbs, 1.0);
  EXPECT_DOUBLE_EQ(ar.bus_gbs, 2.0 * 7 / 8);
  // all_gather and reduce_scatter count the whole array: param_count x n x t.
  for (Collective c : {Collective::kAllGather, Collective::kReduceScatter, Collective::kAlltoAll}) {
    const Bandwidth bw = bandwidth(c, 1'000'000, 4, 1e-3, 4);
    EXPECT_DOUBLE_EQ(bw.alg_gbs, 16.0) << name(c);
    EXPECT_DOUBLE_EQ(bw.bus_gbs, 12.0) << name(c);
  }
  for (Collective c : {Collective::kBroadcast, Collective::kReduce, Collective::kSendRecv}) {
    const Bandwidth bw = bandwidth(c, 1'000'000, 8, 2e-3, 16);
    EXPECT_DOUBLE_EQ(bw.alg_gbs, 4.0) << name(c);
    EXPECT_DOUBLE_EQ(bw.bus_gbs, 4.0) << name(c);
  }
  EXPECT_DOUBLE_EQ(bandwidth(Collective::kAllReduce, 1, 4, 1.0, 1).bus_gbs, 0.0) << "one rank moves nothing";
  EXPECT_DOUBLE_EQ(bandwidth(Collective::kAllReduce, 100, 4, 0.0, 2).alg_gbs, 0.0) << "no time, no rate";
}

TEST(CollSizes, SuffixesAndSweeps) {
  EXPECT_EQ(*parse_size("32M"), 32u << 20);
  EXPECT_EQ(*parse_size("8"), 8u);
  EXPECT_EQ(*parse_size("1G"), 1u << 30);
  EXPECT_EQ(*parse_size("1.5k"), 1536u);
  for (const char* bad : {"", "M", "12Q", "-4", "1.3", "4 M"}) {
    auto s = parse_size(bad);
    ASSERT_FALSE(s) << bad;
    EXPECT_NE(s.error().message.find(std::string("'") + bad + "'"), std::string::npos) << s.error().message;
  }
  EXPECT_EQ(*size_sweep(8, 128, 0, 2), (std::vector<uint64_t>{8, 16, 32, 64, 128}));
  EXPECT_EQ(*size_sweep(8, 100, 0, 2), (std::vector<uint64_t>{8, 16, 32, 64}));
  EXPECT_EQ(*size_sweep(0, 30, 10, 1), (std::vector<uint64_t>{0, 10, 20, 30}));
  EXPECT_EQ(*size_sweep(32, 32, 0, 1), (std::vector<uint64_t>{32}));
  EXPECT_FALSE(size_sweep(64, 8, 1, 1));
  EXPECT_FALSE(size_sweep(0, 64, 0, 2));
  EXPECT_FALSE(size_sweep(8, 64, 0, 1));
}

TEST(CollNames, ParsedInTheirSpellingsAndRefusedOtherwise) {
  for (Collective c : kAllCollectives) EXPECT_EQ(parse_collective(name(c)), c);
  EXPECT_EQ(parse_collective("allreduce"), Collective::kAllReduce);
  EXPECT_EQ(parse_collective("All-Gather"), Collective::kAllGather);
  EXPECT_FALSE(parse_collective("gather"));
  EXPECT_EQ(parse_type("bfloat16"), DataType::kBfloat16);
  EXPECT_EQ(parse_type("float32"), DataType::kFloat);
  EXPECT_EQ(type_size(DataType::kHalf), 2u);
  EXPECT_EQ(type_size(DataType::kUint64), 8u);
  EXPECT_FALSE(parse_type("float8"));
  EXPECT_EQ(parse_op("avg"), RedOp::kAvg);
  EXPECT_FALSE(parse_op("mulsum"));
  EXPECT_TRUE(has_op(Collective::kReduceScatter));
  EXPECT_FALSE(has_op(Collective::kAllGather));
  EXPECT_TRUE(has_root(Collective::kBroadcast));
  EXPECT_FALSE(has_root(Collective::kSendRecv));
}

}  // namespace
}  // namespace megascale::coll
