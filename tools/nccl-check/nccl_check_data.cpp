// Inputs, shapes and exact expected results of nccl_check (see nccl_check_data.h).
#include "nccl_check_data.h"

#include <cstring>

namespace megascale::gpucheck {
namespace {

uint32_t float_bits(float f) {
  uint32_t b = 0;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// Small integers have zero low mantissa bits, so truncating fp32 to its top 16 bits is exact bf16.
uint16_t to_bf16(int v) {
  return static_cast<uint16_t>(float_bits(static_cast<float>(v)) >> 16);
}

size_t odd(size_t n) {
  return n == 0 ? 0 : (n | 1);
}

}  // namespace

const char* to_string(DataType t) {
  return t == DataType::kFloat32 ? "float" : "bfloat16";
}

const char* to_string(Op op) {
  switch (op) {
    case Op::kAllReduce:
      return "AllReduce";
    case Op::kAllGather:
      return "AllGather";
    case Op::kReduceScatter:
      return "ReduceScatter";
    case Op::kAlltoAll:
      return "AlltoAll";
    case Op::kBroadcast:
      return "Broadcast";
    case Op::kSendRecv:
      return "SendRecv";
  }
  return "?";
}

size_t element_bytes(DataType t) {
  return t == DataType::kFloat32 ? 4 : 2;
}

double busbw_factor(Op op, int n) {
  switch (op) {
    case Op::kAllReduce:
      return 2.0 * (n - 1) / n;
    case Op::kAllGather:
    case Op::kReduceScatter:
    case Op::kAlltoAll:
      return static_cast<double>(n - 1) / n;
    case Op::kBroadcast:
    case Op::kSendRecv:
      return 1.0;
  }
  return 1.0;
}

int input_value(int rank, size_t index) {
  return static_cast<int>((index * 7 + static_cast<size_t>(rank) * 3) % 5) + 1;
}

Shape shape_for(Op op, DataType type, size_t bytes, int n, bool odd_counts) {
  const size_t elems = bytes / element_bytes(type);
  const auto un = static_cast<size_t>(n);
  auto count_of = [odd_counts](size_t count) { return odd_counts ? odd(count) : count; };
  Shape s;
  switch (op) {
    case Op::kAllReduce:
    case Op::kBroadcast:
    case Op::kSendRecv:
      s.count = count_of(elems);
      s.send_elems = s.recv_elems = s.count;
      s.printed_bytes = s.count * element_bytes(type);
      break;
    case Op::kAllGather:  // count per rank; the receive buffer holds n of them
      s.count = count_of(elems / un);
      s.send_elems = s.count;
      s.recv_elems = s.count * un;
      s.printed_bytes = s.recv_elems * element_bytes(type);
      break;
    case Op::kReduceScatter:  // count per rank of the result; the send buffer holds n of them
      s.count = count_of(elems / un);
      s.send_elems = s.count * un;
      s.recv_elems = s.count;
      s.printed_bytes = s.send_elems * element_bytes(type);
      break;
    case Op::kAlltoAll:  // count per peer
      s.count = count_of(elems / un);
      s.send_elems = s.recv_elems = s.count * un;
      s.printed_bytes = s.send_elems * element_bytes(type);
      break;
  }
  return s;
}

std::vector<uint8_t> make_input(const Shape& s, DataType type, int rank) {
  std::vector<uint8_t> out(s.send_elems * element_bytes(type));
  for (size_t i = 0; i < s.send_elems; ++i) {
    const int v = input_value(rank, i);
    if (type == DataType::kFloat32) {
      const float f = static_cast<float>(v);
      std::memcpy(out.data() + i * 4, &f, 4);
    } else {
      const uint16_t h = to_bf16(v);
      std::memcpy(out.data() + i * 2, &h, 2);
    }
  }
  return out;
}

int expected_value(Op op, const Shape& s, int rank, int n, size_t i) {
  const size_t c = s.count;
  int sum = 0;
  switch (op) {
    case Op::kAllReduce:
      for (int q = 0; q < n; ++q) sum += input_value(q, i);
      return sum;
    case Op::kAllGather:  // chunk q is q's input
      return input_value(static_cast<int>(i / c), i % c);
    case Op::kReduceScatter:  // our chunk of everyone's input, summed
      for (int q = 0; q < n; ++q) sum += input_value(q, static_cast<size_t>(rank) * c + i);
      return sum;
    case Op::kAlltoAll:  // chunk q of our output is chunk `rank` of q's input
      return input_value(static_cast<int>(i / c), static_cast<size_t>(rank) * c + i % c);
    case Op::kBroadcast:
      return input_value(0, i);
    case Op::kSendRecv:  // a ring: we receive what rank - 1 sent
      return input_value((rank - 1 + n) % n, i);
  }
  return 0;
}

size_t count_wrong(Op op, const Shape& s, DataType type, int rank, int n, const uint8_t* got) {
  size_t wrong = 0;
  for (size_t i = 0; i < s.recv_elems; ++i) {
    const int want = expected_value(op, s, rank, n, i);
    if (type == DataType::kFloat32) {
      float f = 0;
      std::memcpy(&f, got + i * 4, 4);
      wrong += f != static_cast<float>(want) ? 1 : 0;
    } else {
      uint16_t h = 0;
      std::memcpy(&h, got + i * 2, 2);
      wrong += h != to_bf16(want) ? 1 : 0;
    }
  }
  return wrong;
}

}  // namespace megascale::gpucheck
