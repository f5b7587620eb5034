// EngineConfig::payload_crc = false (protocol version 2): DATA leaves without its payload CRC, flagged
// kFlagNoPayloadCrc, and arrives intact on a clean path; the receiver counts it; the trade-off is that a
// payload damaged on the way is placed as it arrived. A peer that speaks only version 1 keeps every CRC,
// and a sender with the CRC on is checked as before whatever the receiver's setting.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "test_net.h"

namespace megascale::engine::testing {
namespace {

EngineConfig without_crc(uint64_t seed = 1) {
  EngineConfig c = test_config(seed);
  c.payload_crc = false;
  return c;
}

// One 40-segment message a -> b; true when both requests completed.
bool send_one(TestNet& net, Connection* a, Connection* b, Batch& batch) {
  batch.post_recvs(b);
  batch.post_sends(a);
  return batch.run(net, a, b);
}

TEST(PayloadCrc, OffSendsUncheckedDataOnVersion2AndItArrivesIntact) {
  TestNet net(without_crc(), test_config(2));
  uint64_t flagged = 0, with_crc = 0;
  net.rule = [&](const Sent& s) {
    if (s.is_data() && s.pkt.payload_len > 0) {
      EXPECT_EQ(s.pkt.hdr.version, kVersion);  // version 2 or later
      ((s.pkt.hdr.flags & kFlagNoPayloadCrc) ? flagged : with_crc) += 1;
      if (s.pkt.hdr.flags & kFlagNoPayloadCrc) {
        EXPECT_EQ(s.pkt.seg.payload_crc, 0u);
      }
    }
    return Fate{};
  };
  auto [a, b] = net.connect_pair();
  ASSERT_NE(b, nullptr);
  Batch batch({40'000, 1, 12'345}, 3);
  ASSERT_TRUE(send_one(net, a, b, batch));
  batch.expect_intact(b);
  EXPECT_GT(flagged, 0u);
  EXPECT_EQ(with_crc, 0u);
  EXPECT_EQ(b->stats().segments_unchecked, flagged);
  // The other direction (b's CRC on) is checked as before.
  Batch back({20'000}, 4);
  ASSERT_TRUE(send_one(net, b, a, back));
  back.expect_intact(a);
  EXPECT_EQ(a->stats().segments_unchecked, 0u);
}

TEST(PayloadCrc, DamageOnTheWayIsPlacedWhenUncheckedAndCaughtWhenChecked) {
  // What the knob gives up: a payload bit flipped in transit.
  auto flip_first = [](const Sent& s) {
    Fate f;
    f.corrupt_payload = s.is_data() && s.copy == 0 && s.pkt.seg.offset == 0 && s.pkt.payload_len > 0;
    return f;
  };
  {
    TestNet net(without_crc(), test_config(2));
    net.rule = flip_first;
    auto [a, b] = net.connect_pair();
    Batch batch({40'000}, 5);
    ASSERT_TRUE(send_one(net, a, b, batch));
    EXPECT_EQ(b->stats().corrupt_dropped, 0u);
    EXPECT_FALSE(std::equal(batch.msgs[0].data.begin(), batch.msgs[0].data.end(), batch.msgs[0].dst.begin()))
        << "an unchecked payload damaged on the way should have been placed as it arrived";
  }
  {
    TestNet net(test_config(), test_config(2));
    net.rule = flip_first;
    auto [a, b] = net.connect_pair();
    Batch batch({40'000}, 5);
    ASSERT_TRUE(send_one(net, a, b, batch));
    batch.expect_intact(b);
    EXPECT_EQ(b->stats().corrupt_dropped, 1u);
    EXPECT_EQ(a->stats().retransmits(), 1u);
  }
}

TEST(PayloadCrc, AVersion1PeerKeepsEveryCrc) {
  EngineConfig old = test_config(2);
  old.version_max = 1;
  for (bool initiator_without : {true, false}) {
    TestNet net(initiator_without ? without_crc() : old, initiator_without ? old : without_crc());
    auto [a, b] = net.connect_pair();
    ASSERT_NE(b, nullptr);
    // Whichever end has the CRC off, the connection speaks version 1 and so sends CRCs.
    Connection* tx = initiator_without ? a : b;
    Connection* rx = initiator_without ? b : a;
    uint64_t flagged = 0;
    net.rule = [&](const Sent& s) {
      EXPECT_EQ(s.pkt.hdr.version, 1);
      flagged += (s.pkt.hdr.flags & kFlagNoPayloadCrc) ? 1 : 0;
      Fate f;
      f.corrupt_payload = s.is_data() && s.copy == 0 && s.pkt.seg.offset == 0 && s.pkt.payload_len > 0;
      return f;
    };
    Batch batch({40'000}, 6);
    ASSERT_TRUE(send_one(net, tx, rx, batch));
    batch.expect_intact(rx);
    EXPECT_EQ(flagged, 0u);
    EXPECT_EQ(rx->stats().corrupt_dropped, 1u);  // caught, retransmitted
    EXPECT_EQ(rx->stats().segments_unchecked, 0u);
  }
}

TEST(PayloadCrc, AnUncheckedVersion2SegmentOnAVersion1ConnectionIsDropped) {
  // Version 1 was agreed, so every payload is checked. A version-2 DATA flagged kFlagNoPayloadCrc
  // (a peer that ignored the handshake, or a forged packet) must not be placed unchecked: the
  // engine drops any packet whose version is not the connection's, and counts it as malformed.
  EngineConfig old = test_config(2);
  old.version_max = 1;
  TestNet net(without_crc(), old);
  auto [a, b] = net.connect_pair();
  ASSERT_NE(b, nullptr);
  std::vector<uint8_t> first;  // the first copy of the DATA at offset 0, kept from the network
  net.rule = [&](const Sent& s) {
    Fate f;
    f.drop = s.is_data() && s.copy == 0 && s.pkt.seg.offset == 0 && s.pkt.payload_len > 0;
    if (f.drop) first = s.bytes;
    return f;
  };
  Batch batch({40'000}, 7);
  batch.post_recvs(b);
  batch.post_sends(a);
  ASSERT_TRUE(net.run_until([&] { return !first.empty(); }, net.now + 1'000'000'000));
  Packet p;
  ASSERT_EQ(decode_packet(first.data(), first.size(), p), DecodeResult::kOk);
  ASSERT_EQ(p.hdr.version, 1);
  // The same segment as version 2 without its CRC, and with its payload altered.
  std::vector<uint8_t> forged(kMaxHeaderBytes + p.payload_len);
  CommonHeader ch = p.hdr;
  ch.version = 2;
  ch.flags = static_cast<uint8_t>(ch.flags | kFlagNoPayloadCrc);
  SegHeader seg = p.seg;
  seg.payload_crc = 0;
  const size_t h = encode_seg(ch, seg, forged.data());
  std::memcpy(forged.data() + h, p.payload, p.payload_len);
  forged.resize(h + p.payload_len);
  forged[h] ^= 0xFF;
  Packet check;
  ASSERT_EQ(decode_packet(forged.data(), forged.size(), check), DecodeResult::kOk);  // well formed
  const uint64_t malformed_before = b->stats().malformed_dropped;
  net.ep[1]->on_packet(net.now, kPeerA, forged.data(), forged.size(), false);
  EXPECT_EQ(b->stats().malformed_dropped, malformed_before + 1);
  EXPECT_EQ(b->stats().segments_unchecked, 0u);
  // The sender retransmits the real segment, which is placed: the message arrives intact.
  ASSERT_TRUE(batch.run(net, a, b));
  batch.expect_intact(b);
  EXPECT_EQ(b->stats().segments_unchecked, 0u);
}

TEST(PayloadCrc, OffNeedsVersion2InTheConfig) {
  EngineConfig c = without_crc();
  c.version_max = 1;
  Status s = validate_engine_config(c);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("payload_crc"), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("version_max >= 2"), std::string::npos) << s.error().message;
  EXPECT_TRUE(validate_engine_config(without_crc()));
}

}  // namespace
}  // namespace megascale::engine::testing
