// One side of a perf connection, driven by the thread that owns its UdpWire (caller-driven mode): the
// progress/idle loop with failure and inactivity checks, and the control-message channel.
#pragma once

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
  // `conn` must be a connection of `w`; `o` gives --poll and --timeout; `peer_name` ("server",
  // "client") names the other side in errors.
  Session(wire::UdpWire& w, engine::ConnId conn, const PerfOptions& o, const PerfSink& sink,
          std::string peer_name);

  wire::UdpWire& wire() { return wire_; }
  engine::ConnId id() const { return id_; }
  // The connection (nullptr once released); use only from the driving thread.
  engine::Connection* conn() { return wire_.endpoint().connection(id_); }

  // One progress round (receive, engine, timers, send).
  Status progress();
  // Nothing to do until the wire has news: sleeps in epoll with --poll sleep (until a datagram or the
  // engine's next deadline), returns at once with --poll busy.
  void idle();
  // Marks that something completed (resets the --timeout clock).
  void touch() { last_activity_ns_ = wire::UdpWire::now(); }
  // Error when the connection failed, or nothing completed for --timeout seconds; `what` says what was
  // being waited for.
  Status check(std::string_view what);

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

  // Progress line on the sink (stderr) at most once a second, after the first second of `start_ns`.
  void progress_note(TimeNs start_ns, const std::string& text);

  // Closes the connection and waits briefly for the peer's FIN (errors ignored: the results are in).
  void close();

 private:
  wire::UdpWire& wire_;
  engine::ConnId id_;
  bool busy_poll_;
  TimeNs timeout_ns_;
  const PerfSink& sink_;
  std::string peer_name_;
  TimeNs last_activity_ns_ = 0;
  TimeNs last_note_ns_ = 0;
  std::vector<uint8_t> control_buf_;
  engine::RequestId control_req_ = 0;
  // True when the control receive completed (seen by check_peer_abort) and is not yet consumed.
  bool control_ready_ = false;
  engine::Completion control_done_;
  // Tests the control receive (or returns the kept completion): true when one is ready.
  bool poll_control();
  std::string control_out_;
  std::string error_out_;
  std::string last_control_;
};

// Status from a completion that is done but failed, naming what it was.
Status completion_error(const engine::Completion& c, std::string_view what, engine::Connection* conn);

}  // namespace megascale::perf::detail
