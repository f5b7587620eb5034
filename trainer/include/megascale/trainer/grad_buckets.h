// The data-parallel group's gradient buckets and the sharded optimizer's pieces (ZeRO-2: Rajbhandari
// et al., SC '20; MegaScale NSDI '24 §3.2, which reduce-scatters gradients as the backward produces them
// and all-gathers the parameters ahead of the forward that needs them).
//
// A rank's tensors are cut into slices: a stacked tensor one per layer, the others (wte, wpe, lnfw,
// lnfb) whole. Each slice is sharded on its own: data-parallel rank r owns the r-th of dp equal parts of
// every slice, keeps the optimizer state of those elements, steps them and all-gathers them back. A
// bucket is the slices of one of the rank's layers, whose gradients are final once that layer's last
// backward ends, so its reduce-scatter can run on a communication stream while the backward goes on
// with the layers before it; the last bucket holds the unstacked tensors. Sharding each slice rather
// than the flat buffer is what lets a layer be reduced before the whole backward is done.
//
// A bucket moves as one collective, not one per slice: a layer's dozen slices include LayerNorm and bias
// vectors of a few KiB, and over a net each collective pays its own round trips. The bucket's slices
// are gathered into its region of a staging buffer (flat_numel elements, every bucket's region after
// the one before), rank-major: rank r's block holds r's part of each slice in slice order, so one
// reduce-scatter leaves each rank its block and one all-gather brings every block back.
//
//   GradBuckets b = *plan_grad_buckets(tp_parameter_tensors(model, tp, stage), /*dp=*/2);
//   for (const GradSlice& s : b.slices) {
//     ElementRange mine = shard_of(s, b.dp, dp_rank);  // within tensor s.tensor: reduce-scatter output,
//     ...                                              // optimizer range, all-gather input
//   }
#pragma once

#include <cstdint>
#include <vector>

#include "megascale/common/result.h"
#include "megascale/trainer/model_shard.h"

namespace megascale::trainer {

struct GradSlice {
  int tensor = 0;  // index into plan_grad_buckets' input
  int bucket = 0;  // the rank's layer (its stacked position) for a stacked tensor, else GradBuckets::layers
  int64_t offset = 0;  // first element within the tensor
  int64_t numel = 0;   // a multiple of dp
  // Where a rank's piece of this slice sits in its optimizer state, which holds its pieces one after
  // another (GradBuckets::shard_numel elements, the same on every rank).
  int64_t shard_offset = 0;
  // Where a rank's piece of this slice sits within that rank's block of the bucket's staging region
  // (flat_element()).
  int64_t block_offset = 0;
};

// A bucket's region of the staging buffer: `begin` its first element, dp blocks of `block` elements.
struct BucketRegion {
  int64_t begin = 0;
  int64_t block = 0;  // a rank's block: the sum of its pieces of the bucket's slices
};

struct GradBuckets {
  int dp = 1;
  int layers = 0;                 // the rank's layers: buckets 0..layers-1; bucket `layers` the rest
  std::vector<GradSlice> slices;  // in the input's tensor order, each stacked tensor layer by layer
  int64_t shard_numel = 0;        // a rank's pieces: the elements of its optimizer state
  std::vector<BucketRegion> regions;  // per bucket: its region of the staging buffer
  int64_t flat_numel = 0;             // the staging buffer: every slice's elements once
  int buckets() const { return layers + 1; }
  // The staging buffer's element that holds element `i` (0 <= i < numel / dp) of rank `rank`'s piece
  // of `slice`.
  int64_t flat_element(const GradSlice& slice, int rank, int64_t i) const {
    const BucketRegion& r = regions[static_cast<size_t>(slice.bucket)];
    return r.begin + rank * r.block + slice.block_offset + i;
  }
};

// Cuts the rank's tensors (tp_parameter_tensors' output) into slices and buckets. Refused, naming the
// tensor: dp < 1, a slice whose element count dp does not divide (ln1w's per-layer count is d_model, so
// dp must divide d_model), stacked tensors with different layer counts.
Result<GradBuckets> plan_grad_buckets(const std::vector<TpTensor>& tensors, int dp);

struct ElementRange {
  int64_t begin = 0;
  int64_t end = 0;  // one past the last
  int64_t size() const { return end - begin; }
  bool operator==(const ElementRange&) const = default;
};

// Data-parallel rank `dp_rank`'s piece of `slice`, in elements of its tensor: the slice's dp_rank-th of
// dp equal parts.
ElementRange shard_of(const GradSlice& slice, int dp, int dp_rank);

}  // namespace megascale::trainer
