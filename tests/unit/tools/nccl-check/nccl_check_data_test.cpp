// nccl_check's shapes and expected results (tools/nccl-check/nccl_check_data.h), on the CPU: the counts
// NCCL is given for a printed size, odd by default and nccl-tests' with --exact-sizes, and the expected
// outputs against collectives computed here from the ranks' inputs.
#include "nccl_check_data.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace megascale::gpucheck {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(NcclCheckShape, OddCountsByDefault) {
  const Shape s = shape_for(Op::kAllReduce, DataType::kFloat32, 256 * kMiB, 2);
  EXPECT_EQ(s.count, 67108865u);
  EXPECT_EQ(s.printed_bytes, 268435460u);
  const Shape g = shape_for(Op::kAllGather, DataType::kFloat32, 64 * kMiB, 2);
  EXPECT_EQ(g.count, 8388609u);
  EXPECT_EQ(g.recv_elems, 2 * 8388609u);
}

// --exact-sizes: a 256 MiB row is 268435456 B, as in nccl-tests, for every collective and type.
TEST(NcclCheckShape, ExactSizesAsNcclTests) {
  for (const DataType t : {DataType::kFloat32, DataType::kBf16}) {
    for (const Op op :
         {Op::kAllReduce, Op::kAllGather, Op::kReduceScatter, Op::kAlltoAll, Op::kBroadcast, Op::kSendRecv}) {
      for (const int n : {2, 4}) {
        const Shape s = shape_for(op, t, 256 * kMiB, n, /*odd_counts=*/false);
        EXPECT_EQ(s.printed_bytes, 256 * kMiB) << to_string(op) << " " << to_string(t) << " n=" << n;
      }
    }
  }
  const Shape r = shape_for(Op::kReduceScatter, DataType::kBf16, 64 * kMiB, 4, false);
  EXPECT_EQ(r.count, 64 * kMiB / 2 / 4);  // per rank, as NCCL's recvcount
  EXPECT_EQ(r.send_elems, 64 * kMiB / 2);
  EXPECT_EQ(shape_for(Op::kAllReduce, DataType::kFloat32, 0, 2, false).count, 0u);
}

float as_float(const std::vector<uint8_t>& raw, size_t i) {
  float f = 0;
  std::memcpy(&f, raw.data() + i * 4, 4);
  return f;
}

// All-reduce and all-gather computed here from every rank's input: count_wrong finds nothing wrong in
// them, with odd and with exact counts, and finds the one element changed.
TEST(NcclCheckExpected, MatchesCollectivesComputedFromTheInputs) {
  const int n = 3;
  for (const bool odd : {true, false}) {
    const Shape ar = shape_for(Op::kAllReduce, DataType::kFloat32, 4096, n, odd);
    const Shape ag = shape_for(Op::kAllGather, DataType::kFloat32, 4096, n, odd);
    std::vector<float> sum(ar.recv_elems, 0.0f);
    std::vector<float> gathered;
    for (int q = 0; q < n; ++q) {
      const std::vector<uint8_t> in = make_input(ar, DataType::kFloat32, q);
      for (size_t i = 0; i < ar.recv_elems; ++i) sum[i] += as_float(in, i);
      const std::vector<uint8_t> in_ag = make_input(ag, DataType::kFloat32, q);
      for (size_t i = 0; i < ag.send_elems; ++i) gathered.push_back(as_float(in_ag, i));
    }
    ASSERT_EQ(gathered.size(), ag.recv_elems);
    for (int rank = 0; rank < n; ++rank) {
      EXPECT_EQ(count_wrong(Op::kAllReduce, ar, DataType::kFloat32, rank, n,
                            reinterpret_cast<const uint8_t*>(sum.data())),
                0u);
      EXPECT_EQ(count_wrong(Op::kAllGather, ag, DataType::kFloat32, rank, n,
                            reinterpret_cast<const uint8_t*>(gathered.data())),
                0u);
    }
    sum[ar.recv_elems / 2] += 1.0f;
    EXPECT_EQ(count_wrong(Op::kAllReduce, ar, DataType::kFloat32, 0, n,
                          reinterpret_cast<const uint8_t*>(sum.data())),
              1u);
  }
}

}  // namespace
}  // namespace megascale::gpucheck
