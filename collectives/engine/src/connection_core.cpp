// Connection lifecycle: construction, requests, handshake, close, failure, liveness, and the dispatch of
// packets, timers and poll_tx to the send and receive halves.
#include "connection_core.h"

#include <algorithm>
#include <cassert>
#include <cstdio>
#include <utility>

namespace megascale::engine::detail {

std::string duration_text(TimeNs ns) {
  char buf[32];
  const double v = static_cast<double>(ns);
  if (ns >= kNsPerSec) {
    std::snprintf(buf, sizeof buf, "%.1f s", v / 1e9);
  } else if (ns >= kNsPerMs) {
    std::snprintf(buf, sizeof buf, "%.1f ms", v / 1e6);
  } else {
    std::snprintf(buf, sizeof buf, "%.0f us", v / 1e3);
  }
  return buf;
}

namespace {

cc::RtoParams handshake_rto_params(const EngineConfig& cfg) {
  cc::RtoParams p = cfg.cc.rto;
  p.retry_budget_ns = cfg.connect_timeout_ns;
  return p;
}

bool is_pow2(uint32_t v) {
  return v != 0 && (v & (v - 1)) == 0;
}

}  // namespace

ConnectionCore::Seeds ConnectionCore::draw_seeds(uint64_t seed) {
  Seeds s;
  s.rto = splitmix64(seed);
  s.ctl_rto = splitmix64(seed);
  s.rng = seed;
  return s;
}

ConnectionCore::ConnectionCore(const EngineConfig& cfg, ConnId id, uint32_t peer, uint64_t seed,
                               bool initiator, TimeNs now, EndpointStats* ep_stats)
    : ConnectionCore(cfg, id, peer, draw_seeds(seed), initiator, now, ep_stats) {}

ConnectionCore::ConnectionCore(const EngineConfig& cfg, ConnId id, uint32_t peer, const Seeds& seeds,
                               bool initiator, TimeNs now, EndpointStats* ep_stats)
    : cfg_(cfg),
      ep_stats_(ep_stats),
      addr_{.peer = peer, .id = id},
      state_(initiator ? ConnectionState::kConnecting : ConnectionState::kEstablished),
      seg_bytes_(cfg.segment_bytes),
      reqs_(cfg, stats_, ep_stats),
      send_(cfg, addr_, reqs_, stats_, ep_stats, seeds.rto, seeds.rng),
      recv_(cfg, addr_, reqs_, stats_, ep_stats),
      initiator_(initiator),
      ctl_rto_(handshake_rto_params(cfg), seeds.ctl_rto) {
  if (initiator) {
    syn_pending_ = true;
    connect_start_ns_ = now;
  }
}

ConnectionCore::~ConnectionCore() = default;

// --- requests ---

Result<RequestId> ConnectionCore::post_send(const void* data, uint64_t size, int32_t tag) {
  if (state_ != ConnectionState::kConnecting && state_ != ConnectionState::kEstablished) {
    return make_error(closed_code(), std::string("post_send: connection is ") +
                                         std::string(to_string(state_)) +
                                         (error_.empty() ? "" : ": " + error_));
  }
  // SendRequest::make checked these (virtual payload: no bytes exist, only their count).
  assert(tag >= 0);
  assert(data != nullptr || size == 0 || cfg_.virtual_payload);
  if (sends_outstanding_ >= cfg_.max_posted_sends) {
    return make_error(ErrorCode::kInvalidUsage,
                      "post_send: " + std::to_string(sends_outstanding_) +
                          " sends outstanding (max_posted_sends); test() completed ones first");
  }
  const uint32_t idx = reqs_.alloc();
  Request& r = reqs_[idx];
  r.is_send = true;
  r.tag = tag;
  r.data = static_cast<const uint8_t*>(data);
  r.size = size;
  ++sends_outstanding_;
  ++stats_.sends_posted;
  send_.post(idx);
  if (state_ == ConnectionState::kEstablished) send_.try_match();  // else the handshake matches it
  if (!reqs_[idx].matched) ++stats_.sends_waited_for_credit;
  return reqs_.id(idx);
}

Result<RequestId> ConnectionCore::post_recv(void* buf, uint64_t capacity, int32_t tag) {
  if (state_ != ConnectionState::kConnecting && state_ != ConnectionState::kEstablished) {
    return make_error(closed_code(), std::string("post_recv: connection is ") +
                                         std::string(to_string(state_)) +
                                         (error_.empty() ? "" : ": " + error_));
  }
  if (tag < -1) return make_error("post_recv: tag must be >= -1 (-1 = any), got " + std::to_string(tag));
  if (buf == nullptr && capacity > 0 && !cfg_.virtual_payload) {
    return make_error("post_recv: null buffer with a non-zero capacity");
  }
  if (recvs_outstanding_ >= cfg_.max_posted_recvs) {
    return make_error(ErrorCode::kInvalidUsage,
                      "post_recv: " + std::to_string(recvs_outstanding_) +
                          " receives outstanding (max_posted_recvs); test() completed ones first");
  }
  if (!recv_.slot_free()) {
    return make_error(ErrorCode::kInvalidUsage, "post_recv: receive slot ring full: the receive posted " +
                                                    std::to_string(recv_.slots()) +
                                                    " receives ago has not completed");
  }
  const uint32_t idx = reqs_.alloc();
  Request& r = reqs_[idx];
  r.is_send = false;
  r.tag = tag;
  r.buf = static_cast<uint8_t*>(buf);
  r.capacity = capacity;
  recv_.post(idx);
  ++recvs_outstanding_;
  ++stats_.recvs_posted;
  send_.queue_credit(idx);
  return reqs_.id(idx);
}

Completion ConnectionCore::test(RequestId id) {
  const uint32_t idx = reqs_.find(id);
  if (idx == kNoRequest) {
    return Completion{.done = true,
                      .ok = false,
                      .bytes = 0,
                      .tag = 0,
                      .error = "unknown request",
                      .code = ErrorCode::kInvalidUsage};
  }
  Request& r = reqs_[idx];
  if (!r.done) return Completion{};
  Completion c{.done = true,
               .ok = r.ok,
               .bytes = r.bytes,
               .tag = r.tag,
               .error = std::move(r.error),
               .send = r.is_send,
               .first_ns = r.first_ns,
               .last_ns = r.last_ns,
               .done_ns = r.done_ns,
               .code = r.code};
  if (r.is_send) {
    --sends_outstanding_;
  } else {
    --recvs_outstanding_;
  }
  reqs_.release(idx);
  return c;
}

void ConnectionCore::fail_pending(const std::string& send_error, const std::string& recv_error,
                                  ErrorCode code, uint32_t* sends_failed, uint32_t* recvs_failed) {
  uint32_t ns = 0;
  uint32_t nr = 0;
  for (uint32_t i = 0; i < reqs_.size(); ++i) {
    Request& r = reqs_[i];
    if (!r.in_use || r.done) continue;
    reqs_.complete(i, false, 0, r.tag, r.is_send ? send_error : recv_error, code);
    if (!r.is_send) recv_.release_slot(i);
    ++(r.is_send ? ns : nr);
  }
  send_.drop_queued();
  if (sends_failed != nullptr) *sends_failed = ns;
  if (recvs_failed != nullptr) *recvs_failed = nr;
}

void ConnectionCore::fail(std::string message, ErrorCode code) {
  if (state_ == ConnectionState::kFailed) return;
  fail_pending(message, message, code, nullptr, nullptr);
  error_ = std::move(message);
  error_code_ = code;
  state_ = ConnectionState::kFailed;
  ++ep_stats_->connections_failed;
  ctl_deadline_ = port_probe_ns_ = kNever;
  send_.stop();
  recv_.stop();
  syn_pending_ = synack_pending_ = fin_pending_ = fin_reply_pending_ = false;
  probe_pending_ = probe_outstanding_ = false;
}

void ConnectionCore::on_port_unreachable(TimeNs now) {
  if (!is_open() || cfg_.port_closed_fail_ns == 0) return;
  if (port_closed_since_ns_ == kNever || last_rx_ns_ >= port_closed_since_ns_) {
    port_closed_since_ns_ = now;  // the first report, or the peer has spoken since the earlier ones
    port_probe_ns_ = now + cfg_.port_closed_fail_ns;
    return;
  }
  if (now - port_closed_since_ns_ < cfg_.port_closed_fail_ns) return;
  fail("peer " + std::to_string(addr_.peer) + " gone: its port is closed (ICMP port unreachable for " +
           duration_text(now - port_closed_since_ns_) + ", nothing heard from it since)",
       ErrorCode::kRemote);
}

// --- handshake ---

HandshakeBody ConnectionCore::handshake_body() const {
  HandshakeBody hs;
  hs.src_conn_id = addr_.id;
  hs.version_min = initiator_ ? cfg_.version_min : addr_.version;
  hs.version_max = initiator_ ? cfg_.version_max : addr_.version;
  hs.lanes = static_cast<uint16_t>(cfg_.lanes);
  hs.cc_kind = static_cast<uint8_t>(cfg_.cc.kind);
  hs.mss_bytes = cfg_.segment_bytes;
  hs.recv_slots = recv_.slots();
  hs.window_segments = recv_.window();
  return hs;
}

Status ConnectionCore::validate_handshake(const HandshakeBody& hs) {
  if (hs.mss_bytes == 0 || hs.mss_bytes > kMaxSegmentPayload) {
    return make_error("handshake: mss_bytes " + std::to_string(hs.mss_bytes) + " outside 1..65000");
  }
  if (!is_pow2(hs.recv_slots) || hs.recv_slots > (1U << 21)) {
    return make_error("handshake: recv_slots " + std::to_string(hs.recv_slots) +
                      " not a power of two <= 2^21");
  }
  if (!is_pow2(hs.window_segments) || hs.window_segments < 16 || hs.window_segments > (1U << 20)) {
    return make_error("handshake: window_segments " + std::to_string(hs.window_segments) +
                      " not a power of two in 16..2^20");
  }
  if (hs.lanes == 0 || hs.lanes > kMaxLanes) {
    return make_error("handshake: lanes " + std::to_string(hs.lanes) + " outside 1..64");
  }
  if (hs.cc_kind > static_cast<uint8_t>(cc::ControllerKind::kHybrid)) {
    return make_error("handshake: unknown controller kind " + std::to_string(hs.cc_kind));
  }
  return {};
}

void ConnectionCore::establish(TimeNs now, const HandshakeBody& peer_hs) {
  addr_.remote_id = peer_hs.src_conn_id;
  seg_bytes_ = std::min(cfg_.segment_bytes, peer_hs.mss_bytes);
  recv_.set_peer_cc(peer_hs.cc_kind);
  state_ = ConnectionState::kEstablished;
  last_rx_ns_ = now;
  send_.establish(now, seg_bytes_, peer_hs.window_segments, peer_hs.recv_slots);
  send_.try_match();
}

void ConnectionCore::accept_syn(TimeNs now, const HandshakeBody& syn, uint16_t version) {
  addr_.version = version;
  establish(now, syn);
  synack_pending_ = true;
  // Version 3: the SYN_ACK asks for a confirmation (kFlagConfirm), and until a packet names our id the
  // application does not see the connection (the SYN may be a stranger's replay).
  if (version >= 3 && cfg_.confirm_handshake) {
    awaiting_confirm_ = true;
    connect_start_ns_ = now;
  }
}

void ConnectionCore::abandon(std::string why) {
  // Never seen by the application: no requests to fail; the endpoint drops it (Endpoint::settle).
  ++ep_stats_->handshakes_unconfirmed;
  state_ = ConnectionState::kFailed;
  error_ = std::move(why);
  ctl_deadline_ = kNever;
  synack_pending_ = false;
}

void ConnectionCore::on_syn_ack(TimeNs now, const Packet& pkt) {
  const HandshakeBody& hs = pkt.handshake;
  const bool confirm = (pkt.hdr.flags & kFlagConfirm) != 0;
  if (state_ != ConnectionState::kConnecting) {
    // A duplicate SYN_ACK. One that asks for a confirmation means ours was lost: confirm again.
    if (confirm && initiator_ && hs.src_conn_id == addr_.remote_id &&
        (state_ == ConnectionState::kEstablished || state_ == ConnectionState::kClosing)) {
      recv_.request_ack();
    }
    return;
  }
  const uint16_t v = hs.version_max;
  if (hs.version_min != v || v < cfg_.version_min || v > cfg_.version_max || !version_implemented(v)) {
    ++ep_stats_->version_mismatches;
    fail("connect to peer " + std::to_string(addr_.peer) + ": version mismatch: the acceptor chose version " +
             std::to_string(v) + ", we speak " + std::to_string(cfg_.version_min) + ".." +
             std::to_string(cfg_.version_max) + " and implement " + std::to_string(kVersionMin) + ".." +
             std::to_string(kVersion),
         ErrorCode::kRemote);
    return;
  }
  if (Status s = validate_handshake(hs); !s) {
    fail("connect to peer " + std::to_string(addr_.peer) + ": bad SYN_ACK: " + s.error().message,
         ErrorCode::kRemote);
    return;
  }
  addr_.version = v;
  ctl_deadline_ = kNever;
  syn_pending_ = false;
  establish(now, hs);
  // The acceptor waits for a packet naming its id before its application sees the connection: an ACK
  // (with nothing to acknowledge yet) at once, rather than whenever our application first posts.
  if (confirm) recv_.request_ack();
}

void ConnectionCore::on_rst(const Packet& pkt) {
  const RstBody& r = pkt.rst;
  const std::string text(r.text_view());
  if (state_ == ConnectionState::kClosing && fin_sent_ && r.reason == RstReason::kUnknownConnection) {
    // The peer finished its side of the close and forgot the connection before our FIN got through.
    state_ = ConnectionState::kClosed;
    ctl_deadline_ = kNever;
    return;
  }
  if (!is_open()) return;
  if (awaiting_confirm_) {
    // The SYN's claimed sender knows no such connection: a replayed or forged SYN.
    abandon("handshake from peer " + std::to_string(addr_.peer) + " reset by the initiator: " + text);
    return;
  }
  if (state_ == ConnectionState::kConnecting) {
    if (r.reason == RstReason::kVersionMismatch) ++ep_stats_->version_mismatches;
    fail("connect to peer " + std::to_string(addr_.peer) + ": refused: " + text, ErrorCode::kRemote);
    return;
  }
  if (r.reason == RstReason::kRefused) {
    fail("connection refused by peer " + std::to_string(addr_.peer) + ": " + text, ErrorCode::kRemote);
    return;
  }
  fail("connection reset by peer " + std::to_string(addr_.peer) + ": " + text, ErrorCode::kRemote);
}

// --- close ---

void ConnectionCore::close(TimeNs now) {
  if (!is_open() || close_requested_) return;
  close_requested_ = true;
  if (state_ == ConnectionState::kConnecting) {
    fail_pending("connection closed before it was established", "connection closed before it was established",
                 ErrorCode::kInvalidUsage, &close_report_.unfinished_sends, &close_report_.unfinished_recvs);
    state_ = ConnectionState::kClosed;
    syn_pending_ = false;
    ctl_deadline_ = kNever;
    return;
  }
  state_ = ConnectionState::kClosing;
  fin_start_ns_ = now;
  drain_deadline_ns_ = now + cfg_.cc.rto.retry_budget_ns;
  gap_deadline_ns_ = now + cfg_.cc.rto.max_rto_ns;
  maybe_finish_drain(now);
}

void ConnectionCore::maybe_finish_drain(TimeNs now) {
  if (!close_requested_ || fin_sent_ || state_ != ConnectionState::kClosing) return;
  // Everything sent is acknowledged and nothing matched waits to be sent ...
  const bool quiet = send_.quiet();
  // ... and no send waits for a credit, or the drain deadline passed (a peer that never posts the
  // matching receives cannot hold the close forever) ...
  const bool matched = !send_.has_unmatched() || now >= drain_deadline_ns_;
  // ... and what the peer sent has arrived without a gap, so that the FIN's cumulative ACK covers every
  // message received here: with a segment lost just before the peer's last message (its CREDIT, say)
  // and that message's ACKs lost too, the FIN would not acknowledge it and the peer would fail a send
  // that arrived. The peer resends the missing segment at its RTO; one that never does holds the close
  // at most max_rto.
  const bool gapless = !recv_.has_gap() || now >= gap_deadline_ns_;
  if (!quiet || !matched || !gapless) {
    if (quiet)
      ctl_deadline_ = std::min(matched ? kNever : drain_deadline_ns_, gapless ? kNever : gap_deadline_ns_);
    return;
  }
  uint32_t ns = 0;
  uint32_t nr = 0;
  // Count first, so the messages can say how many.
  for (uint32_t i = 0; i < reqs_.size(); ++i) {
    const Request& r = reqs_[i];
    if (r.in_use && !r.done) ++(r.is_send ? ns : nr);
  }
  fail_pending("connection closed locally before the peer posted a matching receive",
               "connection closed locally with " + std::to_string(nr) + " receives pending",
               ErrorCode::kInvalidUsage, &close_report_.unfinished_sends, &close_report_.unfinished_recvs);
  fin_sent_ = true;
  fin_pending_ = true;
  fin_start_ns_ = now;
}

void ConnectionCore::on_fin(TimeNs now, const Packet& pkt) {
  const FinBody& f = pkt.fin;
  if (f.cum_ack > send_.snd_nxt()) {
    ++stats_.malformed_dropped;  // acknowledges what we never sent
    return;
  }
  // The FIN acknowledges what the peer received: sends whose ACKs were lost complete, not fail.
  if (state_ == ConnectionState::kEstablished || state_ == ConnectionState::kClosing) {
    send_.on_fin_ack(now, f.cum_ack);
  }
  if (pkt.hdr.flags & kFlagFinReply) {
    if (state_ == ConnectionState::kClosing && fin_sent_) {
      close_report_.peer_unfinished_sends = f.unfinished_sends;
      close_report_.peer_unfinished_recvs = f.unfinished_recvs;
      state_ = ConnectionState::kClosed;
      ctl_deadline_ = kNever;
      fin_pending_ = false;
    }
    return;
  }
  if (state_ == ConnectionState::kClosed) {
    fin_reply_pending_ = true;  // our reply was lost: answer again
    return;
  }
  if (state_ != ConnectionState::kEstablished && state_ != ConnectionState::kClosing) return;
  close_report_.peer_unfinished_sends = f.unfinished_sends;
  close_report_.peer_unfinished_recvs = f.unfinished_recvs;
  if (!fin_sent_) {
    close_report_.closed_by_peer = true;
    const std::string why = "peer closed the connection (it left " + std::to_string(f.unfinished_sends) +
                            " sends and " + std::to_string(f.unfinished_recvs) + " receives unfinished)";
    fail_pending(why, why, ErrorCode::kRemote, &close_report_.unfinished_sends,
                 &close_report_.unfinished_recvs);
  }
  // Nothing more flows in either direction: the peer acknowledged all it will ever need from us.
  send_.finish();
  ctl_deadline_ = kNever;
  fin_pending_ = false;
  fin_reply_pending_ = true;
  state_ = ConnectionState::kClosed;
}

// --- packets and timers ---

void ConnectionCore::on_packet(TimeNs now, TimeNs rx_time_ns, const Packet& pkt, bool ce, DecodeResult r) {
  // Once the handshake has chosen a version, every packet but SYN, SYN_ACK and RST (whose layouts are
  // frozen) must carry it (packet.h). A packet of another version is no part of this connection, and
  // it must not reach the receiver: a version-2 DATA flagged kFlagNoPayloadCrc would otherwise be
  // placed unchecked on a connection that agreed on version 1, where every payload is checked. It is
  // dropped and counted as malformed, and it does not count as hearing from the peer.
  if (state_ != ConnectionState::kConnecting && pkt.hdr.version != addr_.version &&
      pkt.hdr.type != PacketType::kSyn && pkt.hdr.type != PacketType::kSynAck &&
      pkt.hdr.type != PacketType::kRst) {
    ++stats_.malformed_dropped;
    return;
  }
  // Only the initiator knows our id, from our SYN_ACK: any packet naming it but an RST confirms it.
  if (awaiting_confirm_ && pkt.hdr.type != PacketType::kRst && is_open()) {
    awaiting_confirm_ = false;
    confirmed_news_ = true;
    ctl_deadline_ = kNever;
  }
  // The wire's receive timestamp, never later than now (clock conversions may err by nanoseconds).
  const TimeNs rx_ns = std::min(rx_time_ns, now);
  if (rx_time_ns != kRxTimeNow) stats_.rx_delay.add(now - rx_ns);
  last_rx_ns_ = now;
  if (probe_outstanding_ && r == DecodeResult::kOk) {
    // The peer is alive: the probe's "loss episode" ends.
    probe_outstanding_ = false;
    send_.on_probe_answered(now);
  }
  switch (pkt.hdr.type) {
    case PacketType::kSeg:
      if (state_ == ConnectionState::kEstablished || state_ == ConnectionState::kClosing)
        on_seg(now, rx_ns, pkt, ce, r);
      break;
    case PacketType::kAck:
      if (state_ == ConnectionState::kEstablished || state_ == ConnectionState::kClosing) {
        if (pkt.hdr.flags & kFlagAckRequest) recv_.request_ack();  // a keepalive probe: answer at once
        if (send_.on_ack(now, rx_ns, pkt)) maybe_finish_drain(now);
      }
      break;
    case PacketType::kCnp:
      if (state_ == ConnectionState::kEstablished || state_ == ConnectionState::kClosing)
        send_.on_cnp(now, pkt);
      break;
    case PacketType::kSynAck:
      on_syn_ack(now, pkt);
      break;
    case PacketType::kFin:
      on_fin(now, pkt);
      break;
    case PacketType::kRst:
      on_rst(pkt);
      break;
    case PacketType::kSyn:
      break;  // the endpoint handles SYNs
  }
}

void ConnectionCore::on_seg(TimeNs now, TimeNs rx_ns, const Packet& pkt, bool ce, DecodeResult r) {
  if (!recv_.admit(pkt, r)) return;
  const bool accepted =
      (pkt.hdr.flags & kFlagCredit) ? send_.on_credit(pkt) : recv_.on_data(now, pkt, copier_);
  if (!accepted) {
    ++stats_.malformed_dropped;
    return;
  }
  recv_.on_accepted(now, rx_ns, pkt, ce);
}

bool ConnectionCore::poll_control(TimeNs now, TxPacket& out) {
  if (syn_pending_ && state_ == ConnectionState::kConnecting) {
    syn_pending_ = false;
    ++syns_sent_;
    out.header_len =
        static_cast<uint16_t>(encode_handshake(CommonHeader{.version = static_cast<uint8_t>(cfg_.version_max),
                                                            .type = PacketType::kSyn,
                                                            .lane = 0,
                                                            .flags = 0,
                                                            .dst_conn_id = 0},
                                               handshake_body(), out.header));
    fill_common(out, 0);
    out.path_id = kHomePathId;  // the acceptor matches duplicates by (peer, our id): one source address
    ctl_deadline_ = now + ctl_rto_.timeout_ns();
    return true;
  }
  if (synack_pending_) {
    synack_pending_ = false;
    out.header_len = static_cast<uint16_t>(encode_handshake(
        common_header(addr_, PacketType::kSynAck, 0, awaiting_confirm_ ? kFlagConfirm : uint8_t{0}),
        handshake_body(), out.header));
    fill_common(out, 0);
    // Without a confirmation the SYN_ACK is sent again (it or the answer was lost), until
    // connect_timeout_ns; an unconfirmed SYN_ACK is otherwise sent again only for a duplicate SYN.
    if (awaiting_confirm_) ctl_deadline_ = now + ctl_rto_.timeout_ns();
    return true;
  }
  if (fin_reply_pending_ || fin_pending_) {
    const bool reply = fin_reply_pending_;
    FinBody f{.final_seq = send_.snd_nxt(),
              .unfinished_sends = close_report_.unfinished_sends,
              .unfinished_recvs = close_report_.unfinished_recvs,
              .cum_ack = recv_.rcv_nxt()};
    out.header_len = static_cast<uint16_t>(encode_fin(
        common_header(addr_, PacketType::kFin, 0, reply ? kFlagFinReply : uint8_t{0}), f, out.header));
    fill_common(out, 0);
    if (reply) {
      fin_reply_pending_ = false;
    } else {
      fin_pending_ = false;
      ctl_deadline_ = now + send_.rto().timeout_ns();
    }
    return true;
  }
  if (state_ != ConnectionState::kEstablished && state_ != ConnectionState::kClosing) return false;
  if (recv_.cnp_pending()) {
    const uint8_t lane = recv_.take_cnp();
    out.header_len = static_cast<uint16_t>(
        encode_cnp(common_header(addr_, PacketType::kCnp, lane, 0), CnpBody{.lane = lane}, out.header));
    fill_common(out, static_cast<uint8_t>(lane % send_.lanes()));
    ++stats_.cnps_sent;
    send_.count_cnp_sent(lane);
    return true;
  }
  if (recv_.ack_due(now) || probe_pending_) {
    const bool probe = probe_pending_;
    probe_pending_ = false;
    const uint8_t lane = recv_.ack_lane(send_.lanes());
    recv_.build_ack(now, out, lane, send_.path_id(lane), probe);
    return true;
  }
  return false;
}

TimeNs ConnectionCore::keepalive_deadline() const {
  if (state_ != ConnectionState::kEstablished && state_ != ConnectionState::kClosing) return kNever;
  if (fin_sent_ || probe_outstanding_ || reqs_.pending() == 0 || !send_.all_acked()) return kNever;
  return last_rx_ns_ + cfg_.keepalive_interval_ns;
}

bool ConnectionCore::poll_tx(TimeNs now, TxPacket& out) {
  send_.begin_poll();
  if (state_ == ConnectionState::kFailed) return false;
  if (poll_control(now, out)) return true;
  if (state_ != ConnectionState::kEstablished && state_ != ConnectionState::kClosing) return false;
  if (send_.poll(now, out)) return true;
  maybe_finish_drain(now);
  if (fin_pending_) return poll_control(now, out);
  return false;
}

TimeNs ConnectionCore::next_deadline() const {
  return std::min({ctl_deadline_, send_.rto_deadline(), send_.tlp_deadline(), recv_.ack_deadline(),
                   send_.pace_wake(), port_probe_ns_, keepalive_deadline()});
}

void ConnectionCore::on_rto(TimeNs now) {
  if (send_.all_acked()) {
    send_.disarm_rto();
    if (!probe_outstanding_) return;
    // An unanswered keepalive probe: retried on the RTO schedule, within the same retry budget.
    if (send_.rto().on_timeout(now) == cc::RtoVerdict::kGiveUp) {
      fail("peer " + std::to_string(addr_.peer) + " unreachable: nothing heard for " +
               duration_text(now - last_rx_ns_) + " (keepalive probes unanswered)",
           ErrorCode::kTimeout);
      return;
    }
    probe_pending_ = true;
    send_.arm_rto(now);
    return;
  }
  if (Status s = send_.on_rto(now); !s) fail(s.error().message, s.error().code);
}

void ConnectionCore::on_timer(TimeNs now) {
  if (ctl_deadline_ <= now) {
    ctl_deadline_ = kNever;
    if (state_ == ConnectionState::kConnecting) {
      if (ctl_rto_.on_timeout(now) == cc::RtoVerdict::kGiveUp) {
        fail("connect to peer " + std::to_string(addr_.peer) + ": no answer after " +
                 duration_text(now - connect_start_ns_) + " (" + std::to_string(syns_sent_) + " SYNs sent)",
             ErrorCode::kTimeout);
        return;
      }
      syn_pending_ = true;
    } else if (awaiting_confirm_) {
      if (ctl_rto_.on_timeout(now) == cc::RtoVerdict::kGiveUp) {
        abandon("handshake from peer " + std::to_string(addr_.peer) + " not confirmed after " +
                duration_text(now - connect_start_ns_));
        return;
      }
      synack_pending_ = true;
    } else if (state_ == ConnectionState::kClosing && !fin_sent_) {
      maybe_finish_drain(now);
    } else if (state_ == ConnectionState::kClosing && fin_sent_) {
      if (send_.rto().on_timeout(now) == cc::RtoVerdict::kGiveUp) {
        fail("close: peer " + std::to_string(addr_.peer) + " unreachable: no answer to FIN after " +
                 duration_text(now - fin_start_ns_),
             ErrorCode::kTimeout);
        return;
      }
      fin_pending_ = true;
    }
  }
  if (send_.rto_deadline() <= now) on_rto(now);
  if (state_ == ConnectionState::kFailed) return;
  if (send_.tlp_deadline() <= now) send_.on_tail_probe();
  if (keepalive_deadline() <= now) {
    probe_pending_ = true;
    probe_outstanding_ = true;
    send_.arm_rto(now);
  }
  recv_.on_ack_timer(now);
  if (port_probe_ns_ <= now) {
    port_probe_ns_ = kNever;
    // Still nothing heard since the first report: ask once more. A closed port answers with another
    // report, which now fails the connection; a live peer answers the probe.
    if (last_rx_ns_ < port_closed_since_ns_) probe_pending_ = true;
  }
  send_.clear_pace_wake(now);
}

}  // namespace megascale::engine::detail
