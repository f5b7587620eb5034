// The protocol state machine of one connection (engine-design.md). ConnectionCore owns the lifecycle
// (handshake, close, failure, liveness), the application's requests and the dispatch of packets and
// timers; the two directions are types of their own that it drives: SendHalf (sender.h: matching,
// segments in flight, loss recovery, lanes) and ReceiveHalf (receiver.h: placement, ACKs, CNPs).
//
//   ConnectionCore core(cfg, id, peer, seed, /*initiator=*/true, now, &ep_stats);
//   while (core.poll_tx(now, out)) send(out);   // SYN first, then whatever the halves have
//   core.on_packet(now, rx_ns, pkt, ce, r);      // each decoded packet for this connection
//   if (core.next_deadline() <= now) core.on_timer(now);
#pragma once

#include <cstdint>
#include <string>

#include "conn_common.h"
#include "conn_schedule.h"
#include "megascale/common/units.h"
#include "megascale/congestion/rto.h"
#include "megascale/engine/config.h"
#include "megascale/engine/connection.h"
#include "megascale/engine/endpoint.h"
#include "megascale/engine/packet.h"
#include "megascale/engine/stats.h"
#include "receiver.h"
#include "request_table.h"
#include "sender.h"

namespace megascale::engine::detail {

class ConnectionCore {
 public:
  // `initiator`: connect() side (state kConnecting, sends SYN); else created from a peer's SYN.
  // `ep_stats`: the owning endpoint's counters (failures and version mismatches are counted there too).
  ConnectionCore(const EngineConfig& cfg, ConnId id, uint32_t peer, uint64_t seed, bool initiator, TimeNs now,
                 EndpointStats* ep_stats);
  ~ConnectionCore();

  // --- application side (Connection forwards here) ---
  // The arguments were checked on the way in (SendRequest::make): only state and limits are errors.
  Result<RequestId> post_send(const void* data, uint64_t size, int32_t tag);
  Result<RequestId> post_recv(void* buf, uint64_t capacity, int32_t tag);
  Completion test(RequestId id);
  void close(TimeNs now);

  ConnectionState state() const { return state_; }
  const std::string& error() const { return error_; }
  bool virtual_payload() const { return cfg_.virtual_payload; }
  const CloseReport& close_report() const { return close_report_; }
  ConnId id() const { return addr_.id; }
  uint64_t remote_id() const { return addr_.remote_id; }
  uint32_t peer() const { return addr_.peer; }
  uint32_t segment_bytes() const { return seg_bytes_; }
  uint32_t lanes() const { return send_.lanes(); }
  const ConnectionStats& stats() const { return stats_; }
  const LaneStats& lane_stats(uint32_t lane) const { return send_.lane_stats(lane); }
  uint64_t pending_requests() const { return reqs_.in_use(); }

  // --- endpoint side ---
  // The handshake body this side sends (SYN or SYN_ACK).
  HandshakeBody handshake_body() const;
  // Acceptor: the peer's SYN (negotiates, becomes established, queues a SYN_ACK).
  void accept_syn(TimeNs now, const HandshakeBody& syn, uint16_t version);
  // Acceptor: a duplicate SYN: answer again.
  void resend_syn_ack() { synack_pending_ = true; }
  // Acceptor with EngineConfig::confirm_handshake on a version-3 connection: no packet from the
  // initiator has named our id yet, so the application has not been given the connection.
  bool awaiting_confirm() const { return awaiting_confirm_; }
  // True once, at the packet that confirmed the handshake: the endpoint hands the connection out then.
  bool take_confirmed() {
    const bool c = confirmed_news_;
    confirmed_news_ = false;
    return c;
  }
  // A decoded packet for this connection. `r` is kOk or kBadPayloadCrc. `rx_time_ns`: when it arrived
  // (the wire's receive timestamp), or kRxTimeNow.
  void on_packet(TimeNs now, TimeNs rx_time_ns, const Packet& pkt, bool ce, DecodeResult r);
  void set_payload_copier(PayloadCopier* copier) { copier_ = copier; }
  bool poll_tx(TimeNs now, TxPacket& out);
  TimeNs next_deadline() const;
  void on_timer(TimeNs now);
  // Fails every pending request with `message` and `code` (Completion::code) and stops all traffic.
  void fail(std::string message, ErrorCode code);
  // The wire reported ICMP port unreachable for our peer's address (Endpoint::on_port_unreachable).
  void on_port_unreachable(TimeNs now);
  bool initiator() const { return initiator_; }
  // After a poll_tx that found nothing: whether a later poll may find a packet without any event or
  // deadline in between (a pacer blocked by a rate that a controller's own timers raise, as DCQCN's
  // do): the endpoint keeps such a connection among its candidates.
  bool poll_again() const { return send_.poll_again(); }
  // The endpoint's schedule and this connection's index in it (creation order).
  void attach_schedule(Schedule* schedule, uint32_t index) {
    schedule_ = schedule;
    schedule_index_ = index;
  }
  // After an application call (post, close): it may have given us a packet to send or moved our
  // deadline, and the endpoint only looks at connections it was told about (conn_schedule.h).
  void notify_schedule() {
    if (schedule_ != nullptr) schedule_->touch(schedule_index_, next_deadline());
  }
  // Checks a peer's SYN / SYN_ACK values (sizes, powers of two); the message names the field.
  static Status validate_handshake(const HandshakeBody& hs);
  bool is_open() const {
    return state_ == ConnectionState::kConnecting || state_ == ConnectionState::kEstablished ||
           state_ == ConnectionState::kClosing;
  }

