// The receiving half: posted receive slots, arriving SEGs (duplicate and window checks, placement into
// posted buffers), the received-seq bitmap, ACK generation with SACK ranges, and CNPs.
#include "receiver.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "ring.h"

namespace megascale::engine::detail {

ReceiveHalf::ReceiveHalf(const EngineConfig& cfg, const ConnAddress& addr, RequestTable& reqs,
                         ConnectionStats& stats, EndpointStats* ep_stats)
    : cfg_(cfg),
      addr_(addr),
      reqs_(reqs),
      stats_(stats),
      ep_stats_(ep_stats),
      rcv_window_(cfg.window_segments) {
  recv_mask_ = round_up_pow2(cfg.max_posted_recvs) - 1;
  recv_slots_.assign(size_t{recv_mask_} + 1, kNoRequest);
  rcv_bits_.assign((rcv_window_ + 63) / 64, 0);  // windows below 64 segments use part of one word
  cnp_pacers_.assign(kMaxLanes, cc::CnpPacer(cfg.cc.dcqcn.cnp_interval_ns));
}

void ReceiveHalf::post(uint32_t idx) {
  const uint64_t slot = recv_slot_next_;
  reqs_[idx].slot = slot;
  recv_slots_[slot & recv_mask_] = idx;
  ++recv_slot_next_;
}

void ReceiveHalf::release_slot(uint32_t idx) {
  const uint64_t slot = reqs_[idx].slot;
  if (recv_slots_[slot & recv_mask_] == idx) recv_slots_[slot & recv_mask_] = kNoRequest;
}

void ReceiveHalf::finish(uint32_t idx, bool ok, uint64_t bytes, int32_t tag, std::string error,
                         ErrorCode code) {
  if (reqs_.complete(idx, ok, bytes, tag, std::move(error), code)) release_slot(idx);
}

bool ReceiveHalf::rcv_has(uint64_t seq) const {
  const uint64_t bit = seq & (rcv_window_ - 1);
  return (rcv_bits_[bit >> 6] >> (bit & 63)) & 1U;
}

void ReceiveHalf::rcv_mark(uint64_t seq) {
  if (seq != rcv_nxt_) {
    const uint64_t bit = seq & (rcv_window_ - 1);
    rcv_bits_[bit >> 6] |= uint64_t{1} << (bit & 63);
    rcv_highest_end_ = std::max(rcv_highest_end_, seq + 1);
    return;
  }
  // In order: advance over every segment already received above it, clearing their bits.
  ++rcv_nxt_;
  while (rcv_nxt_ < rcv_highest_end_ && rcv_has(rcv_nxt_)) {
    const uint64_t bit = rcv_nxt_ & (rcv_window_ - 1);
    rcv_bits_[bit >> 6] &= ~(uint64_t{1} << (bit & 63));
    ++rcv_nxt_;
  }
  rcv_highest_end_ = std::max(rcv_highest_end_, rcv_nxt_);
}

bool ReceiveHalf::admit(const Packet& pkt, DecodeResult r) {
  const SegHeader& h = pkt.seg;
  if (r == DecodeResult::kBadPayloadCrc) {
    ++stats_.corrupt_dropped;  // not acked: the sender retransmits it
    return false;
  }
  if (h.seq < rcv_nxt_ || (h.seq < rcv_highest_end_ && rcv_has(h.seq))) {
    // Already placed. Ack again: the first ACK may have been lost. The echo stays on the latest new
    // segment: echoing this copy would tell the sender that its retransmission arrived, where an
    // earlier copy did. After a stall the originals and their retransmissions are read in one batch,
    // and the batch's ACK then names an original, which shows the sender its timeout was spurious
    // (Eifel); naming the duplicate would hide it.
    ++stats_.duplicates_dropped;
    ++ep_stats_->duplicates_dropped;
    ack_now_ = true;
    return false;
  }
  if (h.seq >= rcv_nxt_ + rcv_window_) {
    ++stats_.out_of_window_dropped;
    return false;
  }
  return true;
}

void ReceiveHalf::on_accepted(TimeNs now, TimeNs rx_ns, const Packet& pkt, bool ce) {
  const SegHeader& h = pkt.seg;
  rcv_mark(h.seq);
  ++stats_.segments_received;
  ++ep_stats_->segments_received;
  if (pkt.hdr.flags & kFlagNoPayloadCrc) ++stats_.segments_unchecked;
  if (ce) {
    ++stats_.ce_received;
    ++pending_ce_;
    // DCQCN's notification point: a paced CNP per arriving lane (Zhu et al. §3); other controllers
    // get the CE count echoed in ACKs.
    if (peer_cc_kind_ == static_cast<uint8_t>(cc::ControllerKind::kDcqcn) &&
        cnp_pacers_[pkt.hdr.lane].on_packet(now, true)) {
      cnp_pending_mask_ |= uint64_t{1} << pkt.hdr.lane;
    }
  }
  // The echoed remote delay runs from the segment's arrival (the wire's receive timestamp), not from
  // when this host got round to it: the sender subtracts it from the RTT (Swift's endpoint delay,
  // Kumar et al. §3.1), so this host's scheduling delay does not read as fabric queueing.
  echo_seq_ = h.seq;
  echo_ts_ns_ = h.send_ts_ns;
  echo_arrival_ns_ = rx_ns;
  echo_lane_ = pkt.hdr.lane;
  ++segs_since_ack_;
  const bool urgent = rcv_highest_end_ > rcv_nxt_ || (pkt.hdr.flags & (kFlagCredit | kFlagLast)) != 0 || ce ||
                      segs_since_ack_ >= cfg_.ack_every_segments;
  if (urgent) {
    ack_now_ = true;
  } else if (ack_deadline_ == kNever) {
    ack_deadline_ = now + cfg_.ack_delay_ns;
  }
}

bool ReceiveHalf::on_data(TimeNs now, const Packet& pkt, PayloadCopier* copier) {
  const SegHeader& h = pkt.seg;
  // The wire carries the low 32 bits of the slot; valid slots lie in the last ring-size posts.
  const uint64_t ring = uint64_t{recv_mask_} + 1;
  const uint64_t lo = recv_slot_next_ > ring ? recv_slot_next_ - ring : 0;
  const uint64_t slot = lo + static_cast<uint32_t>(h.slot - static_cast<uint32_t>(lo));
  if (slot >= recv_slot_next_) return false;  // data for a receive never posted
  const uint32_t idx = recv_slots_[slot & recv_mask_];
  if (idx == kNoRequest || reqs_[idx].slot != slot) {
    return true;  // the receive already ended (failed at close): acknowledge, place nothing
  }
  Request& r = reqs_[idx];
  if (pkt.hdr.flags & kFlagTooLarge) {
    finish(idx, false, 0, h.tag,
           "message of " + std::to_string(h.msg_len) + " bytes is larger than this receive's buffer of " +
               std::to_string(r.capacity) + " bytes (tag " + std::to_string(h.tag) + ")",
           ErrorCode::kInvalidUsage);
    return true;
  }
  if (h.msg_len > r.capacity) return false;  // the sender must have refused it (kFlagTooLarge)
  if (!r.msg_len_known) {
    r.msg_len = h.msg_len;
    r.msg_len_known = true;
  } else if (r.msg_len != h.msg_len) {
    return false;
  }
  // Virtual payload: only the count of bytes is placed (the receive buffer may be null).
  if (h.payload_len > 0 && !cfg_.virtual_payload) {
    if (copier != nullptr) {
      copier->copy(r.buf + h.offset, pkt.payload, h.payload_len, addr_.id, reqs_.id(idx));
    } else {
      std::memcpy(r.buf + h.offset, pkt.payload, h.payload_len);
    }
  }
  if (r.placed == 0) r.first_ns = now;  // only a 0-byte message places nothing, in one segment
  r.placed += h.payload_len;
  stats_.bytes_received += h.payload_len;
  ep_stats_->bytes_received += h.payload_len;
  if (r.placed == r.msg_len) {
    r.last_ns = r.done_ns = now;
    finish(idx, true, r.msg_len, h.tag);
  }
  return true;
}

void ReceiveHalf::build_ack(TimeNs now, TxPacket& out, uint8_t lane, uint32_t path_id, bool probe) {
  AckHeader& a = ack_scratch_;  // reused: a fresh AckHeader would zero 256 bytes of SACK ranges
  a.cum_ack = rcv_nxt_;
  a.echo_seq = echo_seq_;
  a.echo_ts_ns = echo_ts_ns_;
  a.remote_delay_ns = static_cast<uint32_t>(std::clamp<TimeNs>(now - echo_arrival_ns_, 0, 0xFFFFFFFFLL));
  a.ce_count = static_cast<uint16_t>(std::min<uint32_t>(pending_ce_, 0xFFFF));
  a.echo_lane = echo_lane_;
  a.nsack = 0;
  if (rcv_highest_end_ > rcv_nxt_) {
    // SACK ranges in ascending order, the lowest kMaxSackRanges of them when there are more. Then what
    // the sender learns is exact up to the end of the last range: its per-lane loss rules (dupthresh,
    // RACK) only ever compare segments inside that prefix. Reporting the newest arrival in place of the
    // last range (RFC 2018's first-block rule) would tell it of a segment far beyond ranges it was never
    // told about, and it would retransmit those delivered segments as lost: with lanes on several
    // threads a coalesced ACK routinely has more holes than ranges (sack_truncation_test).
    uint64_t seq = rcv_nxt_ + 1;  // rcv_nxt_ itself is missing by definition
    while (seq < rcv_highest_end_ && a.nsack < kMaxSackRanges) {
      while (seq < rcv_highest_end_ && !rcv_has(seq)) ++seq;
      if (seq >= rcv_highest_end_) break;
      const uint64_t start = seq;
      while (seq < rcv_highest_end_ && rcv_has(seq)) ++seq;
      a.sack[a.nsack++] = SackRange{start, seq};
    }
  }
  out.header_len = static_cast<uint16_t>(encode_ack(
      common_header(addr_, PacketType::kAck, lane, probe ? kFlagAckRequest : uint8_t{0}), a, out.header));
  fill_common(out, addr_, lane, path_id);
  ack_now_ = false;
  ack_deadline_ = kNever;
  segs_since_ack_ = 0;
  pending_ce_ = 0;
  ++stats_.acks_sent;
}

}  // namespace megascale::engine::detail
