// verbs-rc's set-up message: every field round-trips, the engine's decoder and the re-connect message
// never take it for theirs, and every damaged or out-of-range byte is refused naming what is wrong.
#include "megascale/wire/verbs/rc_setup.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "megascale/engine/crc32c.h"
#include "megascale/engine/packet.h"
#include "megascale/wire/verbs/reconnect.h"

namespace megascale::wire::verbs {
namespace {

RcSetupMsg sample() {
  RcSetupMsg m;
  m.kind = RcSetupKind::kAnswer;
  m.lane = 3;
  m.epoch = 0xBEEF;
  for (int i = 0; i < 16; ++i) m.home_gid[i] = static_cast<uint8_t>(0xA0 + i);
  m.home_qpn = 0x000011;
  m.qpn = 0xFFFFFF;
  m.psn = 0xABCDEF;
  m.mtu_bytes = 1024;
  m.ring = {.addr = 0x7F0012345000, .rkey = 0xDEADBEEF, .slots = 64, .slot_bytes = 4224};
  m.ring_lanes = 4;
  m.port_id = 0x0123456789ABCDEF;
  return m;
}

std::vector<uint8_t> encode(const RcSetupMsg& m) {
  std::vector<uint8_t> b(kRcSetupBytes);
  Status s = encode_rc_setup(m, b.data());
  EXPECT_TRUE(s.ok()) << s.error().message;
  return b;
}

std::string error_of(const std::vector<uint8_t>& b) {
  Result<RcSetupMsg> m = decode_rc_setup(b.data(), b.size());
  return m.ok() ? "" : m.error().message;
}

void reseal(std::vector<uint8_t>& b) {
  const uint32_t crc = engine::crc32c(b.data(), 76);
  std::memcpy(b.data() + 76, &crc, 4);
}

template <class T>
void poke(std::vector<uint8_t>& b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof v);
  reseal(b);
}

TEST(VerbsRcSetup, RoundTripsEveryField) {
  const RcSetupMsg in = sample();
  std::vector<uint8_t> b = encode(in);
  Result<RcSetupMsg> m = decode_rc_setup(b.data(), b.size());
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->kind, RcSetupKind::kAnswer);
  EXPECT_EQ(m->lane, 3);
  EXPECT_EQ(m->epoch, 0xBEEF);
  EXPECT_EQ(m->home_gid, in.home_gid);
  EXPECT_EQ(m->home_qpn, 0x11u);
  EXPECT_EQ(m->qpn, 0xFFFFFFu);
  EXPECT_EQ(m->psn, 0xABCDEFu);
  EXPECT_EQ(m->mtu_bytes, 1024u);
  EXPECT_EQ(m->ring.addr, in.ring.addr);
  EXPECT_EQ(m->ring.rkey, 0xDEADBEEFu);
  EXPECT_EQ(m->ring.slots, 64u);
  EXPECT_EQ(m->ring.slot_bytes, 4224u);
  EXPECT_EQ(m->ring_lanes, 4u);
  EXPECT_EQ(m->port_id, 0x0123456789ABCDEFu);
}

TEST(VerbsRcSetup, IsNeitherAnEnginePacketNorAReconnectMessage) {
  std::vector<uint8_t> b = encode(sample());
  EXPECT_TRUE(is_rc_setup(b.data(), b.size()));
  EXPECT_FALSE(is_reconnect(b.data(), b.size()));
  engine::Packet pkt;
  EXPECT_NE(engine::decode_packet(b.data(), b.size(), pkt), engine::DecodeResult::kOk);
  std::vector<uint8_t> r(kReconnectBytes);
  ASSERT_TRUE(encode_reconnect({.conn_id = 1, .lane = 0, .epoch = 0, .qpn = 2, .psn = 0}, r.data()).ok());
  EXPECT_FALSE(is_rc_setup(r.data(), r.size()));
  EXPECT_FALSE(is_rc_setup(b.data(), 3));
}

TEST(VerbsRcSetup, RefusesDamagedBytesNamingWhatIsWrong) {
  const std::vector<uint8_t> good = encode(sample());
  std::vector<uint8_t> b = good;
  b.pop_back();
  EXPECT_NE(error_of(b).find("79 bytes, not 80"), std::string::npos) << error_of(b);
  b = good;
  b[1] ^= 1;
  EXPECT_NE(error_of(b).find("magic"), std::string::npos) << error_of(b);
  b = good;
  b[4] = 3;
  EXPECT_NE(error_of(b).find("version 3"), std::string::npos) << error_of(b);
  // Every single flipped bit past the magic and version is caught by the CRC.
  for (size_t byte = 5; byte < kRcSetupBytes; ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      b = good;
      b[byte] ^= static_cast<uint8_t>(1u << bit);
      EXPECT_NE(error_of(b).find("CRC mismatch"), std::string::npos) << "byte " << byte << " bit " << bit;
    }
  }
}

