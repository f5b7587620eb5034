// One perf row, both sides: the client's bandwidth and latency loops and the server's answers.
#pragma once

#include <nlohmann/json.hpp>

#include "megascale/perf/options.h"
#include "megascale/perf/report.h"
#include "session.h"

namespace megascale::perf::detail {

// Round trips run before a latency row's timed ones (not counted, not timed).
inline constexpr uint64_t kLatWarmup = 16;
// Receives each side of a latency row keeps posted ahead (rows.cpp, LatRecvs).
inline constexpr uint64_t kLatRecvsAhead = 2;

// Client: asks the server for a row (`row` numbers rows and calibrations uniquely), runs it, collects
// the server's result. The counters are both sides' (same_host: the kernel's host counters once).
Result<BwRow> client_bw_row(Session& s, const PerfOptions& o, uint64_t row, uint64_t size_bytes,
                            uint64_t count, bool same_host);
Result<LatRow> client_lat_row(Session& s, const PerfOptions& o, uint64_t row, uint64_t size_bytes,
                              uint64_t count, bool same_host);

// Server: answers one "row" message (receives and checks the bw messages, or echoes the pings).
Status server_row(Session& s, const PerfOptions& o, const nlohmann::json& row_msg);

}  // namespace megascale::perf::detail
