// The NIC's retry parameters and the RC lane recovery state machine (rc_recovery.h).
#include "megascale/wire/verbs/rc_recovery.h"

#include <algorithm>
#include <cstdio>
#include <string>

namespace megascale::wire::verbs {
namespace {

std::string ms(TimeNs ns) {
  char buf[32];
  const double v = static_cast<double>(ns) / 1e6;
  std::snprintf(buf, sizeof buf, v < 10 ? "%.3g ms" : "%.0f ms", v);
  return buf;
}

}  // namespace

TimeNs ib_timeout_ns(uint8_t t) {
  if (t == 0) return kNever;
  return TimeNs{4096} << std::min<uint8_t>(t, 31);
}

Result<NicRetry> derive_nic_retry(const cc::RtoParams& rto) {
  NicRetry nic;
  nic.timeout_exp = 31;
  for (uint8_t t = 1; t <= 31; ++t) {
    if (ib_timeout_ns(t) >= rto.initial_rto_ns) {
      nic.timeout_exp = t;
      break;
    }
  }
  nic.attempt_ns = ib_timeout_ns(nic.timeout_exp);
  nic.give_up_ns = (TimeNs{nic.retry_cnt} + 1) * nic.attempt_ns;
  if (rto.retry_budget_ns < 2 * nic.give_up_ns) {
    return make_error("retry budget " + ms(rto.retry_budget_ns) +
                      " is shorter than twice the NIC's give-up time " + ms(nic.give_up_ns) +
                      " (local ACK timeout 4.096 us * 2^" + std::to_string(nic.timeout_exp) +
                      " from the initial RTO " + ms(rto.initial_rto_ns) + ", retry_cnt " +
                      std::to_string(nic.retry_cnt) + "): no room to re-connect a failed QP");
  }
  return nic;
}

void raise_rto_above_nic(cc::RtoParams& rto, const NicRetry& nic) {
  const TimeNs floor = nic.give_up_ns + nic.attempt_ns;
  rto.min_rto_ns = std::max(rto.min_rto_ns, floor);
  rto.initial_rto_ns = std::max(rto.initial_rto_ns, rto.min_rto_ns);
  rto.max_rto_ns = std::max(rto.max_rto_ns, rto.min_rto_ns);
}

RecoveryParams RecoveryParams::from(const cc::RtoParams& rto, const NicRetry& nic) {
  RecoveryParams p;
  p.retry_budget_ns = rto.retry_budget_ns;
  p.max_attempts = rto.max_retries;
  p.first_backoff_ns = rto.initial_rto_ns;
  p.max_backoff_ns = std::max(rto.max_rto_ns, rto.initial_rto_ns);
  p.connect_timeout_ns = std::max<TimeNs>(2 * nic.give_up_ns, rto.initial_rto_ns);
  return p;
}

RcLaneRecovery::RcLaneRecovery(uint8_t lane, const RecoveryParams& params) : lane_(lane), params_(params) {}

std::string RcLaneRecovery::where() const {
  return "lane " + std::to_string(lane_) + ": RC QP";
}

TimeNs RcLaneRecovery::next_deadline() const {
  return state_ == State::kDown || state_ == State::kConnecting ? deadline_ : kNever;
}

TimeNs RcLaneRecovery::backoff(uint32_t attempt) const {
  TimeNs b = params_.first_backoff_ns;
  for (uint32_t i = 1; i < attempt && b < params_.max_backoff_ns; ++i) b *= 2;
  return std::min(b, params_.max_backoff_ns);
}

void RcLaneRecovery::on_posted(uint64_t wr_id) {
  outstanding_.push_back(wr_id);
}

void RcLaneRecovery::on_send_done(TimeNs /*now*/, uint64_t wr_id) {
  auto it = std::find(outstanding_.begin(), outstanding_.end(), wr_id);
  if (it == outstanding_.end()) return;
  outstanding_.erase(it);
  if (state_ != State::kUp) return;
  outage_start_ = kNever;
  attempts_ = 0;
}

RecoveryAction RcLaneRecovery::fail(ErrorCode code, std::string message) {
  state_ = State::kFailed;
  deadline_ = kNever;
  RecoveryAction a;
  a.kind = RecoveryAction::Kind::kFail;
  a.epoch = epoch_;
  a.error = make_error(code, std::move(message));
  return a;
}

RecoveryAction RcLaneRecovery::take_resend(RecoveryAction::Kind kind) {
  RecoveryAction a;
  a.kind = kind;
  a.epoch = epoch_;
  a.resend.assign(outstanding_.begin(), outstanding_.end());
  outstanding_.clear();
  return a;
}

RecoveryAction RcLaneRecovery::on_qp_error(TimeNs now, uint16_t epoch, WcStatus status) {
  if (state_ == State::kFailed || epoch < epoch_ || state_ == State::kDown) return {};
  ++errors_;
  last_status_ = status;
  if (!is_recoverable(status)) {
    return fail(ErrorCode::kSystem, where() + " failed: " + to_string(status) +
                                        "; a local error, not a path failure, so the QP is not re-created");
  }
  if (outage_start_ == kNever) outage_start_ = now;
  const bool was_connecting = state_ == State::kConnecting;
  state_ = State::kDown;
  // The first failure after progress re-creates at once; a QP that fails again before any write
  // completed waits out the backoff of the attempts so far.
  const TimeNs wait = was_connecting || attempts_ > 0 ? backoff(attempts_) : 0;
  deadline_ = std::min(now + wait, outage_start_ + params_.retry_budget_ns);
  return on_timer(now);
}

RecoveryAction RcLaneRecovery::on_timer(TimeNs now) {
  if (now < deadline_) return {};
  if (state_ == State::kConnecting) {
    // The peer never answered this epoch: a failed attempt.
    state_ = State::kDown;
    deadline_ = std::min(now + backoff(attempts_), outage_start_ + params_.retry_budget_ns);
    if (now < deadline_) return {};
  }
  if (state_ != State::kDown) return {};
  const TimeNs lost = now - outage_start_;
  if (lost >= params_.retry_budget_ns || attempts_ >= params_.max_attempts) {
    return fail(ErrorCode::kTimeout,
                where() + " lost for " + ms(lost) + " (" + std::to_string(errors_) + " errors, the last " +
                    to_string(last_status_) + "; " + std::to_string(attempts_) +
                    " re-connects without a write completing): retry budget of " +
                    ms(params_.retry_budget_ns) + " and " + std::to_string(params_.max_attempts) +
                    " attempts, " + (attempts_ >= params_.max_attempts ? "attempts" : "time") + " spent");
  }
  ++attempts_;
  ++epoch_;
  state_ = State::kConnecting;
  deadline_ = std::min(now + params_.connect_timeout_ns, outage_start_ + params_.retry_budget_ns);
  RecoveryAction a;
  a.kind = RecoveryAction::Kind::kRecreate;
  a.epoch = epoch_;
  return a;
}

RecoveryAction RcLaneRecovery::on_peer_message(TimeNs now, uint16_t epoch) {
  if (state_ == State::kFailed || epoch < epoch_) return {};
  if (epoch == epoch_) {
    if (state_ == State::kConnecting) {
      // Our message's answer, or the peer's own request crossing ours: the new QP can go to RTS.
      state_ = State::kUp;
      deadline_ = kNever;
      return take_resend(RecoveryAction::Kind::kResend);
    }
    if (state_ == State::kUp && epoch_ > 0) {
      RecoveryAction a;
      a.kind = RecoveryAction::Kind::kReply;
      a.epoch = epoch_;
      return a;
    }
    return {};
  }
  // The peer re-created first: its QP failed while ours may still look fine. Ours must be replaced too
  // (its peer QP is gone), answering at once.
  if (outage_start_ == kNever) outage_start_ = now;
  epoch_ = epoch;
  state_ = State::kUp;
  deadline_ = kNever;
  RecoveryAction a = take_resend(RecoveryAction::Kind::kRecreate);
  a.answer = true;
  return a;
}

}  // namespace megascale::wire::verbs
