// The data check's host side (data.h).
#include "megascale/coll/data.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

namespace megascale::coll {

uint16_t float_to_half(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const int32_t exponent = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  uint32_t mantissa = x & 0x7fffffu;
  if (((x >> 23) & 0xff) == 0xff)
    return static_cast<uint16_t>(sign | 0x7c00u | (mantissa != 0 ? 0x200u : 0u));
  if (exponent >= 31) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow: infinity
  if (exponent <= 0) {                                               // subnormal or zero
    if (exponent < -10) return static_cast<uint16_t>(sign);
    mantissa |= 0x800000u;
    const int shift = 14 - exponent;
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rest > mid || (rest == mid && (half & 1u) != 0)) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(exponent) << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u) != 0)) ++half;  // may carry into the exponent
  return static_cast<uint16_t>(half);
}

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0) {
    const float value = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -value : value;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t float_to_bfloat16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN stays NaN
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float bfloat16_to_float(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

namespace {

double pattern(RedOp op, int rank, uint64_t index) {
  if (op == RedOp::kProd) return 1.0 + static_cast<double>((static_cast<uint64_t>(rank) + index) % 2);
  return 1.0 + static_cast<double>((3 * static_cast<uint64_t>(rank) + index) % 7);
}

bool floating(DataType t) {
  return t == DataType::kHalf || t == DataType::kFloat || t == DataType::kDouble || t == DataType::kBfloat16;
}

// Writes `value` as element i of an array of t. Integers wrap as two's complement (NCCL's arithmetic).
void put(DataType t, unsigned char* base, uint64_t i, double value) {
  auto store = [&](auto v) { std::memcpy(base + i * sizeof(v), &v, sizeof(v)); };
  const auto wrapped = static_cast<uint64_t>(static_cast<int64_t>(value));
  switch (t) {
    case DataType::kInt8:
      return store(static_cast<int8_t>(static_cast<uint8_t>(wrapped)));
    case DataType::kUint8:
      return store(static_cast<uint8_t>(wrapped));
    case DataType::kInt32:
      return store(static_cast<int32_t>(static_cast<uint32_t>(wrapped)));
    case DataType::kUint32:
      return store(static_cast<uint32_t>(wrapped));
    case DataType::kInt64:
      return store(static_cast<int64_t>(wrapped));
    case DataType::kUint64:
      return store(wrapped);
    case DataType::kHalf:
      return store(float_to_half(static_cast<float>(value)));
    case DataType::kFloat:
      return store(static_cast<float>(value));
    case DataType::kDouble:
      return store(value);
    case DataType::kBfloat16:
      return store(float_to_bfloat16(static_cast<float>(value)));
  }
}

double get(DataType t, const unsigned char* base, uint64_t i) {
  auto load = [&](auto v) {
    std::memcpy(&v, base + i * sizeof(v), sizeof(v));
    return v;
  };
  switch (t) {
    case DataType::kInt8:
      return load(int8_t{});
    case DataType::kUint8:
      return load(uint8_t{});
    case DataType::kInt32:
      return load(int32_t{});
    case DataType::kUint32:
      return load(uint32_t{});
    case DataType::kInt64:
      return static_cast<double>(load(int64_t{}));
    case DataType::kUint64:
      return static_cast<double>(load(uint64_t{}));
    case DataType::kHalf:
      return half_to_float(load(uint16_t{}));
    case DataType::kFloat:
      return load(float{});
    case DataType::kDouble:
      return load(double{});
    case DataType::kBfloat16:
      return bfloat16_to_float(load(uint16_t{}));
  }
  return 0;
}

// The op over every rank's element `index`; an integer average truncates, as NCCL's does.
double reduced(DataType t, RedOp op, int nranks, uint64_t index) {
  double acc = pattern(op, 0, index);
  for (int r = 1; r < nranks; ++r) {
    const double v = pattern(op, r, index);
    switch (op) {
      case RedOp::kSum:
      case RedOp::kAvg:
        acc += v;
        break;
      case RedOp::kProd:
        acc *= v;
        break;
      case RedOp::kMax:
        acc = std::max(acc, v);
        break;
      case RedOp::kMin:
        acc = std::min(acc, v);
        break;
    }
  }
  if (op == RedOp::kAvg) acc = floating(t) ? acc / nranks : std::trunc(acc / nranks);
  return acc;
}

}  // namespace

std::vector<unsigned char> send_data(Collective c, DataType t, RedOp op, int rank, const Shape& shape) {
  const size_t ts = type_size(t);
  std::vector<unsigned char> out(shape.send_count * ts);
  // all_gather sends its part of the global array; the others send elements 0.. of theirs.
  const uint64_t first = c == Collective::kAllGather ? static_cast<uint64_t>(rank) * shape.send_count : 0;
  for (uint64_t i = 0; i < shape.send_count; ++i) put(t, out.data(), i, pattern(op, rank, first + i));
  return out;
}

std::vector<unsigned char> expected_data(Collective c, DataType t, RedOp op, int root, int rank, int nranks,
                                         const Shape& shape) {
  const size_t ts = type_size(t);
  const uint64_t part = shape.param_count;
  std::vector<unsigned char> out(shape.recv_count * ts);
  switch (c) {
    case Collective::kAllReduce:
      for (uint64_t i = 0; i < shape.recv_count; ++i) put(t, out.data(), i, reduced(t, op, nranks, i));
      break;
    case Collective::kReduce:
      if (rank != root) return {};
      for (uint64_t i = 0; i < shape.recv_count; ++i) put(t, out.data(), i, reduced(t, op, nranks, i));
      break;
    case Collective::kBroadcast:
      for (uint64_t i = 0; i < shape.recv_count; ++i) put(t, out.data(), i, pattern(op, root, i));
      break;
    case Collective::kAllGather:
      for (uint64_t i = 0; i < shape.recv_count; ++i) {
        put(t, out.data(), i, pattern(op, static_cast<int>(i / std::max<uint64_t>(part, 1)), i));
      }
      break;
    case Collective::kReduceScatter:
      for (uint64_t i = 0; i < shape.recv_count; ++i) {
        put(t, out.data(), i, reduced(t, op, nranks, static_cast<uint64_t>(rank) * part + i));
      }
      break;
    case Collective::kAlltoAll:
      for (uint64_t i = 0; i < shape.recv_count; ++i) {
        const uint64_t from = i / std::max<uint64_t>(part, 1);
        put(t, out.data(), i,
            pattern(op, static_cast<int>(from), static_cast<uint64_t>(rank) * part + i % part));
      }
      break;
    case Collective::kSendRecv:
      for (uint64_t i = 0; i < shape.recv_count; ++i)
        put(t, out.data(), i, pattern(op, (rank + nranks - 1) % nranks, i));
      break;
  }
  return out;
}

int64_t count_wrong(DataType t, RedOp op, const void* got, const void* expected, uint64_t count) {
  const auto* g = static_cast<const unsigned char*>(got);
  const auto* e = static_cast<const unsigned char*>(expected);
  const size_t ts = type_size(t);
  const bool tolerant = op == RedOp::kAvg && floating(t);
  const double tol = (t == DataType::kHalf || t == DataType::kBfloat16) ? 1e-2 : 1e-6;
  int64_t wrong = 0;
  for (uint64_t i = 0; i < count; ++i) {
    if (!tolerant) {
      wrong += std::memcmp(g + i * ts, e + i * ts, ts) != 0 ? 1 : 0;
      continue;
    }
    const double a = get(t, g, i), b = get(t, e, i);
    wrong += std::fabs(a - b) <= tol * std::max(1.0, std::fabs(b)) ? 0 : 1;
  }
  return wrong;
}

}  // namespace megascale::coll
