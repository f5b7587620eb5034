// verbs-rc's port (rc_port.cpp): packets out as RDMA writes with immediate into the peer's ring, the
// completions that bring them in, return ring credit, free bounce buffers and report QP errors.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "rc_port.h"

namespace megascale::wire::verbs::rc_detail {

Status RcPort::send(std::span<const PortPacket> packets) {
  TimeNs now = 0;
  for (const PortPacket& pkt : packets) {
    const uint32_t len = pkt.header_len + pkt.payload_len;
    if (pkt.peer >= peers_.size() || pkt.slot >= cfg_.slots || len > slot_bytes_ || pkt.header_len == 0) {
      ++stats_.send_dropped;
      continue;
    }
    if (too_big_for_peer(*peers_[pkt.peer], len)) continue;
    Lane& l = peers_[pkt.peer]->lanes[pkt.slot];
    if (l.state == Lane::State::kFailed) {
      ++stats_.send_dropped;
      ++failed_dropped_;
      continue;
    }
    // Packets without payload (ACKs, credits, the handshake) wait only for each other, so data held
    // back by rc_queue_bytes never delays them.
    const bool data = pkt.payload_len > 0;
    std::deque<std::vector<uint8_t>>& queue = data ? l.pending : l.pending_ctl;
    if (l.state == Lane::State::kUp && queue.empty() &&
        post_packet(pkt.peer, pkt.slot, pkt.header, pkt.header_len, pkt.payload, pkt.payload_len, data)) {
      if (!data && !l.pending.empty()) ++control_first_;
      continue;
    }
    if (queue.size() >= kPendingMax) {
      ++stats_.send_dropped;
      ++queue_dropped_;
      continue;
    }
    if (data && l.state == Lane::State::kUp && l.pending.empty() && queue_full(l, len)) ++queue_full_waits_;
    std::vector<uint8_t> copy(pkt.header, pkt.header + pkt.header_len);
    if (pkt.payload_len > 0) copy.insert(copy.end(), pkt.payload, pkt.payload + pkt.payload_len);
    queue.push_back(std::move(copy));
    ++queued_;
    if (l.state == Lane::State::kIdle) {
      if (now == 0) now = UdpWire::now();
      start_connect(pkt.peer, pkt.slot, now);
    }
  }
  return {};
}

bool RcPort::post_packet(uint32_t peer, uint32_t lane, const uint8_t* h, uint32_t hl, const uint8_t* pl,
                         uint32_t pll, bool data) {
  Peer& p = *peers_[peer];
  Lane& l = p.lanes[lane];
  if (pool_free_.empty() || !p.remote_known || l.writer.credits() == 0) return false;
  if (data && queue_full(l, hl + pll)) return false;
  const uint32_t idx = pool_free_.back();
  uint8_t* buf = pool_.data() + size_t{idx} * slot_bytes_;
  std::memcpy(buf, h, hl);
  if (pll > 0) std::memcpy(buf + hl, pl, pll);
  const std::optional<uint32_t> slot = l.writer.take();
  Result<SendWr> wr = make_rc_write({.tag = {WrKind::kRcWrite, static_cast<uint8_t>(lane), l.epoch, idx},
                                     .header = {addr_of(buf), hl + pll, pool_keys_.lkey},
                                     .payload = {},
                                     .ring = p.remote,
                                     .remote_slot = *slot,
                                     .signaled = true});
  Status s = wr ? l.qp->post_write(*wr) : Status(wr.error());
  if (!s) {
    // The ring's bookkeeping now disagrees with the peer's: start the lane anew.
    ++stats_.send_errors;
    std::fprintf(stderr, "verbs-rc: write to %s lane %u: %s\n", p.text.c_str(), lane,
                 s.error().message.c_str());
    on_qp_error(peer, lane, l.epoch, WcStatus::kGeneralErr, UdpWire::now());
    return true;  // the packet is lost; the engine retransmits it
  }
  pool_free_.pop_back();
  l.outstanding.push_back(idx);
  pool_data_bytes_[idx] = data ? hl + pll : 0;
  l.posted_bytes += pool_data_bytes_[idx];
  ++stats_.packets_sent;
  stats_.bytes_sent += hl + pll;
  return true;
}

void RcPort::flush_lane(uint32_t peer, uint32_t lane) {
  Lane& l = peers_[peer]->lanes[lane];
  for (const bool data : {false, true}) {
    std::deque<std::vector<uint8_t>>& queue = data ? l.pending : l.pending_ctl;
    while (l.state == Lane::State::kUp && !queue.empty()) {
      std::vector<uint8_t>& b = queue.front();
      if (too_big_for_peer(*peers_[peer], static_cast<uint32_t>(b.size()))) {
        queue.pop_front();
        continue;
      }
      if (!post_packet(peer, lane, b.data(), static_cast<uint32_t>(b.size()), nullptr, 0, data)) break;
      if (!data && !l.pending.empty()) ++control_first_;
      queue.pop_front();
    }
  }
}

void RcPort::return_credits(uint32_t peer, uint32_t lane) {
  Peer& p = *peers_[peer];
  Lane& l = p.lanes[lane];
  l.credits_owed += l.reader.take_credits();
  if (l.credits_owed == 0 || l.state != Lane::State::kUp || !p.remote_known) return;
  Result<SendWr> wr =
      make_rc_credit({WrKind::kRcCredit, static_cast<uint8_t>(lane), l.epoch, 0}, p.remote, l.credits_owed);
  Status s = wr ? l.qp->post_write(*wr) : Status(wr.error());
  if (!s) {
    ++stats_.send_errors;
    on_qp_error(peer, lane, l.epoch, WcStatus::kGeneralErr, UdpWire::now());
    return;
  }
  l.credits_owed = 0;
  ++credits_sent_;
}

bool RcPort::arm() {
  if (!stash_.empty()) return false;
  // The channel's events are read here, before a sleep, and not by every receive(): an event comes
  // only after an arm, and one left unread ends the next sleep at once (as on the UD port).
  cq_->drain_events();
  if (Status s = cq_->arm(); !s) return false;
  // A completion that came before the arm raises no event: look once more.
  Result<uint32_t> n = cq_->poll(stash_, 64);
  return n.ok() && stash_.empty();
}

Result<size_t> RcPort::receive(size_t max, const Deliver& deliver) {
  std::vector<WorkCompletion> wcs;
  wcs.swap(stash_);
  const uint32_t room = static_cast<uint32_t>(std::clamp<size_t>(max, 1, 256));
  if (wcs.size() < room) {
    Result<uint32_t> n = cq_->poll(wcs, room - static_cast<uint32_t>(wcs.size()));
    if (!n) return n.error();
  }
  size_t delivered = 0;
  for (const WorkCompletion& wc : wcs) handle(wc, deliver, delivered);
  return delivered;
}

void RcPort::handle_home(const WorkCompletion& wc, const WrTag& tag) {
  if (tag.epoch != home_gen_) return;  // a WR of a home QP since re-created
  if (wc.status == WcStatus::kSuccess) {
    home_told_ = false;
    home_backoff_ = kSetupResendNs;
  } else if (home_reset_at_ == kNever) {
    // A UD QP errors as a whole (on rxe: a send while the link was down): recover it shortly. Said once
    // per outage: while the link stays down every reset errors again.
    if (!home_told_) {
      std::fprintf(stderr, "verbs-rc: home QP error (%s), recovering it\n", to_string(wc.status).c_str());
    }
    home_told_ = true;
    home_reset_at_ = UdpWire::now() + home_backoff_;
  }
  const uint32_t len = kGrhBytes + mtu_;
  const bool recv = tag.kind == WrKind::kUdRecv;
  if (recv && tag.slot >= kHomeRecvs) return;
  const uint8_t* buf = recv ? home_recv_.data() + size_t{tag.slot} * len : nullptr;
  const CompletionEvent ev =
      translate_completion(wc, {.mode = WireMode::kUd, .grh_ipv4 = gid_is_ipv4(gid_.gid)}, buf);
  if (!recv) {
    if (tag.slot < kHomeSends) home_send_free_.push_back(tag.slot);
    if (ev.kind != EventKind::kSendDone) ++stats_.send_errors;
    return;
  }
  if (ev.kind == EventKind::kPacket) {
    Result<RcSetupMsg> m = decode_rc_setup(buf + ev.offset, ev.length);
    if (m) {
      on_setup(*m);
    } else {
      // Said once (a peer of another build repeats its request every 20 ms); counted always.
      if (setups_refused_++ == 0) {
        std::fprintf(stderr, "verbs-rc: %s; refused (further refusals are only counted: rc_setups_refused)\n",
                     m.error().message.c_str());
      }
      ++stats_.recv_errors;
    }
  } else if (ev.kind != EventKind::kFlushed) {
    ++stats_.recv_errors;
  }
  if (ev.kind != EventKind::kFlushed) {
    if (Status s = post_home_recv(tag.slot); !s) ++stats_.recv_errors;
  }
}

void RcPort::handle(const WorkCompletion& wc, const Deliver& deliver, size_t& delivered) {
  const std::optional<WrTag> tag = decode_wr_id(wc.wr_id);
  if (!tag) {
    ++stats_.recv_errors;
    return;
  }
  if (tag->kind == WrKind::kUdSend || tag->kind == WrKind::kUdRecv) {
    handle_home(wc, *tag);
    return;
  }
  // A QP already dropped: its bounce buffers went back with it.
  const auto it = by_qpn_.find(wc.qp_num);
  if (it == by_qpn_.end()) return;
  const auto [peer, lane] = it->second;
  Peer& p = *peers_[peer];
  Lane& l = p.lanes[lane];
  if (tag->epoch != l.epoch || tag->lane != lane) return;
  const CompletionEvent ev = translate_completion(
      wc,
      {.mode = WireMode::kRc, .grh_ipv4 = false, .ring_slots = cfg_.ring_slots, .slot_bytes = slot_bytes_},
      nullptr);
  auto release = [&] {
    if (tag->kind != WrKind::kRcWrite) return;
    const auto at = std::find(l.outstanding.begin(), l.outstanding.end(), tag->slot);
    if (at == l.outstanding.end()) return;
    l.outstanding.erase(at);
    l.posted_bytes -= pool_data_bytes_[tag->slot];
    pool_free_.push_back(tag->slot);
  };
  auto repost = [&] {
    if (tag->kind != WrKind::kRcRecv || !l.qp) return;
    if (Status s = l.qp->post_recv(make_rc_recv(*tag)); !s) ++stats_.recv_errors;
  };
  switch (ev.kind) {
    case EventKind::kSendDone:
      release();
      if (tag->kind == WrKind::kRcWrite) {
        l.outage_start = kNever;  // progress: an outage is over
        l.errors = 0;
      }
      flush_lane(peer, lane);
      return;
    case EventKind::kPacket: {
      uint8_t* data = p.ring.data() + (size_t{lane} * cfg_.ring_slots + ev.ring_slot) * slot_bytes_;
      ++stats_.packets_received;
      stats_.bytes_received += ev.length;
      deliver(peer, data, ev.length, false);
      ++delivered;
      if (Status s = l.reader.on_filled(ev.ring_slot); !s) {
        ++stats_.recv_errors;
        std::fprintf(stderr, "verbs-rc: from %s lane %u: %s\n", p.text.c_str(), lane,
                     s.error().message.c_str());
      }
      repost();
      return_credits(peer, lane);
      return;
    }
    case EventKind::kCredit:
      if (Status s = l.writer.on_credit(ev.credits); !s) ++stats_.recv_errors;
      repost();
      flush_lane(peer, lane);
      return;
    case EventKind::kFlushed:
      release();
      return;
    case EventKind::kQpError:
      release();
      on_qp_error(peer, lane, tag->epoch, ev.status, UdpWire::now());
      return;
    case EventKind::kMalformed:
      ++stats_.recv_errors;
      repost();
      return;
  }
}

}  // namespace megascale::wire::verbs::rc_detail
