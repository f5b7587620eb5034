// The wire format: every type round-trips; decoding rejects every truncation, every damaged header
// byte, damaged payloads, and fields out of range (re-sealed with a valid CRC, so the field check
// itself is what rejects them).
#include "megascale/engine/packet.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string_view>
#include <vector>

#include "megascale/engine/crc32c.h"

namespace megascale::engine {
namespace {

// Recomputes the header CRC after a test edits a field (as a buggy or hostile sender would send it).
void reseal(uint8_t* p, size_t header_len) {
  std::memset(p + 20, 0, 4);
  const uint32_t c = crc32c(p, header_len);
  std::memcpy(p + 20, &c, 4);
}

std::vector<uint8_t> make_data_seg(uint64_t seq, const std::vector<uint8_t>& payload, uint64_t offset,
                                   uint64_t msg_len, uint8_t flags = 0) {
  std::vector<uint8_t> buf(kMaxHeaderBytes + payload.size());
  SegHeader s;
  s.seq = seq;
  s.send_ts_ns = 123'456'789;
  s.payload_len = static_cast<uint32_t>(payload.size());
  s.payload_crc = payload.empty() ? 0 : crc32c(payload.data(), payload.size());
  s.slot = 77;
  s.tag = 5;
  s.offset = offset;
  s.msg_len = msg_len;
  const size_t h =
      encode_seg(CommonHeader{.lane = 3, .flags = flags, .dst_conn_id = 0xABCDEF}, s, buf.data());
  EXPECT_EQ(h, kSegHeaderBytes);
  if (!payload.empty()) std::memcpy(buf.data() + h, payload.data(), payload.size());
  buf.resize(h + payload.size());
  return buf;
}

TEST(Packet, DataSegmentRoundTrips) {
  const std::vector<uint8_t> payload = {1, 2, 3, 4, 5, 6, 7};
  const auto buf =
      make_data_seg(42, payload, (1ULL << 33) + 5, (1ULL << 33) + 12, kFlagLast | kFlagRetransmit);
  Packet p;
  ASSERT_EQ(decode_packet(buf.data(), buf.size(), p), DecodeResult::kOk);
  EXPECT_EQ(p.hdr.type, PacketType::kSeg);
  EXPECT_EQ(p.hdr.version, kVersion);
  EXPECT_EQ(p.hdr.lane, 3);
  EXPECT_EQ(p.hdr.flags, kFlagLast | kFlagRetransmit);
  EXPECT_EQ(p.hdr.dst_conn_id, 0xABCDEFu);
  EXPECT_EQ(p.seg.seq, 42u);
  EXPECT_EQ(p.seg.send_ts_ns, 123'456'789);
  EXPECT_EQ(p.seg.slot, 77u);
  EXPECT_EQ(p.seg.tag, 5);
  EXPECT_EQ(p.seg.offset, (1ULL << 33) + 5);
  EXPECT_EQ(p.seg.msg_len, (1ULL << 33) + 12);
  ASSERT_EQ(p.payload_len, payload.size());
  EXPECT_EQ(std::memcmp(p.payload, payload.data(), payload.size()), 0);
  // Magic "MSCL" in memory order.
  EXPECT_EQ(std::string_view(reinterpret_cast<const char*>(buf.data()), 4), "MSCL");
}

TEST(Packet, CreditAckCnpHandshakeFinRstRoundTrip) {
  uint8_t b[kMaxHeaderBytes];
  Packet p;
  SegHeader c;
  c.seq = 9;
  c.slot = 4;
  c.tag = -1;
  c.capacity_bytes = 1ULL << 40;
  size_t n = encode_seg(CommonHeader{.flags = kFlagCredit, .dst_conn_id = 7}, c, b);
  ASSERT_EQ(decode_packet(b, n, p), DecodeResult::kOk);
  EXPECT_EQ(p.seg.tag, -1);
  EXPECT_EQ(p.seg.capacity_bytes, 1ULL << 40);
  EXPECT_EQ(p.payload_len, 0u);

  AckHeader a;
  a.cum_ack = 100;
  a.echo_seq = 130;
  a.echo_ts_ns = -5;
  a.remote_delay_ns = 1234;
  a.ce_count = 3;
  a.echo_lane = 63;
  a.nsack = kMaxSackRanges;
  for (uint8_t i = 0; i < kMaxSackRanges; ++i) a.sack[i] = SackRange{102 + i * 4ULL, 104 + i * 4ULL};
  n = encode_ack(CommonHeader{.flags = kFlagAckRequest, .dst_conn_id = 7}, a, b);
  EXPECT_EQ(n, kAckMaxBytes);
  ASSERT_EQ(decode_packet(b, n, p), DecodeResult::kOk);
  EXPECT_EQ(p.hdr.flags, kFlagAckRequest);
  EXPECT_EQ(p.ack.cum_ack, 100u);
  EXPECT_EQ(p.ack.echo_ts_ns, -5);
  EXPECT_EQ(p.ack.remote_delay_ns, 1234u);
  EXPECT_EQ(p.ack.ce_count, 3);
  EXPECT_EQ(p.ack.echo_lane, 63);
  ASSERT_EQ(p.ack.nsack, kMaxSackRanges);
  EXPECT_EQ(p.ack.sack[15].start, 162u);
  EXPECT_EQ(p.ack.sack[15].end, 164u);

  n = encode_cnp(CommonHeader{.dst_conn_id = 7}, CnpBody{.lane = 12}, b);
  ASSERT_EQ(decode_packet(b, n, p), DecodeResult::kOk);
  EXPECT_EQ(p.hdr.type, PacketType::kCnp);
  EXPECT_EQ(p.cnp.lane, 12);

  HandshakeBody hs{.src_conn_id = 99,
                   .version_min = 1,
                   .version_max = kVersion + 1,
                   .lanes = 8,
                   .cc_kind = 2,
                   .mss_bytes = 8000,
                   .recv_slots = 256,
                   .window_segments = 4096};
  n = encode_handshake(CommonHeader{.version = kVersion + 1, .type = PacketType::kSyn, .dst_conn_id = 0}, hs,
                       b);
  ASSERT_EQ(decode_packet(b, n, p), DecodeResult::kOk);  // a future version's SYN still decodes
  EXPECT_EQ(p.hdr.type, PacketType::kSyn);
  EXPECT_EQ(p.hdr.version, kVersion + 1);
  EXPECT_EQ(p.handshake.src_conn_id, 99u);
  EXPECT_EQ(p.handshake.version_max, kVersion + 1);
  EXPECT_EQ(p.handshake.lanes, 8);
  EXPECT_EQ(p.handshake.cc_kind, 2);
  EXPECT_EQ(p.handshake.mss_bytes, 8000u);
  EXPECT_EQ(p.handshake.recv_slots, 256u);
  EXPECT_EQ(p.handshake.window_segments, 4096u);

  n = encode_fin(CommonHeader{.flags = kFlagFinReply, .dst_conn_id = 7},
                 FinBody{.final_seq = 5, .unfinished_sends = 2, .unfinished_recvs = 3, .cum_ack = 11}, b);
  ASSERT_EQ(decode_packet(b, n, p), DecodeResult::kOk);
  EXPECT_EQ(p.fin.final_seq, 5u);
  EXPECT_EQ(p.fin.unfinished_sends, 2u);
  EXPECT_EQ(p.fin.unfinished_recvs, 3u);
  EXPECT_EQ(p.fin.cum_ack, 11u);

  const std::string text(200, 'x');  // cut to kMaxRstText
  RstBody r;
  r.reason = RstReason::kVersionMismatch;
  r.ref_conn_id = 55;
  r.text = text.data();
  r.text_len = static_cast<uint16_t>(text.size());
  n = encode_rst(CommonHeader{.version = 9, .dst_conn_id = 0}, r, b);
  EXPECT_EQ(n, kRstFixedBytes + kMaxRstText);
  ASSERT_EQ(decode_packet(b, n, p), DecodeResult::kOk);
  EXPECT_EQ(p.rst.reason, RstReason::kVersionMismatch);
  EXPECT_EQ(p.rst.ref_conn_id, 55u);
  EXPECT_EQ(p.rst.text_view(), std::string(kMaxRstText, 'x'));
}

TEST(Packet, HeaderLengthIsWhatEachEncoderWrote) {
  uint8_t b[kMaxHeaderBytes];
  AckHeader a;
  a.nsack = 3;
  size_t n = encode_ack(CommonHeader{.dst_conn_id = 1}, a, b);
  EXPECT_EQ(packet_header_len(b, n), n);
  EXPECT_EQ(n, kAckFixedBytes + 3 * 16);
  EXPECT_EQ(packet_header_len(b, kAckFixedBytes - 1), kAckFixedBytes);  // nsack not present yet

  const std::string text(40, 'r');
  RstBody r;
  r.text = text.data();
  r.text_len = static_cast<uint16_t>(text.size());
  n = encode_rst(CommonHeader{.dst_conn_id = 0}, r, b);
  EXPECT_EQ(packet_header_len(b, n), n);
  EXPECT_EQ(n, kRstFixedBytes + 40);

  n = encode_seg(CommonHeader{.dst_conn_id = 1}, SegHeader{}, b);
  EXPECT_EQ(packet_header_len(b, n + 100), kSegHeaderBytes);  // the payload is not header
  n = encode_fin(CommonHeader{.dst_conn_id = 1}, FinBody{}, b);
  EXPECT_EQ(packet_header_len(b, n), kFinBytes);

  EXPECT_EQ(packet_header_len(b, kCommonHeaderBytes - 1), 0u);  // no type byte to judge by
  b[5] = 0;
  EXPECT_EQ(packet_header_len(b, n), 0u);
  b[5] = 8;
  EXPECT_EQ(packet_header_len(b, n), 0u);
}

TEST(Packet, EveryTruncationIsRejected) {
  const auto buf = make_data_seg(1, std::vector<uint8_t>(100, 9), 0, 100, kFlagLast);
  Packet p;
  for (size_t len = 0; len < buf.size(); ++len) {
    EXPECT_NE(decode_packet(buf.data(), len, p), DecodeResult::kOk) << len;
  }
  std::vector<uint8_t> longer = buf;
  longer.push_back(0);  // a trailing byte: the payload length no longer matches
  EXPECT_EQ(decode_packet(longer.data(), longer.size(), p), DecodeResult::kBadLength);
}

TEST(Packet, EveryHeaderBitFlipIsRejectedAndPayloadDamageIsNamed) {
  const auto buf = make_data_seg(1, std::vector<uint8_t>(100, 9), 0, 100, kFlagLast);
  Packet p;
  for (size_t byte = 0; byte < kSegHeaderBytes; ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<uint8_t> bad = buf;
      bad[byte] ^= static_cast<uint8_t>(1 << bit);
      const DecodeResult r = decode_packet(bad.data(), bad.size(), p);
      EXPECT_NE(r, DecodeResult::kOk) << byte << ":" << bit;
      EXPECT_NE(r, DecodeResult::kBadPayloadCrc) << byte << ":" << bit;
    }
  }
  std::vector<uint8_t> bad = buf;
  bad[kSegHeaderBytes + 50] ^= 0x80;
  EXPECT_EQ(decode_packet(bad.data(), bad.size(), p), DecodeResult::kBadPayloadCrc);
  EXPECT_EQ(p.seg.seq, 1u);  // the intact header is still reported
  EXPECT_EQ(decode_packet(bad.data(), bad.size(), p, /*verify_payload_crc=*/false), DecodeResult::kOk);
}

TEST(Packet, BadMagicAndVersion) {
  auto buf = make_data_seg(1, {1}, 0, 1, kFlagLast);
  Packet p;
  auto bad = buf;
  bad[0] = 'X';
  EXPECT_EQ(decode_packet(bad.data(), bad.size(), p), DecodeResult::kBadMagic);
  bad = buf;
  bad[4] = kVersion + 1;  // a data packet of a version this engine does not implement, correctly sealed
  reseal(bad.data(), kSegHeaderBytes);
  EXPECT_EQ(decode_packet(bad.data(), bad.size(), p), DecodeResult::kBadVersion);
  bad[4] = 0;
  reseal(bad.data(), kSegHeaderBytes);
  EXPECT_EQ(decode_packet(bad.data(), bad.size(), p), DecodeResult::kBadVersion);
  bad = buf;
  bad[5] = 42;
  reseal(bad.data(), kSegHeaderBytes);
  EXPECT_EQ(decode_packet(bad.data(), bad.size(), p), DecodeResult::kBadType);
}

TEST(Packet, UncheckedPayloadNeedsVersion2AndACrcFieldOfZero) {
  const std::vector<uint8_t> payload = {9, 8, 7, 6, 5};
  auto buf = make_data_seg(3, payload, 0, 5, kFlagLast | kFlagNoPayloadCrc);
  Packet p;
  // make_data_seg filled in the CRC: a flagged segment must carry 0 there.
  EXPECT_EQ(decode_packet(buf.data(), buf.size(), p), DecodeResult::kBadField);
  set_seg_payload_crc(buf.data(), 0);
  ASSERT_EQ(decode_packet(buf.data(), buf.size(), p), DecodeResult::kOk);
  EXPECT_EQ(p.hdr.flags, kFlagLast | kFlagNoPayloadCrc);
  EXPECT_EQ(p.payload_len, 5u);
  // Nothing checks the payload: damage there decodes as it is (the trade EngineConfig::payload_crc makes).
  auto damaged = buf;
  damaged[kSegHeaderBytes + 2] ^= 0x40;
  EXPECT_EQ(decode_packet(damaged.data(), damaged.size(), p), DecodeResult::kOk);
  // Version 1 has no such flag.
  auto v1 = buf;
  v1[4] = 1;
  reseal(v1.data(), kSegHeaderBytes);
  EXPECT_EQ(decode_packet(v1.data(), v1.size(), p), DecodeResult::kBadField);
  // Nor does a segment without payload take it.
  auto empty = make_data_seg(4, {}, 0, 0, kFlagLast | kFlagNoPayloadCrc);
  EXPECT_EQ(decode_packet(empty.data(), empty.size(), p), DecodeResult::kBadField);
  // A version-1 segment with a CRC decodes as before, and its payload is checked.
  auto checked = make_data_seg(5, payload, 0, 5, kFlagLast);
  checked[4] = 1;
  reseal(checked.data(), kSegHeaderBytes);
  EXPECT_EQ(decode_packet(checked.data(), checked.size(), p), DecodeResult::kOk);
  checked[kSegHeaderBytes] ^= 1;
  EXPECT_EQ(decode_packet(checked.data(), checked.size(), p), DecodeResult::kBadPayloadCrc);
}

TEST(Packet, FieldsOutOfRangeAreRejectedEvenWithAValidCrc) {
  Packet p;
  auto expect_field = [&](std::vector<uint8_t> b, size_t hlen, const char* what) {
    reseal(b.data(), hlen);
    const DecodeResult r = decode_packet(b.data(), b.size(), p);
    EXPECT_TRUE(r == DecodeResult::kBadField || r == DecodeResult::kBadLength)
        << what << ": " << to_string(r);
  };
  const auto seg = make_data_seg(1, {1, 2, 3}, 10, 13, kFlagLast);
  auto b = seg;
  b[6] = 64;  // lane
  expect_field(b, kSegHeaderBytes, "lane 64");
  b = seg;
  b[7] = 0;  // LAST missing on the last segment
  expect_field(b, kSegHeaderBytes, "LAST flag");
  b = seg;
  b[7] |= 0x80;  // unknown flag
  expect_field(b, kSegHeaderBytes, "unknown flag");
  b = seg;
  b[64] = 12;  // msg_len 12 < offset 10 + 3
  expect_field(b, kSegHeaderBytes, "offset + len > msg_len");
  b = seg;
  std::memset(b.data() + 8, 0, 8);  // dst_conn_id 0
  expect_field(b, kSegHeaderBytes, "dst 0");
  b = seg;
  b[16] = 1;  // reserved
  expect_field(b, kSegHeaderBytes, "reserved");
  b = seg;
  std::memset(b.data() + 52, 0xFF, 4);  // DATA tag -1
  expect_field(b, kSegHeaderBytes, "negative data tag");

  uint8_t hdr[kMaxHeaderBytes];
  AckHeader a;
  a.cum_ack = 10;
  a.nsack = 1;
  a.sack[0] = SackRange{12, 11};  // inverted
  size_t n = encode_ack(CommonHeader{.dst_conn_id = 1}, a, hdr);
  expect_field(std::vector<uint8_t>(hdr, hdr + n), n, "inverted SACK");
  a.sack[0] = SackRange{10, 11};  // not above cum_ack
  n = encode_ack(CommonHeader{.dst_conn_id = 1}, a, hdr);
  expect_field(std::vector<uint8_t>(hdr, hdr + n), n, "SACK at cum_ack");
  a.nsack = 0;
  n = encode_ack(CommonHeader{.dst_conn_id = 1}, a, hdr);
  hdr[55] = 17;  // nsack 17: the length check catches it before anything else
  EXPECT_NE(decode_packet(hdr, n, p), DecodeResult::kOk);

  HandshakeBody hs{.src_conn_id = 0};
  n = encode_handshake(CommonHeader{.type = PacketType::kSyn}, hs, hdr);
  expect_field(std::vector<uint8_t>(hdr, hdr + n), n, "SYN src id 0");
  hs.src_conn_id = 5;
  hs.version_min = 3;
  hs.version_max = 2;
  n = encode_handshake(CommonHeader{.type = PacketType::kSyn}, hs, hdr);
  expect_field(std::vector<uint8_t>(hdr, hdr + n), n, "SYN version range inverted");
  hs.version_min = 1;
  n = encode_handshake(CommonHeader{.type = PacketType::kSynAck, .dst_conn_id = 0}, hs, hdr);
  expect_field(std::vector<uint8_t>(hdr, hdr + n), n, "SYN_ACK to id 0");
  // kFlagConfirm belongs to a version-3 SYN_ACK: on a SYN, or on a SYN_ACK of version 2, it is refused.
  hs.version_min = hs.version_max = 3;
  n = encode_handshake(
      CommonHeader{.version = 3, .type = PacketType::kSynAck, .flags = kFlagConfirm, .dst_conn_id = 9}, hs,
      hdr);
  ASSERT_EQ(decode_packet(hdr, n, p), DecodeResult::kOk);
  EXPECT_EQ(p.hdr.flags, kFlagConfirm);
  n = encode_handshake(CommonHeader{.version = 3, .type = PacketType::kSyn, .flags = kFlagConfirm}, hs, hdr);
  expect_field(std::vector<uint8_t>(hdr, hdr + n), n, "SYN with kFlagConfirm");
  hs.version_min = hs.version_max = 2;
  n = encode_handshake(
      CommonHeader{.version = 2, .type = PacketType::kSynAck, .flags = kFlagConfirm, .dst_conn_id = 9}, hs,
      hdr);
  expect_field(std::vector<uint8_t>(hdr, hdr + n), n, "version-2 SYN_ACK with kFlagConfirm");
  hs.version_min = 1;
  hs.version_max = kVersion;
  n = encode_handshake(CommonHeader{.type = PacketType::kSyn}, hs, hdr);
  for (const size_t reserved : {size_t{39}, size_t{52}, size_t{55}}) {
    std::vector<uint8_t> syn(hdr, hdr + n);
    syn[reserved] = 1;
    expect_field(syn, n, "SYN reserved byte");
  }

  RstBody r;
  r.reason = static_cast<RstReason>(99);
  n = encode_rst(CommonHeader{}, r, hdr);
  expect_field(std::vector<uint8_t>(hdr, hdr + n), n, "RST reason 99");
  r.reason = RstReason::kUnknownConnection;
  n = encode_rst(CommonHeader{}, r, hdr);
  ASSERT_EQ(decode_packet(hdr, n, p), DecodeResult::kOk);
  hdr[30] = 1;  // reserved
  expect_field(std::vector<uint8_t>(hdr, hdr + n), n, "RST reserved");
}

}  // namespace
}  // namespace megascale::engine

