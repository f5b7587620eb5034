// `megascale perf --loopback --baseline ucx`: the same bandwidth rows over UCX (UCP's tag messages),
// in this process, beside megascale's transport, in one table.
//
//   UcxBw r = run_ucx_bw_loopback({.size_bytes = 1 << 20, .iterations = 2000, .window = 128});
//   if (!r.error.empty()) fail(r.error);
//   use(r.figures.bw_average_gbps, r.transports);   // "tcp/lo"
//
// A sender thread and a receiver thread, each with its own UCP worker (one context), each spinning on
// its worker's progress as perf's two sides spin on their wires. The receiver keeps `window` receives
// posted into a ring of buffers; the sender keeps `window` sends in flight. Figures follow perf's own
// definitions (report.h): message i is posted when the sender posts it and complete when the receiver's
// receive of it completes (the whole message delivered), so BW average = bytes x 8 / (last delivery -
// first post).
//
// Which path: UCX's TCP transport on the loopback interface, the kernel network path megascale's UDP
// wire takes, unless UCX_TLS or UCX_NET_DEVICES are set in the environment, whose choice then stands
// (UCX_TLS=all picks shared memory: a memory copy, not a network path). The transports UCX used are
// reported from its endpoint's lanes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "megascale/perf/report.h"

namespace megascale::perf {

// Whether this build has UCX (Debian's libucx-dev when it was configured).
bool have_ucx();

struct UcxBwOptions {
  uint64_t size_bytes = 65536;
  uint64_t iterations = 5000;
  uint32_t window = 128;
  uint64_t peak_run = 0;  // BwFigures' peak window (0: `window`)
  double timeout_s = 60;  // fail when nothing completes for this long
};

struct UcxBw {
  std::string error;  // non-empty: the row failed; nothing below is valid
  BwFigures figures;
  std::string transports;  // the endpoint's lanes' transports, e.g. "tcp/lo"
  std::string version;     // UCX's, e.g. "1.13.1"
};

UcxBw run_ucx_bw_loopback(const UcxBwOptions& o);

// --baseline ucx after a loopback run: each of `report`'s bw rows again over UCX (same size, iterations
// and window), a table of both averages and their ratio (megascale / UCX) through `out`, and
// report.baseline. The error of the first row that fails, else "".
std::string append_ucx_baseline(PerfReport& report, const std::function<void(const std::string&)>& out,
                                double timeout_s);

}  // namespace megascale::perf
