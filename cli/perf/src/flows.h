// The two sides of a perf run on wires that are already open (run.cpp opens them).
#pragma once

#include <atomic>
#include <string>

#include "megascale/perf/options.h"
#include "megascale/perf/run.h"
#include "megascale/wire/fault.h"
#include "megascale/wire/udp.h"

namespace megascale::perf::detail {

// What the client says about its setup in the banner and the JSON "config".
struct ClientSetup {
  std::string cc_name;       // the resolved preset's name
  wire::FaultConfig fault;   // from MEGASCALE_FAULT_*
  std::string source_ports;  // the lanes' ports and where they came from (source_ports.h); "" = ephemeral
};

// Connects to host:port, agrees on the parameters, runs every row, prints as it goes. `data_wire`
// (--wire verbs-*; nullptr for udp) carries the data connection, to the server's accept's data_address.
PerfRun run_client_on(wire::UdpWire& w, wire::UdpWire* data_wire, const std::string& host, uint16_t port,
                      const PerfOptions& o, const ClientSetup& setup, const PerfSink& sink);

// Waits for one client (until `stop` is set, if given), answers its rows, prints the rows it reports.
// `data_wire` (--wire verbs-*; nullptr for udp): its local_address() goes in the accept, and the
// client's data connection comes there.
PerfRun run_server_on(wire::UdpWire& w, wire::UdpWire* data_wire, const PerfOptions& o,
                      const std::string& cc_name, const PerfSink& sink, const std::atomic<bool>* stop);

// "drop 1%, reorder 0.5% ..." or "off".
std::string describe_faults(const wire::FaultConfig& f);

}  // namespace megascale::perf::detail
