// The receiving half of a connection: the posted receives by slot, arriving SEGs (duplicate and
// window checks, placement into the posted buffers), the received-seq bitmap, ACK generation with SACK
// ranges and the echoed timestamp, and DCQCN's CNPs. ConnectionCore drives it; it never sees the
// sending half (a CREDIT segment's content goes to SendHalf::on_credit).
//
//   ReceiveHalf recv(cfg, addr, reqs, stats, &ep_stats);
//   if (recv.slot_free()) recv.post(idx);                   // a posted receive takes the next slot
//   if (recv.admit(pkt, r) && recv.on_data(now, pkt, copier)) recv.on_accepted(now, rx_ns, pkt, ce);
//   if (recv.ack_due(now)) recv.build_ack(now, out, lane, path_id, /*probe=*/false);
#pragma once

#include <cstdint>
#include <vector>

#include "conn_common.h"
#include "megascale/congestion/dcqcn.h"
#include "megascale/engine/config.h"
#include "megascale/engine/endpoint.h"
#include "megascale/engine/packet.h"
#include "megascale/engine/stats.h"
#include "request_table.h"

namespace megascale::engine::detail {

class ReceiveHalf {
 public:
  // `addr`, `reqs`, `stats`, `ep_stats`: the connection's, shared with the sending half.
  ReceiveHalf(const EngineConfig& cfg, const ConnAddress& addr, RequestTable& reqs, ConnectionStats& stats,
              EndpointStats* ep_stats);

  // --- posted receives ---
  // Whether the next receive slot is free (the receive posted slots() receives ago has completed).
  bool slot_free() const { return recv_slots_[recv_slot_next_ & recv_mask_] == kNoRequest; }
  uint32_t slots() const { return recv_mask_ + 1; }
  // Our reorder window (segments), as advertised in the handshake.
  uint32_t window() const { return rcv_window_; }
  // Receive `idx` takes the next slot (slot_free() holds).
  void post(uint32_t idx);
  // Receive `idx` has completed (failed by the connection): its slot is free again.
  void release_slot(uint32_t idx);
  // The controller kind the peer's lanes run: DCQCN's peers get CNPs.
  void set_peer_cc(uint8_t kind) { peer_cc_kind_ = kind; }

  // --- arriving segments ---
  // A SEG's checks before its content is looked at: false for a corrupt payload, a duplicate (acked
  // again) or one beyond the window, each counted.
  bool admit(const Packet& pkt, DecodeResult r);
  // A DATA segment's payload into its receive (through `copier`, or memcpy when nullptr); false for
  // one that breaks the protocol.
  bool on_data(TimeNs now, const Packet& pkt, PayloadCopier* copier);
  // An admitted segment whose content was accepted: marks it received and schedules the ACK (and a
  // CNP for a CE mark). `rx_ns`: when it arrived (<= now): the echoed remote delay starts there.
  void on_accepted(TimeNs now, TimeNs rx_ns, const Packet& pkt, bool ce);

  // --- ACKs and CNPs ---
  // Send an ACK at the next poll (a keepalive probe, a SYN_ACK asking for confirmation).
  void request_ack() { ack_now_ = true; }
  bool ack_due(TimeNs now) const { return ack_now_ || ack_deadline_ <= now; }
  TimeNs ack_deadline() const { return ack_deadline_; }
  // The delayed-ACK timer: if it expired, the ACK goes at the next poll.
  void on_ack_timer(TimeNs now) {
    if (ack_deadline_ <= now) {
      ack_now_ = true;
      ack_deadline_ = kNever;
    }
  }
  // The lane the next ACK goes on: the echoed segment's, folded onto our `lanes`.
  uint8_t ack_lane(uint32_t lanes) const { return static_cast<uint8_t>(echo_lane_ % lanes); }
  // The ACK, on `lane` (ack_lane()) with its `path_id`. `probe`: a keepalive that asks the peer for an
  // ACK at once.
  void build_ack(TimeNs now, TxPacket& out, uint8_t lane, uint32_t path_id, bool probe);
  bool cnp_pending() const { return cnp_pending_mask_ != 0; }
  // The lowest lane with a CNP to send (cnp_pending() holds); it is no longer pending.
  uint8_t take_cnp() {
    const auto lane = static_cast<uint8_t>(__builtin_ctzll(cnp_pending_mask_));
    cnp_pending_mask_ &= cnp_pending_mask_ - 1;
    return lane;
  }
  // Every segment below this has been received (a FIN carries it).
  uint64_t rcv_nxt() const { return rcv_nxt_; }
  // A segment above rcv_nxt() has arrived: something before it is still missing.
  bool has_gap() const { return rcv_highest_end_ > rcv_nxt_; }
  // Stops ACKs and CNPs (the connection failed).
  void stop() {
    ack_now_ = false;
    ack_deadline_ = kNever;
    cnp_pending_mask_ = 0;
  }

 private:
  bool rcv_has(uint64_t seq) const;
  void rcv_mark(uint64_t seq);
  // Completes receive `idx` and frees its slot.
  void finish(uint32_t idx, bool ok, uint64_t bytes, int32_t tag, std::string error = {},
              ErrorCode code = ErrorCode::kInternal);

  const EngineConfig& cfg_;
  const ConnAddress& addr_;
  RequestTable& reqs_;
  ConnectionStats& stats_;
  EndpointStats* ep_stats_;
  uint8_t peer_cc_kind_ = 0;

  std::vector<uint32_t> recv_slots_;  // request index by slot & recv_mask_ (kNoRequest = free)
  uint32_t recv_mask_ = 0;
  uint64_t recv_slot_next_ = 0;
  uint32_t rcv_window_;             // our reorder window (what we advertised)
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
};

}  // namespace megascale::engine::detail
