// RC mode's answer to a queue pair that fails: the NIC's own retry parameters derived from the
// engine's RTO, and a pure per-lane state machine that re-creates the QP, re-connects it with the peer
// and resends its unacknowledged writes within the engine's retry budget, then fails clearly.
//
//   Result<NicRetry> nic = derive_nic_retry(cfg.cc.rto);     // -> ibv_qp_attr timeout, retry_cnt
//   RcLaneRecovery lane(/*lane=*/2, RecoveryParams::from(cfg.cc.rto, *nic));
//   lane.on_posted(wr_id);                                    // every write posted on the lane
//   lane.on_send_done(now, wr_id);                            // its successful completion
//   RecoveryAction a = lane.on_qp_error(now, epoch, status);  // an error completion (completion.h)
//   a = lane.on_timer(now);                                   // at lane.next_deadline()
//   a = lane.on_peer_message(now, epoch);                     // the peer's re-connect message
//   // act on a.kind (RecoveryAction below); post only while lane.can_post()
//
// The NIC's timeout (InfiniBand's "local ACK timeout", ibv_qp_attr.timeout = t) is 4.096 us * 2^t
// (t = 1..31; 0 means wait forever). The NIC retransmits an unacknowledged packet after that, up to
// retry_cnt (0..7) times, then moves the QP to the error state: a QP gives up after about
// (retry_cnt + 1) * 4.096 us * 2^t. derive_nic_retry picks the smallest t with 4.096 us * 2^t at
// least the engine's initial RTO (the engine's timeout before any RTT sample: the NIC keeps no RTT
// estimate) and retry_cnt 7, so the NIC covers a lost packet or a short stall; a longer outage (a link
// flap of seconds) errors the QP, and this state machine carries the connection through it for the
// rest of the engine's retry budget. rnr_retry is 7 (retry forever): receive WRs are refilled by the
// wire, and a peer that is gone shows as a transport retry error instead.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "megascale/common/result.h"
#include "megascale/common/units.h"
#include "megascale/congestion/params.h"
#include "megascale/wire/verbs/completion.h"

