// One side of a perf session, driven by the thread that owns its UdpWire (caller-driven mode): the
// progress/idle loop with failure and inactivity checks, and the control-message channel.
//
// A session is two engine connections between the same wires: the control connection carries the
// JSON control messages and keeps one receive posted all the time; the data connection carries only
// the measured messages, so its counters are the row's alone. They are apart because the engine's
// receive slots form a ring (max_posted_recvs): a receive that stays posted while many later ones
// complete would block the ring.
//
// With --wire verbs-* the data connection lives on a second wire (the verbs wire) while the control
// connection stays on the UDP wire: move_data() puts it there, and progress() drives both wires.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "megascale/common/result.h"
#include "megascale/perf/options.h"
#include "megascale/perf/run.h"
#include "megascale/wire/udp.h"

namespace megascale::perf::detail {

class Session {
 public:
  // `control` must be a connection of `w` (the data connection is set later); `o` gives --poll and
  // --timeout; `peer_name` ("server", "client") names the other side in errors.
  Session(wire::UdpWire& w, engine::ConnId control, const PerfOptions& o, const PerfSink& sink,
          std::string peer_name);

  // The data connection's wire (the control wire until move_data()).
  wire::UdpWire& wire() { return *data_wire_; }
  void set_data(engine::ConnId data) { data_id_ = data; }
  // The second wire (the verbs wire): progress() and idle() drive it from now on, as the control wire.
  void add_wire(wire::UdpWire& w) { second_wire_ = &w; }
  // The data connection moves to `data` on the second wire; the first data connection on the control
  // wire stays open, unused, until close().
  void move_data(engine::ConnId data);
  engine::ConnId id() const { return data_id_; }
  // The data connection (nullptr before set_data and once released); use only from the driving thread.
  engine::Connection* conn() { return data_id_ ? data_wire_->endpoint().connection(data_id_) : nullptr; }
  // A send's completion on the data connection, through the wire rather than conn(): with I/O threads
  // the wire holds it back until they no longer read the buffer (collectives/wire/README.md, "The TX
  // fence"). Receives may be tested on conn() directly.
  engine::Completion test_send(engine::RequestId id) { return data_wire_->test(data_id_, id); }
  engine::Connection* control() { return wire_.endpoint().connection(control_id_); }

  // One progress round (receive, engine, timers, send) on each wire. After refuse_newcomers(why), every
  // connection another client opens meanwhile is refused with `why` (Endpoint::refuse): the server
  // serves one.
  Status progress();
  // The same in a row's loop, where only the data wire is busy: with two wires, the control wire gets a
  // round once in 16 and after every sleep of idle() (a peer's "error" is all it carries meanwhile, and
  // its round is a system call and clock reads); control exchanges (drive()) use progress().
  Status progress_data();
  void refuse_newcomers(std::string why) { refuse_why_ = std::move(why); }
  // Nothing to do until the wire has news: with --poll sleep, sleeps in epoll until a datagram or the
  // engine's next deadline; --poll busy returns at once; --poll adaptive returns at once while the
  // last datagram is less than kAdaptiveSpinNs old, then sleeps.
  void idle();
  // Marks that something completed (resets the --timeout clock).
  void touch() { last_activity_ns_ = wire::UdpWire::now(); }
  // Error when a connection failed, or nothing completed for --timeout seconds (by the time of the last
  // progress round); `what` says what was being waited for.
  Status check(std::string_view what);
  // The same for polling loops: `what()` builds the text only when there is something to report, so
  // a loop that spins a million times a second formats nothing while all is well.
  Status check_lazily(const std::function<std::string()>& what);

  // Runs progress()/idle() until done() is true.
  template <class Done>
  Status drive(Done&& done, std::string_view what) {
    touch();
    for (;;) {
      if (Status s = progress(); !s) return s;
      if (done()) return {};
      if (Status s = check(what); !s) return s;
      idle();
    }
  }

  // After the last row: the peer may close the data connection at any moment now, which check() then
  // takes as the end it is, not as an error.
  void expect_peer_close() { peer_close_expected_ = true; }

