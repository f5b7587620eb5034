// The protocol state machine of one connection (engine-design.md): requests and credits, the sender's
// outstanding-segment ring with SACK/RACK loss detection and RTO, lanes with their controllers and
// pacers, the receiver's placement and ACK/CNP generation, handshake and close.
//
// Split over files by direction: connection_core.cpp (lifecycle, requests, poll_tx dispatch, timers),
// sender.cpp (matching, segment transmission, ACK processing, loss recovery), receiver.cpp (arriving
// SEGs, placement, ACK and CNP generation), lane.cpp (lane controllers, pacing, repathing).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "conn_schedule.h"
#include "megascale/common/units.h"
#include "megascale/congestion/controller.h"
#include "megascale/congestion/dcqcn.h"
#include "megascale/congestion/pacer.h"
#include "megascale/congestion/rto.h"
#include "megascale/engine/config.h"
#include "megascale/engine/connection.h"
#include "megascale/engine/endpoint.h"
#include "megascale/engine/packet.h"
#include "megascale/engine/stats.h"
#include "ring.h"

namespace megascale::engine::detail {

inline constexpr uint32_t kNoRequest = 0xFFFFFFFF;

// A duration for an error message in the unit that shows it: "2.5 s", "1.2 ms", "350 us" (a budget of a
// millisecond, as the simulator uses, must not read "0.0 s").
std::string duration_text(TimeNs ns);

// A posted send or receive. Lives in a slab; its RequestId carries the slab index and a generation.
struct Request {
  uint32_t gen = 0;
  bool in_use = false;
  bool is_send = false;
  bool done = false;
  bool ok = false;
  int32_t tag = 0;     // posted tag; after completion of a receive, the sender's tag
  uint64_t bytes = 0;  // completion bytes
  std::string error;   // set only on failure (allocation off the hot path)
  // Send.
  const uint8_t* data = nullptr;
  uint64_t size = 0;
  uint64_t next_offset = 0;   // segmentation cursor
  uint64_t segs_unacked = 0;  // segments sent at least once and not yet acknowledged
  bool matched = false;       // took a peer credit
  bool all_sent = false;      // every segment has been sent at least once
  // Receive.
  uint8_t* buf = nullptr;
  uint64_t capacity = 0;
  uint64_t placed = 0;   // payload bytes placed (each seq counted once)
  uint64_t slot = 0;     // receive slot (cumulative), or the credit's slot for a send
  uint64_t msg_len = 0;  // receive: the message's size, from its first segment
  bool msg_len_known = false;
  bool credit_sent = false;
  // Where the request's time went (Completion::first_ns etc.).
  TimeNs first_ns = 0;  // send: its first segment released; receive: its first segment placed
  TimeNs last_ns = 0;   // send: its last segment released (once); receive: its last segment placed
  TimeNs done_ns = 0;   // completed (a send: the ACK that covered its last segment)
};

// One sent segment, indexed by seq in the outstanding ring.
struct TxSeg {
  uint64_t offset = 0;        // DATA: offset in the message; CREDIT: capacity_bytes
  uint64_t msg_len = 0;       // DATA: message length
  uint64_t lane_seq = 0;      // per-lane send counter of the latest transmission (loss detection)
  TimeNs sent_ns = 0;         // latest transmission
  TimeNs first_sent_ns = 0;   // first transmission
  uint32_t len = 0;           // payload bytes
  uint32_t req = kNoRequest;  // the send it belongs to (DATA), kNoRequest for CREDIT / notices
  uint64_t slot = 0;
  int32_t tag = 0;
  uint8_t lane = 0;          // lane of the latest transmission
  uint8_t flags = 0;         // kFlagCredit / kFlagLast / kFlagTooLarge as on the wire
  uint8_t retx = 0;          // transmissions - 1 (saturating)
  bool sacked = false;       // delivered (cumulatively or selectively)
  bool lost = false;         // declared lost, waiting in the retransmission queue
  bool lost_by_rto = false;  // the last loss declaration came from a timeout
};

// What the receiver learned from the peer's credits: one entry per receive slot.
struct CreditEntry {  // 24 bytes: one per peer receive slot (256 by default) in every connection
  uint64_t slot = 0;
  uint64_t capacity = 0;
  int32_t tag = 0;
  bool present = false;
};

struct TooLargeNotice {
  uint64_t slot = 0;
  int32_t tag = 0;
  uint64_t msg_len = 0;
};

struct Lane {
  std::unique_ptr<cc::Controller> cc;
  cc::Pacer pacer{cc::PacerParams{}, 1e9};
  double cwnd_bytes = 0;       // cached after every controller call
  TimeNs target_delay_ns = 0;  // cached once per RTT round (0 = the controller has none)
  uint64_t in_flight = 0;
  uint64_t next_lane_seq = 0;
  uint64_t delivered_lane_seq_end = 0;  // 1 + the highest lane_seq delivered (0: none)
  TimeNs rack_sent_ns = -1;             // latest send time of a delivered segment of this lane
  uint64_t recovery_end_seq = 0;        // fast-recovery episode: until snd_una passes this
  bool in_recovery = false;
  uint32_t consecutive_rtos = 0;
  TimeNs path_since_ns = 0;  // the latest repath: copies sent before it took another path
  // Delay-driven repathing: RTT rounds that were over target with ECN.
  TimeNs round_end_ns = 0;
  bool round_over_target = false;
  bool round_ce = false;
  uint32_t bad_rounds = 0;
  // Floor stall detection (EngineConfig::floor_stall_ns): since when an ACK found the controller at
  // its floor (kNever: not at it), and whether this stay was counted.
  TimeNs floor_since_ns = kNever;
  bool floor_counted = false;
  LaneStats stats;
};

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
  ConnId id() const { return id_; }
  uint64_t remote_id() const { return remote_id_; }
  uint32_t peer() const { return peer_; }
  uint32_t segment_bytes() const { return seg_bytes_; }
  uint32_t lanes() const { return static_cast<uint32_t>(lanes_.size()); }
  const ConnectionStats& stats() const { return stats_; }
  const LaneStats& lane_stats(uint32_t lane) const { return lanes_[lane].stats; }
  uint64_t pending_requests() const { return requests_in_use_; }

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
  // Fails every pending request and stops all traffic.
  void fail(std::string message);
  // The wire reported ICMP port unreachable for our peer's address (Endpoint::on_port_unreachable).
  void on_port_unreachable(TimeNs now);
  bool initiator() const { return initiator_; }
  // After a poll_tx that found nothing: whether a later poll may find a packet without any event or
  // deadline in between (a pacer blocked by a rate that a controller's own timers raise, as DCQCN's
  // do): the endpoint keeps such a connection among its candidates.
  bool poll_again() const { return poll_again_; }
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
  // connection_core.cpp
  uint32_t alloc_request();
  // The id the application knows request `idx` by (its slab index and generation).
  RequestId request_id(uint32_t idx) const { return (uint64_t{reqs_[idx].gen} << 32) | (uint64_t{idx} + 1); }
  // EngineConfig::grow_connection_state: doubles the outstanding-segment ring (up to window_segments),
  // re-placing the segments in flight by their seq.
  void grow_tx_ring();
  void complete(uint32_t idx, bool ok, uint64_t bytes, int32_t tag, std::string error);
  void establish(TimeNs now, const HandshakeBody& peer_hs);
  void on_syn_ack(TimeNs now, const Packet& pkt);
  // An accepted connection whose handshake was never confirmed fails, counted in handshakes_unconfirmed.
  void abandon(std::string why);
  void on_fin(TimeNs now, const Packet& pkt);
  void on_rst(const Packet& pkt);
  void maybe_finish_drain(TimeNs now);
  void fail_pending(const std::string& send_error, const std::string& recv_error, uint32_t* sends_failed,
                    uint32_t* recvs_failed);
  bool poll_control(TimeNs now, TxPacket& out);
  void fill_common(TxPacket& out, uint8_t lane) const;

