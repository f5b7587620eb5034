// The connection handle: round trips in both modes within 128 bytes, and every refusal names its cause.
#include "megascale/wire/verbs/handle.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "megascale/engine/crc32c.h"

namespace megascale::wire::verbs {
namespace {

ConnHandle ud_handle(uint32_t lanes) {
  ConnHandle h;
  h.mode = WireMode::kUd;
  h.mtu_bytes = 1024;
  h.gid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 2, 15};
  h.qkey = 0x4D530001;
  h.lane_count = lanes;
  for (uint32_t i = 0; i < lanes; ++i)
    h.lanes[i] = {.qpn = 0x11 + i, .psn = 0, .sport = uint16_t(49152 + 7 * i)};
  return h;
}

ConnHandle rc_handle(uint32_t lanes) {
  ConnHandle h = ud_handle(lanes);
  h.mode = WireMode::kRc;
  h.mtu_bytes = 4096;
  h.qkey = 0;
  h.rkey = 0xabcdef01;
  h.ring_addr = 0x7f0012345000;
  h.ring_slots = 64;
  h.slot_bytes = 4096 + 72;
  for (uint32_t i = 0; i < lanes; ++i) h.lanes[i].psn = 0xFFFFFF - i;
  return h;
}

std::vector<uint8_t> encode(const ConnHandle& h) {
  uint8_t buf[kMaxHandleBytes];
  Result<size_t> n = encode_handle(h, buf);
  EXPECT_TRUE(n.ok()) << n.error().message;
  return n.ok() ? std::vector<uint8_t>(buf, buf + *n) : std::vector<uint8_t>{};
}

std::string decode_error(const std::vector<uint8_t>& b) {
  Result<ConnHandle> h = decode_handle(b.data(), b.size());
  return h.ok() ? "" : h.error().message;
}

// Re-seals the CRC after a test changed a field, so that the field's own check is what refuses it.
void reseal(std::vector<uint8_t>& b) {
  const uint32_t crc = engine::crc32c(b.data(), b.size() - 4);
  std::memcpy(b.data() + b.size() - 4, &crc, 4);
}

void expect_same(const ConnHandle& a, const ConnHandle& b) {
  EXPECT_EQ(a.mode, b.mode);
  EXPECT_EQ(a.mtu_bytes, b.mtu_bytes);
  EXPECT_EQ(a.gid, b.gid);
  EXPECT_EQ(a.qkey, b.qkey);
  EXPECT_EQ(a.rkey, b.rkey);
  EXPECT_EQ(a.ring_addr, b.ring_addr);
  EXPECT_EQ(a.ring_slots, b.ring_slots);
  EXPECT_EQ(a.slot_bytes, b.slot_bytes);
  ASSERT_EQ(a.lane_count, b.lane_count);
  for (uint32_t i = 0; i < a.lane_count; ++i) {
    EXPECT_EQ(a.lanes[i].qpn, b.lanes[i].qpn) << i;
    EXPECT_EQ(a.lanes[i].psn, b.lanes[i].psn) << i;
    EXPECT_EQ(a.lanes[i].sport, b.lanes[i].sport) << i;
  }
}

TEST(VerbsHandle, UdAndRcRoundTripAtEveryLaneCountWithin128Bytes) {
  for (uint32_t lanes = 1; lanes <= kMaxHandleLanes; ++lanes) {
    for (const ConnHandle& h : {ud_handle(lanes), rc_handle(lanes)}) {
      std::vector<uint8_t> b = encode(h);
      ASSERT_EQ(b.size(), 48 + 8 * lanes);
      ASSERT_LE(b.size(), kMaxHandleBytes);
      Result<ConnHandle> back = decode_handle(b.data(), b.size());
      ASSERT_TRUE(back.ok()) << back.error().message;
      expect_same(h, *back);
    }
  }
}

TEST(VerbsHandle, EncodeRefusesWhatTheLayoutCannotHold) {
  uint8_t buf[kMaxHandleBytes];
  ConnHandle h = ud_handle(kMaxHandleLanes);
  h.lane_count = kMaxHandleLanes + 1;
  EXPECT_EQ(encode_handle(h, buf).error().message,
            "verbs connection handle: lanes 11 (1..10 fit in 128 bytes)");
  h = ud_handle(2);
  h.mtu_bytes = 1500;
  EXPECT_EQ(encode_handle(h, buf).error().message,
            "verbs connection handle: mtu 1500 is not an IB MTU (256..4096)");
  h = ud_handle(2);
  h.lanes[1].qpn = 1;
  EXPECT_EQ(encode_handle(h, buf).error().message, "verbs connection handle: lane 1: qpn 1");
  h = rc_handle(2);
  h.ring_addr = 0;
  EXPECT_NE(encode_handle(h, buf).error().message.find("an RC handle needs its receive ring"),
            std::string::npos);
  h = ud_handle(1);
  h.qkey = 0x80000000;
  EXPECT_NE(encode_handle(h, buf).error().message.find("privileged"), std::string::npos);
}

TEST(VerbsHandle, DecodeRefusesTruncatedForeignAndOtherVersions) {
  std::vector<uint8_t> b = encode(ud_handle(4));
  EXPECT_EQ(decode_error({b.begin(), b.begin() + 20}),
            "verbs connection handle: 20 bytes, shorter than the smallest handle (56)");
  std::vector<uint8_t> cut(b.begin(), b.end() - 8);
  EXPECT_EQ(decode_error(cut), "verbs connection handle: 72 bytes, but 4 lanes make 80");
  std::vector<uint8_t> foreign = b;
  foreign[0] = 'N';
  foreign[1] = 'C';
  EXPECT_EQ(decode_error(foreign), "verbs connection handle: magic 0x434e, not a verbs handle (0x564d)");
  std::vector<uint8_t> newer = b;
  newer[2] = 2;
  EXPECT_EQ(decode_error(newer),
            "verbs connection handle: version 2; this build reads version 1 (both ends must run the same "
            "megascale)");
}

TEST(VerbsHandle, DecodeRefusesDamagedBytesAsDamaged) {
  const std::vector<uint8_t> b = encode(rc_handle(3));
  for (size_t i = 5; i < b.size(); ++i) {  // past magic, version and lane count
    std::vector<uint8_t> d = b;
    d[i] ^= 0x10;
    EXPECT_EQ(decode_error(d), "verbs connection handle: CRC mismatch (damaged bytes)") << "byte " << i;
  }
}

TEST(VerbsHandle, DecodeRefusesFieldsOutOfRangeEvenWithAGoodCrc) {
  std::vector<uint8_t> b = encode(ud_handle(2));
  std::vector<uint8_t> d = b;
  d[3] = 7;
  reseal(d);
  EXPECT_EQ(decode_error(d), "verbs connection handle: mode 7 (1 UD, 2 RC)");
  d = b;
  d[5] = 6;
  reseal(d);
  EXPECT_EQ(decode_error(d), "verbs connection handle: mtu code 6 (1..5: 256..4096)");
  d = b;
  d[4] = 0;
  EXPECT_EQ(decode_error(d), "verbs connection handle: lanes 0 (1..10)");
  d = b;
  std::memset(d.data() + 44 + 8, 0, 3);  // lane 1's qpn := 0
  reseal(d);
  EXPECT_EQ(decode_error(d), "verbs connection handle: lane 1: qpn 0 is a special QP");
  d = b;
  d[28] = 1;  // an rkey in a UD handle
  reseal(d);
  EXPECT_EQ(decode_error(d), "verbs connection handle: a UD handle carries RC ring fields");
  d = b;
  d[44 + 3] = 1;  // a PSN in a UD lane
  reseal(d);
  EXPECT_EQ(decode_error(d), "verbs connection handle: lane 0: a UD lane carries a PSN");
  std::vector<uint8_t> r = encode(rc_handle(1));
  std::memset(r.data() + 6, 0, 2);  // ring_slots := 0
  reseal(r);
  EXPECT_NE(decode_error(r).find("an RC handle without its receive ring"), std::string::npos);
}

}  // namespace
}  // namespace megascale::wire::verbs
