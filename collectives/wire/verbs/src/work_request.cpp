// Work-request construction (work_request.h).
#include "megascale/wire/verbs/work_request.h"

#include <cstdio>
#include <string>

#include "megascale/engine/packet.h"

namespace megascale::wire::verbs {

uint64_t encode_wr_id(const WrTag& tag) {
  return (uint64_t{static_cast<uint8_t>(tag.kind)} << 56) | (uint64_t{tag.lane} << 48) |
         (uint64_t{tag.epoch} << 32) | tag.slot;
}

std::optional<WrTag> decode_wr_id(uint64_t wr_id) {
  const auto kind = static_cast<uint8_t>(wr_id >> 56);
  if (kind < static_cast<uint8_t>(WrKind::kUdSend) || kind > static_cast<uint8_t>(WrKind::kRcCredit)) {
    return std::nullopt;
  }
  return WrTag{.kind = static_cast<WrKind>(kind),
               .lane = static_cast<uint8_t>(wr_id >> 48),
               .epoch = static_cast<uint16_t>(wr_id >> 32),
               .slot = static_cast<uint32_t>(wr_id)};
}

Result<uint32_t> flow_label_for_sport(uint16_t sport) {
  if (sport == 0) return 0u;
  if (sport < 0xC000) {
    return make_error("UDP source port " + std::to_string(sport) +
                      ": RoCE v2 derives source ports from the flow label, in 49152..65535");
  }
  return uint32_t{sport} & 0x3FFFu;
}

uint16_t sport_for_flow_label(uint32_t flow_label) {
  uint32_t low = flow_label & 0x3FFF;
  const uint32_t high = flow_label & 0xFC000;
  low ^= high >> 14;
  return static_cast<uint16_t>(low | 0xC000);
}

Result<uint8_t> traffic_class(uint32_t dscp, bool ect) {
  if (dscp > 63) return make_error("DSCP " + std::to_string(dscp) + " is not 0..63");
  return static_cast<uint8_t>((dscp << 2) | (ect ? 0x2 : 0x0));
}

uint32_t ud_max_segment_bytes(uint32_t mtu_bytes) {
  return mtu_bytes > engine::kSegHeaderBytes ? mtu_bytes - static_cast<uint32_t>(engine::kSegHeaderBytes) : 0;
}

Result<SendWr> make_ud_send(const UdSend& in) {
  if (in.header.length == 0)
    return make_error(ErrorCode::kInternal, "UD send: an engine packet without a header");
  const uint64_t total = uint64_t{in.header.length} + in.payload.length;
  if (total > in.mtu_bytes) {
    return make_error("UD datagram of " + std::to_string(total) + " bytes exceeds the port MTU " +
                      std::to_string(in.mtu_bytes) +
                      " (UD does not fragment: segment_bytes must be at most " +
                      std::to_string(ud_max_segment_bytes(in.mtu_bytes)) + ")");
  }
  SendWr wr;
  wr.wr_id = encode_wr_id(in.tag);
  wr.opcode = SendOpcode::kSend;
  wr.sge[0] = in.header;
  wr.num_sge = 1;
  if (in.payload.length > 0) wr.sge[wr.num_sge++] = in.payload;
  wr.signaled = in.signaled;
  wr.ah = in.ah;
  wr.remote_qpn = in.remote_qpn;
  wr.remote_qkey = in.qkey;
  return wr;
}

Result<RecvWr> make_ud_recv(const WrTag& tag, const Sge& buffer, uint32_t mtu_bytes) {
  if (buffer.length != kGrhBytes + mtu_bytes) {
    return make_error(ErrorCode::kInternal, "UD receive buffer of " + std::to_string(buffer.length) +
                                                " bytes; it must hold the GRH and one MTU (" +
                                                std::to_string(kGrhBytes + mtu_bytes) + ")");
  }
  return RecvWr{.wr_id = encode_wr_id(tag), .sge = buffer, .num_sge = 1};
}

uint64_t ring_slot_addr(const RemoteRing& ring, uint32_t lane, uint32_t slot) {
  return ring.addr + (uint64_t{lane} * ring.slots + slot) * ring.slot_bytes;
}

uint32_t encode_imm(const Imm& imm) {
  return (uint32_t{static_cast<uint8_t>(imm.kind)} << 30) | (uint32_t{imm.lane & 0x3Fu} << 24) |
         (imm.value & kMaxImmValue);
}

Result<Imm> decode_imm(uint32_t imm) {
  const uint32_t kind = imm >> 30;
  if (kind > static_cast<uint32_t>(ImmKind::kCredit)) {
    return make_error(
        ErrorCode::kRemote, "RC immediate 0x" +
                                [&] {
                                  char hex[9];
                                  std::snprintf(hex, sizeof hex, "%08x", imm);
                                  return std::string(hex);
                                }() +
                                ": unknown kind " + std::to_string(kind));
  }
  return Imm{.kind = static_cast<ImmKind>(kind),
             .lane = static_cast<uint8_t>((imm >> 24) & 0x3F),
             .value = imm & kMaxImmValue};
}

Result<SendWr> make_rc_write(const RcWrite& in) {
  if (in.header.length == 0)
    return make_error(ErrorCode::kInternal, "RC write: an engine packet without a header");
  if (in.remote_slot >= in.ring.slots || in.remote_slot > kMaxImmValue) {
    return make_error(ErrorCode::kInternal, "RC write: ring slot " + std::to_string(in.remote_slot) +
                                                " beyond the peer's " + std::to_string(in.ring.slots));
  }
  const uint64_t total = uint64_t{in.header.length} + in.payload.length;
  if (total > in.ring.slot_bytes) {
    return make_error("RC write of " + std::to_string(total) + " bytes exceeds the peer's ring slot of " +
                      std::to_string(in.ring.slot_bytes) + " (segment_bytes larger than the peer's?)");
  }
  SendWr wr;
  wr.wr_id = encode_wr_id(in.tag);
  wr.opcode = SendOpcode::kRdmaWriteWithImm;
  wr.sge[0] = in.header;
  wr.num_sge = 1;
  if (in.payload.length > 0) wr.sge[wr.num_sge++] = in.payload;
  wr.signaled = in.signaled;
  wr.has_imm = true;
  wr.imm_data = encode_imm({.kind = ImmKind::kData, .lane = in.tag.lane, .value = in.remote_slot});
  wr.remote_addr = ring_slot_addr(in.ring, in.tag.lane, in.remote_slot);
  wr.rkey = in.ring.rkey;
  return wr;
}

Result<SendWr> make_rc_credit(const WrTag& tag, const RemoteRing& ring, uint32_t count) {
  if (count == 0 || count > kMaxImmValue) {
    return make_error(ErrorCode::kInternal, "RC credit of " + std::to_string(count) + " slots");
  }
  SendWr wr;
  wr.wr_id = encode_wr_id(tag);
  wr.opcode = SendOpcode::kRdmaWriteWithImm;
  wr.num_sge = 0;
  wr.signaled = true;
  wr.has_imm = true;
  wr.imm_data = encode_imm({.kind = ImmKind::kCredit, .lane = tag.lane, .value = count});
  wr.remote_addr = ring_slot_addr(ring, tag.lane, 0);
  wr.rkey = ring.rkey;
  return wr;
}

RecvWr make_rc_recv(const WrTag& tag) {
  return RecvWr{.wr_id = encode_wr_id(tag), .sge = {}, .num_sge = 0};
}

uint32_t recv_to_post(uint32_t posted, uint32_t depth, uint32_t batch) {
  if (posted >= depth) return 0;
  const uint32_t deficit = depth - posted;
  return deficit >= batch || posted < batch ? deficit : 0;
}

}  // namespace megascale::wire::verbs
