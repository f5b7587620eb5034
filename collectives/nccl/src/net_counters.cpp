// megascaleNetCounters_v1 (megascale/nccl/counters.h): the process's transport counters, exported
// beside the net tables for programs that have NCCL load the plugin and want them between two points.
#include <algorithm>

#include "megascale/engine/stats.h"
#include "megascale/nccl/counters.h"
#include "registry.h"

static_assert(MEGASCALE_NET_COUNTERS_RTT_BUCKETS == megascale::engine::RttHistogram::kBuckets,
              "counters.h's RTT buckets are the engine's");

extern "C" __attribute__((visibility("default"))) int megascaleNetCounters_v1(megascaleNetCounters_v1_t* out) {
  using megascale::engine::RttHistogram;
  if (out == nullptr) return -1;
  *out = megascaleNetCounters_v1_t{};
  out->version = 1;
  out->rtt_buckets = MEGASCALE_NET_COUNTERS_RTT_BUCKETS;
  uint64_t connections = 0;
  const megascale::engine::ConnectionStats t = megascale::nccl::Registry::get().stats().totals(&connections);
  out->connections = connections;
  out->bytes_sent = t.bytes_sent;
  out->segments_sent = t.segments_sent;
  out->bytes_received = t.bytes_received;
  out->retransmits_fast = t.retransmits_fast;
  out->retransmits_rto = t.retransmits_rto;
  out->timeouts = t.timeouts;
  out->timeouts_spurious = t.timeouts_spurious;
  out->tail_probes = t.tail_probes;
  out->ecn_marks = t.ecn_marks;
  out->cnps_received = t.cnps_received;
  out->duplicates_dropped = t.duplicates_dropped;
  out->corrupt_dropped = t.corrupt_dropped;
  out->rtt_samples = t.rtt.count();
  for (int b = 0; b < RttHistogram::kBuckets; ++b) {
    out->rtt_bucket_counts[b] = t.rtt.bucket_count(b);
    out->rtt_bucket_upper_ns[b] = static_cast<uint64_t>(std::max<int64_t>(0, RttHistogram::bucket_upper_ns(b)));
  }
  return 0;
}
