// EngineConfig::wire_seals_payload_crc: the engine leaves DATA payload CRCs to the wire (the UDP wire's
// I/O threads compute them off the engine's thread). Sealed, transfers are intact; unsealed, the receiver
// refuses every data segment as corrupt, so a wire that forgets cannot deliver wrong data.
#include <gtest/gtest.h>

#include "test_net.h"

namespace megascale::engine::testing {
namespace {

EngineConfig sealing_config() {
  EngineConfig c = test_config();
  c.wire_seals_payload_crc = true;
  return c;
}

TEST(WireSealsPayloadCrc, SealedByTheWireTransfersAreIntact) {
  TestNet net(sealing_config());
  net.seal_payload_crc = true;
  auto [a, b] = net.connect_pair();
  ASSERT_TRUE(a && b);
  Batch batch({1, 4095, 4096, 100'000, 3 * 1024 * 1024 + 7}, 11);
  ASSERT_NO_FATAL_FAILURE(batch.post_recvs(b));
  ASSERT_NO_FATAL_FAILURE(batch.post_sends(a));
  ASSERT_TRUE(batch.run(net, a, b));
  batch.expect_intact(b);
  EXPECT_GT(net.pending_crc_packets, 0u);  // the engine did leave the CRCs to the wire
  EXPECT_EQ(b->stats().corrupt_dropped, 0u);
}

TEST(WireSealsPayloadCrc, OnlyDataWithPayloadIsLeftPendingAndUnsealedDataIsRefused) {
  TestNet net(sealing_config());
  net.keep_trace = true;
  auto [a, b] = net.connect_pair();
  ASSERT_TRUE(a && b);
  Batch batch({50'000}, 12);
  ASSERT_NO_FATAL_FAILURE(batch.post_recvs(b));
  ASSERT_NO_FATAL_FAILURE(batch.post_sends(a));
  EXPECT_FALSE(batch.run(net, a, b, 50'000'000));  // 50 ms of virtual time: nothing can complete
  uint64_t data_segments = 0;
  for (const Sent& s : net.trace) data_segments += s.is_seg() && s.pkt.seg.payload_len > 0 ? 1 : 0;
  EXPECT_GT(data_segments, 0u);
  EXPECT_EQ(net.pending_crc_packets, data_segments);  // every data segment, nothing else
  EXPECT_GT(b->stats().corrupt_dropped, 0u);
  EXPECT_EQ(b->stats().bytes_received, 0u);
}

}  // namespace
}  // namespace megascale::engine::testing
