// The perf session: driving loop, failure checks and control messages.
#include "session.h"

#include <fmt/format.h>

#include "megascale/perf/protocol.h"

namespace megascale::perf::detail {

namespace {
// Waits shorter than this are spun for even with --poll sleep: an epoll sleep wakes tens of
// microseconds late.
constexpr TimeNs kSpinNs = 20 * kNsPerUs;
// Longest single sleep, so that --timeout and progress notes are looked at.
constexpr TimeNs kMaxSleepNs = 50 * kNsPerMs;
}  // namespace

Session::Session(wire::UdpWire& w, engine::ConnId conn, const PerfOptions& o, const PerfSink& sink,
                 std::string peer_name)
    : wire_(w),
      id_(conn),
      busy_poll_(o.busy_poll),
      timeout_ns_(sec(o.timeout_s)),
      sink_(sink),
      peer_name_(std::move(peer_name)),
      control_buf_(kMaxControlBytes) {
  touch();
}

Status Session::progress() {
  if (Status s = wire_.progress(); !s) return make_error("udp wire: " + s.error().message);
  return {};
}

void Session::idle() {
  if (busy_poll_) return;
  const TimeNs now = wire::UdpWire::now();
  const TimeNs deadline = std::min(wire_.next_deadline(), now + kMaxSleepNs);
  if (deadline > now + kSpinNs) wire_.wait_for_io(deadline);
}

Status Session::check(std::string_view what) {
  engine::Connection* c = conn();
  if (c == nullptr) return make_error(fmt::format("connection gone while waiting for {}", what));
  if (c->state() == engine::ConnectionState::kFailed) {
    return make_error(fmt::format("connection failed while waiting for {}: {}", what, c->error()));
  }
  if (c->state() == engine::ConnectionState::kClosed) {
    return make_error(fmt::format("the {} closed the connection while we waited for {}", peer_name_, what));
  }
  const TimeNs idle_ns = wire::UdpWire::now() - last_activity_ns_;
  if (idle_ns > timeout_ns_) {
    const engine::ConnectionStats& s = c->stats();
    return make_error(fmt::format(
        "nothing completed for {:.1f} s (--timeout) while waiting for {}; connection {}: {} B sent, {} B "
        "acked, {} B received, {} retransmits, {} timeouts",
        static_cast<double>(idle_ns) / 1e9, what, engine::to_string(c->state()), s.bytes_sent, s.bytes_acked,
        s.bytes_received, s.retransmits(), s.timeouts));
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
  engine::Connection* c = conn();
  if (c == nullptr) return make_error("connection gone");
  auto r = c->post_recv(control_buf_.data(), control_buf_.size(), kTagControl);
  if (!r) return make_error("posting the control receive: " + r.error().message);
  control_req_ = *r;
  return {};
}

Status Session::send_control(const nlohmann::json& msg) {
  control_out_ = encode_control(msg);
  engine::Connection* c = conn();
  if (c == nullptr) return make_error("connection gone");
  auto r = c->post_send(control_out_.data(), control_out_.size(), kTagControl);
  if (!r) return make_error("sending a control message: " + r.error().message);
  engine::Completion done;
  const engine::RequestId req = *r;
  const std::string what = fmt::format("the peer to take the '{}' message", msg.value("type", std::string()));
  if (Status s = drive([&] { return (done = conn()->test(req)).done; }, what); !s) return s;
  return completion_error(done, "control send", conn());
}

bool Session::poll_control() {
  if (control_ready_) return true;
  engine::Connection* c = conn();
  if (c == nullptr) return false;
  control_done_ = c->test(control_req_);
  control_ready_ = control_done_.done;
  return control_ready_;
}

Status Session::check_peer_abort() {
  if (!poll_control()) return {};
  if (!control_done_.ok) return completion_error(control_done_, "control receive", conn());
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
  if (Status s = completion_error(done, "control receive", conn()); !s) return s.error();
  last_control_.assign(reinterpret_cast<const char*>(control_buf_.data()), done.bytes);
  if (Status s = post_control_recv(); !s) return s.error();
  auto msg = decode_control(last_control_, type);
  if (!msg) return make_error(peer_name_ + ": " + msg.error().message);
  return msg;
}

void Session::send_error(const std::string& text) {
  engine::Connection* c = conn();
  if (c == nullptr || c->state() != engine::ConnectionState::kEstablished) return;
  error_out_ = encode_control(nlohmann::json{{"type", "error"}, {"error", text}});
  auto r = c->post_send(error_out_.data(), error_out_.size(), kTagControl);
  if (!r) return;
  // Give it a moment to leave; the peer may already be gone, so do not wait for its answer long.
  const TimeNs until = wire::UdpWire::now() + 200 * kNsPerMs;
  while (wire::UdpWire::now() < until && progress()) {
    engine::Connection* now_c = conn();
    if (now_c == nullptr || now_c->test(*r).done) return;
  }
}

void Session::progress_note(TimeNs start_ns, const std::string& text) {
  if (!sink_.progress) return;
  const TimeNs now = wire::UdpWire::now();
  if (now - start_ns < kNsPerSec || now - last_note_ns_ < kNsPerSec) return;
  last_note_ns_ = now;
  sink_.progress(fmt::format("perf: {} ({:.0f} s)", text, static_cast<double>(now - start_ns) / 1e9));
}

void Session::close() {
  engine::Connection* c = conn();
  if (c == nullptr) return;
  wire_.close(id_);
  const TimeNs deadline = wire::UdpWire::now() + 2 * kNsPerSec;
  while (wire::UdpWire::now() < deadline) {
    if (!progress()) return;
    c = conn();
    if (c == nullptr || c->state() == engine::ConnectionState::kClosed ||
        c->state() == engine::ConnectionState::kFailed) {
      return;
    }
    idle();
  }
}

}  // namespace megascale::perf::detail
