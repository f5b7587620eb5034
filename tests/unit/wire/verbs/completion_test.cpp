// Completion translation: successes of every kind into engine events, the ECN bits of a UD receive's
// GRH (RoCE v2 over IPv4 and IPv6), error and flush completions whose opcode and length are garbage,
// and completions this wire cannot use.
#include "megascale/wire/verbs/completion.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>

namespace megascale::wire::verbs {
namespace {

// A UD receive buffer whose GRH's last 20 bytes are an IPv4 header with `tos` (RoCE v2 over IPv4).
std::array<uint8_t, 40 + 256> ipv4_buffer(uint8_t tos) {
  std::array<uint8_t, 40 + 256> b{};
  uint8_t* ip = b.data() + 20;
  ip[0] = 0x45;  // version 4, IHL 5
  ip[1] = tos;
  ip[8] = 64;  // TTL
  ip[9] = 17;  // UDP
  return b;
}

// The same with an IPv6 header as the GRH (RoCE v2 over IPv6): traffic class across bytes 0-1.
std::array<uint8_t, 40 + 256> ipv6_buffer(uint8_t tc) {
  std::array<uint8_t, 40 + 256> b{};
  b[0] = static_cast<uint8_t>(0x60 | (tc >> 4));
  b[1] = static_cast<uint8_t>((tc & 0x0F) << 4);
  b[6] = 17;
  return b;
}

WorkCompletion ud_recv(uint32_t byte_len, uint32_t slot = 4) {
  WorkCompletion wc;
  wc.wr_id = encode_wr_id({.kind = WrKind::kUdRecv, .lane = 1, .epoch = 0, .slot = slot});
  wc.opcode = WcOpcode::kRecv;
  wc.byte_len = byte_len;
  wc.grh = true;
  wc.src_qp = 0x51;
  return wc;
}

const CompletionContext kUd{.mode = WireMode::kUd, .grh_ipv4 = true, .ring_slots = 0, .slot_bytes = 0};
const CompletionContext kRc{.mode = WireMode::kRc, .grh_ipv4 = true, .ring_slots = 16, .slot_bytes = 4168};

TEST(VerbsGrh, Ipv4TosByteIsReadFromTheLast20Bytes) {
  // DSCP 26 with each ECN codepoint: Not-ECT, ECT(1), ECT(0), CE.
  for (uint8_t ecn = 0; ecn < 4; ++ecn) {
    auto b = ipv4_buffer(static_cast<uint8_t>((26 << 2) | ecn));
    std::optional<uint8_t> tc = grh_traffic_class(b.data(), true);
    ASSERT_TRUE(tc);
    EXPECT_EQ(*tc >> 2, 26);
    EXPECT_EQ(*tc & 3, ecn);
  }
  auto not_ip = ipv4_buffer(3);
  not_ip[20] = 0x46;  // IHL 6: not the 20-byte header RoCE v2 builds
  EXPECT_FALSE(grh_traffic_class(not_ip.data(), true));
}

TEST(VerbsGrh, Ipv6TrafficClassSpansTwoBytes) {
  auto b = ipv6_buffer(0xAB);
  EXPECT_EQ(grh_traffic_class(b.data(), false), 0xAB);
  b[0] = 0x45;
  EXPECT_FALSE(grh_traffic_class(b.data(), false));
}

TEST(VerbsCompletion, UdReceiveIsAPacketAfterTheGrhWithItsCeMark) {
  auto ce = ipv4_buffer((26 << 2) | 3);
  CompletionEvent ev = translate_completion(ud_recv(40 + 100), kUd, ce.data());
  ASSERT_EQ(ev.kind, EventKind::kPacket) << ev.why;
  EXPECT_EQ(ev.offset, 40u);
  EXPECT_EQ(ev.length, 100u);
  EXPECT_TRUE(ev.ecn_known);
  EXPECT_TRUE(ev.ce);
  EXPECT_EQ(ev.src_qp, 0x51u);
  EXPECT_EQ(ev.tag.slot, 4u);
  EXPECT_EQ(ev.tag.lane, 1);
  auto ect = ipv4_buffer((26 << 2) | 2);
  ev = translate_completion(ud_recv(40 + 100), kUd, ect.data());
  EXPECT_TRUE(ev.ecn_known);
  EXPECT_FALSE(ev.ce);
  // An IPv6 wire reads the IPv6 header.
  auto v6 = ipv6_buffer(3);
  CompletionContext ctx6 = kUd;
  ctx6.grh_ipv4 = false;
  ev = translate_completion(ud_recv(40 + 8), ctx6, v6.data());
  EXPECT_TRUE(ev.ce);
  // A GRH without the expected IP header: the packet still counts, its ECN is unknown.
  ev = translate_completion(ud_recv(40 + 8), kUd, v6.data());
  ASSERT_EQ(ev.kind, EventKind::kPacket);
  EXPECT_FALSE(ev.ecn_known);
  EXPECT_FALSE(ev.ce);
}

TEST(VerbsCompletion, UdReceivesThisWireCannotUseAreMalformed) {
  auto b = ipv4_buffer(0);
  WorkCompletion no_grh = ud_recv(140);
  no_grh.grh = false;
  EXPECT_EQ(translate_completion(no_grh, kUd, b.data()).kind, EventKind::kMalformed);
  CompletionEvent shortev = translate_completion(ud_recv(39), kUd, b.data());
  EXPECT_EQ(shortev.kind, EventKind::kMalformed);
  EXPECT_EQ(shortev.why, "UD receive shorter than its GRH");
  EXPECT_EQ(shortev.tag.slot, 4u);  // so the buffer is posted again
  WorkCompletion foreign = ud_recv(140);
  foreign.wr_id = 42;
  EXPECT_EQ(translate_completion(foreign, kUd, b.data()).why,
            "completion of a work request this wire did not post");
  EXPECT_EQ(translate_completion(ud_recv(140), kRc, b.data()).kind, EventKind::kMalformed);
}

TEST(VerbsCompletion, SendCompletionsFreeTheirHeaderSlot) {
  WorkCompletion wc;
  wc.wr_id = encode_wr_id({.kind = WrKind::kUdSend, .lane = 2, .epoch = 0, .slot = 77});
  wc.opcode = WcOpcode::kSend;
  CompletionEvent ev = translate_completion(wc, kUd, nullptr);
  ASSERT_EQ(ev.kind, EventKind::kSendDone);
  EXPECT_EQ(ev.tag.slot, 77u);
  wc.wr_id = encode_wr_id({.kind = WrKind::kRcWrite, .lane = 2, .epoch = 3, .slot = 78});
  wc.opcode = WcOpcode::kRdmaWrite;
  ev = translate_completion(wc, kRc, nullptr);
  ASSERT_EQ(ev.kind, EventKind::kSendDone);
  EXPECT_EQ(ev.tag.epoch, 3);
  wc.opcode = WcOpcode::kSend;  // a write that completes as a send
  EXPECT_EQ(translate_completion(wc, kRc, nullptr).kind, EventKind::kMalformed);
}

WorkCompletion rc_recv(uint8_t lane, uint32_t imm, uint32_t byte_len) {
  WorkCompletion wc;
  wc.wr_id = encode_wr_id({.kind = WrKind::kRcRecv, .lane = lane, .epoch = 1, .slot = 0});
  wc.opcode = WcOpcode::kRecvRdmaWithImm;
  wc.with_imm = true;
  wc.imm_data = imm;
  wc.byte_len = byte_len;
  return wc;
}

TEST(VerbsCompletion, RcWriteWithImmediateNamesTheRingSlot) {
  CompletionEvent ev = translate_completion(
      rc_recv(3, encode_imm({.kind = ImmKind::kData, .lane = 3, .value = 9}), 1000), kRc, nullptr);
  ASSERT_EQ(ev.kind, EventKind::kPacket) << ev.why;
  EXPECT_EQ(ev.ring_slot, 9u);
  EXPECT_EQ(ev.offset, 0u);
  EXPECT_EQ(ev.length, 1000u);
  EXPECT_EQ(ev.tag.lane, 3);
  ev = translate_completion(rc_recv(3, encode_imm({.kind = ImmKind::kCredit, .lane = 3, .value = 8}), 0), kRc,
                            nullptr);
  ASSERT_EQ(ev.kind, EventKind::kCredit) << ev.why;
  EXPECT_EQ(ev.credits, 8u);
}

TEST(VerbsCompletion, RcImmediatesOutOfRangeAreMalformed) {
  auto why = [](const WorkCompletion& wc) { return std::string(translate_completion(wc, kRc, nullptr).why); };
  EXPECT_EQ(why(rc_recv(3, encode_imm({.kind = ImmKind::kData, .lane = 4, .value = 1}), 10)),
            "RC immediate names another lane than its QP's");
  EXPECT_EQ(why(rc_recv(3, encode_imm({.kind = ImmKind::kData, .lane = 3, .value = 16}), 10)),
            "RC write into a slot beyond the ring");
  EXPECT_EQ(why(rc_recv(3, encode_imm({.kind = ImmKind::kData, .lane = 3, .value = 1}), 4169)),
            "RC write of a bad length");
  EXPECT_EQ(why(rc_recv(3, encode_imm({.kind = ImmKind::kCredit, .lane = 3, .value = 17}), 0)),
            "RC credit beyond the ring");
  EXPECT_EQ(why(rc_recv(3, 0xC0000000, 10)), "RC immediate of an unknown kind");
  WorkCompletion no_imm = rc_recv(3, 0, 10);
  no_imm.with_imm = false;
  EXPECT_EQ(why(no_imm), "RC receive that is not an RDMA write with immediate");
}

TEST(VerbsCompletion, ErrorsCarryTheTagWhateverTheirOpcodeAndLength) {
  WorkCompletion wc;
  wc.wr_id = encode_wr_id({.kind = WrKind::kRcWrite, .lane = 5, .epoch = 2, .slot = 11});
  wc.status = WcStatus::kRetryExcErr;
  wc.opcode = static_cast<WcOpcode>(0xDEAD);  // undefined on error completions
  wc.byte_len = 0xFFFFFFFF;
  CompletionEvent ev = translate_completion(wc, kRc, nullptr);
  ASSERT_EQ(ev.kind, EventKind::kQpError);
  EXPECT_EQ(ev.tag.lane, 5);
  EXPECT_EQ(ev.tag.epoch, 2);
  EXPECT_EQ(ev.status, WcStatus::kRetryExcErr);
  EXPECT_TRUE(ev.recoverable);
  wc.status = WcStatus::kLocProtErr;
  ev = translate_completion(wc, kRc, nullptr);
  EXPECT_EQ(ev.kind, EventKind::kQpError);
  EXPECT_FALSE(ev.recoverable);
  wc.status = WcStatus::kWrFlushErr;
  ev = translate_completion(wc, kRc, nullptr);
  EXPECT_EQ(ev.kind, EventKind::kFlushed);
  EXPECT_EQ(ev.tag.slot, 11u);
}

TEST(VerbsCompletion, StatusTextsNameTheVerbsConstant) {
  EXPECT_EQ(to_string(WcStatus::kRetryExcErr), "transport retry counter exceeded (IBV_WC_RETRY_EXC_ERR)");
  EXPECT_EQ(to_string(WcStatus::kRnrRetryExcErr), "RNR retry counter exceeded (IBV_WC_RNR_RETRY_EXC_ERR)");
  EXPECT_EQ(to_string(static_cast<WcStatus>(99)), "status 99");
  EXPECT_TRUE(is_recoverable(WcStatus::kRnrRetryExcErr));
  EXPECT_TRUE(is_recoverable(WcStatus::kRespTimeoutErr));
  EXPECT_FALSE(is_recoverable(WcStatus::kRemAccessErr));
  EXPECT_FALSE(is_recoverable(WcStatus::kLocLenErr));
  EXPECT_FALSE(is_recoverable(WcStatus::kSuccess));
}

}  // namespace
}  // namespace megascale::wire::verbs
