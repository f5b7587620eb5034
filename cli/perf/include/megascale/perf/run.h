// Running `megascale perf`: a perftest-style point-to-point benchmark over the transport (UDP wire).
//
//   PerfOptions o;  o.loopback = true;  o.test = PerfTest::kBw;  o.size_bytes = 1 << 20;
//   o.explicit_flags.insert("-s");
//   PerfSink sink{[](const std::string& l) { std::puts(l.c_str()); }, nullptr};
//   PerfRun r = run_perf(o, sink);           // prints the banner, then each row and its counters
//   if (r.status != PerfStatus::kOk) fail(r.error);
//   use(r.report.bw[0].figures.bw_average_gbps);
//
// Roles (role_of): a server waits on -p for one client and runs the test the client asks for; a client
// connects to the server's UDP port and drives the test; --loopback runs both in this process, each
// on its own thread and UdpWire, on 127.0.0.1 (::1 with -6). Each side drives its wire itself
// (caller-driven mode: its thread calls progress(), busy-polling unless --poll sleep), so a loopback
// run uses two threads, as perftest's two processes would.
//
// Bandwidth: the client sends `iterations` messages of one size, `window` in flight, to receives the
// server posted (the engine's receiver-driven credits: data moves only into a posted buffer); a
// message counts when its send completes (every byte acknowledged). The receiver checks each message
// (its ends, or every byte with --check). Latency: the client sends a ping, the server answers with a
// pong of the same size as soon as it has the ping; one-way latency = round trip / 2.
//
// Errors: bad options or disagreeing flags -> kUsage (exit 2); a transfer that fails, a check that
// fails, or nothing completing for --timeout seconds -> kFailed (exit 1), with the connection's error.
#pragma once

#include <functional>
#include <string>

#include "megascale/congestion/params.h"
#include "megascale/perf/options.h"
#include "megascale/perf/report.h"
#include "megascale/wire/fault.h"
#include "megascale/wire/udp.h"

namespace megascale::perf {

struct PerfSink {
  std::function<void(const std::string&)> out;       // result lines (stdout); may be empty
  std::function<void(const std::string&)> progress;  // progress and notes (stderr); may be empty
};

enum class PerfStatus : uint8_t { kOk, kUsage, kFailed };

struct PerfRun {
  PerfStatus status = PerfStatus::kOk;
  std::string error;  // when not kOk
  PerfReport report;
};

PerfRun run_perf(const PerfOptions& o, const PerfSink& sink);

// The UdpWire configuration of one side: bind address and port, lanes, segment, preset, DSCP, faults.
// A server given no --segment offers the largest segment, so that the client's choice wins (the
// engine uses the smaller of the two).
wire::UdpConfig wire_config_for(const PerfOptions& o, PerfRole side, const cc::CcConfig& cc,
                                const wire::FaultConfig& fault);

}  // namespace megascale::perf