 private:
  // The seeds a connection draws from its seed, in this order: the data RTO's jitter, the handshake
  // RTO's, then the state path ids are drawn from.
  struct Seeds {
    uint64_t rto = 0;
    uint64_t ctl_rto = 0;
    uint64_t rng = 0;
  };
  static Seeds draw_seeds(uint64_t seed);
  ConnectionCore(const EngineConfig& cfg, ConnId id, uint32_t peer, const Seeds& seeds, bool initiator,
                 TimeNs now, EndpointStats* ep_stats);

  // Fails every request not yet done (a receive frees its slot too) and drops what waits to be sent.
  void fail_pending(const std::string& send_error, const std::string& recv_error, ErrorCode code,
                    uint32_t* sends_failed, uint32_t* recvs_failed);
  void establish(TimeNs now, const HandshakeBody& peer_hs);
  void on_syn_ack(TimeNs now, const Packet& pkt);
  // An accepted connection whose handshake was never confirmed fails, counted in handshakes_unconfirmed.
  void abandon(std::string why);
  void on_fin(TimeNs now, const Packet& pkt);
  void on_rst(const Packet& pkt);
  void maybe_finish_drain(TimeNs now);
  // A SEG: the receive half admits it, its content goes to the half it is for (a CREDIT to the send
  // half, DATA to the receive half), and the receive half acknowledges it.
  void on_seg(TimeNs now, TimeNs rx_ns, const Packet& pkt, bool ce, DecodeResult r);
  // The data RTO fired: SendHalf::on_rto with segments in flight, else an unanswered keepalive probe.
  void on_rto(TimeNs now);
  bool poll_control(TimeNs now, TxPacket& out);
  void fill_common(TxPacket& out, uint8_t lane) const {
    detail::fill_common(out, addr_, lane, send_.path_id(lane));
  }
  TimeNs keepalive_deadline() const;
  // The kind of a post's failure on a connection that takes no more: the failure's own (a failed
  // connection), else invalid usage (a closed one).
  ErrorCode closed_code() const {
    return state_ == ConnectionState::kFailed ? error_code_ : ErrorCode::kInvalidUsage;
  }

  const EngineConfig& cfg_;
  Schedule* schedule_ = nullptr;  // the owning endpoint's (nullptr: none)
  uint32_t schedule_index_ = 0;
  PayloadCopier* copier_ = nullptr;  // set by the endpoint before each packet; nullptr: memcpy
  EndpointStats* ep_stats_;
  ConnAddress addr_;  // remote_id and version: set at the handshake
  ConnectionState state_;
  std::string error_;
  ErrorCode error_code_ = ErrorCode::kInternal;  // with error_: its kind (set by fail())
  CloseReport close_report_;
  ConnectionStats stats_;
  uint32_t seg_bytes_;  // negotiated at the handshake

  // Requests: the slab both halves use, and the application's limits on what is outstanding.
  RequestTable reqs_;
  uint32_t sends_outstanding_ = 0;
  uint32_t recvs_outstanding_ = 0;

  SendHalf send_;
  ReceiveHalf recv_;

  // --- handshake and close ---
  bool initiator_;
  bool syn_pending_ = false;
  bool synack_pending_ = false;
  bool awaiting_confirm_ = false;  // see awaiting_confirm()
  bool confirmed_news_ = false;    // see take_confirmed()
  cc::RtoEstimator ctl_rto_;       // SYN (and confirmed SYN_ACK) retransmission (budget: connect_timeout_ns)
  TimeNs ctl_deadline_ = kNever;   // SYN, confirmed SYN_ACK or FIN retransmission
  uint32_t syns_sent_ = 0;
  TimeNs connect_start_ns_ = 0;
  bool close_requested_ = false;
  bool fin_sent_ = false;
  bool fin_pending_ = false;
  bool fin_reply_pending_ = false;
  TimeNs fin_start_ns_ = 0;
  TimeNs drain_deadline_ns_ = kNever;  // close(): unmatched sends fail after this
  TimeNs gap_deadline_ns_ = kNever;  // close: how long a gap in what we received may hold the FIN

  // --- liveness ---
  TimeNs last_rx_ns_ = 0;                 // the last packet from the peer
  bool probe_pending_ = false;            // a keepalive probe to send
  bool probe_outstanding_ = false;        // a probe is unanswered (the RTO schedule retries it)
  TimeNs port_closed_since_ns_ = kNever;  // the first port-unreachable report since the peer was heard
  // When the grace after that first report ends, a probe goes to the peer: its report (or its answer)
  // settles the matter then, not at a retransmission that backoff may have put seconds later.
  TimeNs port_probe_ns_ = kNever;
};

}  // namespace megascale::engine::detail
