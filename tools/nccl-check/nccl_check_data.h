// Inputs and exact expected results of nccl_check's collectives, computed on the host.
//
// Every input element is a small integer (1..5), so every sum over up to 51 ranks is an integer of at
// most 255: exact in fp32 and in bf16 (8 significant bits), in any order of summation. A result is then
// either bit-identical to the expected value or wrong.
//
//   Shape s = shape_for(Op::kAllReduce, DataType::kBf16, 1 << 20, nranks);
//   std::vector<uint8_t> in = make_input(s, DataType::kBf16, rank);      // raw element bytes
//   ... run the collective, copy the output back ...
//   size_t wrong = count_wrong(Op::kAllReduce, s, DataType::kBf16, rank, nranks, out.data());
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace megascale::gpucheck {

enum class DataType { kFloat32, kBf16 };
enum class Op { kAllReduce, kAllGather, kReduceScatter, kAlltoAll, kBroadcast, kSendRecv };

const char* to_string(DataType t);
const char* to_string(Op op);
size_t element_bytes(DataType t);
// nccl-tests' bus bandwidth factor (research notes §5): busbw = algbw * factor.
double busbw_factor(Op op, int nranks);

// Input element `index` of `rank`: 1..5.
int input_value(int rank, size_t index);

// The element counts one collective works on, for a printed size of `bytes` (nccl-tests' "size"):
// `count` is NCCL's count argument, send/recv are the buffer lengths in elements. Counts are odd unless
// `odd_counts` is false; then they are nccl-tests' (bytes / element size, per rank where NCCL's count is).
struct Shape {
  size_t count = 0;
  size_t send_elems = 0;
  size_t recv_elems = 0;
  size_t printed_bytes = 0;  // the size column: the full buffer, as nccl-tests prints it
};
Shape shape_for(Op op, DataType type, size_t bytes, int nranks, bool odd_counts = true);

// The send buffer of `rank` (s.send_elems elements of `type`, raw bytes).
std::vector<uint8_t> make_input(const Shape& s, DataType type, int rank);

// Output element `i` that `rank` must receive, as an integer.
int expected_value(Op op, const Shape& s, int rank, int nranks, size_t i);

// Elements of `got` (s.recv_elems raw elements of `type`) that differ from the expected output.
size_t count_wrong(Op op, const Shape& s, DataType type, int rank, int nranks, const uint8_t* got);

}  // namespace megascale::gpucheck
