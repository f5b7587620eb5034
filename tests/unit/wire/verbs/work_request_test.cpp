// Work-request construction: wr_id tags, UD sends of one engine segment, RC writes into the peer's
// ring with their immediates, credits, receive WRs, source ports, traffic class and posting counts.
#include "megascale/wire/verbs/work_request.h"

#include <gtest/gtest.h>

#include "megascale/engine/packet.h"

namespace megascale::wire::verbs {
namespace {

TEST(VerbsWrId, EveryFieldRoundTripsAndForeignIdsAreRefused) {
  const WrTag tag{.kind = WrKind::kRcCredit, .lane = 63, .epoch = 0xBEEF, .slot = 0xFFFFFFFF};
  const uint64_t id = encode_wr_id(tag);
  EXPECT_EQ(id, 0x053FBEEFFFFFFFFFull);
  std::optional<WrTag> back = decode_wr_id(id);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->kind, WrKind::kRcCredit);
  EXPECT_EQ(back->lane, 63);
  EXPECT_EQ(back->epoch, 0xBEEF);
  EXPECT_EQ(back->slot, 0xFFFFFFFFu);
  EXPECT_FALSE(decode_wr_id(0));                  // kind 0
  EXPECT_FALSE(decode_wr_id(uint64_t{6} << 56));  // beyond the last kind
}

TEST(VerbsUdSend, OneSegmentIsHeaderThenPayloadSge) {
  const Sge hdr{.addr = 0x1000, .length = engine::kSegHeaderBytes, .lkey = 7};
  const Sge payload{.addr = 0x900000, .length = 952, .lkey = 9};
  Result<SendWr> wr = make_ud_send({.tag = {.kind = WrKind::kUdSend, .lane = 2, .epoch = 0, .slot = 5},
                                    .header = hdr,
                                    .payload = payload,
                                    .ah = 3,
                                    .remote_qpn = 0x1234,
                                    .qkey = 0x4D530001,
                                    .mtu_bytes = 1024,
                                    .signaled = true});
  ASSERT_TRUE(wr.ok()) << wr.error().message;
  EXPECT_EQ(wr->opcode, SendOpcode::kSend);
  ASSERT_EQ(wr->num_sge, 2u);
  EXPECT_EQ(wr->sge[0].addr, 0x1000u);
  EXPECT_EQ(wr->sge[0].lkey, 7u);
  EXPECT_EQ(wr->sge[1].addr, 0x900000u);
  EXPECT_EQ(wr->sge[1].lkey, 9u);
  EXPECT_EQ(wr->total_bytes(), 1024u);
  EXPECT_EQ(wr->ah, 3u);
  EXPECT_EQ(wr->remote_qpn, 0x1234u);
  EXPECT_EQ(wr->remote_qkey, 0x4D530001u);
  EXPECT_FALSE(wr->has_imm);
  EXPECT_EQ(decode_wr_id(wr->wr_id)->slot, 5u);
  EXPECT_EQ(decode_wr_id(wr->wr_id)->lane, 2u);
}

TEST(VerbsUdSend, ControlPacketHasOneSgeAndOversizeNamesTheSegmentThatFits) {
  Result<SendWr> ack = make_ud_send({.tag = {},
                                     .header = {.addr = 0x1000, .length = 56, .lkey = 1},
                                     .payload = {},
                                     .ah = 0,
                                     .remote_qpn = 9,
                                     .qkey = 1,
                                     .mtu_bytes = 256,
                                     .signaled = false});
  ASSERT_TRUE(ack.ok());
  EXPECT_EQ(ack->num_sge, 1u);
  EXPECT_FALSE(ack->signaled);
  Result<SendWr> big = make_ud_send({.tag = {},
                                     .header = {.addr = 0x1000, .length = 72, .lkey = 1},
                                     .payload = {.addr = 0x2000, .length = 4096, .lkey = 1},
                                     .ah = 0,
                                     .remote_qpn = 9,
                                     .qkey = 1,
                                     .mtu_bytes = 1024,
                                     .signaled = true});
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(
      big.error().message,
      "UD datagram of 4168 bytes exceeds the port MTU 1024 (UD does not fragment: segment_bytes must be at "
      "most 952)");
  EXPECT_EQ(ud_max_segment_bytes(4096), 4096u - 72u);
}

TEST(VerbsUdRecv, BufferHoldsGrhAndOneMtu) {
  Result<RecvWr> ok = make_ud_recv({.kind = WrKind::kUdRecv, .lane = 1, .epoch = 0, .slot = 8},
                                   {.addr = 0x5000, .length = 40 + 1024, .lkey = 2}, 1024);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->num_sge, 1u);
  EXPECT_EQ(decode_wr_id(ok->wr_id)->slot, 8u);
  EXPECT_FALSE(make_ud_recv({}, {.addr = 0x5000, .length = 1024, .lkey = 2}, 1024).ok());
}

