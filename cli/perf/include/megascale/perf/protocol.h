// The perf control protocol: small JSON messages on the benchmark's own connection, tag kTagControl,
// next to the measured messages (tag kTagData).
//
//   client                              server
//   (control connection, then data connection, both on the UDP wire)
//   params {test, sizes, iters, wire, ...} -> checks them against the flags it was given explicitly
//                                    <- accept {server's settings, data_address} | refuse {error}
//   (--wire verbs-*: the client opens a data connection on its verbs wire to data_address, the
//    server's verbs wire local_address(); the UDP data connection stays idle until the end)
//   row {test, size, count}          -> allocates and posts `count` receives (bw) / the first (lat)
//                                    <- ready
//   ... count data messages (bw), or count ping-pongs (lat) ...
//                                    <- result {received, verify errors, server's counters}
//   (with -b both sides send `count` messages and receive the other's `count`; the result also
//    carries the server's own send figures)
//   report {row's table lines}       -> (the server prints them)
//   ... more rows (a -D row is preceded by unprinted calibration rows) ...
//   done                             -> both close
//
// perftest requires the same flags on both sides. Here a server started with only -p adopts the
// client's; a flag given explicitly on both sides must agree, or the run stops with exit status 2 and
// says which flag differs ("-s: 1024 on the server, 65536 on the client").
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "megascale/common/result.h"
#include "megascale/perf/counters.h"
#include "megascale/perf/options.h"

namespace megascale::perf {

inline constexpr int32_t kTagData = 1;
inline constexpr int32_t kTagControl = 7;
inline constexpr uint64_t kMaxControlBytes = 64 * 1024;
// 2: -b (PerfParams::bidirectional, and the server's own send figures in a bw row's result).
// 3: rows and counters name their units (bw_average_gbps, payload_sent_bytes, ...).
// 4: --wire (PerfParams::wire) and the server's verbs address in its accept (data_address).
inline constexpr int kProtocolVersion = 4;

// The test parameters the client proposes.
struct PerfParams {
  int version = kProtocolVersion;
  PerfTest test = PerfTest::kBoth;
  bool all_sizes = false;
  uint64_t size_bytes = 0;  // 0 = default
  uint64_t iterations = 0;  // 0 = default
  double duration_s = 0;
  uint32_t window = 128;
  bool check = false;
  uint32_t lanes = 4;
  std::string cc;  // the preset's name as loaded (a file's stem, or the built-in name)
  uint32_t segment_bytes = 4096;
  uint8_t dscp = 0;
  bool bidirectional = false;
  PerfWire wire = PerfWire::kUdp;
};

// The client's proposal from its options; `cc_name` is its resolved preset name.
PerfParams params_from(const PerfOptions& o, const std::string& cc_name);
// The options the server runs the test with: the client's test parameters, the server's own limits.
PerfOptions adopt_params(const PerfOptions& server, const PerfParams& p);

nlohmann::json to_json(const PerfParams& p);
Result<PerfParams> params_from_json(const nlohmann::json& j);

// Every flag the server was given explicitly must have the client's value, and --wire always (the
// server's wires are open before a client comes); the error names each that differs. `server_cc_name` is the
// server's resolved preset name. The client's sizes must also fit the server's --buffer-mib
// (check_buffer_budget).
Status check_agreement(const PerfOptions& server, const std::string& server_cc_name,
                       const PerfParams& client);

// How a side's sizes were chosen, for messages: "-a", "-s 1024", "default".
std::string describe_sizes(const PerfOptions& o);

// SideCounters <-> JSON (the server sends its own with each row result).
nlohmann::json to_json(const SideCounters& c);
SideCounters side_counters_from_json(const nlohmann::json& j);

// Encodes a control message (a JSON object with "type"); decodes and checks its type and size.
std::string encode_control(const nlohmann::json& msg);
Result<nlohmann::json> decode_control(std::string_view bytes, std::string_view expected_type);

}  // namespace megascale::perf
