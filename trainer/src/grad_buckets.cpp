// Gradient buckets and shard ranges for the sharded optimizer (grad_buckets.h).
#include "megascale/trainer/grad_buckets.h"

#include <fmt/format.h>

#include <algorithm>

namespace megascale::trainer {

Result<GradLayout> plan_grad_buckets(const std::vector<BucketTensor>& tensors, int dp, int64_t bucket_numel,
                                     int64_t align) {
  if (tensors.empty()) return make_error(ErrorCode::kInvalidArgument, "gradient buckets: no tensors");
  if (dp < 1 || bucket_numel < 1 || align < 1) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("gradient buckets: dp {}, bucket size {}, alignment {}: each must be >= 1",
                                  dp, bucket_numel, align));
  }
  GradLayout g;
  g.dp = dp;
  g.tensor_offset.assign(tensors.size(), 0);
  g.tensor_bucket.assign(tensors.size(), 0);
  const int64_t unit = static_cast<int64_t>(dp) * align;
  GradBucket open;
  auto close = [&] {
    open.numel = (open.used + unit - 1) / unit * unit;
    g.total_numel = open.offset + open.numel;
    g.buckets.push_back(open);
    open = GradBucket{};
    open.offset = g.total_numel;
  };
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].numel < 1) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("gradient buckets: tensor {} ('{}') has {} elements", i, tensors[i].name,
                                    tensors[i].numel));
    }
    g.tensor_offset[i] = open.offset + open.used;
    g.tensor_bucket[i] = static_cast<int>(g.buckets.size());
    open.tensors.push_back(static_cast<int>(i));
    open.used += tensors[i].numel;
    open.ready_after = static_cast<int>(i);
    if (open.used >= bucket_numel) close();
  }
  if (!open.tensors.empty()) close();
  return g;
}

ElementRange shard_of(const GradBucket& bucket, int dp, int dp_rank) {
  const int64_t shard = bucket.numel / dp;
  return {bucket.offset + dp_rank * shard, bucket.offset + (dp_rank + 1) * shard};
}

std::vector<TensorPiece> pieces_in(const GradLayout& layout, ElementRange range) {
  std::vector<TensorPiece> out;
  const size_t n = layout.tensor_offset.size();
  for (const GradBucket& b : layout.buckets) {
    if (b.offset + b.numel <= range.begin || b.offset >= range.end) continue;
    for (int t : b.tensors) {
      const int64_t begin = layout.tensor_offset[t];
      // A tensor ends where the next one in its bucket starts, or at the bucket's used end.
      const size_t next = static_cast<size_t>(t) + 1;
      const int64_t end = next < n && layout.tensor_bucket[next] == layout.tensor_bucket[t]
                              ? layout.tensor_offset[next]
                              : b.offset + b.used;
      const int64_t lo = std::max(begin, range.begin);
      const int64_t hi = std::min(end, range.end);
      if (lo < hi) out.push_back({t, lo - begin, lo, hi - lo});
    }
  }
  return out;
}

}  // namespace megascale::trainer
