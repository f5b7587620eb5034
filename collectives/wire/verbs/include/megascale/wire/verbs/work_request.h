// Work requests as plain data: what the verbs wire posts, built by pure functions from an engine
// TxPacket's parts, so every address, length, key and immediate is checked by unit tests without a
// device. The thin layer over libibverbs (ib_device.h) copies these into ibv_send_wr / ibv_recv_wr.
//
//   // UD: one engine packet, header copied into a registered slot, payload from the registered send
//   // buffer (two SGEs; the payload SGE is left out when empty).
//   Result<SendWr> wr = make_ud_send({.tag = {WrKind::kUdSend, lane, slot}, .header = hdr_sge,
//                                     .payload = payload_sge, .ah = ah_index, .remote_qpn = qpn,
//                                     .qkey = qkey, .mtu_bytes = 1024, .signaled = true});
//   // RC: the same bytes written into the peer's receive ring, the immediate naming lane and slot.
//   Result<SendWr> w = make_rc_write({.tag = ..., .header = hdr_sge, .payload = payload_sge,
//                                     .ring = peer_ring, .remote_slot = slot, .signaled = true});
//
// wr_id: every work request carries a WrTag (kind, lane, QP epoch, slot) packed into its 64-bit wr_id,
// so a completion says what it completes without a lookup table; an error completion carries only
// wr_id, status and qp_num (its opcode and byte_len are undefined), and the tag is all there is then.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "megascale/common/result.h"
#include "megascale/wire/verbs/gid.h"

