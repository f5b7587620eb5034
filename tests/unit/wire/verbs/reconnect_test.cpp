// The RC re-connect message: round trip, told apart from engine packets by its magic, and refusals
// that name what is wrong.
#include "megascale/wire/verbs/reconnect.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "megascale/engine/crc32c.h"
#include "megascale/engine/packet.h"

namespace megascale::wire::verbs {
namespace {

std::vector<uint8_t> encode(const ReconnectMsg& m) {
  std::vector<uint8_t> b(kReconnectBytes);
  Status s = encode_reconnect(m, b.data());
  EXPECT_TRUE(s.ok()) << s.error().message;
  return b;
}

std::string error_of(const std::vector<uint8_t>& b) {
  Result<ReconnectMsg> m = decode_reconnect(b.data(), b.size());
  return m.ok() ? "" : m.error().message;
}

void reseal(std::vector<uint8_t>& b) {
  const uint32_t crc = engine::crc32c(b.data(), 24);
  std::memcpy(b.data() + 24, &crc, 4);
}

const ReconnectMsg kMsg{
    .conn_id = 0x1122334455667788, .lane = 63, .epoch = 0xFFFF, .qpn = 0xFFFFFF, .psn = 0xABCDEF};

TEST(VerbsReconnect, RoundTripsEveryField) {
  std::vector<uint8_t> b = encode(kMsg);
  Result<ReconnectMsg> m = decode_reconnect(b.data(), b.size());
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->conn_id, kMsg.conn_id);
  EXPECT_EQ(m->lane, kMsg.lane);
  EXPECT_EQ(m->epoch, kMsg.epoch);
  EXPECT_EQ(m->qpn, kMsg.qpn);
  EXPECT_EQ(m->psn, kMsg.psn);
}

TEST(VerbsReconnect, ToldApartFromEnginePackets) {
  EXPECT_TRUE(is_reconnect(encode(kMsg).data(), kReconnectBytes));
  uint8_t hdr[engine::kMaxHeaderBytes];
  const size_t n = engine::encode_cnp({.lane = 1, .dst_conn_id = 5}, {.lane = 1}, hdr);
  EXPECT_FALSE(is_reconnect(hdr, n));
  engine::Packet p;
  std::vector<uint8_t> b = encode(kMsg);
  EXPECT_EQ(engine::decode_packet(b.data(), b.size(), p), engine::DecodeResult::kBadMagic);
}

TEST(VerbsReconnect, RefusalsNameTheCause) {
  std::vector<uint8_t> b = encode(kMsg);
  EXPECT_EQ(error_of({b.begin(), b.end() - 1}), "RC re-connect message: 27 bytes, not 28");
  std::vector<uint8_t> d = b;
  d[0] = 0;
  EXPECT_EQ(error_of(d), "RC re-connect message: not one (magic)");
  d = b;
  d[4] = 2;
  EXPECT_EQ(error_of(d), "RC re-connect message: version 2; this build reads version 1");
  for (size_t i = 5; i < 28; ++i) {
    d = b;
    d[i] ^= 0x40;
    EXPECT_EQ(error_of(d), "RC re-connect message: CRC mismatch (damaged bytes)") << "byte " << i;
  }
  d = b;
  d[5] = 64;
  reseal(d);
  EXPECT_EQ(error_of(d), "RC re-connect message: lane 64 (0..63)");
  d = b;
  std::memset(d.data() + 16, 0, 4);
  reseal(d);
  EXPECT_EQ(error_of(d), "RC re-connect message: qpn 0");
  uint8_t out[kReconnectBytes];
  ReconnectMsg m = kMsg;
  m.psn = 1 << 24;
  EXPECT_EQ(encode_reconnect(m, out).error().message, "RC re-connect message: psn 16777216 > 24 bits");
}

}  // namespace
}  // namespace megascale::wire::verbs