  // Posts the receive for the next control message (once at the start; recv_control reposts).
  Status post_control_recv();
  // Sends a control message and waits until the peer has it.
  Status send_control(const nlohmann::json& msg);
  // Waits for the next control message; `type` "" accepts any. A peer's "error"/"refuse" is an error.
  Result<nlohmann::json> recv_control(std::string_view type);
  // The last control message received, undecoded (to tell a refusal from other errors).
  const std::string& last_control() const { return last_control_; }
  // During a data phase: a control message that has arrived is kept for the next recv_control, and
  // if it is the peer's "error" (it gave up: a failed check, a failed transfer) this returns that error.
  Status check_peer_abort();

  // Tells the peer why this side stops (an "error" control message, best effort: it may be gone).
  void send_error(const std::string& text);

  // Progress line on the sink (stderr) at most once a second, after the first second of `start_ns`;
  // `text()` is called only when a line is due.
  template <class Text>
  void progress_note(TimeNs start_ns, Text&& text) {
    if (note_due(start_ns)) emit_note(start_ns, text());
  }

  // Closes both connections and waits briefly for the peer's FINs (errors ignored: the results are in).
  void close();
  // Drops the data connection at once (the peer gets an RST): every pending request on it fails, so
  // no buffer of ours is read or written after this. For error paths about to free their buffers.
  void abort();

 private:
  wire::UdpWire& wire_;                   // the control connection's
  wire::UdpWire* data_wire_;              // the data connection's: &wire_, or second_wire_
  wire::UdpWire* second_wire_ = nullptr;  // add_wire()
  engine::ConnId control_id_;
  engine::ConnId data_id_ = 0;
  engine::ConnId parked_id_ = 0;  // the control wire's data connection after move_data()
  PerfPoll poll_;
  TimeNs now_ns_ = 0;                  // the last progress round's time (UdpWire::progress_time())
  uint32_t rounds_since_control_ = 0;  // progress_data() rounds without the control wire
  bool control_due_ = true;            // idle() slept: the next progress_data() drives the control wire
  Status drive_wires(bool control);
  TimeNs time_now() const;      // now_ns_, or the clock before the first round
  uint64_t last_io_count_ = 0;  // datagrams in + out at the last idle()
  TimeNs last_io_ns_ = 0;       // when that count last changed
  TimeNs timeout_ns_;
  const PerfSink& sink_;
  std::string peer_name_;
  std::string refuse_why_;
  TimeNs last_activity_ns_ = 0;
  TimeNs last_note_ns_ = 0;
  std::vector<uint8_t> control_buf_;
  engine::RequestId control_req_ = 0;
  // True when the control receive completed (seen by check_peer_abort) and is not yet consumed.
  bool control_ready_ = false;
  bool peer_close_expected_ = false;
  bool control_posted_ = false;     // control_req_ is a receive in flight
  std::string control_post_error_;  // why the receive could not be re-posted
  engine::Completion control_done_;
  // Tests the control receive (or returns the kept completion): true when one is ready.
  bool poll_control();
  bool note_due(TimeNs start_ns);
  void emit_note(TimeNs start_ns, const std::string& text);
  std::string control_out_;
  std::string error_out_;
  std::string last_control_;
};

// Aborts the session when a row leaves early (declare it after the row's buffers, so that it runs
// before they are freed); disarm() on success.
class AbortGuard {
 public:
  explicit AbortGuard(Session& s) : s_(s) {}
  ~AbortGuard() {
    if (armed_) s_.abort();
  }
  AbortGuard(const AbortGuard&) = delete;
  AbortGuard& operator=(const AbortGuard&) = delete;
  void disarm() { armed_ = false; }

 private:
  Session& s_;
  bool armed_ = true;
};

// Status from a completion that is done but failed, naming what it was.
Status completion_error(const engine::Completion& c, std::string_view what, engine::Connection* conn);

}  // namespace megascale::perf::detail
