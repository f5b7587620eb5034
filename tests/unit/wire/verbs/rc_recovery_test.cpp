// RC recovery: the NIC's timeout and retry count from the engine's RTO (4.096 us * 2^t), and the lane
// state machine through a link flap the budget covers, one it does not, local errors, stale and
// duplicate messages, a peer that re-creates first and both ends failing at once.
#include "megascale/wire/verbs/rc_recovery.h"

#include <gtest/gtest.h>

namespace megascale::wire::verbs {
namespace {

using Kind = RecoveryAction::Kind;
constexpr TimeNs kMs = 1'000'000;

uint64_t write_id(uint32_t slot, uint16_t epoch = 0) {
  return encode_wr_id({.kind = WrKind::kRcWrite, .lane = 2, .epoch = epoch, .slot = slot});
}

RecoveryParams params() {
  RecoveryParams p;
  p.retry_budget_ns = 1000 * kMs;
  p.max_attempts = 64;
  p.first_backoff_ns = 1 * kMs;
  p.max_backoff_ns = 100 * kMs;
  p.connect_timeout_ns = 20 * kMs;
  return p;
}

// ---- the NIC's parameters ----

TEST(VerbsNicRetry, LocalAckTimeoutIs4096NsTimesTwoToTheT) {
  EXPECT_EQ(ib_timeout_ns(0), kNever);
  EXPECT_EQ(ib_timeout_ns(1), 8192);
  EXPECT_EQ(ib_timeout_ns(8), 1'048'576);
  EXPECT_EQ(ib_timeout_ns(31), TimeNs{4096} << 31);
}

TEST(VerbsNicRetry, SmallestTimeoutCoveringTheInitialRto) {
  cc::RtoParams rto;  // initial RTO 1 ms, budget 30 s
  Result<NicRetry> nic = derive_nic_retry(rto);
  ASSERT_TRUE(nic.ok()) << nic.error().message;
  // 4.096 us * 2^7 = 0.52 ms < 1 ms <= 4.096 us * 2^8 = 1.05 ms
  EXPECT_EQ(nic->timeout_exp, 8);
  EXPECT_EQ(nic->retry_cnt, 7);
  EXPECT_EQ(nic->rnr_retry, 7);
  EXPECT_EQ(nic->attempt_ns, 1'048'576);
  EXPECT_EQ(nic->give_up_ns, 8 * 1'048'576);
  rto.initial_rto_ns = 100'000;  // 65.5 us < 100 us <= 131 us
  EXPECT_EQ(derive_nic_retry(rto)->timeout_exp, 5);
  rto.initial_rto_ns = 8192;  // exactly 2^1
  EXPECT_EQ(derive_nic_retry(rto)->timeout_exp, 1);
}

TEST(VerbsNicRetry, BudgetWithoutRoomForAReconnectIsRefused) {
  cc::RtoParams rto;
  rto.retry_budget_ns = 10 * kMs;
  Result<NicRetry> nic = derive_nic_retry(rto);
  ASSERT_FALSE(nic.ok());
  EXPECT_EQ(
      nic.error().message,
      "retry budget 10 ms is shorter than twice the NIC's give-up time 8.39 ms (local ACK timeout 4.096 us "
      "* 2^8 from the initial RTO 1 ms, retry_cnt 7): no room to re-connect a failed QP");
}

TEST(VerbsNicRetry, EngineRtoOnRcStaysAboveTheNicsGiveUpTime) {
  // The loopback preset: 5 ms initial and floor -> t = 11 (8.39 ms), give-up 8 x 8.39 = 67.1 ms.
  cc::RtoParams rto;
  rto.initial_rto_ns = 5 * kMs;
  rto.min_rto_ns = 5 * kMs;
  rto.max_rto_ns = 50 * kMs;
  const NicRetry nic = *derive_nic_retry(rto);
  ASSERT_EQ(nic.timeout_exp, 11);
  raise_rto_above_nic(rto, nic);
  EXPECT_EQ(rto.min_rto_ns, 9 * ib_timeout_ns(11));  // give-up time plus one attempt: 75.5 ms
  EXPECT_EQ(rto.initial_rto_ns, rto.min_rto_ns);
  EXPECT_EQ(rto.max_rto_ns, rto.min_rto_ns);  // a ceiling below the floor is raised with it
  // A floor already above the give-up time stays.
  cc::RtoParams high;
  high.min_rto_ns = 200 * kMs;
  high.initial_rto_ns = 300 * kMs;
  raise_rto_above_nic(high, nic);
  EXPECT_EQ(high.min_rto_ns, 200 * kMs);
  EXPECT_EQ(high.initial_rto_ns, 300 * kMs);
  EXPECT_EQ(high.max_rto_ns, cc::RtoParams{}.max_rto_ns);
}

TEST(VerbsNicRetry, RecoveryParamsComeFromTheEngine) {
  cc::RtoParams rto;
  const NicRetry nic = *derive_nic_retry(rto);
  RecoveryParams p = RecoveryParams::from(rto, nic);
  EXPECT_EQ(p.retry_budget_ns, rto.retry_budget_ns);
  EXPECT_EQ(p.max_attempts, rto.max_retries);
  EXPECT_EQ(p.first_backoff_ns, rto.initial_rto_ns);
  EXPECT_EQ(p.max_backoff_ns, rto.max_rto_ns);
  EXPECT_EQ(p.connect_timeout_ns, 2 * nic.give_up_ns);
}

// ---- the state machine ----

TEST(VerbsRcRecovery, RetryExceededRecreatesReconnectsAndResendsInPostOrder) {
  RcLaneRecovery lane(2, params());
  for (uint32_t s = 0; s < 4; ++s) lane.on_posted(write_id(s));
  lane.on_send_done(0, write_id(0));
  RecoveryAction a = lane.on_qp_error(5 * kMs, 0, WcStatus::kRetryExcErr);
  ASSERT_EQ(a.kind, Kind::kRecreate);  // at once: the first failure after progress
  EXPECT_EQ(a.epoch, 1);
  EXPECT_FALSE(a.answer);
  EXPECT_FALSE(lane.can_post());
  EXPECT_EQ(lane.state(), RcLaneRecovery::State::kConnecting);
  EXPECT_EQ(lane.next_deadline(), 25 * kMs);
  // The rest of epoch 0's WRs flush; a second error completion of epoch 0 changes nothing.
  EXPECT_EQ(lane.on_qp_error(5 * kMs, 0, WcStatus::kRetryExcErr).kind, Kind::kNone);
  a = lane.on_peer_message(7 * kMs, 1);
  ASSERT_EQ(a.kind, Kind::kResend);
  EXPECT_EQ(a.epoch, 1);
  EXPECT_EQ(a.resend, (std::vector<uint64_t>{write_id(1), write_id(2), write_id(3)}));
  EXPECT_TRUE(lane.can_post());
  EXPECT_EQ(lane.next_deadline(), kNever);
  // The peer's message again (our answer was lost): answer again.
  EXPECT_EQ(lane.on_peer_message(8 * kMs, 1).kind, Kind::kReply);
  EXPECT_EQ(lane.on_peer_message(8 * kMs, 0).kind, Kind::kNone);  // stale
}

TEST(VerbsRcRecovery, FailingAgainWithoutProgressWaitsTheBackoff) {
  RcLaneRecovery lane(2, params());
  lane.on_posted(write_id(0));
  ASSERT_EQ(lane.on_qp_error(0, 0, WcStatus::kRetryExcErr).kind, Kind::kRecreate);
  ASSERT_EQ(lane.on_peer_message(1 * kMs, 1).kind, Kind::kResend);
  lane.on_posted(write_id(0, 1));
  // The resent write fails too: no progress since the outage began, attempt 1's backoff (1 ms).
  EXPECT_EQ(lane.on_qp_error(3 * kMs, 1, WcStatus::kRetryExcErr).kind, Kind::kNone);
  EXPECT_EQ(lane.next_deadline(), 4 * kMs);
  RecoveryAction a = lane.on_timer(4 * kMs);
  ASSERT_EQ(a.kind, Kind::kRecreate);
  EXPECT_EQ(a.epoch, 2);
  EXPECT_EQ(lane.attempts(), 2u);
  ASSERT_EQ(lane.on_peer_message(5 * kMs, 2).kind, Kind::kResend);
  lane.on_posted(write_id(0, 2));
  lane.on_send_done(6 * kMs, write_id(0, 2));  // progress: the next failure starts afresh
  EXPECT_EQ(lane.attempts(), 0u);
  EXPECT_EQ(lane.on_qp_error(7 * kMs, 2, WcStatus::kRetryExcErr).kind, Kind::kRecreate);
}

TEST(VerbsRcRecovery, LocalErrorsFailAtOnce) {
  RcLaneRecovery lane(2, params());
  RecoveryAction a = lane.on_qp_error(0, 0, WcStatus::kLocProtErr);
  ASSERT_EQ(a.kind, Kind::kFail);
  EXPECT_EQ(a.error.code, ErrorCode::kSystem);
  EXPECT_EQ(a.error.message,
            "lane 2: RC QP failed: local protection error (IBV_WC_LOC_PROT_ERR); a local error, not a path "
            "failure, "
            "so the QP is not re-created");
  EXPECT_EQ(lane.state(), RcLaneRecovery::State::kFailed);
  EXPECT_EQ(lane.on_peer_message(1, 5).kind, Kind::kNone);
}

TEST(VerbsRcRecovery, PeerThatRecreatesFirstIsAnsweredWithOurOutstandingWrites) {
  RcLaneRecovery lane(2, params());
  lane.on_posted(write_id(7));
  RecoveryAction a = lane.on_peer_message(10 * kMs, 1);
  ASSERT_EQ(a.kind, Kind::kRecreate);
  EXPECT_TRUE(a.answer);
  EXPECT_EQ(a.epoch, 1);
  EXPECT_EQ(a.resend, std::vector<uint64_t>{write_id(7)});
  EXPECT_TRUE(lane.can_post());
  // Our old QP's error completion arrives after: epoch 0 is gone already.
  EXPECT_EQ(lane.on_qp_error(11 * kMs, 0, WcStatus::kRetryExcErr).kind, Kind::kNone);
}

TEST(VerbsRcRecovery, BothEndsFailingAtOnceConnectOnTheCrossingMessages) {
  RcLaneRecovery lane(2, params());
  ASSERT_EQ(lane.on_qp_error(0, 0, WcStatus::kRetryExcErr).kind, Kind::kRecreate);
  // The peer's own request for epoch 1 crosses ours: it carries its new QPN, so ours goes to RTS.
  EXPECT_EQ(lane.on_peer_message(1 * kMs, 1).kind, Kind::kResend);
  EXPECT_TRUE(lane.can_post());
}

// A link that is down from 0 until `down_ns`: re-connect messages sent while it is down are lost, the
// others answered 1 ms later. Returns the lane's end state and when it got there.
struct FlapResult {
  RcLaneRecovery::State state;
  TimeNs at;
  Error error;
  uint32_t attempts;
};
FlapResult flap(TimeNs down_ns, const RecoveryParams& p) {
  RcLaneRecovery lane(2, p);
  for (uint32_t s = 0; s < 8; ++s) lane.on_posted(write_id(s));
  RecoveryAction a = lane.on_qp_error(0, 0, WcStatus::kRetryExcErr);
  TimeNs now = 0;
  TimeNs answer_at = kNever;
  uint16_t answer_epoch = 0;
  for (int step = 0; step < 10000; ++step) {
    if (a.kind == Kind::kFail) return {lane.state(), now, a.error, lane.attempts()};
    if (a.kind == Kind::kResend) {
      EXPECT_EQ(a.resend.size(), 8u);
      return {lane.state(), now, {}, lane.attempts()};
    }
    if (a.kind == Kind::kRecreate && now >= down_ns) {
      answer_at = now + 1 * kMs;
      answer_epoch = a.epoch;
    }
    const TimeNs next = std::min(lane.next_deadline(), answer_at);
    EXPECT_NE(next, kNever);
    if (next == kNever) break;
    now = next;
    if (now == answer_at) {
      answer_at = kNever;
      a = lane.on_peer_message(now, answer_epoch);
    } else {
      a = lane.on_timer(now);
    }
  }
  return {lane.state(), now, make_error("did not settle"), lane.attempts()};
}

TEST(VerbsRcRecovery, ThreeSecondFlapInsideTheBudgetIsSurvived) {
  RecoveryParams p = params();
  p.retry_budget_ns = 30'000 * kMs;
  p.max_backoff_ns = 1000 * kMs;
  FlapResult r = flap(3000 * kMs, p);
  EXPECT_EQ(r.state, RcLaneRecovery::State::kUp) << r.error.message;
  // Back within one backoff ceiling of the link's return.
  EXPECT_GE(r.at, 3000 * kMs);
  EXPECT_LE(r.at, 3000 * kMs + p.max_backoff_ns + p.connect_timeout_ns + 1 * kMs);
}

TEST(VerbsRcRecovery, FlapPastTheBudgetFailsClearlyWhenTheBudgetEnds) {
  RecoveryParams p = params();  // budget 1 s
  FlapResult r = flap(3000 * kMs, p);
  ASSERT_EQ(r.state, RcLaneRecovery::State::kFailed);
  EXPECT_EQ(r.at, p.retry_budget_ns);  // bounded: exactly at the budget's end
  EXPECT_EQ(r.error.code, ErrorCode::kTimeout);
  EXPECT_NE(r.error.message.find("lane 2: RC QP lost for 1000 ms (1 errors, the last transport retry counter "
                                 "exceeded (IBV_WC_RETRY_EXC_ERR); "),
            std::string::npos)
      << r.error.message;
  EXPECT_NE(r.error.message.find("retry budget of 1000 ms and 64 attempts, time spent"), std::string::npos)
      << r.error.message;
}

TEST(VerbsRcRecovery, AttemptLimitEndsItBeforeTheBudget) {
  RecoveryParams p = params();
  p.max_attempts = 3;
  p.retry_budget_ns = 1'000'000 * kMs;
  FlapResult r = flap(1'000'000 * kMs, p);
  ASSERT_EQ(r.state, RcLaneRecovery::State::kFailed);
  EXPECT_EQ(r.attempts, 3u);
  EXPECT_NE(r.error.message.find("3 attempts, attempts spent"), std::string::npos) << r.error.message;
  // Three connect timeouts of 20 ms and the backoffs between them (1, 2 and 4 ms).
  EXPECT_EQ(r.at, 3 * 20 * kMs + (1 + 2 + 4) * kMs);
}

}  // namespace
}  // namespace megascale::wire::verbs
