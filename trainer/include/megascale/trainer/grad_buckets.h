// Gradient buckets and the sharded optimizer's ranges (ZeRO-2: Rajbhandari et al., SC '20; MegaScale
// NSDI '24 §3.2). A rank's gradients live in one flat buffer laid out in the order the backward
// produces them, cut into buckets; each bucket is reduce-scattered over the data-parallel group as soon
// as its last gradient is written, and data-parallel rank r then owns the r-th of dp equal shards of
// every bucket: it keeps the optimizer state of those elements, steps them, and all-gathers the updated
// parameters back.
//
//   std::vector<BucketTensor> ts = {{"fcprojw.11", 2359296}, {"fcprojb.11", 768}, ...};  // backward order
//   GradLayout g = *plan_grad_buckets(ts, /*dp=*/2, /*bucket_numel=*/1 << 22, /*align=*/64);
//   for (const GradBucket& b : g.buckets) {
//     ElementRange mine = shard_of(b, g.dp, dp_rank);      // reduce-scatter output, optimizer range
//     for (const TensorPiece& p : pieces_in(g, mine)) ...  // which tensor each part of it belongs to
//   }
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "megascale/common/result.h"

namespace megascale::trainer {

struct BucketTensor {
  std::string name;
  int64_t numel = 0;
};

struct GradBucket {
  int64_t offset = 0;        // first element in the flat buffer
  int64_t numel = 0;         // including the padding: a multiple of dp * align
  int64_t used = 0;          // elements of its tensors; the rest is zero padding
  std::vector<int> tensors;  // indices into plan_grad_buckets' input, in buffer order
  int ready_after = 0;       // the bucket may be reduced once this tensor's gradient is written
};

struct GradLayout {
  int dp = 1;
  std::vector<int64_t> tensor_offset;  // per input tensor: its first element in the flat buffer
  std::vector<int> tensor_bucket;      // per input tensor: its bucket
  std::vector<GradBucket> buckets;     // in buffer (and backward) order
  int64_t total_numel = 0;             // the flat buffer's size, padding included
};

// Lays the tensors (given in the order the backward produces their gradients) out one after another
// and closes a bucket once it holds at least bucket_numel elements; a tensor is never split, so one
// larger than bucket_numel is a bucket of its own. Each bucket is padded to a multiple of dp * align
// elements, so every shard has the same size and starts aligned. Refused: no tensors, dp < 1,
// bucket_numel < 1, align < 1, a tensor of numel < 1 (named).
Result<GradLayout> plan_grad_buckets(const std::vector<BucketTensor>& tensors, int dp, int64_t bucket_numel,
                                     int64_t align);

struct ElementRange {
  int64_t begin = 0;
  int64_t end = 0;  // one past the last
  int64_t size() const { return end - begin; }
  bool operator==(const ElementRange&) const = default;
};

// Data-parallel rank `dp_rank`'s shard of `bucket`: the bucket's dp_rank-th of dp equal parts.
ElementRange shard_of(const GradBucket& bucket, int dp, int dp_rank);

// A run of one tensor's elements inside a range of the flat buffer.
struct TensorPiece {
  int tensor = 0;              // index into plan_grad_buckets' input
  int64_t tensor_offset = 0;   // first element within the tensor
  int64_t buffer_offset = 0;   // first element within the flat buffer
  int64_t numel = 0;
  bool operator==(const TensorPiece&) const = default;
};

// The tensors' pieces inside `range`, in buffer order; padding is in no piece. A sharded optimizer steps
// these, and LAMB's per-tensor norms are the sums of squares over each tensor's pieces on every rank,
// added up over the data-parallel group.
std::vector<TensorPiece> pieces_in(const GradLayout& layout, ElementRange range);

}  // namespace megascale::trainer
