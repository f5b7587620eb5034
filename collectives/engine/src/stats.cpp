// The fixed-bucket RTT histogram.
#include "megascale/engine/stats.h"

#include <algorithm>
#include <bit>
#include <utility>

#include "megascale/common/percentile.h"

namespace megascale::engine {

// Bucket 0: below 2^kMinLog2. Then kSubBuckets per octave [2^k, 2^(k+1)), k = kMinLog2 .. kMaxLog2-1,
// each sub-bucket a quarter of the octave. The last bucket: 2^kMaxLog2 and above.
int RttHistogram::bucket_of(TimeNs rtt_ns) {
  if (rtt_ns < (TimeNs{1} << kMinLog2)) return 0;
  if (rtt_ns >= (TimeNs{1} << kMaxLog2)) return kBuckets - 1;
  const auto v = static_cast<uint64_t>(rtt_ns);
  const int log2 = 63 - std::countl_zero(v);
  const auto sub = static_cast<int>((v >> (log2 - 2)) & 3U);  // the two bits below the leading one
  return 1 + (log2 - kMinLog2) * kSubBuckets + sub;
}

TimeNs RttHistogram::bucket_upper_ns(int bucket) {
  if (bucket <= 0) return (TimeNs{1} << kMinLog2) - 1;
  if (bucket >= kBuckets - 1) return kNever;
  const int octave = (bucket - 1) / kSubBuckets + kMinLog2;
  const int sub = (bucket - 1) % kSubBuckets;
  const TimeNs base = TimeNs{1} << octave;
  return base + (base / kSubBuckets) * (sub + 1) - 1;
}

void RttHistogram::add(TimeNs rtt_ns) {
  if (rtt_ns < 0) return;
  ++buckets_[static_cast<size_t>(bucket_of(rtt_ns))];
  ++count_;
  sum_ns_ += rtt_ns;
  min_ns_ = std::min(min_ns_, rtt_ns);
  max_ns_ = std::max(max_ns_, rtt_ns);
}

void RttHistogram::merge(const RttHistogram& other) {
  if (other.count_ == 0) return;
  for (size_t i = 0; i < buckets_.size(); ++i) buckets_[i] += other.buckets_[i];
  min_ns_ = count_ ? std::min(min_ns_, other.min_ns_) : other.min_ns_;
  max_ns_ = std::max(max_ns_, other.max_ns_);
  count_ += other.count_;
  sum_ns_ += other.sum_ns_;
}

uint64_t RttHistogram::bucket_count(int bucket) const {
  if (bucket < 0 || bucket >= kBuckets) return 0;
  return buckets_[static_cast<size_t>(bucket)];
}

void ConnectionStats::merge(const ConnectionStats& o) {
  for (auto [mine, theirs] : {
           std::pair{&bytes_sent, o.bytes_sent},
           {&segments_sent, o.segments_sent},
           {&bytes_acked, o.bytes_acked},
           {&retransmits_fast, o.retransmits_fast},
           {&retransmits_rto, o.retransmits_rto},
           {&timeouts, o.timeouts},
           {&timeouts_spurious, o.timeouts_spurious},
           {&tail_probes, o.tail_probes},
           {&ecn_marks, o.ecn_marks},
           {&cnps_received, o.cnps_received},
           {&repaths, o.repaths},
           {&floor_stalls, o.floor_stalls},
           {&acks_received, o.acks_received},
           {&bytes_received, o.bytes_received},
           {&segments_received, o.segments_received},
           {&segments_unchecked, o.segments_unchecked},
           {&ce_received, o.ce_received},
           {&cnps_sent, o.cnps_sent},
           {&acks_sent, o.acks_sent},
           {&duplicates_dropped, o.duplicates_dropped},
           {&malformed_dropped, o.malformed_dropped},
           {&corrupt_dropped, o.corrupt_dropped},
           {&out_of_window_dropped, o.out_of_window_dropped},
           {&sends_posted, o.sends_posted},
           {&sends_waited_for_credit, o.sends_waited_for_credit},
           {&sends_completed, o.sends_completed},
           {&sends_failed, o.sends_failed},
           {&recvs_posted, o.recvs_posted},
           {&recvs_completed, o.recvs_completed},
           {&recvs_failed, o.recvs_failed},
       }) {
    *mine += theirs;
  }
  rtt.merge(o.rtt);
  fabric_delay.merge(o.fabric_delay);
  rx_delay.merge(o.rx_delay);
}

TimeNs RttHistogram::percentile_ns(double q) const {
  if (count_ == 0) return 0;
  const size_t b = quantile_bucket(buckets_, count_, q);
  if (b == buckets_.size()) return max_ns_;
  return std::clamp(bucket_upper_ns(static_cast<int>(b)), min_ns_, max_ns_);
}

}  // namespace megascale::engine