  // sender.cpp
  void try_match();
  bool poll_data(TimeNs now, TxPacket& out);
  // `rx_ns`: when the ACK arrived (<= now): RTT samples for the controllers end there.
  void on_ack(TimeNs now, TimeNs rx_ns, const Packet& pkt);
  void on_cnp(TimeNs now, const Packet& pkt);
  // An ACK showed the timeouts' originals arrived (Eifel); `run`: the timeouts since the last progress.
  void undo_spurious_rtos(TimeNs now, uint32_t run);
  // What an ACK (or a FIN) says about the copies it acknowledges (original_arrived()), and what the
  // deliveries found.
  struct AckNews {
    TimeNs rx_ns = 0;                   // when it arrived (a FIN: when it was processed)
    TimeNs echo_ts_ns = kNever;         // the send time of the copy it echoes (a FIN: none)
    uint32_t echo_lane = kMaxLanes;     // that copy's lane
    bool rto_original_arrived = false;  // set by deliver(): a timed-out segment came through its original
    TimeNs now_ns = 0;                  // the engine's time processing it (a send it finishes is done then)
  };
  bool original_arrived(const TxSeg& s, const AckNews& news) const;
  void deliver(TxSeg& s, AckNews& news);
  // Delivers every unsacked segment below `cum_ack` (<= snd_nxt_) and moves snd_una_ up to it; true if
  // it moved. An ACK's cumulative point and a FIN's receive point both go through here.
  bool advance_cum_ack(uint64_t cum_ack, AckNews& news);
  void detect_losses(TimeNs now, uint64_t scan_end);
  void mark_lost(uint64_t seq, TxSeg& s, bool by_rto);
  void on_rto(TimeNs now);
  void push_retx(uint64_t seq);
  // `probe`: a tail-loss probe, a copy of a segment still counted in flight (no second count).
  void emit_seg(TimeNs now, uint64_t seq, TxSeg& s, uint32_t lane, bool retransmit, TxPacket& out,
                bool probe = false);
  // Tail-loss probe (EngineConfig::tail_probe): (re)arms the probe timer after new data left or an ACK
  // made progress; on_tail_probe picks the newest unacknowledged segment of each lane.
  void arm_tail_probe(TimeNs now);
  void on_tail_probe();
  TimeNs reo_wnd_ns() const;

