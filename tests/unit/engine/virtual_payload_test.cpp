// Virtual payload (EngineConfig::virtual_payload, for the packet-level simulator): messages are byte
// counts without bytes. Transfers complete with the right sizes over header-only packets, the decoder
// takes a header whose payload is absent only when the lengths agree, and the normal mode is unchanged:
// it still refuses null buffers, truncated packets and header-only arrivals.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "megascale/engine/crc32c.h"
#include "megascale/engine/packet.h"
#include "test_net.h"

namespace megascale::engine::testing {
namespace {

EngineConfig virtual_config(uint64_t seed = 1) {
  EngineConfig c = test_config(seed);
  c.virtual_payload = true;
  return c;
}

// A DATA segment header for `payload_len` bytes (CRC 0, as a virtual sender leaves it).
std::vector<uint8_t> data_header(uint32_t payload_len, uint64_t offset, uint64_t msg_len) {
  std::vector<uint8_t> buf(kMaxHeaderBytes);
  SegHeader s;
  s.seq = 9;
  s.payload_len = payload_len;
  s.slot = 1;
  s.tag = 0;
  s.offset = offset;
  s.msg_len = msg_len;
  const uint8_t flags = offset + payload_len == msg_len ? kFlagLast : 0;
  buf.resize(encode_seg(CommonHeader{.lane = 1, .flags = flags, .dst_conn_id = 0x1234}, s, buf.data()));
  return buf;
}

TEST(VirtualPayload, MessagesCompleteWithTheirSizesOverHeaderOnlyPackets) {
  TestNet net(virtual_config());
  net.header_only = true;
  auto [a, b] = net.connect_pair();
  ASSERT_NE(b, nullptr);
  const std::vector<uint64_t> sizes = {25'500, 1, 0, 1000, 70'001};
  std::vector<RequestId> recvs, sends;
  for (uint64_t n : sizes) {
    auto r = b->post_recv(nullptr, n + 10, -1);  // receive buffers larger than the messages
    ASSERT_TRUE(r.ok()) << r.error().message;
    recvs.push_back(*r);
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    auto s = a->post_send(nullptr, sizes[i], static_cast<int32_t>(i));
    ASSERT_TRUE(s.ok()) << s.error().message;
    sends.push_back(*s);
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    Completion rc, sc;
    ASSERT_TRUE(wait_done(net, b, recvs[i], &rc)) << i;
    ASSERT_TRUE(wait_done(net, a, sends[i], &sc)) << i;
    EXPECT_TRUE(rc.ok && sc.ok) << rc.error << sc.error;
    EXPECT_EQ(rc.bytes, sizes[i]);
    EXPECT_EQ(sc.bytes, sizes[i]);
    EXPECT_EQ(rc.tag, static_cast<int32_t>(i));
  }
  uint64_t total = 0;
  for (uint64_t n : sizes) total += n;
  EXPECT_EQ(b->stats().bytes_received, total);
  EXPECT_EQ(a->stats().bytes_acked, total);
  EXPECT_EQ(b->stats().malformed_dropped, 0u);
  // Every DATA packet on the wire carried a header alone and announced its payload with a zero CRC.
  uint64_t announced = 0;
  for (const Sent& s : net.trace) {
    if (!s.is_data()) continue;
    EXPECT_EQ(s.bytes.size(), s.pkt.header_len);
    EXPECT_EQ(s.pkt.seg.payload_crc, 0u);
    EXPECT_EQ(s.pkt.payload, nullptr);
    announced += s.pkt.seg.payload_len;
  }
  EXPECT_EQ(announced, total);
}

TEST(VirtualPayload, LossIsRecoveredByRetransmission) {
  TestNet net(virtual_config(3));
  net.header_only = true;
  net.rule = [](const Sent& s) {
    Fate f;
    f.drop = s.is_data() && s.copy == 0 && s.pkt.seg.seq % 5 == 2;
    return f;
  };
  auto [a, b] = net.connect_pair();
  auto r = b->post_recv(nullptr, 50'000, 4);
  auto s = a->post_send(nullptr, 50'000, 4);
  ASSERT_TRUE(r.ok() && s.ok());
  Completion rc, sc;
  ASSERT_TRUE(wait_done(net, b, *r, &rc));
  ASSERT_TRUE(wait_done(net, a, *s, &sc));
  EXPECT_TRUE(rc.ok && sc.ok);
  EXPECT_EQ(rc.bytes, 50'000u);
  EXPECT_GT(a->stats().retransmits(), 0u);
}

TEST(VirtualPayload, HeaderOnlyDecodeNeedsTheAnnouncedLength) {
  const std::vector<uint8_t> h = data_header(1000, 0, 3000);
  Packet p;
  ASSERT_EQ(decode_packet_header_only(h.data(), h.size(), 1000, p), DecodeResult::kOk);
  EXPECT_EQ(p.payload, nullptr);
  EXPECT_EQ(p.payload_len, 1000u);
  EXPECT_EQ(p.seg.offset, 0u);
  // The absent length must match the header's, and bytes beyond the header are not a header alone.
  EXPECT_EQ(decode_packet_header_only(h.data(), h.size(), 999, p), DecodeResult::kBadLength);
  std::vector<uint8_t> longer = h;
  longer.push_back(0);
  EXPECT_EQ(decode_packet_header_only(longer.data(), longer.size(), 1000, p), DecodeResult::kBadLength);
  // Header checks still apply: a damaged header byte is refused.
  std::vector<uint8_t> bad = h;
  bad[30] ^= 0x10;
  EXPECT_EQ(decode_packet_header_only(bad.data(), bad.size(), 1000, p), DecodeResult::kBadHeaderCrc);
  // A type without payload may not claim any.
  uint8_t cnp[kMaxHeaderBytes];
  const size_t n = encode_cnp(CommonHeader{.dst_conn_id = 5}, CnpBody{.lane = 1}, cnp);
  EXPECT_EQ(decode_packet_header_only(cnp, n, 0, p), DecodeResult::kOk);
  EXPECT_EQ(decode_packet_header_only(cnp, n, 1, p), DecodeResult::kBadLength);
}

TEST(VirtualPayload, NormalModeStillRejectsATruncatedPacketAndHeaderOnlyArrivals) {
  // The wire decoder: a DATA header whose payload is missing is truncated data, not a virtual packet.
  const std::vector<uint8_t> h = data_header(1000, 0, 3000);
  Packet p;
  EXPECT_EQ(decode_packet(h.data(), h.size(), p), DecodeResult::kBadLength);

  // An endpoint in normal mode counts header-only arrivals as malformed and places nothing.
  TestNet net(test_config());
  net.header_only = true;
  auto id = net.ep[0]->connect(net.now, kPeerB);
  ASSERT_TRUE(id.ok());
  net.run_for(1'000'000);
  EXPECT_EQ(net.ep[1]->connection_count(), 0u);
  EXPECT_GT(net.ep[1]->stats().malformed_dropped, 0u);

  // And it still refuses null buffers for non-empty messages.
  TestNet normal(test_config());
  auto [a, b] = normal.connect_pair();
  EXPECT_FALSE(a->post_send(nullptr, 10, 0).ok());
  EXPECT_FALSE(b->post_recv(nullptr, 10, 0).ok());
}

TEST(VirtualPayload, VirtualModeRejectsAHeaderOnlyPacketWithTheWrongLength) {
  TestNet net(virtual_config());
  auto [a, b] = net.connect_pair();
  ASSERT_NE(b, nullptr);
  const uint64_t before = net.ep[1]->stats().malformed_dropped;
  SegHeader s;
  s.seq = 0;
  s.payload_len = 100;
  s.slot = 0;
  s.offset = 0;
  s.msg_len = 100;
  uint8_t hdr[kMaxHeaderBytes];
  const size_t n = encode_seg(CommonHeader{.lane = 1, .flags = kFlagLast, .dst_conn_id = b->id()}, s, hdr);
  net.ep[1]->on_packet_header_only(net.now, kPeerA, hdr, n, 99, false);
  EXPECT_EQ(net.ep[1]->stats().malformed_dropped, before + 1);
  EXPECT_EQ(b->stats().segments_received, 0u);
}

}  // namespace
}  // namespace megascale::engine::testing
