// The perf session: driving loop, failure checks and control messages.
#include "session.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <thread>

#include "megascale/perf/counters.h"
#include "megascale/perf/protocol.h"

namespace megascale::perf::detail {

namespace {
// Waits shorter than this are spun for even with --poll sleep: an epoll sleep wakes tens of
// microseconds late.
constexpr TimeNs kSpinNs = 20 * kNsPerUs;
// Longest single sleep, so that --timeout and progress notes are looked at.
constexpr TimeNs kMaxSleepNs = 50 * kNsPerMs;
// progress_data(): the control wire's round comes once in this many (and after every sleep).
constexpr uint32_t kControlEveryRounds = 16;
}  // namespace

Session::Session(wire::UdpWire& w, engine::ConnId control, const PerfOptions& o, const PerfSink& sink,
                 std::string peer_name)
    : wire_(w),
      data_wire_(&w),
      control_id_(control),
      poll_(o.poll),
      timeout_ns_(sec(o.timeout_s)),
      sink_(sink),
      peer_name_(std::move(peer_name)),
      control_buf_(kMaxControlBytes) {
  touch();
}

void Session::move_data(engine::ConnId data) {
  parked_id_ = data_id_;
  data_wire_ = second_wire_;
  data_id_ = data;
}

Status Session::progress() {
  return drive_wires(/*control=*/true);
}

Status Session::progress_data() {
  // The control wire carries nothing during a row but a peer's "error": it is driven every
  // kControlEveryRounds rounds, in the first round after a sleep (idle()), when time has passed, and
  // when its own timers are due (an ACK it deferred, a retransmission).
  const bool control = second_wire_ == nullptr || control_due_ ||
                       ++rounds_since_control_ >= kControlEveryRounds || wire_.next_deadline() <= time_now();
  return drive_wires(control);
}

Status Session::drive_wires(bool control) {
  if (control) {
    rounds_since_control_ = 0;
    control_due_ = false;
    if (Status s = wire_.progress(); !s) return make_error("udp wire: " + s.error().message);
  }
  if (second_wire_ != nullptr) {
    if (Status s = second_wire_->progress(); !s) {
      return make_error(fmt::format("{}: {}", second_wire_->describe(), s.error().message));
    }
  }
  // The time the last wire's round left: what check() and idle() go by, without a clock read of their
  // own (under emulation one costs microseconds, and a waiting loop makes one a round).
  now_ns_ = (second_wire_ != nullptr ? second_wire_ : &wire_)->progress_time();
  if (!refuse_why_.empty()) {
    // The second wire's first connection is the data connection the server waits for (move_data).
    for (wire::UdpWire* w : {&wire_, data_wire_ == second_wire_ ? second_wire_ : nullptr}) {
      if (w == nullptr) continue;
      while (std::optional<engine::ConnId> other = w->endpoint().accept()) {
        w->endpoint().refuse(*other, refuse_why_);
      }
    }
  }
  return {};
}

void Session::idle() {
  if (poll_ == PerfPoll::kBusy) return;
  const TimeNs now = time_now();
  if (poll_ == PerfPoll::kAdaptive) {
    const uint64_t io =
        wire_.datagrams_moved() + (second_wire_ != nullptr ? second_wire_->datagrams_moved() : 0);
    if (io != last_io_count_) {
      last_io_count_ = io;
      last_io_ns_ = now;
    }
    if (now - last_io_ns_ < kAdaptiveSpinNs) {
      // Spinning, but give the CPU to any thread waiting for one (the wire's I/O threads on a small
      // host: see UdpWire's own polling threads).
      std::this_thread::yield();
      return;
    }
  }
  if (second_wire_ != nullptr) {
    // Two wires: sleep on the data wire's events only, briefly, so that control messages on the UDP
    // wire wait at most kTwoWireSleepNs (they come between rows, not inside one).
    constexpr TimeNs kTwoWireSleepNs = kNsPerMs;
    const TimeNs deadline =
        std::min({wire_.next_deadline(), second_wire_->next_deadline(), now + kTwoWireSleepNs});
    if (deadline > now + kSpinNs) {
      second_wire_->wait_for_io(deadline);
      control_due_ = true;
    }
    return;
  }
  const TimeNs deadline = std::min(wire_.next_deadline(), now + kMaxSleepNs);
  if (deadline > now + kSpinNs) wire_.wait_for_io(deadline);
}

TimeNs Session::time_now() const {
  return now_ns_ != 0 ? now_ns_ : wire::UdpWire::now();
}

namespace {

// The state of one connection in a --timeout message: what moved, what was dropped, and where each
// lane's congestion control stands (a window or rate collapsed to its floor explains a stall), and
// over a verbs port, the port's own counters.
std::string describe_stall(const engine::Connection& c, const engine::EndpointStats& e,
                           const wire::UdpWireStats& w) {
  const engine::ConnectionStats& s = c.stats();
  std::string lanes;
  for (uint32_t i = 0; i < c.lanes() && i < 8; ++i) {
    const engine::LaneStats& l = c.lane_stats(i);
    lanes += fmt::format("{}lane {}: cwnd {:.0f} B, rate {:.3g} Gb/s, in flight {} B", i ? "; " : "", i,
                         l.cwnd_bytes, l.pacing_rate_bps / 1e9, l.in_flight_bytes);
  }
  const std::string text = fmt::format(
      "connection {}: {} B sent, {} B acked, {} B received, {} retransmits ({} fast, {} rto), {} timeouts, "
      "{} "
      "acks received; dropped: {} duplicate, {} malformed, {} corrupt, {} out of window; endpoint: {} "
      "malformed, {} unknown connection; wire: {} datagrams sent, {} received, {} lost to full socket "
      "buffers, "
      "{} to send errors; {}",
      engine::to_string(c.state()), s.bytes_sent, s.bytes_acked, s.bytes_received, s.retransmits(),
      s.retransmits_fast, s.retransmits_rto, s.timeouts, s.acks_received, s.duplicates_dropped,
      s.malformed_dropped, s.corrupt_dropped, s.out_of_window_dropped, e.malformed_dropped,
      e.unknown_connection, w.datagrams_sent, w.datagrams_received, w.send_dropped_full, w.send_dropped_error,
      lanes);
  return text + port_counters_text(w);
}

}  // namespace

Status Session::check(std::string_view what) {
  return check_lazily([what] { return std::string(what); });
}

Status Session::check_lazily(const std::function<std::string()>& describe) {
  const bool have_data = data_id_ != 0;
  for (engine::Connection* c : {control(), have_data ? conn() : nullptr}) {
    if (c == nullptr) continue;
    const char* which = c == control() ? "control" : "data";
    if (c->state() == engine::ConnectionState::kFailed) {
      return make_error(
          fmt::format("{} connection failed while waiting for {}: {}", which, describe(), c->error()));
    }
    if (c->state() == engine::ConnectionState::kClosed && !(peer_close_expected_ && c != control())) {
      return make_error(fmt::format("the {} closed the {} connection while we waited for {}", peer_name_,
                                    which, describe()));
    }
  }
  if (control() == nullptr || (have_data && conn() == nullptr)) {
    return make_error(fmt::format("connection gone while waiting for {}", describe()));
  }
  const TimeNs idle_ns = time_now() - last_activity_ns_;
  if (idle_ns > timeout_ns_) {
    engine::Connection* c = have_data ? conn() : control();
    return make_error(
        fmt::format("nothing completed for {:.1f} s (--timeout) while waiting for {}; {}",
                    static_cast<double>(idle_ns) / 1e9, describe(),
                    describe_stall(*c, have_data ? data_wire_->endpoint().stats() : wire_.endpoint().stats(),
                                   have_data ? data_wire_->stats() : wire_.stats())));
  }
  return {};
}

Status completion_error(const engine::Completion& c, std::string_view what, engine::Connection* conn) {
  if (c.ok) return {};
  std::string why = c.error;
  if (conn != nullptr && !conn->error().empty() && why.find(conn->error()) == std::string::npos) {
    why += " (connection: " + conn->error() + ")";
  }
  return make_error(fmt::format("{} failed: {}", what, why));
}

Status Session::post_control_recv() {
  engine::Connection* c = control();
  if (c == nullptr) return make_error("connection gone");
  auto r = c->post_recv(control_buf_.data(), control_buf_.size(), kTagControl);
  if (!r) return make_error("posting the control receive: " + r.error().message);
  control_req_ = *r;
  control_posted_ = true;
  return {};
}

Status Session::send_control(const nlohmann::json& msg) {
  control_out_ = encode_control(msg);
  engine::Connection* c = control();
  if (c == nullptr) return make_error("connection gone");
  auto r = c->post_send(control_out_.data(), control_out_.size(), kTagControl);
  if (!r) return make_error("sending a control message: " + r.error().message);
  engine::Completion done;
  const engine::RequestId req = *r;
  const std::string what = fmt::format("the peer to take the '{}' message", msg.value("type", std::string()));
  if (Status s = drive([&] { return (done = wire_.test(control_id_, req)).done; }, what); !s) return s;
  return completion_error(done, "control send", control());
}

bool Session::poll_control() {
  if (control_ready_) return true;
  engine::Connection* c = control();
  if (c == nullptr) return false;
  if (!control_posted_) {
    // The receive could not be re-posted (the peer closed): report that as the next message's failure.
    control_done_ = engine::Completion{.done = true, .ok = false, .error = control_post_error_};
    control_ready_ = true;
    return true;
  }
  control_done_ = c->test(control_req_);
  control_ready_ = control_done_.done;
  return control_ready_;
}

Status Session::check_peer_abort() {
  if (!poll_control()) return {};
  if (!control_done_.ok) return completion_error(control_done_, "control receive", control());
  const std::string_view bytes(reinterpret_cast<const char*>(control_buf_.data()), control_done_.bytes);
  auto msg = decode_control(bytes, "");
  if (!msg) return make_error(peer_name_ + ": " + msg.error().message);
  return {};
}

Result<nlohmann::json> Session::recv_control(std::string_view type) {
  const std::string what = type.empty() ? std::string("a control message from the peer")
                                        : fmt::format("the peer's '{}' message", type);
  if (Status s = drive([&] { return poll_control(); }, what); !s) return s.error();
  control_ready_ = false;
  const engine::Completion done = control_done_;
  if (Status s = completion_error(done, "control receive", control()); !s) return s.error();
  last_control_.assign(reinterpret_cast<const char*>(control_buf_.data()), done.bytes);
  control_posted_ = false;
  // The peer may have sent its last word and closed: this message still counts, and a failure to
  // post the next receive is reported only if a next message is waited for.
  if (Status s = post_control_recv(); !s) control_post_error_ = s.error().message;
  auto msg = decode_control(last_control_, type);
  if (!msg) return make_error(peer_name_ + ": " + msg.error().message);
  return msg;
}

void Session::send_error(const std::string& text) {
  engine::Connection* c = control();
  if (c == nullptr || c->state() != engine::ConnectionState::kEstablished) return;
  error_out_ = encode_control(nlohmann::json{{"type", "error"}, {"error", text}});
  auto r = c->post_send(error_out_.data(), error_out_.size(), kTagControl);
  if (!r) return;
  // Give it a moment to leave; the peer may already be gone, so do not wait for its answer long.
  const TimeNs until = wire::UdpWire::now() + 200 * kNsPerMs;
  while (wire::UdpWire::now() < until && progress()) {
    if (control() == nullptr || wire_.test(control_id_, *r).done) return;
  }
}

bool Session::note_due(TimeNs start_ns) {
  if (!sink_.progress) return false;
  const TimeNs now = time_now();
  if (now - start_ns < kNsPerSec || now - last_note_ns_ < kNsPerSec) return false;
  last_note_ns_ = now;
  return true;
}

void Session::emit_note(TimeNs start_ns, const std::string& text) {
  const TimeNs now = wire::UdpWire::now();
  sink_.progress(fmt::format("perf: {} ({:.0f} s)", text, static_cast<double>(now - start_ns) / 1e9));
}

void Session::abort() {
  if (conn() != nullptr) data_wire_->close(data_id_, /*release=*/true);
  // Let the RST leave before this side stops driving the wire.
  for (int i = 0; i < 4; ++i) {
    if (!progress()) break;
  }
}

void Session::close() {
  if (conn() != nullptr) data_wire_->close(data_id_);
  auto parked = [&] { return parked_id_ ? wire_.endpoint().connection(parked_id_) : nullptr; };
  if (parked() != nullptr) wire_.close(parked_id_);
  if (control() != nullptr) wire_.close(control_id_);
  auto settled = [](engine::Connection* c) {
    return c == nullptr || c->state() == engine::ConnectionState::kClosed ||
           c->state() == engine::ConnectionState::kFailed;
  };
  const TimeNs deadline = wire::UdpWire::now() + 2 * kNsPerSec;
  while (wire::UdpWire::now() < deadline) {
    if (!progress()) return;
    if (settled(control()) && settled(conn()) && settled(parked())) return;
    idle();
  }
}

}  // namespace megascale::perf::detail
