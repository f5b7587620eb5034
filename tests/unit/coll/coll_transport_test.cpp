// A row's transport counters from two readings of the plugin's (transport.h): differences per counter,
// the RTT p99 from the histogram's difference, the ranks added up with the worst p99 named, and the
// row's line and JSON.
#include <gtest/gtest.h>

#include "megascale/coll/transport.h"

namespace megascale::coll {
namespace {

megascaleNetCounters_v1_t reading() {
  megascaleNetCounters_v1_t c{};
  c.version = 1;
  c.rtt_buckets = MEGASCALE_NET_COUNTERS_RTT_BUCKETS;
  for (int b = 0; b < MEGASCALE_NET_COUNTERS_RTT_BUCKETS; ++b) c.rtt_bucket_upper_ns[b] = 1000u * (b + 1);
  return c;
}

TEST(CollTransport, ARowIsTheDifferenceOfTwoReadings) {
  megascaleNetCounters_v1_t before = reading(), after = reading();
  before.bytes_sent = 1000;
  after.bytes_sent = 5000;
  after.retransmits_fast = 3;
  after.retransmits_rto = 2;
  after.timeouts = 1;
  after.ecn_marks = 7;
  // Before the row: 500 samples in bucket 40 (41 us), which the row's p99 must not see.
  before.rtt_bucket_counts[40] = 500;
  after.rtt_bucket_counts[40] = 500;
  // The row: 99 samples at 3 us and one at 90 us: the 99th percentile is 3 us; 98 and 2 make it 90.
  after.rtt_bucket_counts[2] = 99;
  after.rtt_bucket_counts[89] = 1;
  TransportDelta d = transport_delta(before, after);
  EXPECT_EQ(d.bytes_sent, 4000u);
  EXPECT_EQ(d.retransmits_fast, 3u);
  EXPECT_EQ(d.retransmits_rto, 2u);
  EXPECT_EQ(d.timeouts, 1u);
  EXPECT_EQ(d.ecn_marks, 7u);
  EXPECT_EQ(d.rtt_samples, 100u);
  EXPECT_DOUBLE_EQ(d.rtt_p99_us, 3.0);
  after.rtt_bucket_counts[2] = 98;
  after.rtt_bucket_counts[89] = 2;
  EXPECT_DOUBLE_EQ(transport_delta(before, after).rtt_p99_us, 90.0);
  // A counter that went down (the plugin reloaded) counts as none; no sample, no p99.
  EXPECT_EQ(transport_delta(after, before).bytes_sent, 0u);
  const TransportDelta none = transport_delta(before, before);
  EXPECT_EQ(none.rtt_samples, 0u);
  EXPECT_EQ(none.rtt_p99_us, 0.0);
  const TransportDelta back = TransportDelta::from_values(d.values().data());
  EXPECT_EQ(back.values(), d.values());
}

TEST(CollTransport, RanksAddUpAndTheWorstRttIsNamed) {
  TransportDelta a, b, c;
  a.retransmits_fast = 1;
  a.rtt_samples = 10;
  a.rtt_p99_us = 20;
  b.retransmits_rto = 2;
  b.timeouts = 2;
  b.rtt_samples = 10;
  b.rtt_p99_us = 80;  // rank 1: the worst
  c.ecn_marks = 5;    // rank 2: no sample
  const TransportRow row = transport_row({a.values(), b.values(), c.values()});
  EXPECT_EQ(row.total.retransmits_fast + row.total.retransmits_rto, 3u);
  EXPECT_EQ(row.total.timeouts, 2u);
  EXPECT_EQ(row.total.ecn_marks, 5u);
  EXPECT_EQ(row.total.rtt_samples, 20u);
  EXPECT_EQ(row.worst_rtt_rank, 1);
  EXPECT_DOUBLE_EQ(row.total.rtt_p99_us, 80);
  EXPECT_EQ(
      transport_line(row),
      "#   transport: 3 retransmissions (2 after a timeout), 2 timeouts, 5 ECN marks, 0 CNPs, RTT p99 80.0 "
      "us (rank 1)\n");
  const nlohmann::json j = transport_json(row);
  EXPECT_EQ(j["retransmits"], 3);
  EXPECT_EQ(j["retransmits_rto"], 2);
  EXPECT_EQ(j["rtt_p99_us"], 80.0);
  EXPECT_EQ(j["rtt_p99_rank"], 1);

  const TransportRow quiet = transport_row({c.values()});
  EXPECT_EQ(quiet.worst_rtt_rank, -1);
  EXPECT_TRUE(transport_json(quiet)["rtt_p99_us"].is_null());
  EXPECT_EQ(transport_line(quiet),
            "#   transport: 0 retransmissions (0 after a timeout), 0 timeouts, 5 ECN marks, 0 CNPs, no RTT "
            "sample\n");
}

}  // namespace
}  // namespace megascale::coll