// An older build's message (version 1: 72 bytes, no port id, CRC at 68) is named as what it is, not
// taken for a damaged or short one.
TEST(VerbsRcSetup, RefusesVersion1NamingTheVersion) {
  std::vector<uint8_t> v1(72, 0);
  const uint32_t magic = kRcSetupMagic;
  std::memcpy(v1.data(), &magic, 4);
  v1[4] = 1;
  v1[5] = 1;
  const uint32_t crc = engine::crc32c(v1.data(), 68);
  std::memcpy(v1.data() + 68, &crc, 4);
  const std::string e = error_of(v1);
  EXPECT_NE(e.find("version 1; this build reads version 2"), std::string::npos) << e;
  EXPECT_EQ(e.find("bytes"), std::string::npos) << e;
}

TEST(VerbsRcSetup, RefusesSealedFieldsOutOfRange) {
  const std::vector<uint8_t> good = encode(sample());
  struct Case {
    size_t at;
    uint32_t value;
    size_t width;
    const char* expect;
  };
  const Case cases[] = {
      {5, 3, 1, "kind 3"},        {6, 4, 1, "lane 4 beyond the ring's 4"},
      {7, 1, 1, "reserved"},      {28, 1, 4, "home qpn 1"},
      {32, 0x1000000, 4, "qpn"},  {36, 0x1000000, 4, "psn 16777216 > 24 bits"},
      {40, 1000, 4, "mtu 1000"},  {40, 8192, 4, "mtu 8192"},
      {56, 0, 4, "ring slots 0"}, {60, 0, 4, "ring slot bytes 0"},
      {64, 0, 4, "ring lanes 0"}, {64, 65, 4, "ring lanes 65"},
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> b = good;
    if (c.width == 1) {
      poke<uint8_t>(b, c.at, static_cast<uint8_t>(c.value));
    } else {
      poke<uint32_t>(b, c.at, c.value);
    }
    EXPECT_NE(error_of(b).find(c.expect), std::string::npos) << c.expect << ": " << error_of(b);
  }
  std::vector<uint8_t> b = good;
  poke<uint64_t>(b, 44, ~uint64_t{0} - 10);
  EXPECT_NE(error_of(b).find("wraps"), std::string::npos) << error_of(b);
  b = good;
  poke<uint64_t>(b, 68, 0);
  EXPECT_NE(error_of(b).find("port id 0"), std::string::npos) << error_of(b);
}

TEST(VerbsRcSetup, EncodeRefusesWhatDecodeWouldRefuse) {
  RcSetupMsg m = sample();
  m.qpn = 1;
  std::vector<uint8_t> b(kRcSetupBytes);
  Status s = encode_rc_setup(m, b.data());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("qpn 1"), std::string::npos) << s.error().message;
}

// perf's server opens its wire with the largest segment and lets each client choose; the engine's
// handshake gives the connection the smaller. The server's port must still take a client whose ring
// slots are sized for 4 KiB segments, and write it no packet larger than those slots.
TEST(VerbsRcSetup, APeerWithSmallerRingSlotsIsTakenAndWrittenWithinThem) {
  const uint32_t server = rc_slot_bytes(engine::kMaxSegmentPayload);
  const uint32_t client = rc_slot_bytes(4096);
  EXPECT_EQ(client, 4224u);
  EXPECT_EQ(server, 65088u);
  Status s = check_peer_slots(server, client);
  EXPECT_TRUE(s.ok()) << s.error().message;
  s = check_peer_slots(client, server);
  EXPECT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(rc_write_limit(server, client), client);
  EXPECT_EQ(rc_write_limit(client, server), client);
  // The connection's segments (4096) and every header fit the limit; a 65000-byte segment does not.
  EXPECT_LE(4096 + engine::kSegHeaderBytes, rc_write_limit(server, client));
  EXPECT_LE(engine::kMaxHeaderBytes, rc_write_limit(server, client));
  EXPECT_GT(engine::kMaxSegmentPayload + engine::kSegHeaderBytes, rc_write_limit(server, client));
}

TEST(VerbsRcSetup, SlotsAreWholeLinesHoldingEveryHeader) {
  EXPECT_EQ(rc_slot_bytes(1) % 64, 0u);
  EXPECT_GE(rc_slot_bytes(1), engine::kMaxHeaderBytes);
  EXPECT_GE(rc_slot_bytes(952), 952 + engine::kSegHeaderBytes);
  EXPECT_LT(rc_slot_bytes(952), 952 + engine::kSegHeaderBytes + 64);
}

TEST(VerbsRcSetup, RefusesPeerSlotsTooSmallForAHeaderNamingTheSizes) {
  const uint32_t tiny = static_cast<uint32_t>(engine::kMaxHeaderBytes) - 1;
  Status s = check_peer_slots(4224, tiny);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find(std::to_string(tiny) + " bytes"), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("4224"), std::string::npos) << s.error().message;
}

}  // namespace
}  // namespace megascale::wire::verbs
