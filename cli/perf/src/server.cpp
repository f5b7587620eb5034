// The server side of a perf run: wait for one client, agree on its parameters, answer its rows.
#include <fmt/format.h>
#include <unistd.h>

#include "flows.h"
#include "megascale/perf/protocol.h"
#include "rows.h"
#include "session.h"

namespace megascale::perf::detail {
namespace {

using nlohmann::json;
using wire::UdpWire;

void emit(const PerfSink& sink, const std::string& line) {
  if (sink.out) sink.out(line);
}

PerfRun failed(PerfStatus status, std::string error) {
  PerfRun run;
  run.status = status;
  run.error = std::move(error);
  return run;
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "";
  return name;
}

// A client's "report": its lines were printed; its config and row go into this side's report.
Status keep_reported(const json& m, const UdpWire& w, PerfReport& into) {
  if (m.contains("config") && m["config"].is_object()) {
    into.config = m["config"];
    into.config["mode"] = fmt::format("server on {}: rows as its client measured them (client's config)",
                                      w.capabilities().describe());
  }
  if (m.contains("bw_row")) {
    auto row = bw_row_from_json(m["bw_row"]);
    if (!row) return make_error("protocol: the client's report: " + row.error().message);
    into.bw.push_back(std::move(*row));
  }
  if (m.contains("lat_row")) {
    auto row = lat_row_from_json(m["lat_row"]);
    if (!row) return make_error("protocol: the client's report: " + row.error().message);
    into.lat.push_back(std::move(*row));
  }
  return {};
}

}  // namespace

std::string describe_faults(const wire::FaultConfig& f) {
  if (!f.enabled()) return "off (MEGASCALE_FAULT_* unset)";
  std::string text = "MEGASCALE_FAULT_*:";
  auto add = [&](const char* name, double p) {
    if (p > 0) text += fmt::format(" {} {:g}%", name, p * 100);
  };
  add("drop", f.drop);
  add("duplicate", f.duplicate);
  add("reorder", f.reorder);
  add("delay", f.delay);
  add("corrupt", f.corrupt);
  add("ce", f.mark_ce);
  if (f.delay > 0) text += fmt::format(" (delay {} us)", f.delay_ns / kNsPerUs);
  text += fmt::format(", seed {}", f.seed);
  return text;
}

PerfRun run_server_on(UdpWire& w, UdpWire* data_wire, const PerfOptions& o, const std::string& cc_name,
                      const PerfSink& sink, const std::atomic<bool>* stop) {
  if (!o.loopback) {
    emit(sink, fmt::format("megascale perf server: waiting for a client on {}", w.capabilities().describe()));
    if (data_wire != nullptr) {
      emit(sink, fmt::format("megascale perf server: data on {} at {}", data_wire->describe(),
                             data_wire->local_address()));
    }
  }
  // A client opens two connections: control first, then data.
  std::optional<engine::ConnId> id;
  while (!id) {
    if (stop != nullptr && stop->load())
      return failed(PerfStatus::kFailed, "stopped before a client connected");
    if (Status st = w.progress(); !st) return failed(PerfStatus::kFailed, "udp wire: " + st.error().message);
    id = w.endpoint().accept();
    if (!id) w.wait_for_io(std::min(w.next_deadline(), UdpWire::now() + 20 * kNsPerMs));
  }
  Session s(w, *id, o, sink, "client");
  if (data_wire != nullptr) s.add_wire(*data_wire);
  // One client at a time: its data connection comes from the address its control connection came
  // from (both leave from its home socket); any other client is told the server is busy.
  const std::string busy = "server busy: another client's run is in progress";
  const uint32_t client_peer = s.control()->peer();
  std::optional<engine::ConnId> data;
  auto data_came = [&] {
    while ((data = w.endpoint().accept())) {
      if (w.endpoint().connection(*data)->peer() == client_peer) return true;
      w.endpoint().refuse(*data, busy);
    }
    return false;
  };
  if (Status st = s.drive(data_came, "the data connection"); !st) {
    s.close();
    return failed(PerfStatus::kFailed, st.error().message);
  }
  s.set_data(*data);
  s.refuse_newcomers(busy);
  if (Status st = s.post_control_recv(); !st) return failed(PerfStatus::kFailed, st.error().message);
  auto msg = s.recv_control("params");
  if (!msg) {
    s.close();
    return failed(PerfStatus::kFailed, msg.error().message);
  }
  auto params = params_from_json(*msg);
  Status agree = params ? check_agreement(o, cc_name, *params) : Status(params.error());
  if (!agree) {
    // Best effort: the refusal reaches the client unless it is already gone.
    (void)s.send_control(json{{"type", "refuse"}, {"error", agree.error().message}});
    s.close();
    return failed(PerfStatus::kUsage, agree.error().message);
  }
  const PerfOptions eff = adopt_params(o, *params);
  if (Status st = s.send_control(json{{"type", "accept"},
                                      {"transport", data_wire ? data_wire->describe() : w.describe()},
                                      {"cc", cc_name},
                                      {"lanes", o.lanes},
                                      {"host", host_name()},
                                      {"wire", std::string(to_string(o.wire))},
                                      {"data_address", data_wire ? data_wire->local_address() : ""}});
      !st) {
    return failed(PerfStatus::kFailed, st.error().message);
  }
  if (data_wire != nullptr) {
    // The client's data connection on the verbs wire: the first to come after the accept is this
    // client's (another client's control connection is refused on the UDP wire before it gets here).
    std::optional<engine::ConnId> vdata;
    if (Status st = s.drive([&] { return (vdata = data_wire->endpoint().accept()).has_value(); },
                            fmt::format("the data connection on {}", data_wire->describe()));
        !st) {
      s.close();
      return failed(PerfStatus::kFailed, st.error().message);
    }
    s.move_data(*vdata);
  }
  if (!o.loopback) {
    emit(sink, fmt::format("client connected from {}: test {}, sizes {}, window {}, lanes {}, cc {}",
                           s.wire().peer_address(s.conn()->peer()), to_string(eff.test), describe_sizes(eff),
                           eff.window, params->lanes, params->cc));
  }
  // The rows the client reports, for this side's --json; kept when the run fails later.
  PerfRun run;
  auto stop_with = [&](std::string error) {
    s.close();
    run.status = PerfStatus::kFailed;
    run.error = std::move(error);
    return std::move(run);
  };
  for (;;) {
    auto m = s.recv_control("");
    if (!m) return stop_with(m.error().message);
    const std::string type = m->value("type", std::string());
    if (m->contains("lines") && (*m)["lines"].is_array()) {
      for (const json& line : (*m)["lines"]) {
        if (line.is_string()) emit(sink, line.get<std::string>());
      }
    }
    if (type == "row") {
      if (Status st = server_row(s, eff, *m); !st) return stop_with(st.error().message);
    } else if (type == "report") {
      if (Status st = keep_reported(*m, w, run.report); !st) return stop_with(st.error().message);
    } else if (type == "done") {
      break;
    } else {
      return stop_with("protocol: unexpected '" + type + "' message from the client");
    }
  }
  s.close();
  return run;
}

}  // namespace megascale::perf::detail