  // receiver.cpp
  // `rx_ns`: when the segment arrived (<= now): the echoed remote delay starts there.
  void on_seg(TimeNs now, TimeNs rx_ns, const Packet& pkt, bool ce, DecodeResult r);
  // Both return false for a segment that breaks the protocol (dropped, counted malformed, not acked).
  bool on_data(TimeNs now, const Packet& pkt);
  bool on_credit(const Packet& pkt);
  bool rcv_has(uint64_t seq) const;
  void rcv_mark(uint64_t seq);
  // `probe`: a keepalive that asks the peer for an ACK at once.
  void build_ack(TimeNs now, TxPacket& out, bool probe = false);

  // lane.cpp
  void init_lanes(TimeNs now);
  void lane_refresh(TimeNs now, Lane& lane);
  // A lane that may send a segment of `len` payload bytes at `now`, round-robin; -1 if none, and then
  // *wake is lowered to when a pacer would release one.
  int pick_lane(TimeNs now, uint32_t len, TimeNs* wake);
  void lane_rtt_sample(TimeNs now, Lane& lane, TimeNs rtt_ns, bool ce);
  // After an ACK reached the lane's controller: a stay at the floor longer than floor_stall_ns counts.
  void lane_floor_check(TimeNs now, Lane& lane);
  void repath(TimeNs now, Lane& lane);

  const EngineConfig& cfg_;
  Schedule* schedule_ = nullptr;  // the owning endpoint's (nullptr: none)
  uint32_t schedule_index_ = 0;
  PayloadCopier* copier_ = nullptr;  // set by the endpoint before each packet; nullptr: memcpy
  EndpointStats* ep_stats_;
  ConnId id_;
  uint64_t remote_id_ = 0;
  uint32_t peer_;
  uint64_t rng_;
  ConnectionState state_;
  std::string error_;
  CloseReport close_report_;
  ConnectionStats stats_;

  // Negotiated at the handshake.
  uint32_t seg_bytes_;
  double pacing_floor_bps_;  // one segment per RTO ceiling: no lane waits longer (lane_refresh)
  uint32_t window_;      // sender window (segments)
  uint32_t rcv_window_;  // our reorder window (what we advertised)
  uint8_t peer_cc_kind_ = 0;
  uint16_t version_ = kVersion;

