// nccl-tests' counts, bandwidths and size sweep (coll.h).
#include "megascale/coll/coll.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <string>

namespace megascale::coll {
namespace {

std::string normalized(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '-' || c == '_') continue;
    out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return out;
}

}  // namespace

std::string_view name(Collective c) {
  switch (c) {
    case Collective::kAllReduce:
      return "all_reduce";
    case Collective::kAllGather:
      return "all_gather";
    case Collective::kReduceScatter:
      return "reduce_scatter";
    case Collective::kAlltoAll:
      return "alltoall";
    case Collective::kBroadcast:
      return "broadcast";
    case Collective::kReduce:
      return "reduce";
    case Collective::kSendRecv:
      return "sendrecv";
  }
  return "?";
}

std::optional<Collective> parse_collective(std::string_view text) {
  const std::string want = normalized(text);
  for (Collective c : kAllCollectives) {
    if (normalized(name(c)) == want) return c;
  }
  return std::nullopt;
}

bool has_op(Collective c) {
  return c == Collective::kAllReduce || c == Collective::kReduceScatter || c == Collective::kReduce;
}

bool has_root(Collective c) {
  return c == Collective::kBroadcast || c == Collective::kReduce;
}

namespace {
struct TypeInfo {
  DataType type;
  std::string_view name;
  size_t bytes;
  std::array<std::string_view, 2> aliases;
};
constexpr TypeInfo kTypes[] = {
    {DataType::kInt8, "int8", 1, {"char", "int8_t"}},
    {DataType::kUint8, "uint8", 1, {"uint8_t", ""}},
    {DataType::kInt32, "int32", 4, {"int", "int32_t"}},
    {DataType::kUint32, "uint32", 4, {"uint32_t", ""}},
    {DataType::kInt64, "int64", 8, {"int64_t", ""}},
    {DataType::kUint64, "uint64", 8, {"uint64_t", ""}},
    {DataType::kHalf, "half", 2, {"float16", "fp16"}},
    {DataType::kFloat, "float", 4, {"float32", "fp32"}},
    {DataType::kDouble, "double", 8, {"float64", "fp64"}},
    {DataType::kBfloat16, "bfloat16", 2, {"bf16", ""}},
};
constexpr std::string_view kOps[] = {"sum", "prod", "max", "min", "avg"};
}  // namespace

std::string_view name(DataType t) {
  return kTypes[static_cast<int>(t)].name;
}

std::optional<DataType> parse_type(std::string_view text) {
  for (const TypeInfo& t : kTypes) {
    if (text == t.name || (!t.aliases[0].empty() && text == t.aliases[0]) ||
        (!t.aliases[1].empty() && text == t.aliases[1])) {
      return t.type;
    }
  }
  return std::nullopt;
}

size_t type_size(DataType t) {
  return kTypes[static_cast<int>(t)].bytes;
}

std::string_view name(RedOp op) {
  return kOps[static_cast<int>(op)];
}

std::optional<RedOp> parse_op(std::string_view text) {
  for (size_t i = 0; i < std::size(kOps); ++i) {
    if (text == kOps[i]) return static_cast<RedOp>(i);
  }
  return std::nullopt;
}

uint64_t Shape::bytes(size_t type_bytes) const {
  return std::max(send_count, recv_count) * type_bytes;
}

Shape shape_of(Collective c, uint64_t size_bytes, size_t type_bytes, int nranks) {
  const uint64_t count = size_bytes / type_bytes;
  const uint64_t n = static_cast<uint64_t>(std::max(nranks, 1));
  // nccl-tests 2.19 rounds a rank's part down to whole 16-byte units (its GetCollByteCount functions).
  const uint64_t units = type_bytes < 16 ? 16 / type_bytes : 1;
  const uint64_t part = count / n / units * units;
  Shape s;
  switch (c) {
    case Collective::kAllGather:
      s = {.send_count = part, .recv_count = part * n, .param_count = part, .send_inplace_stride = part};
      break;
    case Collective::kReduceScatter:
      s = {.send_count = part * n, .recv_count = part, .param_count = part, .recv_inplace_stride = part};
      break;
    case Collective::kAlltoAll:
      s = {.send_count = part * n, .recv_count = part * n, .param_count = part};
      break;
    default:
      s = {.send_count = count, .recv_count = count, .param_count = count};
      break;
  }
  return s;
}

Bandwidth bandwidth(Collective c, uint64_t param_count, size_t type_bytes, double seconds, int nranks) {
  if (!(seconds > 0)) return {};
  const double n = std::max(nranks, 1);
  double bytes = static_cast<double>(param_count) * static_cast<double>(type_bytes);
  double factor = 1;
  switch (c) {
    case Collective::kAllReduce:
      factor = 2 * (n - 1) / n;
      break;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAlltoAll:
      bytes *= n;
      factor = (n - 1) / n;
      break;
    default:
      break;
  }
  const double alg = bytes / 1e9 / seconds;
  return {alg, alg * factor};
}

Result<uint64_t> parse_size(std::string_view text) {
  std::string_view number = text;
  double unit = 1;
  if (!number.empty()) {
    switch (number.back()) {
      case 'K':
      case 'k':
        unit = 1024.0;
        break;
      case 'M':
      case 'm':
        unit = 1024.0 * 1024;
        break;
      case 'G':
      case 'g':
        unit = 1024.0 * 1024 * 1024;
        break;
      default:
        break;
    }
    if (unit > 1) number.remove_suffix(1);
  }
  double value = 0;
  const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (number.empty() || ec != std::errc() || end != number.data() + number.size() || !(value >= 0)) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("size '{}': expected a number of bytes with an optional K, M or G", text));
  }
  const double bytes = value * unit;
  if (bytes != std::floor(bytes) || bytes > 1.8e19) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("size '{}' is not a whole number of bytes", text));
  }
  return static_cast<uint64_t>(bytes);
}

Result<std::vector<uint64_t>> size_sweep(uint64_t min_bytes, uint64_t max_bytes, uint64_t step_bytes,
                                         uint64_t step_factor) {
  if (min_bytes > max_bytes) {
    return make_error(
        ErrorCode::kInvalidArgument,
        fmt::format("minimum size {} B is above the maximum {} B (-b, -e)", min_bytes, max_bytes));
  }
  const bool factor = step_factor > 1;
  if (factor && min_bytes == 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "-f multiplies the size from -b, which must then be above 0");
  }
  if (!factor && step_bytes == 0 && min_bytes < max_bytes) {
    return make_error(ErrorCode::kInvalidArgument,
                      "-i 0 would never reach the maximum size (use -f, or -i above 0)");
  }
  std::vector<uint64_t> sizes;
  for (uint64_t s = min_bytes; s <= max_bytes;) {
    sizes.push_back(s);
    const uint64_t next = factor ? s * step_factor : s + step_bytes;
    if (next <= s) break;  // overflow, or a zero step with min == max
    s = next;
  }
  return sizes;
}

}  // namespace megascale::coll