TEST(VerbsRcWrite, WritesIntoTheLanesRingSlotWithTheSlotInTheImmediate) {
  const RemoteRing ring{.addr = 0x10000, .rkey = 0x77, .slots = 16, .slot_bytes = 4168};
  Result<SendWr> wr = make_rc_write({.tag = {.kind = WrKind::kRcWrite, .lane = 3, .epoch = 2, .slot = 40},
                                     .header = {.addr = 0x1000, .length = 72, .lkey = 1},
                                     .payload = {.addr = 0x2000, .length = 4096, .lkey = 4},
                                     .ring = ring,
                                     .remote_slot = 9,
                                     .signaled = true});
  ASSERT_TRUE(wr.ok()) << wr.error().message;
  EXPECT_EQ(wr->opcode, SendOpcode::kRdmaWriteWithImm);
  EXPECT_EQ(wr->remote_addr, 0x10000u + (3u * 16u + 9u) * 4168u);
  EXPECT_EQ(wr->rkey, 0x77u);
  EXPECT_EQ(wr->total_bytes(), 4168u);
  ASSERT_TRUE(wr->has_imm);
  Result<Imm> imm = decode_imm(wr->imm_data);
  ASSERT_TRUE(imm.ok());
  EXPECT_EQ(imm->kind, ImmKind::kData);
  EXPECT_EQ(imm->lane, 3);
  EXPECT_EQ(imm->value, 9u);
  EXPECT_EQ(decode_wr_id(wr->wr_id)->epoch, 2);

  RcWrite beyond{.tag = {},
                 .header = {.addr = 1, .length = 72, .lkey = 1},
                 .payload = {},
                 .ring = ring,
                 .remote_slot = 16,
                 .signaled = true};
  EXPECT_EQ(make_rc_write(beyond).error().message, "RC write: ring slot 16 beyond the peer's 16");
  RcWrite big = beyond;
  big.remote_slot = 0;
  big.payload = {.addr = 2, .length = 4097, .lkey = 1};
  EXPECT_EQ(
      make_rc_write(big).error().message,
      "RC write of 4169 bytes exceeds the peer's ring slot of 4168 (segment_bytes larger than the peer's?)");
}

TEST(VerbsRcWrite, CreditIsAZeroLengthWriteWithTheCountInTheImmediate) {
  const RemoteRing ring{.addr = 0x10000, .rkey = 0x77, .slots = 16, .slot_bytes = 4168};
  Result<SendWr> wr = make_rc_credit({.kind = WrKind::kRcCredit, .lane = 5, .epoch = 1, .slot = 0}, ring, 8);
  ASSERT_TRUE(wr.ok());
  EXPECT_EQ(wr->num_sge, 0u);
  EXPECT_EQ(wr->total_bytes(), 0u);
  Result<Imm> imm = decode_imm(wr->imm_data);
  EXPECT_EQ(imm->kind, ImmKind::kCredit);
  EXPECT_EQ(imm->lane, 5);
  EXPECT_EQ(imm->value, 8u);
  EXPECT_FALSE(make_rc_credit({}, ring, 0).ok());
  EXPECT_EQ(make_rc_recv({.kind = WrKind::kRcRecv, .lane = 1, .epoch = 0, .slot = 3}).num_sge, 0u);
}

TEST(VerbsImm, LayoutAndUnknownKinds) {
  EXPECT_EQ(encode_imm({.kind = ImmKind::kCredit, .lane = 63, .value = kMaxImmValue}), 0x7FFFFFFFu);
  EXPECT_EQ(encode_imm({.kind = ImmKind::kData, .lane = 1, .value = 2}), 0x01000002u);
  Result<Imm> bad = decode_imm(0x80000001);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "RC immediate 0x80000001: unknown kind 2");
}

TEST(VerbsPath, SourcePortsMapToFlowLabelsAndBack) {
  for (uint32_t sport = 0xC000; sport <= 0xFFFF; ++sport) {
    Result<uint32_t> fl = flow_label_for_sport(static_cast<uint16_t>(sport));
    ASSERT_TRUE(fl.ok());
    ASSERT_EQ(sport_for_flow_label(*fl), sport);
  }
  EXPECT_EQ(*flow_label_for_sport(0), 0u);
  EXPECT_EQ(flow_label_for_sport(4791).error().message,
            "UDP source port 4791: RoCE v2 derives source ports from the flow label, in 49152..65535");
  // The kernel's fold of the high six bits into the low fourteen.
  EXPECT_EQ(sport_for_flow_label(0x4001), 0xC000 | (0x0001 ^ 0x1));
}

TEST(VerbsPath, TrafficClassIsDscpAndEct) {
  EXPECT_EQ(*traffic_class(26, true), (26 << 2) | 2);
  EXPECT_EQ(*traffic_class(0, false), 0);
  EXPECT_EQ(traffic_class(64, true).error().message, "DSCP 64 is not 0..63");
}

TEST(VerbsPosting, RefillsInBatchesOrWhenRunningDry) {
  EXPECT_EQ(recv_to_post(256, 256, 32), 0u);   // full
  EXPECT_EQ(recv_to_post(240, 256, 32), 0u);   // 16 missing: wait for a batch
  EXPECT_EQ(recv_to_post(224, 256, 32), 32u);  // a batch
  EXPECT_EQ(recv_to_post(200, 256, 32), 56u);  // all that is missing
  EXPECT_EQ(recv_to_post(10, 16, 32), 6u);     // a queue shallower than a batch
  EXPECT_EQ(recv_to_post(0, 256, 32), 256u);
}

}  // namespace
}  // namespace megascale::wire::verbs