namespace megascale::engine {
namespace {

// Regression (found by fuzz_packet): a count field claiming a header longer than kMaxHeaderBytes must
// be rejected before the header CRC is computed over a bounded copy, not overflow it.
TEST(PacketDecode, OversizedHeaderCountsAreRejectedNotCopied) {
  std::vector<uint8_t> buf(4096, 0xAB);
  CommonHeader hdr;
  AckHeader ack;
  size_t n = encode_ack(hdr, ack, buf.data());
  ASSERT_GT(n, 0u);
  // Claim 200 SACK ranges (far above kMaxSackRanges): the declared header would be >3 KB. The nsack
  // byte is found by encoding with nsack = 1 and diffing against nsack = 0.
  AckHeader one = ack;
  one.nsack = 1;
  std::vector<uint8_t> b1(4096, 0);
  size_t n1 = encode_ack(hdr, one, b1.data());
  std::vector<uint8_t> b0(4096, 0);
  encode_ack(hdr, ack, b0.data());
  size_t nsack_off = n;
  for (size_t off = 0; off < n; ++off) {
    if (off >= 20 && off < 24) continue;  // header CRC differs too
    if (b0[off] == 0 && b1[off] == 1) {
      nsack_off = off;
      break;
    }
  }
  ASSERT_LT(nsack_off, n) << "nsack byte not found";
  ASSERT_GT(n1, n);
  b0[nsack_off] = 200;
  Packet out;
  EXPECT_EQ(decode_packet(b0.data(), b0.size(), out), DecodeResult::kBadLength);
}

// A wire that sends an ACK late adds the wait to its remote delay: the CRC stays valid, the sum
// saturates, and anything but an ACK is left alone.
TEST(Packet, AckRemoteDelayGrowsInPlace) {
  uint8_t buf[kAckMaxBytes];
  AckHeader a;
  a.cum_ack = 9;
  a.echo_seq = 8;
  a.echo_ts_ns = 1234;
  a.remote_delay_ns = 7'000;
  a.nsack = 2;
  a.sack[0] = {11, 12};
  a.sack[1] = {14, 20};
  const size_t h = encode_ack(CommonHeader{.lane = 1, .dst_conn_id = 5}, a, buf);
  ASSERT_TRUE(add_ack_remote_delay(buf, h, 50'000));
  Packet p;
  ASSERT_EQ(decode_packet(buf, h, p), DecodeResult::kOk);
  EXPECT_EQ(p.ack.remote_delay_ns, 57'000u);
  EXPECT_EQ(p.ack.cum_ack, 9u);
  EXPECT_EQ(p.ack.nsack, 2);
  EXPECT_EQ(p.ack.sack[1].end, 20u);
  ASSERT_TRUE(add_ack_remote_delay(buf, h, 0xFFFFFFFFu));
  ASSERT_EQ(decode_packet(buf, h, p), DecodeResult::kOk);
  EXPECT_EQ(p.ack.remote_delay_ns, 0xFFFFFFFFu);

  const std::vector<uint8_t> seg = make_data_seg(42, {1, 2, 3}, 0, 3);
  std::vector<uint8_t> copy = seg;
  EXPECT_FALSE(add_ack_remote_delay(copy.data(), kSegHeaderBytes, 50'000));
  EXPECT_EQ(copy, seg);
  EXPECT_FALSE(add_ack_remote_delay(buf, kAckFixedBytes - 1, 1));
}

}  // namespace
}  // namespace megascale::engine
