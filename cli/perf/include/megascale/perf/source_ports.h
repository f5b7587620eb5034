// The perf client's lane source ports: --source-ports as given, or --fabric/--from/--to/--hash turned
// into a request to the topology's port mapping (topo::map_source_ports) for the real 5-tuple: the
// server's IPv4 address and UDP port, and this side's address when the client binds a specific IPv4
// address (else the model's address for --from, which the banner says). Lane i then binds port i
// (wire::UdpConfig::source_ports), so it takes the path chosen for it when the switches hash as modelled.
//
//   Result<LanePorts> lp = resolve_lane_ports(o, "10.0.3.2", 18515, "0.0.0.0");
//   if (!lp) return usage(lp.error().message);         // the message names the flag
//   cfg.source_ports = lp->ports;  banner.push_back(lp->describe);
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "megascale/common/result.h"
#include "megascale/perf/options.h"

namespace megascale::perf {

struct LanePorts {
  std::vector<uint16_t> ports;  // one per lane; empty: no --source-ports / --fabric (ephemeral ports)
  std::string describe;         // the banner's text: the ports and where they came from
  uint64_t distinct_paths = 0;  // with --hash: distinct fabric paths the lanes take (0 otherwise)
  uint64_t path_count = 0;      // with --fabric: equal-cost paths between --from and --to
};

// Resolves `o`'s ports for a client that connects to `server_host`:`server_port` from `bind_host` (the
// client wire's bind address: an IPv4 literal other than 0.0.0.0 is used as the source address).
// Errors name the flag (--fabric, --from, --to, --hash, --source-ports) and are usage errors; a server
// name that does not resolve to IPv4 too.
Result<LanePorts> resolve_lane_ports(const PerfOptions& o, std::string_view server_host, uint16_t server_port,
                                     std::string_view bind_host);

}  // namespace megascale::perf
