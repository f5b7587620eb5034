// The sending half of a connection: matching posted sends to the peer's credits, the queues of what
// is to be sent (matched sends, our receives' credits, too-large notices), the outstanding-segment ring
// with SACK/RACK loss detection, retransmission, tail-loss probes and the RTO, and the lanes with their
// controllers and pacers. ConnectionCore drives it; it never sees the receiving half.
//
//   SendHalf send(cfg, addr, reqs, stats, &ep_stats, rto_seed, rng);
//   send.establish(now, seg_bytes, peer_window, peer_recv_slots);   // at the handshake
//   send.post(idx); send.try_match();                               // a posted send
//   if (send.poll(now, out)) ...                                    // the next SEG, if any may leave
//   send.on_ack(now, rx_ns, pkt);                                   // an arriving ACK
//
// Methods by file: sender.cpp (matching, transmission, ACKs, loss recovery, timeouts), lane.cpp
// (lane controllers, pacing, lane choice, repathing).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "conn_common.h"
#include "megascale/common/result.h"
#include "megascale/congestion/controller.h"
#include "megascale/congestion/pacer.h"
#include "megascale/congestion/rto.h"
#include "megascale/engine/config.h"
#include "megascale/engine/packet.h"
#include "megascale/engine/stats.h"
#include "request_table.h"
#include "ring.h"

namespace megascale::engine::detail {

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

// What the peer's credits said: one entry per peer receive slot (256 by default) in every connection.
struct CreditEntry {  // 24 bytes
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

class SendHalf {
 public:
  // `addr`, `reqs`, `stats`, `ep_stats`: the connection's, shared with the receiving half. `rto_seed`
  // jitters the RTO's first timeout; `rng` is the state path ids are drawn from.
  SendHalf(const EngineConfig& cfg, const ConnAddress& addr, RequestTable& reqs, ConnectionStats& stats,
           EndpointStats* ep_stats, uint64_t rto_seed, uint64_t rng);

  // The handshake is done: the negotiated segment size, the peer's window and receive slots. Sets up
  // the lanes' controllers and path ids.
  void establish(TimeNs now, uint32_t seg_bytes, uint32_t peer_window, uint32_t peer_recv_slots);

  // --- what to send ---
  // A posted send `idx`, waiting for a credit (try_match hands it one).
  void post(uint32_t idx) { unmatched_sends_.push_back(idx); }
  // Matches waiting sends to the peer's credits in order; a send larger than its credit fails and
  // leaves a notice for the peer.
  void try_match();
  // Our posted receive `idx`: its CREDIT goes to the peer as a segment of ours.
  void queue_credit(uint32_t idx);
  // A CREDIT segment from the peer; false for one that breaks the protocol.
  bool on_credit(const Packet& pkt);

  // --- packets ---
  // Clears poll_again(); ConnectionCore calls it at the start of every poll_tx.
  void begin_poll() { poll_again_ = false; }
  // The next SEG: a retransmission, a tail-loss probe, a credit, a notice or new data, if a lane may
  // send it now; else false and pace_wake() says when a pacer releases one.
  bool poll(TimeNs now, TxPacket& out);
  // `rx_ns`: when the ACK arrived (<= now): RTT samples for the controllers end there. False for an
  // ACK that acknowledges what was never sent (dropped, counted malformed).
  bool on_ack(TimeNs now, TimeNs rx_ns, const Packet& pkt);
  void on_cnp(TimeNs now, const Packet& pkt);
  // A FIN's receive point: delivers everything below `cum_ack` (<= snd_nxt()).
  void on_fin_ack(TimeNs now, uint64_t cum_ack);
  // The peer's FIN: nothing more flows; everything sent counts as acknowledged.
  void finish();

  // --- timers ---
  // Segments are in flight and the RTO fired: declares losses, backs off, repaths; an error when the
  // retry budget is spent. ConnectionCore handles the case all_acked() (keepalive probes) itself.
  Status on_rto(TimeNs now);
  void on_tail_probe();
  void disarm_rto() { rto_deadline_ = kNever; }
  void arm_rto(TimeNs now) { rto_deadline_ = now + rto_.timeout_ns(); }
  // The peer answered a keepalive probe: its loss episode ends.
  void on_probe_answered(TimeNs now);
  void clear_pace_wake(TimeNs now) {
    if (pace_wake_ns_ <= now) pace_wake_ns_ = kNever;
  }
  TimeNs rto_deadline() const { return rto_deadline_; }
  TimeNs tlp_deadline() const { return tlp_deadline_; }
  TimeNs pace_wake() const { return pace_wake_ns_; }
  // The connection's RTO estimator; the FIN's and keepalive probes' retransmissions run on it too.
  cc::RtoEstimator& rto() { return rto_; }
  const cc::RtoEstimator& rto() const { return rto_; }