namespace megascale::wire::verbs {

enum class WrKind : uint8_t {
  kUdSend = 1,    // an engine packet as a UD datagram
  kUdRecv = 2,    // a UD receive buffer (GRH + MTU bytes)
  kRcWrite = 3,   // an engine packet as an RDMA write with immediate into the peer's ring
  kRcRecv = 4,    // an RC receive WR (no buffer: it only consumes a write's immediate)
  kRcCredit = 5,  // a zero-length RDMA write with immediate returning ring slots to the peer
};

struct WrTag {
  WrKind kind = WrKind::kUdSend;
  uint8_t lane = 0;
  uint16_t epoch = 0;  // the lane QP's incarnation (RC re-creates a QP after an error)
  uint32_t slot = 0;   // the wire's slot: a header/receive buffer, or the remote ring slot
};
// Layout: bits 56-63 kind, 48-55 lane, 32-47 epoch, 0-31 slot.
uint64_t encode_wr_id(const WrTag& tag);
// nullopt when the kind byte names no WrKind (a wr_id this wire never posted).
std::optional<WrTag> decode_wr_id(uint64_t wr_id);

// A scatter/gather element over registered memory (struct ibv_sge).
struct Sge {
  uint64_t addr = 0;
  uint32_t length = 0;
  uint32_t lkey = 0;
};

enum class SendOpcode : uint8_t { kSend, kRdmaWriteWithImm };

// struct ibv_send_wr, the fields this wire uses.
struct SendWr {
  uint64_t wr_id = 0;
  SendOpcode opcode = SendOpcode::kSend;
  std::array<Sge, 2> sge{};
  uint32_t num_sge = 0;
  bool signaled = false;  // IBV_SEND_SIGNALED
  bool has_imm = false;
  uint32_t imm_data = 0;     // host order; the verbs layer converts to network order (htonl)
  uint32_t ah = 0;           // UD: the wire's index of the address handle
  uint32_t remote_qpn = 0;   // UD
  uint32_t remote_qkey = 0;  // UD
  uint64_t remote_addr = 0;  // RC
  uint32_t rkey = 0;         // RC
  uint32_t total_bytes() const {
    return (num_sge > 0 ? sge[0].length : 0) + (num_sge > 1 ? sge[1].length : 0);
  }
};

// struct ibv_recv_wr with at most one SGE.
struct RecvWr {
  uint64_t wr_id = 0;
  Sge sge{};
  uint32_t num_sge = 0;
};

// ---- address handles and traffic class ----

// The bytes of the Global Route Header at the start of every UD receive buffer.
inline constexpr uint32_t kGrhBytes = 40;

// The UDP source port RoCE v2 derives from a flow label lies in 49152..65535 (the kernel's
// rdma_flow_label_to_udp_sport: 0xC000 | low 14 bits, xored with the next 6); a flow label below
// 2^14 maps to 0xC000 | label. Returns the flow label that gives `sport`; 0 = let the NIC choose
// (sport 0). Error: a port outside 49152..65535.
Result<uint32_t> flow_label_for_sport(uint16_t sport);
// Inverse, as the kernel computes it.
uint16_t sport_for_flow_label(uint32_t flow_label);

// The traffic class (IP TOS byte on RoCE v2): DSCP in the upper six bits, ECT(0) in the ECN bits when
// `ect` (so switches may mark CE rather than drop). Error: DSCP above 63.
Result<uint8_t> traffic_class(uint32_t dscp, bool ect);

// What an ibv_ah_attr needs for one lane's path to a peer (is_global always: RoCE needs the GRH).
struct AhSpec {
  Gid dgid{};
  uint8_t sgid_index = 0;
  uint8_t traffic_class = 0;
  uint8_t hop_limit = 64;
  uint32_t flow_label = 0;  // selects the UDP source port (flow_label_for_sport)
  uint8_t port_num = 1;
};

// ---- UD ----

// The largest engine segment payload a UD datagram carries at `mtu_bytes`: the MTU less the largest
// SEG header (engine::kSegHeaderBytes). UD does not fragment.
uint32_t ud_max_segment_bytes(uint32_t mtu_bytes);

struct UdSend {
  WrTag tag;        // kind kUdSend
  Sge header;       // the engine header, copied into a registered slot (length > 0)
  Sge payload;      // the segment's payload (length 0: none, the SGE is left out)
  uint32_t ah = 0;  // address handle index
  uint32_t remote_qpn = 0;
  uint32_t qkey = 0;
  uint32_t mtu_bytes = 1024;
  bool signaled = true;
};
// Errors: an empty header, a datagram larger than the MTU (naming both and the segment size that fits).
Result<SendWr> make_ud_send(const UdSend& in);

// A UD receive buffer: kGrhBytes for the GRH, then mtu_bytes for the datagram. Error: a buffer of
// another length.
Result<RecvWr> make_ud_recv(const WrTag& tag, const Sge& buffer, uint32_t mtu_bytes);

// ---- RC ----

// The peer's receive ring as its handle describes it: one region of `slots` slots of `slot_bytes`
// per lane, lane after lane, from `addr`.
struct RemoteRing {
  uint64_t addr = 0;
  uint32_t rkey = 0;
  uint32_t slots = 0;       // per lane
  uint32_t slot_bytes = 0;  // at least the largest engine header + segment_bytes
};
uint64_t ring_slot_addr(const RemoteRing& ring, uint32_t lane, uint32_t slot);

// The 32-bit immediate of an RC write: bits 30-31 kind, 24-29 lane, 0-23 value.
enum class ImmKind : uint8_t {
  kData = 0,    // value: the ring slot the write filled; the completion's byte_len is the packet's length
  kCredit = 1,  // value: ring slots the writer has consumed and returns (a zero-length write)
};
struct Imm {
  ImmKind kind = ImmKind::kData;
  uint8_t lane = 0;    // < 64
  uint32_t value = 0;  // < 2^24
};
inline constexpr uint32_t kMaxImmValue = (1u << 24) - 1;
uint32_t encode_imm(const Imm& imm);
// Error: kinds 2 and 3 (never sent).
Result<Imm> decode_imm(uint32_t imm);

struct RcWrite {
  WrTag tag;  // kind kRcWrite; tag.slot is the local header slot
  Sge header;
  Sge payload;  // length 0: none
  RemoteRing ring;
  uint32_t remote_slot = 0;
  bool signaled = true;
};
// Errors: an empty header, a slot beyond the ring, a packet larger than a slot.
Result<SendWr> make_rc_write(const RcWrite& in);
// A zero-length write with immediate {kCredit, lane, count}: returns `count` consumed ring slots.
// Error: count 0 or above kMaxImmValue.
Result<SendWr> make_rc_credit(const WrTag& tag, const RemoteRing& ring, uint32_t count);
// An RC receive WR: no SGE (an RDMA write's data lands in the ring; the WR only takes its immediate).
RecvWr make_rc_recv(const WrTag& tag);

// ---- posting policy ----

// Receive WRs to post now on a queue of `depth` with `posted` outstanding: the whole deficit once it
// reaches `batch` (one doorbell for many WRs), or at once when fewer than `batch` remain posted (the
// queue is about to run dry: RNR on RC, drops on UD); 0 otherwise.
uint32_t recv_to_post(uint32_t posted, uint32_t depth, uint32_t batch);

}  // namespace megascale::wire::verbs
