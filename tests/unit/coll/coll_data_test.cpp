// The data check's host side: half and bfloat16 conversions (exact on small integers, round to nearest
// even), each collective's expected receive buffer against hand-computed elements, integer wrap-around
// like NCCL's, and wrong elements counted (exactly, or within a tolerance for floating averages).
#include <gtest/gtest.h>

#include <cstring>

#include "megascale/coll/data.h"

namespace megascale::coll {
namespace {

template <class V>
V at(const std::vector<unsigned char>& b, uint64_t i) {
  V v;
  std::memcpy(&v, b.data() + i * sizeof(V), sizeof(V));
  return v;
}

TEST(CollData, HalfAndBfloat16Conversions) {
  for (float f : {0.0f, 1.0f, 7.0f, 56.0f, 2048.0f, -3.0f, 0.5f}) {
    EXPECT_EQ(half_to_float(float_to_half(f)), f) << f;
    EXPECT_EQ(bfloat16_to_float(float_to_bfloat16(f)), f) << f;
  }
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_bfloat16(1.0f), 0x3f80);
  EXPECT_EQ(half_to_float(float_to_half(2049.0f)), 2048.0f) << "a tie rounds to even";
  EXPECT_EQ(bfloat16_to_float(float_to_bfloat16(257.0f)), 256.0f) << "a tie rounds to even";
  EXPECT_EQ(float_to_half(1e6f), 0x7c00) << "overflow is infinity";
}

TEST(CollData, ExpectedBuffersOfEachCollective) {
  const int n = 4;
  // all_reduce sum of float over 4 ranks: element i is the sum over r of 1 + (3r + i) mod 7.
  const Shape ar = shape_of(Collective::kAllReduce, 64, 4, n);
  const auto want = expected_data(Collective::kAllReduce, DataType::kFloat, RedOp::kSum, 0, 2, n, ar);
  EXPECT_EQ(at<float>(want, 0), 1 + 4 + 7 + 3);  // r = 0..3: (0, 3, 6, 9 mod 7 = 2) + 1
  EXPECT_EQ(at<float>(want, 5), 6 + 2 + 5 + 1);  // (5, 8 = 1, 11 = 4, 14 = 0) + 1
  // all_gather: rank r's part sits at r x part, as rank r sent it.
  const Shape ag = shape_of(Collective::kAllGather, 64, 4, n);  // 4 elements a part
  const auto sent = send_data(Collective::kAllGather, DataType::kInt32, RedOp::kSum, 3, ag);
  const auto gathered = expected_data(Collective::kAllGather, DataType::kInt32, RedOp::kSum, 0, 0, n, ag);
  for (uint64_t i = 0; i < ag.send_count; ++i) EXPECT_EQ(at<int32_t>(gathered, 12 + i), at<int32_t>(sent, i));
  // reduce_scatter: rank 1 holds the reduction of elements 4..7.
  const Shape rs = shape_of(Collective::kReduceScatter, 64, 4, n);
  const auto scattered =
      expected_data(Collective::kReduceScatter, DataType::kFloat, RedOp::kMax, 0, 1, n, rs);
  ASSERT_EQ(scattered.size(), 4 * 4u);
  EXPECT_EQ(at<float>(scattered, 0), 7.0f) << "max over r of 1 + (3r + 4) mod 7: 5, 1, 4, 7";
  // alltoall: rank 2's part j came from rank j's elements 2 x part ..
  const Shape a2a = shape_of(Collective::kAlltoAll, 64, 4, n);
  const auto from1 = send_data(Collective::kAlltoAll, DataType::kInt32, RedOp::kSum, 1, a2a);
  const auto got2 = expected_data(Collective::kAlltoAll, DataType::kInt32, RedOp::kSum, 0, 2, n, a2a);
  for (uint64_t i = 0; i < 4; ++i) EXPECT_EQ(at<int32_t>(got2, 4 + i), at<int32_t>(from1, 8 + i));
  // sendrecv: the previous rank's data; broadcast: the root's; reduce: only the root checks.
  const Shape sr = shape_of(Collective::kSendRecv, 16, 4, n);
  EXPECT_EQ(expected_data(Collective::kSendRecv, DataType::kFloat, RedOp::kSum, 0, 0, n, sr),
            send_data(Collective::kSendRecv, DataType::kFloat, RedOp::kSum, 3, sr));
  EXPECT_EQ(expected_data(Collective::kBroadcast, DataType::kFloat, RedOp::kSum, 2, 0, n, sr),
            send_data(Collective::kBroadcast, DataType::kFloat, RedOp::kSum, 2, sr));
  EXPECT_TRUE(expected_data(Collective::kReduce, DataType::kFloat, RedOp::kSum, 1, 0, n, sr).empty());
}

TEST(CollData, IntegersWrapAsNcclsDoAndAveragesTruncate) {
  // prod of 1 + (r + i) mod 2 over 16 ranks: 2^8 at even i, wrapping to 0 in 8 bits.
  const Shape s = shape_of(Collective::kAllReduce, 2, 1, 16);
  const auto prod = expected_data(Collective::kAllReduce, DataType::kUint8, RedOp::kProd, 0, 0, 16, s);
  EXPECT_EQ(at<uint8_t>(prod, 0), 0);
  const auto avg = expected_data(Collective::kAllReduce, DataType::kInt32, RedOp::kAvg, 0, 0, 2,
                                 shape_of(Collective::kAllReduce, 4, 4, 2));
  EXPECT_EQ(at<int32_t>(avg, 0), 2) << "(1 + 4) / 2 truncated";
}

TEST(CollData, WrongElementsAreCounted) {
  const std::vector<float> want = {1, 2, 3, 4};
  std::vector<float> got = want;
  EXPECT_EQ(count_wrong(DataType::kFloat, RedOp::kSum, got.data(), want.data(), 4), 0);
  got[2] = 3.0000002f;
  EXPECT_EQ(count_wrong(DataType::kFloat, RedOp::kSum, got.data(), want.data(), 4), 1) << "sums are exact";
  EXPECT_EQ(count_wrong(DataType::kFloat, RedOp::kAvg, got.data(), want.data(), 4), 0)
      << "averages within 1e-6";
  got[3] = 5;
  EXPECT_EQ(count_wrong(DataType::kFloat, RedOp::kAvg, got.data(), want.data(), 4), 1);
}

}  // namespace
}  // namespace megascale::coll