  // --- failure and close ---
  // Drops what waits to be sent (unmatched and matched sends, credits, notices).
  void drop_queued();
  // Stops every timer and retransmission (the connection failed).
  void stop();
  // Nothing waits to be sent and everything sent is acknowledged.
  bool quiet() const {
    return tx_queue_.empty() && notices_.empty() && credit_queue_.empty() && snd_una_ == snd_nxt_;
  }
  bool has_unmatched() const { return !unmatched_sends_.empty(); }

  // --- state ---
  uint64_t snd_nxt() const { return snd_nxt_; }
  bool all_acked() const { return snd_una_ == snd_nxt_; }
  // See ConnectionCore::poll_again().
  bool poll_again() const { return poll_again_; }
  uint32_t lanes() const { return static_cast<uint32_t>(lanes_.size()); }
  const LaneStats& lane_stats(uint32_t lane) const { return lanes_[lane].stats; }
  // The path id a packet on `lane` carries (0 for a lane the connection does not have).
  uint32_t path_id(uint8_t lane) const { return lane < lanes_.size() ? lanes_[lane].stats.path_id : 0; }
  // A CNP left for the peer's `lane`.
  void count_cnp_sent(uint8_t lane) {
    if (lane < lanes_.size()) ++lanes_[lane].stats.cnps_sent;
  }

 private:
  // sender.cpp
  // EngineConfig::grow_connection_state: doubles the outstanding-segment ring (up to window_segments),
  // re-placing the segments in flight by their seq.
  void grow_tx_ring();
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
  void push_retx(uint64_t seq);
  // `probe`: a tail-loss probe, a copy of a segment still counted in flight (no second count).
  void emit_seg(TimeNs now, uint64_t seq, TxSeg& s, uint32_t lane, bool retransmit, TxPacket& out,
                bool probe = false);
  // Tail-loss probe (EngineConfig::tail_probe): (re)arms the probe timer after new data left or an ACK
  // made progress; on_tail_probe picks the newest unacknowledged segment of each lane.
  void arm_tail_probe(TimeNs now);
  TimeNs reo_wnd_ns() const;

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
  const ConnAddress& addr_;
  RequestTable& reqs_;
  ConnectionStats& stats_;
  EndpointStats* ep_stats_;
  uint64_t rng_;

  // Negotiated at the handshake.
  uint32_t seg_bytes_;
  uint32_t window_;          // sender window (segments)
  double pacing_floor_bps_;  // one segment per RTO ceiling: no lane waits longer (lane_refresh)

  // What waits to be sent.
  std::vector<uint32_t> unmatched_sends_;  // post order (reserved; erase never allocates)
  Ring<uint32_t> tx_queue_;                // matched sends, in match order; front is being segmented
  Ring<uint32_t> credit_queue_;            // our receives whose CREDIT is not yet sent
  std::vector<TooLargeNotice> notices_;    // refusals to tell the peer (rare)
  std::vector<CreditEntry> credits_;       // peer's credits by slot & credit_mask_
  uint32_t credit_mask_ = 0;
  uint64_t credit_contig_ = 0;   // every credit slot below this has arrived
  uint64_t credit_scan_lo_ = 0;  // no unmatched credit below this

  // Outstanding segments and their recovery.
  std::vector<TxSeg> ring_;  // outstanding segments by seq & ring_mask_
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
  TimeNs min_rtt_ns_ = kNever;

  // Lanes.
  std::vector<Lane> lanes_;
  uint32_t lane_rr_ = 0;
  bool poll_again_ = false;  // see poll_again()
  TimeNs pace_wake_ns_ = kNever;
  uint64_t ack_lane_mask_ = 0;  // lanes with acked bytes in the ACK being processed
  uint64_t ack_lane_bytes_[kMaxLanes] = {};
  uint32_t ack_lane_pkts_[kMaxLanes] = {};
  TimeNs ack_lane_newest_sent_[kMaxLanes] = {};  // newest first-transmission send time delivered (0: none)
};

}  // namespace megascale::engine::detail