  // Requests.
  std::vector<Request> reqs_;
  std::vector<uint32_t> free_reqs_;
  uint64_t requests_in_use_ = 0;
  uint64_t requests_pending_ = 0;  // posted and not yet done
  uint32_t sends_outstanding_ = 0;
  uint32_t recvs_outstanding_ = 0;

  // --- sender ---
  std::vector<uint32_t> unmatched_sends_;  // post order (reserved; erase never allocates)
  Ring<uint32_t> tx_queue_;                // matched sends, in match order; front is being segmented
  std::vector<TooLargeNotice> notices_;    // refusals to tell the peer (rare)
  std::vector<CreditEntry> credits_;       // peer's credits by slot & credit_mask_
  uint32_t credit_mask_ = 0;
  uint64_t credit_contig_ = 0;   // every credit slot below this has arrived
  uint64_t credit_scan_lo_ = 0;  // no unmatched credit below this
  std::vector<TxSeg> ring_;      // outstanding segments by seq & ring_mask_
  uint64_t ring_mask_ = 0;
  uint64_t snd_una_ = 0;
  uint64_t snd_nxt_ = 0;
  uint64_t highest_sacked_end_ = 0;  // 1 + highest seq delivered
  Ring<uint64_t> retx_queue_;
  cc::RtoEstimator rto_;
  TimeNs rto_deadline_ = kNever;
  TimeNs last_progress_ns_ = 0;
  TimeNs tlp_deadline_ = kNever;    // the probe timeout (EngineConfig::tail_probe)
  bool tlp_out_ = false;            // a probe went out and no ACK has made progress since
  std::vector<uint64_t> tlp_seqs_;  // probes still to send: one seq per lane (reserved at setup)
  std::vector<Lane> lanes_;
  uint32_t lane_rr_ = 0;
  bool poll_again_ = false;  // see poll_again()
  TimeNs pace_wake_ns_ = kNever;
  TimeNs min_rtt_ns_ = kNever;
  uint64_t ack_lane_mask_ = 0;  // lanes with acked bytes in the ACK being processed
  uint64_t ack_lane_bytes_[kMaxLanes] = {};
  uint32_t ack_lane_pkts_[kMaxLanes] = {};
  TimeNs ack_lane_newest_sent_[kMaxLanes] = {};  // newest first-transmission send time delivered (0: none)

  // --- receiver ---
  std::vector<uint32_t> recv_slots_;  // request index by slot & recv_mask_ (kNoRequest = free)
  uint32_t recv_mask_ = 0;
  uint64_t recv_slot_next_ = 0;
  Ring<uint32_t> credit_queue_;     // receives whose CREDIT is not yet sent
  std::vector<uint64_t> rcv_bits_;  // received seqs above rcv_nxt_, by seq & (rcv_window_ - 1)
  uint64_t rcv_nxt_ = 0;
  uint64_t rcv_highest_end_ = 0;
  bool ack_now_ = false;
  TimeNs ack_deadline_ = kNever;
  uint32_t segs_since_ack_ = 0;
  uint32_t pending_ce_ = 0;
  uint64_t echo_seq_ = 0;
  TimeNs echo_ts_ns_ = 0;
  TimeNs echo_arrival_ns_ = 0;
  uint8_t echo_lane_ = 0;
  std::vector<cc::CnpPacer> cnp_pacers_;  // by arriving lane (any of 64)
  uint64_t cnp_pending_mask_ = 0;
  AckHeader ack_scratch_;

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

  // --- liveness ---
  TimeNs last_rx_ns_ = 0;           // the last packet from the peer
  bool probe_pending_ = false;      // a keepalive probe to send
  bool probe_outstanding_ = false;  // a probe is unanswered (the RTO schedule retries it)
  TimeNs keepalive_deadline() const;
  TimeNs port_closed_since_ns_ = kNever;  // the first port-unreachable report since the peer was heard
  // When the grace after that first report ends, a probe goes to the peer: its report (or its answer)
  // settles the matter then, not at a retransmission that backoff may have put seconds later.
  TimeNs port_probe_ns_ = kNever;
};

}  // namespace megascale::engine::detail
