// Gradient buckets and the sharded optimizer's pieces (grad_buckets.h).
#include "megascale/trainer/grad_buckets.h"

#include <fmt/format.h>

#include <algorithm>

namespace megascale::trainer {

Result<GradBuckets> plan_grad_buckets(const std::vector<TpTensor>& tensors, int dp) {
  if (dp < 1)
    return make_error(ErrorCode::kInvalidArgument, fmt::format("gradient buckets: dp {} (must be >= 1)", dp));
  GradBuckets b;
  b.dp = dp;
  b.layers = -1;
  for (const TpTensor& t : tensors) {
    if (t.layer_ids.empty()) continue;
    const int layers = static_cast<int>(t.layer_ids.size());
    if (b.layers >= 0 && layers != b.layers) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("gradient buckets: '{}' holds {} layers, the tensors before it {}",
                                    t.name, layers, b.layers));
    }
    b.layers = layers;
  }
  b.layers = std::max(b.layers, 0);
  for (size_t k = 0; k < tensors.size(); ++k) {
    const TpTensor& t = tensors[k];
    const int slices = t.layer_ids.empty() ? 1 : b.layers;
    const int64_t numel = t.numel() / slices;
    if (numel % dp != 0) {
      return make_error(
          ErrorCode::kInvalidArgument,
          fmt::format("data parallel over {} ranks shards each layer's slice of every tensor, and "
                      "'{}' has {} elements a slice, which {} does not divide",
                      dp, t.name, numel, dp));
    }
    for (int j = 0; j < slices; ++j) {
      b.slices.push_back({.tensor = static_cast<int>(k),
                          .bucket = t.layer_ids.empty() ? b.layers : j,
                          .offset = j * numel,
                          .numel = numel,
                          .shard_offset = b.shard_numel});
      b.shard_numel += numel / dp;
    }
  }
  b.regions.assign(static_cast<size_t>(b.buckets()), BucketRegion{});
  for (GradSlice& s : b.slices) {
    BucketRegion& r = b.regions[static_cast<size_t>(s.bucket)];
    s.block_offset = r.block;
    r.block += s.numel / dp;
  }
  for (BucketRegion& r : b.regions) {
    r.begin = b.flat_numel;
    b.flat_numel += r.block * dp;
  }
  return b;
}

ElementRange shard_of(const GradSlice& slice, int dp, int dp_rank) {
  const int64_t part = slice.numel / dp;
  return {slice.offset + dp_rank * part, slice.offset + (dp_rank + 1) * part};
}

}  // namespace megascale::trainer
