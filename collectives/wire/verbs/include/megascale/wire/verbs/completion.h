// Completion handling as a pure translation: a work completion (struct ibv_wc's fields, as plain data)
// becomes one event the wire acts on, and a UD receive's GRH gives the packet's ECN bits.
//
//   CompletionEvent ev = translate_completion(wc, ctx, recv_buffer_of(wc));
//   switch (ev.kind) {
//     case EventKind::kPacket:   // hand buffer[ev.offset, +ev.length) to the engine, with ev.ce
//       endpoint->on_packet(now, peer_of(wc), buf + ev.offset, ev.length, ev.ce); repost(ev.tag); break;
//     case EventKind::kSendDone: free_header_slot(ev.tag); break;
//     case EventKind::kCredit:   ring_credits[ev.tag.lane] += ev.credits; break;
//     case EventKind::kQpError:  recovery.on_qp_error(now, ev.tag.lane, ev.status); break;   // rc_recovery.h
//     case EventKind::kFlushed:  free_header_slot(ev.tag); break;   // the QP is already in error
//     case EventKind::kMalformed: ++malformed; log(ev.why); repost(ev.tag); break;
//   }
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "megascale/wire/verbs/handle.h"
#include "megascale/wire/verbs/work_request.h"

namespace megascale::wire::verbs {

// enum ibv_wc_status, value for value (checked against <infiniband/verbs.h> where it is compiled).
enum class WcStatus : uint32_t {
  kSuccess = 0,
  kLocLenErr = 1,
  kLocQpOpErr = 2,
  kLocEecOpErr = 3,
  kLocProtErr = 4,
  kWrFlushErr = 5,
  kMwBindErr = 6,
  kBadRespErr = 7,
  kLocAccessErr = 8,
  kRemInvReqErr = 9,
  kRemAccessErr = 10,
  kRemOpErr = 11,
  kRetryExcErr = 12,
  kRnrRetryExcErr = 13,
  kLocRddViolErr = 14,
  kRemInvRdReqErr = 15,
  kRemAbortErr = 16,
  kInvEecnErr = 17,
  kInvEecStateErr = 18,
  kFatalErr = 19,
  kRespTimeoutErr = 20,
  kGeneralErr = 21,
};
// "transport retry counter exceeded (IBV_WC_RETRY_EXC_ERR)"; "status N" for values beyond the enum.
std::string to_string(WcStatus s);

// Whether a QP that failed with `s` is worth re-creating: the errors a link flap or a slow or restarted
// peer cause (retry and RNR retry exceeded, response timeout, remote abort and operation errors). The
// others are local mistakes (lengths, keys, protection, opcodes): re-creating would fail the same way.
bool is_recoverable(WcStatus s);

// enum ibv_wc_opcode, the values this wire sees.
enum class WcOpcode : uint32_t {
  kSend = 0,
  kRdmaWrite = 1,
  kRdmaRead = 2,
  kRecv = 128,
  kRecvRdmaWithImm = 129,
};

// struct ibv_wc, the fields this wire reads. For an error status only wr_id, status and qp_num are
// defined (the verbs layer leaves the others as the device wrote them: this code does not read them).
struct WorkCompletion {
  uint64_t wr_id = 0;
  WcStatus status = WcStatus::kSuccess;
  WcOpcode opcode = WcOpcode::kSend;
  uint32_t byte_len = 0;
  uint32_t imm_data = 0;  // host order (the verbs layer converts from network order)
  bool with_imm = false;  // IBV_WC_WITH_IMM
  bool grh = false;       // IBV_WC_GRH: the buffer starts with a 40-byte GRH
  uint32_t qp_num = 0;
  uint32_t src_qp = 0;  // UD: the sender's QPN
};

enum class EventKind : uint8_t {
  kSendDone,   // a send or write completed: its header slot (tag.slot) is free again
  kPacket,     // an engine packet arrived: bytes [offset, offset + length) of the receive buffer (UD)
               // or of ring slot `ring_slot` of lane tag.lane (RC)
  kCredit,     // RC: the peer returned `credits` ring slots of lane tag.lane
  kFlushed,    // a WR flushed because its QP is in error: free its resources, nothing else
  kQpError,    // the QP of tag.lane failed with `status` (recoverable: is_recoverable)
  kMalformed,  // a completion this wire cannot use (why); a receive is posted again
};

struct CompletionEvent {
  EventKind kind = EventKind::kMalformed;
  WrTag tag;
  uint32_t offset = 0;
  uint32_t length = 0;
  uint32_t ring_slot = 0;
  bool ce = false;         // the packet's IP header carried ECN CE (UD; RC's ECN is the NIC's)
  bool ecn_known = false;  // the GRH held an IP header whose ECN bits were read
  uint32_t credits = 0;
  WcStatus status = WcStatus::kSuccess;
  bool recoverable = false;
  uint32_t src_qp = 0;
  std::string_view why;  // kMalformed: a static text
};

struct CompletionContext {
  WireMode mode = WireMode::kUd;
  // UD: the GRH holds an IPv4 header (RoCE v2 with an IPv4-mapped GID, gid_is_ipv4) rather than an
  // IPv6 one.
  bool grh_ipv4 = true;
  uint32_t ring_slots = 0;  // RC: slots per lane of this end's receive ring
  uint32_t slot_bytes = 0;  // RC: bytes per slot
};

// The traffic class (IP TOS) of the packet whose GRH is grh[0..40): for RoCE v2 over IPv4 the last 20
// bytes are the packet's IPv4 header (version 4, IHL 5; TOS at byte 21), over IPv6 the GRH is the
// IPv6 header (traffic class across bytes 0-1). nullopt when the expected header is not there.
std::optional<uint8_t> grh_traffic_class(const uint8_t* grh, bool ipv4);
inline constexpr uint8_t kEcnCe = 0x3;

// One completion -> one event. `recv_buffer`: a UD receive's buffer (the GRH first), nullptr
// otherwise.
CompletionEvent translate_completion(const WorkCompletion& wc, const CompletionContext& ctx,
                                     const uint8_t* recv_buffer);

}  // namespace megascale::wire::verbs
