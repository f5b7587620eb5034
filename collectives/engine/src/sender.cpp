// The sending direction: matching sends to the peer's credits, segment transmission over lanes, ACK
// processing (cumulative + SACK), loss detection per lane (dupthresh and RACK), retransmission and RTO.
#include "sender.h"

#include <algorithm>

#include "megascale/engine/crc32c.h"

namespace megascale::engine::detail {

SendHalf::SendHalf(const EngineConfig& cfg, const ConnAddress& addr, RequestTable& reqs,
                   ConnectionStats& stats, EndpointStats* ep_stats, uint64_t rto_seed, uint64_t rng)
    : cfg_(cfg),
      addr_(addr),
      reqs_(reqs),
      stats_(stats),
      ep_stats_(ep_stats),
      rng_(rng),
      seg_bytes_(cfg.segment_bytes),
      window_(cfg.window_segments),
      pacing_floor_bps_(8.0 * static_cast<double>(cfg.segment_bytes + kSegHeaderBytes) * 1e9 /
                        static_cast<double>(std::max<TimeNs>(cfg.cc.rto.max_rto_ns, 1))),
      tx_queue_(initial_entries(cfg, cfg.max_posted_sends)),
      credit_queue_(initial_entries(cfg, cfg.max_posted_recvs)),
      retx_queue_(initial_entries(cfg, cfg.window_segments * 2)),
      rto_(cfg.cc.rto, rto_seed) {
  if (!cfg.grow_connection_state) unmatched_sends_.reserve(cfg.max_posted_sends);
  ring_.resize(initial_entries(cfg, cfg.window_segments));
  ring_mask_ = ring_.size() - 1;
  lanes_.resize(cfg.lanes);
}

void SendHalf::establish(TimeNs now, uint32_t seg_bytes, uint32_t peer_window, uint32_t peer_recv_slots) {
  seg_bytes_ = seg_bytes;
  window_ = std::min(cfg_.window_segments, peer_window);
  credits_.assign(peer_recv_slots, CreditEntry{});
  credit_mask_ = peer_recv_slots - 1;
  init_lanes(now);
}

void SendHalf::queue_credit(uint32_t idx) {
  if (credit_queue_.full()) credit_queue_.grow();  // grow_connection_state only; else never full
  credit_queue_.push(idx);
}

bool SendHalf::on_credit(const Packet& pkt) {
  const SegHeader& h = pkt.seg;
  const uint64_t ring = uint64_t{credit_mask_} + 1;
  const uint64_t slot =
      credit_contig_ + static_cast<uint32_t>(h.slot - static_cast<uint32_t>(credit_contig_));
  if (slot >= credit_contig_ + ring) return false;  // more receives than the peer advertised
  CreditEntry& c = credits_[slot & credit_mask_];
  if (c.present) return false;  // a slot still unmatched: the peer reused it too early
  c.present = true;
  c.slot = slot;
  c.tag = h.tag;
  c.capacity = h.capacity_bytes;
  // Credits are matched in slot order: advance over every slot that has arrived.
  while (credits_[credit_contig_ & credit_mask_].present &&
         credits_[credit_contig_ & credit_mask_].slot == credit_contig_) {
    ++credit_contig_;
  }
  try_match();
  return true;
}

void SendHalf::drop_queued() {
  unmatched_sends_.clear();
  tx_queue_.clear();
  credit_queue_.clear();
  notices_.clear();
}

void SendHalf::stop() {
  rto_deadline_ = pace_wake_ns_ = tlp_deadline_ = kNever;
  tlp_seqs_.clear();
  retx_queue_.clear();
}

void SendHalf::finish() {
  retx_queue_.clear();
  snd_una_ = snd_nxt_;
  rto_deadline_ = kNever;
  tlp_deadline_ = kNever;
}

void SendHalf::on_probe_answered(TimeNs now) {
  rto_.on_progress(now);
  if (snd_una_ == snd_nxt_) rto_deadline_ = kNever;
}

void SendHalf::grow_tx_ring() {
  std::vector<TxSeg> bigger(ring_.size() * 2);
  const uint64_t mask = bigger.size() - 1;
  for (uint64_t seq = snd_una_; seq < snd_nxt_; ++seq) bigger[seq & mask] = ring_[seq & ring_mask_];
  ring_.swap(bigger);
  ring_mask_ = mask;
}

void SendHalf::try_match() {
  if (credit_scan_lo_ == credit_contig_) return;  // no unmatched credit in order
  for (size_t i = 0; i < unmatched_sends_.size();) {
    const uint32_t idx = unmatched_sends_[i];
    Request& s = reqs_[idx];
    bool matched = false;
    for (uint64_t slot = credit_scan_lo_; slot < credit_contig_; ++slot) {
      CreditEntry& c = credits_[slot & credit_mask_];
      if (!c.present || (c.tag != -1 && c.tag != s.tag)) continue;
      c.present = false;
      matched = true;
      s.matched = true;
      s.slot = slot;
      if (s.size > c.capacity) {
        // NCCL semantics: a receive smaller than the send is an error, on both sides.
        notices_.push_back(TooLargeNotice{.slot = slot, .tag = s.tag, .msg_len = s.size});
        reqs_.complete(idx, false, 0, s.tag,
                       "message of " + std::to_string(s.size) +
                           " bytes is larger than the peer's receive buffer of " +
                           std::to_string(c.capacity) + " bytes (tag " + std::to_string(s.tag) + ")",
                       ErrorCode::kInvalidUsage);
      } else {
        if (tx_queue_.full()) tx_queue_.grow();  // grow_connection_state only; else never full
        tx_queue_.push(idx);
      }
      break;
    }
    if (matched) {
      unmatched_sends_.erase(unmatched_sends_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
    while (credit_scan_lo_ < credit_contig_ && !credits_[credit_scan_lo_ & credit_mask_].present)
      ++credit_scan_lo_;
    if (credit_scan_lo_ == credit_contig_) break;
  }
}

void SendHalf::emit_seg(TimeNs now, uint64_t seq, TxSeg& s, uint32_t lane_index, bool retransmit,
                        TxPacket& out, bool probe) {
  Lane& lane = lanes_[lane_index];
  s.lane = static_cast<uint8_t>(lane_index);
  s.sent_ns = now;
  if (!retransmit) s.first_sent_ns = now;
  s.lane_seq = lane.next_lane_seq++;
  if (retransmit && s.retx < 255) ++s.retx;
  if (!probe) lane.in_flight += s.len;
  lane.pacer.on_send(now, uint64_t{s.len} + kSegHeaderBytes);
  lane.cc->on_send(now, s.len);

  SegHeader h;
  h.seq = seq;
  h.send_ts_ns = now;
  h.payload_len = s.len;
  h.slot = static_cast<uint32_t>(s.slot);
  h.tag = s.tag;
  const uint8_t* payload = nullptr;
  bool unchecked = false;  // a DATA payload sent without its CRC (version 2, EngineConfig::payload_crc)
  if (s.flags & kFlagCredit) {
    h.capacity_bytes = s.offset;
  } else {
    h.offset = s.offset;
    h.msg_len = s.msg_len;
    // Virtual payload: the bytes do not exist; the packet leaves with payload nullptr and CRC 0.
    if (s.len > 0 && !cfg_.virtual_payload) {
      payload = reqs_[s.req].data + s.offset;
      unchecked = !cfg_.payload_crc && addr_.version >= 2;
      if (!unchecked && !cfg_.wire_seals_payload_crc) h.payload_crc = crc32c(payload, s.len);
    }
  }
  const CommonHeader ch = common_header(addr_, PacketType::kSeg, static_cast<uint8_t>(lane_index),
                                        static_cast<uint8_t>(s.flags | (retransmit ? kFlagRetransmit : 0) |
                                                             (unchecked ? kFlagNoPayloadCrc : 0)));
  out.header_len = static_cast<uint16_t>(encode_seg(ch, h, out.header));
  fill_common(out, addr_, static_cast<uint8_t>(lane_index), lane.stats.path_id);
  out.payload = payload;
  out.payload_len = s.len;
  out.ect = true;
  out.payload_crc_pending = payload != nullptr && cfg_.wire_seals_payload_crc && !unchecked;
  out.request = payload != nullptr ? reqs_.id(s.req) : 0;

  ++lane.stats.segments_sent;
  lane.stats.bytes_sent += s.len;
  lane.stats.in_flight_bytes = lane.in_flight;
  ++stats_.segments_sent;
  stats_.bytes_sent += s.len;
  if (rto_deadline_ == kNever) {
    rto_deadline_ = now + rto_.timeout_ns();
    last_progress_ns_ = now;
  }
  if (cfg_.tail_probe && !retransmit) arm_tail_probe(now);
}

void SendHalf::arm_tail_probe(TimeNs now) {
  // RFC 8985 §7.2: after new data leaves or an ACK makes progress, unless a probe is already out or a
  // timeout episode is running (the RTO is in charge then). Without an RTT sample there is no PTO.
  tlp_deadline_ = kNever;
  if (tlp_out_ || snd_una_ == snd_nxt_ || rto_.in_episode()) return;
  const TimeNs srtt = rto_.srtt_ns();
  if (srtt <= 0) return;
  const TimeNs at = now + std::max(2 * srtt + cfg_.ack_delay_ns, cfg_.tail_probe_min_ns);
  if (at < rto_deadline_) tlp_deadline_ = at;
}

void SendHalf::on_tail_probe() {
  tlp_deadline_ = kNever;
  if (snd_una_ == snd_nxt_ || rto_.in_episode()) return;
  // A segment already declared lost and waiting for its retransmission: recovery is under way.
  for (size_t i = 0; i < retx_queue_.size(); ++i) {
    const uint64_t seq = retx_queue_.at(i);
    const TxSeg& s = ring_[seq & ring_mask_];
    if (seq >= snd_una_ && s.lost && !s.sacked) return;
  }
  // The newest transmission of each lane still in flight: the one whose loss nothing would reveal.
  uint64_t newest_lane_seq[kMaxLanes];
  uint64_t newest_seq[kMaxLanes];
  uint64_t lanes_seen = 0;
  for (uint64_t seq = snd_una_; seq < snd_nxt_; ++seq) {
    const TxSeg& s = ring_[seq & ring_mask_];
    if (s.sacked || s.lost) continue;
    const uint64_t bit = uint64_t{1} << s.lane;
    if (!(lanes_seen & bit) || s.lane_seq > newest_lane_seq[s.lane]) {
      lanes_seen |= bit;
      newest_lane_seq[s.lane] = s.lane_seq;
      newest_seq[s.lane] = seq;
    }
  }
  tlp_seqs_.clear();
  while (lanes_seen != 0) {
    const auto i = static_cast<uint32_t>(__builtin_ctzll(lanes_seen));
    lanes_seen &= lanes_seen - 1;
    tlp_seqs_.push_back(newest_seq[i]);
  }
  tlp_out_ = !tlp_seqs_.empty();
}

bool SendHalf::poll(TimeNs now, TxPacket& out) {
  TimeNs wake = kNever;
  // Retransmissions first: they unblock the receiver's cumulative ACK.
  while (!retx_queue_.empty()) {
    const uint64_t seq = retx_queue_.front();
    TxSeg& s = ring_[seq & ring_mask_];
    if (seq < snd_una_ || s.sacked || !s.lost) {
      retx_queue_.pop();
      continue;
    }
    const int lane = pick_lane(now, s.len, &wake);
    if (lane < 0) {
      pace_wake_ns_ = wake;
      return false;
    }
    retx_queue_.pop();
    s.lost = false;
    emit_seg(now, seq, s, static_cast<uint32_t>(lane), true, out);
    Lane& l = lanes_[static_cast<size_t>(lane)];
    if (s.lost_by_rto) {
      ++l.stats.retransmits_rto;
      ++stats_.retransmits_rto;
    } else {
      ++l.stats.retransmits_fast;
      ++stats_.retransmits_fast;
    }
    return true;
  }
  // Tail-loss probes: on their own lanes, outside window and pacer (RFC 8985 §7.3).
  while (!tlp_seqs_.empty()) {
    const uint64_t seq = tlp_seqs_.back();
    tlp_seqs_.pop_back();
    TxSeg& s = ring_[seq & ring_mask_];
    if (seq < snd_una_ || s.sacked || s.lost) continue;
    emit_seg(now, seq, s, s.lane, true, out, /*probe=*/true);
    ++lanes_[s.lane].stats.tail_probes;
    ++stats_.tail_probes;
    return true;
  }
  if (snd_nxt_ - snd_una_ >= window_) return false;  // the ACK that opens the window wakes us

  TxSeg next;
  uint32_t req_idx = kNoRequest;
  if (!credit_queue_.empty()) {
    req_idx = credit_queue_.front();
    const Request& r = reqs_[req_idx];
    next.flags = kFlagCredit;
    next.slot = r.slot;
    next.tag = r.tag;
    next.offset = r.capacity;
  } else if (!notices_.empty()) {
    const TooLargeNotice& n = notices_.front();
    next.flags = kFlagTooLarge;
    next.slot = n.slot;
    next.tag = n.tag;
    next.msg_len = n.msg_len;
  } else if (!tx_queue_.empty()) {
    req_idx = tx_queue_.front();
    const Request& r = reqs_[req_idx];
    next.req = req_idx;
    next.slot = r.slot;
    next.tag = r.tag;
    next.offset = r.next_offset;
    next.msg_len = r.size;
    next.len = static_cast<uint32_t>(std::min<uint64_t>(seg_bytes_, r.size - r.next_offset));
    if (r.next_offset + next.len == r.size) next.flags = kFlagLast;
  } else {
    return false;
  }
  const int lane = pick_lane(now, next.len, &wake);
  if (lane < 0) {
    pace_wake_ns_ = wake;
    return false;
  }
  // Commit: the element leaves its queue.
  if (next.flags & kFlagCredit) {
    reqs_[req_idx].credit_sent = true;
    credit_queue_.pop();
  } else if (next.flags & kFlagTooLarge) {
    notices_.erase(notices_.begin());
  } else {
    Request& r = reqs_[req_idx];
    if (r.next_offset == 0) r.first_ns = now;  // the segment at offset 0 is released once
    r.next_offset += next.len;
    ++r.segs_unacked;
    if (r.next_offset == r.size) {
      r.last_ns = now;
      r.all_sent = true;
      tx_queue_.pop();
    }
  }
  // grow_connection_state: the ring holds fewer than window_ segments until it has doubled enough.
  if (snd_nxt_ - snd_una_ == ring_.size()) grow_tx_ring();
  const uint64_t seq = snd_nxt_++;
  TxSeg& s = ring_[seq & ring_mask_];
  s = next;
  emit_seg(now, seq, s, static_cast<uint32_t>(lane), false, out);
  return true;
}

// A segment a timeout declared lost, newly acknowledged: was it the original that arrived? Then the
// timeout was spurious (Eifel's question, RFC 3522, answered without the echo naming that segment,
// which it often does not: it names one segment, perhaps one no timeout marked, sent within the last
// base RTO). Yes when no copy but the original could have been received before the ACK left the
// receiver:
// - its retransmission has not left (queued behind the cut window);
// - its one retransmission left after the ACK arrived (the wire's receive timestamp: an I/O thread
//   read the ACK late while the engine's timer fired);
// - its one retransmission left after the copy the ACK echoes, on the same lane and path, by more
//   than the reordering window. Such copies arrive in order (RACK's own premise, detect_losses), and
//   the echo names the receiver's newest new segment (receiver.cpp never moves it to a duplicate):
//   had the retransmission arrived before the ACK left, it would have arrived after the echoed copy,
//   and been either a duplicate (the original was there) or the echo itself.
bool SendHalf::original_arrived(const TxSeg& s, const AckNews& news) const {
  if (s.retx == 0) return true;
  if (s.retx != 1) return false;  // an earlier retransmission may be what arrived
  if (news.rx_ns < s.sent_ns) return true;
  return news.echo_lane == s.lane && news.echo_ts_ns >= lanes_[s.lane].path_since_ns &&
         news.echo_ts_ns + reo_wnd_ns() < s.sent_ns;
}

void SendHalf::deliver(TxSeg& s, AckNews& news) {
  if (s.lost_by_rto && original_arrived(s, news)) news.rto_original_arrived = true;
  s.sacked = true;
  Lane& lane = lanes_[s.lane];
  if (s.lost) {
    s.lost = false;  // declared lost but arrived after all: it was out of flight already
  } else {
    lane.in_flight -= s.len;
  }
  const uint64_t bit = uint64_t{1} << s.lane;
  ack_lane_mask_ |= bit;
  ack_lane_bytes_[s.lane] += s.len;
  ++ack_lane_pkts_[s.lane];
  if (s.retx == 0) ack_lane_newest_sent_[s.lane] = std::max(ack_lane_newest_sent_[s.lane], s.sent_ns);
  // The per-lane loss rules learn only from deliveries that are certainly of the copy this TxSeg
  // describes. A retransmission may have gone out on another lane, with a new lane sequence and send
  // time; if the first copy is what arrived, crediting the new lane would tell dupthresh and RACK that
  // this lane delivered a segment it has not, and they would declare its earlier segments, still on
  // their way, lost (RFC 8985 §6.2 step 2 excludes such ambiguous samples for the same reason).
  // retx_ambiguity_test covers that cascade.
  if (s.retx == 0) {
    lane.delivered_lane_seq_end = std::max(lane.delivered_lane_seq_end, s.lane_seq + 1);
    lane.rack_sent_ns = std::max(lane.rack_sent_ns, s.sent_ns);
  }
  if (s.req != kNoRequest) {
    Request& r = reqs_[s.req];
    if (r.in_use && !r.done) {
      --r.segs_unacked;
      if (r.all_sent && r.segs_unacked == 0) {
        r.done_ns = news.now_ns;
        reqs_.complete(s.req, true, r.size, r.tag);
      }
    }
  }
}

bool SendHalf::advance_cum_ack(uint64_t cum_ack, AckNews& news) {
  for (uint64_t seq = snd_una_; seq < cum_ack; ++seq) {
    TxSeg& s = ring_[seq & ring_mask_];
    if (!s.sacked) deliver(s, news);
  }
  if (cum_ack <= snd_una_) return false;
  snd_una_ = cum_ack;
  return true;
}

bool SendHalf::on_ack(TimeNs now, TimeNs rx_ns, const Packet& pkt) {
  const AckHeader& a = pkt.ack;
  ++stats_.acks_received;
  if (a.cum_ack > snd_nxt_ || (a.nsack > 0 && a.sack[a.nsack - 1].end > snd_nxt_)) {
    ++stats_.malformed_dropped;  // acknowledges what we never sent
    return false;
  }
  for (uint32_t i = 0; i + 1 < a.nsack; ++i) {
    if (a.sack[i].end > snd_nxt_) {
      ++stats_.malformed_dropped;
      return false;
    }
  }
  // The RTT sample from the echoed send time, only when this ACK is the first news of that segment's
  // delivery. Karn's rule forbids samples that cannot be attributed to one transmission; the echoed
  // timestamp attributes them (RFC 7323 §4.1), so a retransmitted segment still gives a sample when
  // the echo equals the send time of its first or its latest copy. Without this, a lane whose path is
  // slower than the connection's RTO would time out forever and never teach the RTO its real RTT.
  //
  // Two samples of one round trip: to the ACK's arrival (rx_ns, the wire's receive timestamp) for the
  // controllers, RACK and the statistics, so that the path and not this host's scheduling is measured
  // (Swift's NIC timestamps, Kumar et al. §3.1); and to now, when the ACK is processed, for the RTO,
  // because the retransmission timer also runs on processing time: an RTO learnt without the host's
  // delay would fire before ACKs that arrived in time are read.
  TimeNs rtt_ns = -1;
  TimeNs rto_rtt_ns = -1;
  // A timeout declared this segment lost, and the echo is of its first transmission: the original
  // arrived, so the timeout was spurious (Eifel detection with timestamps, RFC 3522). On a host that
  // stalls, every lane then sits in a run of such timeouts; its cuts are undone below.
  bool spurious_rto = false;
  if (a.echo_seq >= snd_una_ && a.echo_seq < snd_nxt_) {
    const TxSeg& e = ring_[a.echo_seq & ring_mask_];
    const bool attributable = e.retx == 0 ? e.sent_ns == a.echo_ts_ns
                                          : (e.sent_ns == a.echo_ts_ns || e.first_sent_ns == a.echo_ts_ns) &&
                                                e.sent_ns != e.first_sent_ns;
    if (!e.sacked && attributable && rx_ns >= a.echo_ts_ns) {
      rtt_ns = rx_ns - a.echo_ts_ns;
      rto_rtt_ns = now - a.echo_ts_ns;
    }
    spurious_rto = !e.sacked && e.lost_by_rto && (e.retx > 0 || e.lost) && e.first_sent_ns == a.echo_ts_ns;
    // RACK-TLP: the echo names the latest copy of a retransmitted segment (a probe's, or a
    // retransmission's): that copy, on its lane, is what arrived, so RACK may learn from it, which
    // deliver() cannot for a retransmitted segment. The probe's ACK then shows the earlier segments of
    // its lane that are still missing as lost (RFC 8985 §6.2 uses timestamps the same way). Both are
    // maxima, as deliver()'s updates below are, so the order does not matter.
    if (cfg_.tail_probe && !e.sacked && e.retx > 0 && e.sent_ns == a.echo_ts_ns &&
        e.sent_ns != e.first_sent_ns) {
      Lane& lane = lanes_[e.lane];
      lane.delivered_lane_seq_end = std::max(lane.delivered_lane_seq_end, e.lane_seq + 1);
      lane.rack_sent_ns = std::max(lane.rack_sent_ns, e.sent_ns);
    }
  }

  const uint32_t rto_run = rto_.backoff_count();  // timeouts since the last progress
  AckNews news{rx_ns, a.echo_ts_ns, a.echo_lane};
  news.now_ns = now;
  bool progress = advance_cum_ack(a.cum_ack, news);
  for (uint32_t i = 0; i < a.nsack; ++i) {
    for (uint64_t seq = std::max(a.sack[i].start, snd_una_); seq < a.sack[i].end; ++seq) {
      TxSeg& s = ring_[seq & ring_mask_];
      if (!s.sacked) {
        deliver(s, news);
        progress = true;
      }
    }
    highest_sacked_end_ = std::max(highest_sacked_end_, a.sack[i].end);
  }
  if (progress) {
    rto_.on_progress(now);
    last_progress_ns_ = now;
  }
  if (spurious_rto || news.rto_original_arrived) undo_spurious_rtos(now, rto_run);
  if (rtt_ns >= 0) {
    rto_.on_rtt_sample(rto_rtt_ns);
    stats_.rtt.add(rtt_ns);
    stats_.fabric_delay.add(std::max<TimeNs>(rtt_ns - a.remote_delay_ns, 0));
    min_rtt_ns_ = std::min(min_rtt_ns_, rtt_ns);
  }

  // Feed each lane's controller with what was delivered on it. The exact RTT sample and the ECN echo
  // belong to the lane of the echoed segment. A coalesced ACK also covers other lanes' segments: each
  // of those lanes gets the classic sample (now - send time of its newest never-retransmitted segment
  // acknowledged here, less the echoed receiver delay), else a delay-based controller would never
  // grow a lane whose segments are never the last of a batch. The echoed delay is the latest
  // segment's: those segments arrived earlier and waited longer for this ACK (a receiver descheduled
  // for milliseconds acknowledges every lane's arrivals at once), so their sample only bounds the
  // fabric delay from above (AckSample::delay_upper_bound): below the target it proves room, above it
  // it may be the receiver's scheduling and must not cut.
  const uint32_t echo_lane = a.echo_lane < lanes_.size() ? a.echo_lane : kMaxLanes;
  uint64_t mask = ack_lane_mask_;
  if (echo_lane < kMaxLanes && (rtt_ns >= 0 || a.ce_count > 0)) mask |= uint64_t{1} << echo_lane;
  ack_lane_mask_ = 0;
  while (mask != 0) {
    const auto i = static_cast<uint32_t>(__builtin_ctzll(mask));
    mask &= mask - 1;
    Lane& lane = lanes_[i];
    cc::AckSample smp;
    smp.acked_bytes = ack_lane_bytes_[i];
    smp.acked_packets = ack_lane_pkts_[i];
    if (i == echo_lane) {
      smp.rtt_ns = rtt_ns;
      smp.remote_delay_ns = a.remote_delay_ns;
      smp.ecn_ce = a.ce_count > 0;
      smp.ce_packets = a.ce_count;
      if (rtt_ns >= 0) lane.stats.rtt.add(rtt_ns);
      lane.stats.ecn_marks += a.ce_count;
      stats_.ecn_marks += a.ce_count;
    } else if (ack_lane_newest_sent_[i] > 0 && rx_ns >= ack_lane_newest_sent_[i]) {
      smp.rtt_ns = rx_ns - ack_lane_newest_sent_[i];
      smp.remote_delay_ns = std::min<TimeNs>(a.remote_delay_ns, smp.rtt_ns);
      smp.delay_upper_bound = true;
    }
    lane.cc->on_ack(now, smp);
    lane_refresh(now, lane);
    lane_floor_check(now, lane);
    if (smp.acked_packets > 0) lane.consecutive_rtos = 0;
    lane.stats.bytes_acked += smp.acked_bytes;
    lane.stats.segments_acked += smp.acked_packets;
    stats_.bytes_acked += smp.acked_bytes;
    lane.stats.in_flight_bytes = lane.in_flight;
    if (lane.in_recovery && snd_una_ >= lane.recovery_end_seq) lane.in_recovery = false;
    if (i == echo_lane && rtt_ns >= 0) {
      lane_rtt_sample(now, lane, rtt_ns - a.remote_delay_ns, a.ce_count > 0);
    }
    ack_lane_bytes_[i] = 0;
    ack_lane_pkts_[i] = 0;
    ack_lane_newest_sent_[i] = 0;
  }

  if (highest_sacked_end_ > snd_una_ && a.nsack > 0) detect_losses(now, highest_sacked_end_);
  if (snd_una_ == snd_nxt_) {
    rto_deadline_ = kNever;
  } else if (progress) {
    rto_deadline_ = now + rto_.timeout_ns();
  }
  if (cfg_.tail_probe && (progress || snd_una_ == snd_nxt_)) {
    tlp_out_ = false;
    arm_tail_probe(now);
  }
  return true;
}

void SendHalf::on_fin_ack(TimeNs now, uint64_t cum_ack) {
  AckNews news{.rx_ns = now, .now_ns = now};
  advance_cum_ack(cum_ack, news);
}

TimeNs SendHalf::reo_wnd_ns() const {
  if (cfg_.reo_wnd_ns > 0) return cfg_.reo_wnd_ns;
  return min_rtt_ns_ == kNever ? 0 : min_rtt_ns_ / 4;
}

void SendHalf::push_retx(uint64_t seq) {
  // grow_connection_state: a queue below its full size (twice window_segments) doubles instead, so the
  // rebuild below happens exactly when it would with the whole queue.
  if (retx_queue_.full() && retx_queue_.capacity() < size_t{cfg_.window_segments} * 2) retx_queue_.grow();
  if (retx_queue_.full()) {
    // Only stale entries can fill a queue twice the window: rebuild it from the ring.
    retx_queue_.clear();
    for (uint64_t q = snd_una_; q < snd_nxt_; ++q) {
      const TxSeg& s = ring_[q & ring_mask_];
      if (s.lost && !s.sacked && q != seq) retx_queue_.push(q);
    }
  }
  retx_queue_.push(seq);
}

void SendHalf::mark_lost(uint64_t seq, TxSeg& s, bool by_rto) {
  Lane& lane = lanes_[s.lane];
  s.lost = true;
  s.lost_by_rto = by_rto;
  lane.in_flight -= s.len;
  lane.stats.in_flight_bytes = lane.in_flight;
  ++lane.stats.losses;
  push_retx(seq);
}

// Segments of one lane travel one path, so they arrive in order unless lost; across lanes, arrival
// order says nothing (paths differ by microseconds). So both rules are applied per lane: dupthresh
// counts later segments *of the same lane* delivered (RFC 6675's rule on the lane's own sequence),
// and RACK compares send times with the latest delivered segment *of the same lane* (RFC 8985).
void SendHalf::detect_losses(TimeNs now, uint64_t scan_end) {
  const TimeNs reo = reo_wnd_ns();
  const uint64_t end = std::min(scan_end, snd_nxt_);
  for (uint64_t seq = snd_una_; seq < end; ++seq) {
    TxSeg& s = ring_[seq & ring_mask_];
    if (s.sacked || s.lost) continue;
    Lane& lane = lanes_[s.lane];
    const bool by_count = lane.delivered_lane_seq_end >= s.lane_seq + 1 + cfg_.dupthresh;
    const bool by_time = lane.rack_sent_ns >= 0 && lane.rack_sent_ns - reo > s.sent_ns;
    if (!by_count && !by_time) continue;
    mark_lost(seq, s, false);
    if (!lane.in_recovery) {
      // One congestion response per loss episode on this lane (Controller::on_fast_recovery).
      lane.in_recovery = true;
      lane.recovery_end_seq = snd_nxt_;
      lane.cc->on_fast_recovery(now);
      lane_refresh(now, lane);
    }
  }
}

Status SendHalf::on_rto(TimeNs now) {
  // Nothing in flight: every unacknowledged segment is selectively acknowledged or declared lost and
  // waiting for its retransmission, which a pacer below one packet of window may hold for many RTOs
  // (Swift §3.4: one packet every rtt/cwnd). That is no timeout (no count, no backoff, no cut): the
  // timer stops and starts again when the retransmission leaves (emit_seg; RFC 6298 5.1).
  bool in_flight = false;
  for (uint64_t seq = snd_una_; seq < snd_nxt_ && !in_flight; ++seq) {
    const TxSeg& s = ring_[seq & ring_mask_];
    in_flight = !s.sacked && !s.lost;
  }
  if (!in_flight) {
    rto_deadline_ = kNever;
    return {};
  }
  if (rto_.on_timeout(now) == cc::RtoVerdict::kGiveUp) {
    return make_error(ErrorCode::kTimeout,
                      "peer " + std::to_string(addr_.peer) + " unreachable: no progress for " +
                          duration_text(now - last_progress_ns_) + " after " +
                          std::to_string(rto_.backoff_count()) + " retransmission timeouts");
  }
  ++stats_.timeouts;
  tlp_deadline_ = kNever;  // the timeout is in charge until an ACK makes progress
  tlp_seqs_.clear();
  // Everything unacknowledged that has been out for a whole base RTO is presumed lost (the oldest
  // always is); younger segments on other lanes may still arrive.
  const TimeNs age = rto_.base_rto_ns();
  uint64_t lanes_hit = 0;
  for (uint64_t seq = snd_una_; seq < snd_nxt_; ++seq) {
    TxSeg& s = ring_[seq & ring_mask_];
    if (s.sacked || s.lost) continue;
    if (seq != snd_una_ && now - s.sent_ns < age) continue;
    mark_lost(seq, s, true);
    lanes_hit |= uint64_t{1} << s.lane;
  }
  while (lanes_hit != 0) {
    const auto i = static_cast<uint32_t>(__builtin_ctzll(lanes_hit));
    lanes_hit &= lanes_hit - 1;
    Lane& lane = lanes_[i];
    ++lane.stats.timeouts;
    lane.cc->on_rto(now);
    lane_refresh(now, lane);
    ++lane.consecutive_rtos;
    // Every repath_rto_threshold-th timeout in a row moves the lane. The count runs on through the
    // repath: the lane is still in its run of timeouts, which an ACK may yet show spurious.
    if (cfg_.repath_rto_threshold > 0 && lane.consecutive_rtos % cfg_.repath_rto_threshold == 0)
      repath(now, lane);
  }
  rto_deadline_ = now + rto_.timeout_ns();
  return {};
}

void SendHalf::undo_spurious_rtos(TimeNs now, uint32_t run) {
  // Eifel's response (RFC 4015) for every lane still in a run of timeouts (no acknowledgment since):
  // the controller restores its window. What was queued for retransmission is skipped as the late
  // originals are acknowledged; the backoff ended with the progress this ACK made.
  bool any = false;
  for (Lane& lane : lanes_) {
    if (lane.consecutive_rtos == 0) continue;
    lane.cc->on_spurious_rto(now);
    lane_refresh(now, lane);
    lane.consecutive_rtos = 0;
    any = true;
  }
  // Counted in timeouts, as ConnectionStats::timeouts is: the run's length (the RTO's backoff count
  // before this ACK's progress), at least 1 (an earlier ACK's progress on other lanes may have ended
  // the connection's run before this lane's).
  if (any) stats_.timeouts_spurious += std::max<uint32_t>(run, 1);
}

void SendHalf::on_cnp(TimeNs now, const Packet& pkt) {
  if (pkt.cnp.lane >= lanes_.size()) return;
  Lane& lane = lanes_[pkt.cnp.lane];
  lane.cc->on_cnp(now);
  lane_refresh(now, lane);
  ++lane.stats.cnps_received;
  ++stats_.cnps_received;
}

}  // namespace megascale::engine::detail