namespace megascale::wire::verbs {

struct NicRetry {
  uint8_t timeout_exp = 0;  // ibv_qp_attr.timeout: the local ACK timeout is 4.096 us * 2^timeout_exp
  uint8_t retry_cnt = 7;    // ibv_qp_attr.retry_cnt, 0..7
  uint8_t rnr_retry = 7;    // ibv_qp_attr.rnr_retry, 7 = forever
  TimeNs attempt_ns = 0;    // 4.096 us * 2^timeout_exp
  TimeNs give_up_ns = 0;    // (retry_cnt + 1) * attempt_ns: about when the QP errors on a dead path
};

// 4096 ns * 2^t; kNever for t = 0 (no timeout).
TimeNs ib_timeout_ns(uint8_t t);

// The NIC's retry parameters for the engine's RTO parameters. Errors: a retry budget shorter than
// twice the NIC's give-up time (no room for a single re-connect), naming both.
Result<NicRetry> derive_nic_retry(const cc::RtoParams& rto);

// The engine's RTO on an RC wire: the NIC retransmits a lost write itself (every `nic.attempt_ns`, up to
// retry_cnt times) and delivers in order, so an engine timeout shorter than the NIC's give-up time
// only resends what the NIC still holds: a duplicate that costs the link and the peer a segment each.
// Raises the floor (and the initial RTO, and the ceiling where it is lower) to the give-up time plus
// one attempt, so that the engine times out only what the NIC has given up on (its QP in error, the
// lane being re-created). Call with the `rto` the NIC's timeout was derived from.
void raise_rto_above_nic(cc::RtoParams& rto, const NicRetry& nic);

struct RecoveryParams {
  TimeNs retry_budget_ns = 30'000'000'000;  // an outage longer than this fails the lane
  uint32_t max_attempts = 64;               // ... and so do this many re-connects without progress
  TimeNs first_backoff_ns = 1'000'000;      // wait after a failed re-connect; doubles per attempt ...
  TimeNs max_backoff_ns = 1'000'000'000;    // ... up to this
  TimeNs connect_timeout_ns = 10'000'000;   // a re-connect unanswered this long has failed
  // From the engine's RTO: budget and attempts as the engine's (rto.retry_budget_ns, max_retries),
  // backoff from the initial RTO to the RTO ceiling, a re-connect timeout of twice the NIC's give-up
  // time (the peer's QP may itself be erroring before it reads our message).
  static RecoveryParams from(const cc::RtoParams& rto, const NicRetry& nic);
};

struct RecoveryAction {
  enum class Kind : uint8_t {
    kNone,
    // Destroy the lane's QP (its WRs flush), create one for `epoch`, and send the peer a re-connect
    // message {lane, epoch, new QPN, PSN} over the control channel. With `answer` the peer's message
    // for this epoch already came: move the new QP to RTS with the QPN it carried and post `resend`.
    kRecreate,
    kReply,   // the peer sent this epoch's message again (ours was lost): send ours again
    kResend,  // the QP of the current epoch is connected: post `resend` on it
    kFail,    // the lane is lost: fail the connection with `error`
  };
  Kind kind = Kind::kNone;
  uint16_t epoch = 0;
  bool answer = false;
  // wr_ids of the writes posted and not completed when the QP failed, in post order. Their tag.slot
  // is the local header slot; the wire posts them again with the new epoch and fresh ring slots (both
  // ends start the lane's ring anew with its QP), skipping any whose send the engine has completed
  // (its payload may be gone; the engine's own retransmission covers what is skipped).
  std::vector<uint64_t> resend;
  Error error;
};

class RcLaneRecovery {
 public:
  enum class State : uint8_t {
    kUp,          // the QP is RTS: post freely
    kDown,        // the QP failed; re-created at next_deadline()
    kConnecting,  // a new QP waits for the peer's message of its epoch
    kFailed,      // the budget is spent or the error cannot be recovered
  };

  RcLaneRecovery(uint8_t lane, const RecoveryParams& params);

  State state() const { return state_; }
  uint16_t epoch() const { return epoch_; }
  bool can_post() const { return state_ == State::kUp; }
  // When on_timer has work; kNever when none.
  TimeNs next_deadline() const;
  uint32_t attempts() const { return attempts_; }

  // A write posted on the current QP (only while can_post()).
  void on_posted(uint64_t wr_id);
  // A write's successful completion: progress, which ends an outage and resets the attempt count.
  void on_send_done(TimeNs now, uint64_t wr_id);
  // An error completion (not a flush) of a WR of QP `epoch` on this lane. Errors of an earlier epoch
  // are left alone: that QP has been replaced already.
  RecoveryAction on_qp_error(TimeNs now, uint16_t epoch, WcStatus status);
  RecoveryAction on_timer(TimeNs now);
  // The peer's re-connect message for `epoch`: the answer to ours, a crossing request (both ends
  // failed at once), a new request (the peer's QP failed and ours may still look fine), or a duplicate.
  RecoveryAction on_peer_message(TimeNs now, uint16_t epoch);

 private:
  RecoveryAction fail(ErrorCode code, std::string message);
  RecoveryAction take_resend(RecoveryAction::Kind kind);
  TimeNs backoff(uint32_t attempt) const;
  std::string where() const;

  uint8_t lane_;
  RecoveryParams params_;
  State state_ = State::kUp;
  uint16_t epoch_ = 0;
  uint32_t attempts_ = 0;
  TimeNs outage_start_ = kNever;  // the first error since the last progress
  TimeNs deadline_ = kNever;
  WcStatus last_status_ = WcStatus::kSuccess;
  uint32_t errors_ = 0;
  std::deque<uint64_t> outstanding_;  // posted, not completed, in post order
};

}  // namespace megascale::wire::verbs
