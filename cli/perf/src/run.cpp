// `megascale perf` entry: options -> wires -> server, client or both (loopback).
#include "megascale/perf/run.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "flows.h"
#include "megascale/congestion/config.h"
#include "megascale/engine/packet.h"
#include "megascale/perf/source_ports.h"
#include "megascale/perf/ucx.h"
#include "verbs_wire.h"

namespace megascale::perf {

wire::UdpConfig wire_config_for(const PerfOptions& o, PerfRole side, const cc::CcConfig& cc,
                                const wire::FaultConfig& fault) {
  wire::UdpConfig c;
  if (!o.bind_host.empty()) {
    c.bind_host = o.bind_host;
  } else if (o.loopback) {
    c.bind_host = o.ipv6 ? "::1" : "127.0.0.1";
  } else {
    c.bind_host = o.ipv6 ? "::" : "0.0.0.0";
  }
  const bool server = side == PerfRole::kServer;
  c.bind_port = server ? (o.loopback && !o.port_given ? 0 : o.port) : 0;
  c.dscp = o.dscp;
  c.fault = fault;
  c.engine.cc = cc;
  c.engine.lanes = o.lanes;
  c.io_threads = o.io_threads;
  c.stall_ns = static_cast<TimeNs>(o.stall_us) * kNsPerUs;
  c.engine.payload_crc = o.payload_crc;
  // The engine uses the smaller of both sides' segments: a server without --segment lets the client choose.
  c.engine.segment_bytes =
      server && !o.loopback && !o.is_explicit(flag::kSegment) ? engine::kMaxSegmentPayload : o.segment_bytes;
  // Room for the bw window plus the control messages.
  c.engine.max_posted_recvs = std::max<uint32_t>(c.engine.max_posted_recvs, o.window + 8);
  c.engine.max_posted_sends = std::max<uint32_t>(c.engine.max_posted_sends, o.window + 8);
  // --timeout also bounds the connection attempt (a client started before its server, a wrong port).
  c.engine.connect_timeout_ns = std::min(c.engine.connect_timeout_ns, sec(o.timeout_s));
  return c;
}

namespace {

PerfRun usage(std::string text) {
  PerfRun r;
  r.status = PerfStatus::kUsage;
  r.error = std::move(text);
  return r;
}

PerfRun failure(std::string text) {
  PerfRun r;
  r.status = PerfStatus::kFailed;
  r.error = std::move(text);
  return r;
}

Result<std::unique_ptr<wire::UdpWire>> open_wire(const PerfOptions& o, PerfRole side, const cc::CcConfig& cc,
                                                 const wire::FaultConfig& fault,
                                                 const std::vector<uint16_t>& source_ports = {}) {
  wire::UdpConfig cfg = wire_config_for(o, side, cc, fault);
  cfg.source_ports = source_ports;
  auto w = wire::UdpWire::create(cfg);
  if (!w) {
    return make_error(fmt::format("{} wire on {} port {}: {}",
                                  side == PerfRole::kServer ? "server" : "client", cfg.bind_host,
                                  cfg.bind_port, w.error().message));
  }
  return w;
}

// --wire verbs-*: the side's data wire (nullptr for udp, whose data connection shares the control wire).
Result<std::unique_ptr<wire::UdpWire>> open_data_wire(const PerfOptions& o, PerfRole side,
                                                      const cc::CcConfig& cc,
                                                      const wire::FaultConfig& fault) {
  if (!is_verbs(o.wire)) return std::unique_ptr<wire::UdpWire>();
  auto w = detail::open_verbs_wire(o, wire_config_for(o, side, cc, fault));
  if (!w) {
    return make_error(
        fmt::format("{} wire: {}", side == PerfRole::kServer ? "server" : "client", w.error().message));
  }
  return w;
}

}  // namespace

PerfRun run_perf(const PerfOptions& o, const PerfSink& sink) {
  if (Status s = validate_perf_options(o); !s) return usage(s.error().message);
  auto cc = cc::resolve_cc_config(o.cc);
  if (!cc) return usage("--cc " + o.cc + ": " + cc.error().message);
  auto fault = wire::fault_config_from_env(wire::FaultConfig{});
  if (!fault) return usage(fault.error().message);
  detail::ClientSetup setup{cc->name, *fault, {}};
  // A wire config the engine refuses (e.g. a segment too large for its limits) is a usage error too.
  if (Status s = engine::validate_engine_config(wire_config_for(o, PerfRole::kClient, *cc, *fault).engine);
      !s) {
    return usage(s.error().message);
  }
  if (is_verbs(o.wire)) {
    if (Status s = detail::check_verbs_device(o); !s) return usage(s.error().message);
  }

  switch (role_of(o)) {
    case PerfRole::kServer: {
      auto w = open_wire(o, PerfRole::kServer, *cc, *fault);
      if (!w) return failure(w.error().message);
      auto data = open_data_wire(o, PerfRole::kServer, *cc, *fault);
      if (!data) return failure(data.error().message);
      return detail::run_server_on(**w, data->get(), o, cc->name, sink, nullptr);
    }
    case PerfRole::kClient: {
      auto ports = resolve_lane_ports(o, o.server, o.port,
                                      wire_config_for(o, PerfRole::kClient, *cc, *fault).bind_host);
      if (!ports) return usage(ports.error().message);
      setup.source_ports = ports->describe;
      auto w = open_wire(o, PerfRole::kClient, *cc, *fault, ports->ports);
      if (!w) return failure(w.error().message);
      auto data = open_data_wire(o, PerfRole::kClient, *cc, *fault);
      if (!data) return failure(data.error().message);
      return detail::run_client_on(**w, data->get(), o.server, o.port, o, setup, sink);
    }
    case PerfRole::kLoopback: {
      auto server_wire = open_wire(o, PerfRole::kServer, *cc, *fault);
      if (!server_wire) return failure(server_wire.error().message);
      // The client's lanes may take mapped ports (--fabric) for the real 5-tuple: the server's port is
      // known once its wire is open.
      const std::string host = o.ipv6 ? "::1" : "127.0.0.1";
      const std::string server_host = o.bind_host.empty() ? host : o.bind_host;
      auto ports = resolve_lane_ports(o, server_host, (*server_wire)->local_port(),
                                      wire_config_for(o, PerfRole::kClient, *cc, *fault).bind_host);
      if (!ports) return usage(ports.error().message);
      setup.source_ports = ports->describe;
      auto client_wire = open_wire(o, PerfRole::kClient, *cc, *fault, ports->ports);
      if (!client_wire) return failure(client_wire.error().message);
      auto server_data = open_data_wire(o, PerfRole::kServer, *cc, *fault);
      if (!server_data) return failure(server_data.error().message);
      auto client_data = open_data_wire(o, PerfRole::kClient, *cc, *fault);
      if (!client_data) return failure(client_data.error().message);
      std::atomic<bool> stop{false};
      PerfRun server_run;
      const PerfSink quiet{};
      std::thread server([&] {
        server_run = detail::run_server_on(**server_wire, server_data->get(), o, cc->name, quiet, &stop);
      });
      PerfRun run = detail::run_client_on(**client_wire, client_data->get(), server_host,
                                          (*server_wire)->local_port(), o, setup, sink);
      stop.store(true);
      server.join();
      if (run.status == PerfStatus::kOk && server_run.status != PerfStatus::kOk) {
        run.status = server_run.status;
        run.error = "server: " + server_run.error;
      } else if (server_run.status != PerfStatus::kOk &&
                 run.error.find(server_run.error) == std::string::npos) {
        // Both failed: the server's own account often names the cause.
        run.error += "\n  (server side: " + server_run.error + ")";
      }
      if (o.baseline_ucx && run.status == PerfStatus::kOk) {
        if (std::string e = append_ucx_baseline(run.report, sink.out, o.timeout_s); !e.empty()) {
          run.status = PerfStatus::kFailed;
          run.error = e;
        }
      }
      return run;
    }
  }
  return failure("unknown role");
}

}  // namespace megascale::perf
