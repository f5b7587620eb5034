// Completion translation and the GRH's traffic class (completion.h).
#include "megascale/wire/verbs/completion.h"

#include <string>

namespace megascale::wire::verbs {
namespace {

CompletionEvent malformed(const WrTag& tag, std::string_view why) {
  CompletionEvent ev;
  ev.kind = EventKind::kMalformed;
  ev.tag = tag;
  ev.why = why;
  return ev;
}

CompletionEvent ud_receive(const WorkCompletion& wc, const WrTag& tag, const CompletionContext& ctx,
                           const uint8_t* buf) {
  if (wc.opcode != WcOpcode::kRecv)
    return malformed(tag, "UD receive completed with an opcode other than RECV");
  if (!wc.grh) return malformed(tag, "UD receive without a GRH (RoCE always carries one)");
  if (wc.byte_len < kGrhBytes) return malformed(tag, "UD receive shorter than its GRH");
  if (buf == nullptr) return malformed(tag, "UD receive without its buffer");
  CompletionEvent ev;
  ev.kind = EventKind::kPacket;
  ev.tag = tag;
  ev.offset = kGrhBytes;
  ev.length = wc.byte_len - kGrhBytes;
  ev.src_qp = wc.src_qp;
  if (std::optional<uint8_t> tc = grh_traffic_class(buf, ctx.grh_ipv4)) {
    ev.ecn_known = true;
    ev.ce = (*tc & 0x3) == kEcnCe;
  }
  return ev;
}

CompletionEvent rc_receive(const WorkCompletion& wc, const WrTag& tag, const CompletionContext& ctx) {
  if (wc.opcode != WcOpcode::kRecvRdmaWithImm || !wc.with_imm) {
    return malformed(tag, "RC receive that is not an RDMA write with immediate");
  }
  Result<Imm> imm = decode_imm(wc.imm_data);
  if (!imm) return malformed(tag, "RC immediate of an unknown kind");
  if (imm->lane != tag.lane) return malformed(tag, "RC immediate names another lane than its QP's");
  CompletionEvent ev;
  ev.tag = tag;
  if (imm->kind == ImmKind::kCredit) {
    if (imm->value == 0 || imm->value > ctx.ring_slots) return malformed(tag, "RC credit beyond the ring");
    ev.kind = EventKind::kCredit;
    ev.credits = imm->value;
    return ev;
  }
  if (imm->value >= ctx.ring_slots) return malformed(tag, "RC write into a slot beyond the ring");
  if (wc.byte_len == 0 || wc.byte_len > ctx.slot_bytes) return malformed(tag, "RC write of a bad length");
  ev.kind = EventKind::kPacket;
  ev.ring_slot = imm->value;
  ev.offset = 0;
  ev.length = wc.byte_len;
  return ev;
}

}  // namespace

std::string to_string(WcStatus s) {
  switch (s) {
    case WcStatus::kSuccess:
      return "success (IBV_WC_SUCCESS)";
    case WcStatus::kLocLenErr:
      return "local length error (IBV_WC_LOC_LEN_ERR)";
    case WcStatus::kLocQpOpErr:
      return "local QP operation error (IBV_WC_LOC_QP_OP_ERR)";
    case WcStatus::kLocEecOpErr:
      return "local EE context operation error (IBV_WC_LOC_EEC_OP_ERR)";
    case WcStatus::kLocProtErr:
      return "local protection error (IBV_WC_LOC_PROT_ERR)";
    case WcStatus::kWrFlushErr:
      return "work request flushed (IBV_WC_WR_FLUSH_ERR)";
    case WcStatus::kMwBindErr:
      return "memory window bind error (IBV_WC_MW_BIND_ERR)";
    case WcStatus::kBadRespErr:
      return "bad response (IBV_WC_BAD_RESP_ERR)";
    case WcStatus::kLocAccessErr:
      return "local access error (IBV_WC_LOC_ACCESS_ERR)";
    case WcStatus::kRemInvReqErr:
      return "remote invalid request (IBV_WC_REM_INV_REQ_ERR)";
    case WcStatus::kRemAccessErr:
      return "remote access error (IBV_WC_REM_ACCESS_ERR)";
    case WcStatus::kRemOpErr:
      return "remote operation error (IBV_WC_REM_OP_ERR)";
    case WcStatus::kRetryExcErr:
      return "transport retry counter exceeded (IBV_WC_RETRY_EXC_ERR)";
    case WcStatus::kRnrRetryExcErr:
      return "RNR retry counter exceeded (IBV_WC_RNR_RETRY_EXC_ERR)";
    case WcStatus::kLocRddViolErr:
      return "local RDD violation (IBV_WC_LOC_RDD_VIOL_ERR)";
    case WcStatus::kRemInvRdReqErr:
      return "remote invalid RD request (IBV_WC_REM_INV_RD_REQ_ERR)";
    case WcStatus::kRemAbortErr:
      return "remote aborted (IBV_WC_REM_ABORT_ERR)";
    case WcStatus::kInvEecnErr:
      return "invalid EE context number (IBV_WC_INV_EECN_ERR)";
    case WcStatus::kInvEecStateErr:
      return "invalid EE context state (IBV_WC_INV_EEC_STATE_ERR)";
    case WcStatus::kFatalErr:
      return "fatal error (IBV_WC_FATAL_ERR)";
    case WcStatus::kRespTimeoutErr:
      return "response timeout (IBV_WC_RESP_TIMEOUT_ERR)";
    case WcStatus::kGeneralErr:
      return "general error (IBV_WC_GENERAL_ERR)";
  }
  return "status " + std::to_string(static_cast<uint32_t>(s));
}

bool is_recoverable(WcStatus s) {
  switch (s) {
    case WcStatus::kRetryExcErr:
    case WcStatus::kRnrRetryExcErr:
    case WcStatus::kRespTimeoutErr:
    case WcStatus::kRemAbortErr:
    case WcStatus::kRemOpErr:
    case WcStatus::kGeneralErr:
      return true;
    default:
      return false;
  }
}

std::optional<uint8_t> grh_traffic_class(const uint8_t* grh, bool ipv4) {
  if (ipv4) {
    const uint8_t* ip = grh + 20;
    if (ip[0] != 0x45) return std::nullopt;  // version 4, 20-byte header
    return ip[1];
  }
  if ((grh[0] >> 4) != 6) return std::nullopt;
  return static_cast<uint8_t>(((grh[0] & 0x0F) << 4) | (grh[1] >> 4));
}

CompletionEvent translate_completion(const WorkCompletion& wc, const CompletionContext& ctx,
                                     const uint8_t* recv_buffer) {
  const std::optional<WrTag> tag = decode_wr_id(wc.wr_id);
  if (!tag) return malformed({}, "completion of a work request this wire did not post");
  if (wc.status == WcStatus::kWrFlushErr) {
    CompletionEvent ev;
    ev.kind = EventKind::kFlushed;
    ev.tag = *tag;
    ev.status = wc.status;
    return ev;
  }
  if (wc.status != WcStatus::kSuccess) {
    // opcode and byte_len are undefined here: only the tag says what failed.
    CompletionEvent ev;
    ev.kind = EventKind::kQpError;
    ev.tag = *tag;
    ev.status = wc.status;
    ev.recoverable = is_recoverable(wc.status);
    return ev;
  }
  const bool ud = ctx.mode == WireMode::kUd;
  switch (tag->kind) {
    case WrKind::kUdSend:
    case WrKind::kRcWrite:
    case WrKind::kRcCredit: {
      if ((tag->kind == WrKind::kUdSend) != ud) return malformed(*tag, "send completion of the other mode");
      const WcOpcode want = ud ? WcOpcode::kSend : WcOpcode::kRdmaWrite;
      if (wc.opcode != want) return malformed(*tag, "send completion with an unexpected opcode");
      CompletionEvent ev;
      ev.kind = EventKind::kSendDone;
      ev.tag = *tag;
      return ev;
    }
    case WrKind::kUdRecv:
      if (!ud) return malformed(*tag, "UD receive completion on an RC wire");
      return ud_receive(wc, *tag, ctx, recv_buffer);
    case WrKind::kRcRecv:
      if (ud) return malformed(*tag, "RC receive completion on a UD wire");
      return rc_receive(wc, *tag, ctx);
  }
  return malformed(*tag, "unknown work request kind");
}

}  // namespace megascale::wire::verbs
