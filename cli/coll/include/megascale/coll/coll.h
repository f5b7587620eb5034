// `megascale coll`'s arithmetic, the same as nccl-tests' so that its tables can be diffed against
// theirs: the collectives, data types and reduction ops by their nccl-tests names, the element counts a
// sweep size gives each collective, algorithm and bus bandwidth, and the size sweep (-b -e -i -f).
//
// A sweep size S bytes of a type of t bytes is count = S / t elements, shared out as nccl-tests does
// (n ranks): all_reduce, broadcast, reduce and sendrecv move `count` per rank; all_gather sends count/n
// and receives n of them; reduce_scatter sends n x count/n and receives count/n; alltoall sends and
// receives n x count/n. The size column is the larger of a rank's send and receive bytes, the count
// column the per-call count given to NCCL (param_count).
//
// Bandwidth (nccl-tests' PERFORMANCE.md): algbw = bytes / time with bytes = param_count x t, times n for
// all_gather, reduce_scatter and alltoall; busbw = algbw x 2(n-1)/n for all_reduce, (n-1)/n for
// all_gather, reduce_scatter and alltoall, 1 for broadcast, reduce and sendrecv: what each rank's link
// carries, comparable with its line rate whatever n is. GB = 1e9 bytes.
//
//   Shape s = shape_of(Collective::kAllGather, 1 << 20, 4, 8);  // send 32768, receive 262144 floats
//   Bandwidth bw = bandwidth(Collective::kAllGather, s.param_count, 4, 1e-3, 8);
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "megascale/common/result.h"

namespace megascale::coll {

enum class Collective { kAllReduce, kAllGather, kReduceScatter, kAlltoAll, kBroadcast, kReduce, kSendRecv };
inline constexpr Collective kAllCollectives[] = {
    Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter, Collective::kAlltoAll,
    Collective::kBroadcast, Collective::kReduce,    Collective::kSendRecv};

// "all_reduce" (nccl-tests' binary without _perf), parsed also as "allreduce" or "all-reduce".
std::string_view name(Collective c);
std::optional<Collective> parse_collective(std::string_view text);
bool has_op(Collective c);    // a reduction: all_reduce, reduce_scatter, reduce
bool has_root(Collective c);  // broadcast, reduce

// nccl-tests' type names (-d): int8 uint8 int32 uint32 int64 uint64 half float double bfloat16.
enum class DataType { kInt8, kUint8, kInt32, kUint32, kInt64, kUint64, kHalf, kFloat, kDouble, kBfloat16 };
std::string_view name(DataType t);
std::optional<DataType> parse_type(std::string_view text);  // also NCCL's aliases: char, int, float32, ...
size_t type_size(DataType t);

// -o: sum prod max min avg.
enum class RedOp { kSum, kProd, kMax, kMin, kAvg };
std::string_view name(RedOp op);
std::optional<RedOp> parse_op(std::string_view text);

struct Shape {
  uint64_t send_count = 0;   // elements in a rank's send buffer
  uint64_t recv_count = 0;   // and its receive buffer
  uint64_t param_count = 0;  // the count NCCL is called with (the table's count column)
  // In place: where a rank's send data sits inside its receive buffer, in elements per rank index
  // (all_gather: rank r's part at r x send_count; reduce_scatter: rank r's result at r x recv_count).
  uint64_t send_inplace_stride = 0;
  uint64_t recv_inplace_stride = 0;
  uint64_t bytes(size_t type_bytes) const;  // the size column: max(send, receive) bytes
};
Shape shape_of(Collective c, uint64_t size_bytes, size_t type_bytes, int nranks);

struct Bandwidth {
  double alg_gbs = 0;
  double bus_gbs = 0;
};
Bandwidth bandwidth(Collective c, uint64_t param_count, size_t type_bytes, double seconds, int nranks);

// nccl-tests' size syntax: a number with an optional K, M or G (powers of 1024), "32M", "1.5K", "8".
// Refused, quoting the text: anything else, or a size that is not a whole number of bytes.
Result<uint64_t> parse_size(std::string_view text);

// min, then min + step_bytes (step_factor <= 1) or min x step_factor, up to max inclusive. Refused:
// min > max, a step of 0 with min < max, min 0 with a factor (it would never grow).
Result<std::vector<uint64_t>> size_sweep(uint64_t min_bytes, uint64_t max_bytes, uint64_t step_bytes,
                                         uint64_t step_factor);

}  // namespace megascale::coll
