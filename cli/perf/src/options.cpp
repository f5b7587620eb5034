// Checking perf options and turning them into rows.
#include "megascale/perf/options.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "megascale/engine/packet.h"

namespace megascale::perf {

std::string_view to_string(PerfTest t) {
  switch (t) {
    case PerfTest::kBw:
      return "bw";
    case PerfTest::kLat:
      return "lat";
    case PerfTest::kBoth:
      return "both";
  }
  return "?";
}

Result<PerfTest> parse_perf_test(std::string_view text) {
  if (text == "bw") return PerfTest::kBw;
  if (text == "lat") return PerfTest::kLat;
  if (text == "both") return PerfTest::kBoth;
  return make_error(fmt::format("--test {}: must be bw, lat or both", text));
}

std::string_view to_string(PerfWire w) {
  switch (w) {
    case PerfWire::kUdp:
      return "udp";
    case PerfWire::kVerbsUd:
      return "verbs-ud";
    case PerfWire::kVerbsRc:
      return "verbs-rc";
  }
  return "?";
}

uint32_t default_segment_bytes(PerfWire w, bool loopback, uint32_t lanes) {
  if (w == PerfWire::kVerbsRc) return engine::kMaxSegmentPayload;
  if (!loopback) return PerfOptions{}.segment_bytes;
  return w == PerfWire::kUdp && lanes == 1 ? 60000 : 16384;
}

Result<PerfWire> parse_perf_wire(std::string_view text) {
  if (text == "udp") return PerfWire::kUdp;
  if (text == "verbs-ud") return PerfWire::kVerbsUd;
  if (text == "verbs-rc") return PerfWire::kVerbsRc;
  return make_error(fmt::format("--wire {}: must be udp, verbs-ud or verbs-rc", text));
}

std::string_view to_string(PerfPoll p) {
  switch (p) {
    case PerfPoll::kAdaptive:
      return "adaptive";
    case PerfPoll::kBusy:
      return "busy";
    case PerfPoll::kSleep:
      return "sleep";
  }
  return "?";
}

Result<PerfPoll> parse_perf_poll(std::string_view text) {
  if (text == "adaptive") return PerfPoll::kAdaptive;
  if (text == "busy") return PerfPoll::kBusy;
  if (text == "sleep") return PerfPoll::kSleep;
  return make_error(fmt::format("--poll {}: must be adaptive, busy or sleep", text));
}

PerfRole role_of(const PerfOptions& o) {
  if (o.loopback) return PerfRole::kLoopback;
  return o.server.empty() ? PerfRole::kServer : PerfRole::kClient;
}

Status validate_perf_options(const PerfOptions& o) {
  auto bad = [](std::string text) { return make_error(std::move(text)); };
  if (o.all_sizes && o.is_explicit(flag::kSize)) return bad("-a and -s: give one of them");
  if (o.is_explicit(flag::kSize) && (o.size_bytes < 1 || o.size_bytes > kMaxSizeBytes)) {
    return bad(fmt::format("-s {}: a message size must be 1 .. {} bytes", o.size_bytes, kMaxSizeBytes));
  }
  if (o.is_explicit(flag::kIters) && o.iterations < 1) return bad("-n 0: at least one iteration");
  if (o.bidirectional && o.test == PerfTest::kLat) {
    return bad("-b with --test lat: -b runs the bandwidth rows both ways; a ping-pong already does");
  }
  if (o.is_explicit(flag::kIters) && o.is_explicit(flag::kDuration)) {
    return bad("-n and -D: give a count or a duration, not both");
  }
  if (o.duration_s < 0 || o.duration_s > 3600 || std::isnan(o.duration_s)) {
    return bad(fmt::format("-D {}: a duration must be 0 .. 3600 seconds", o.duration_s));
  }
  if (o.window < 1 || o.window > 1024) return bad(fmt::format("--window {}: must be 1 .. 1024", o.window));
  if (o.lanes < 1 || o.lanes > 64) return bad(fmt::format("--lanes {}: must be 1 .. 64", o.lanes));
  if (o.io_threads > 64) return bad(fmt::format("--io-threads {}: must be 0 .. 64", o.io_threads));
  if (o.stall_us > 1'000'000) return bad(fmt::format("--stall-us {}: must be 0 .. 1000000", o.stall_us));
  if (o.segment_bytes < 64 || o.segment_bytes > 65000) {
    return bad(fmt::format("--segment {}: payload bytes per datagram must be 64 .. 65000", o.segment_bytes));
  }
  if (o.dscp > 63) {
    return bad(fmt::format("-T {}: the traffic class is one byte, DSCP (0 .. 63) in its upper six bits",
                           uint32_t{o.dscp} << 2));
  }
  if (!(o.timeout_s > 0) || o.timeout_s > 86400) {
    return bad(fmt::format("--timeout {}: must be > 0 and at most 86400 seconds", o.timeout_s));
  }
  if (o.buffer_budget_bytes < (1ULL << 20)) return bad("--buffer-mib: at least 1 MiB");
  if (Status s = check_buffer_budget(o); !s) return s;
  if (o.cc.empty()) return bad("--cc: empty preset name");
  if (o.baseline_ucx) {
    if (!o.loopback) return bad("--baseline ucx runs its rows in this process: it needs --loopback");
    if (o.test == PerfTest::kLat) return bad("--baseline ucx compares bandwidth rows: drop --test lat");
    if (o.bidirectional) return bad("--baseline ucx and -b: the baseline runs one direction");
    if (is_verbs(o.wire)) return bad("--baseline ucx compares the UDP wire on loopback: drop --wire");
  }
  if (o.loopback && !o.server.empty()) {
    return bad(fmt::format("--loopback runs both sides here: drop the server address '{}'", o.server));
  }
  if (o.port_given && o.port == 0 && role_of(o) != PerfRole::kLoopback) {
    return bad("-p 0: the server needs a fixed port (0 is allowed with --loopback only)");
  }
  if (o.port_given && o.port != 0 && uint32_t{o.port} + o.lanes - 1 > 65535) {
    return bad(fmt::format("-p {} with --lanes {}: the server binds one port per lane, past 65535", o.port,
                           o.lanes));
  }
  const bool mapping = !o.fabric.empty() || !o.from.empty() || !o.to.empty() || !o.hashes.empty();
  if (role_of(o) == PerfRole::kServer && (mapping || !o.source_ports.empty())) {
    return bad(fmt::format("{}: the client's lanes take these ports; the server needs none",
                           o.source_ports.empty() ? "--fabric" : "--source-ports"));
  }
  if (!o.fabric.empty() && !o.source_ports.empty()) {
    return bad("--fabric and --source-ports: give one of them");
  }
  if (o.fabric.empty()) {
    if (!o.from.empty()) return bad(fmt::format("--from {}: needs --fabric", o.from));
    if (!o.to.empty()) return bad(fmt::format("--to {}: needs --fabric", o.to));
    if (!o.hashes.empty()) return bad(fmt::format("--hash {}: needs --fabric", o.hashes.front()));
  } else {
    if (o.from.empty() || o.to.empty()) {
      return bad(
          fmt::format("--fabric {}: needs --from and --to (this NIC and the server's, hH:nN)", o.fabric));
    }
    if (o.ipv6) return bad("--fabric with -6: the fabric model hashes IPv4 5-tuples");
  }
  if (is_verbs(o.wire)) {
    // The verbs wire's lanes are QPs: no UDP source ports to choose, no I/O threads (the port's
    // completion queue is read by the progress thread).
    const std::string w(to_string(o.wire));
    if (mapping || !o.source_ports.empty()) {
      return bad(fmt::format("--wire {} with {}: lanes are QPs there, not UDP source ports", w,
                             o.source_ports.empty() ? "--fabric" : "--source-ports"));
    }
    if (o.io_threads > 0) return bad(fmt::format("--wire {} with --io-threads: udp only", w));
  } else if (o.ib_port != 0 || o.gid_index) {
    return bad(fmt::format("{}: the RDMA port and GID apply to --wire verbs-ud and verbs-rc",
                           o.ib_port != 0 ? "-i" : "-x"));
  }
  if (!o.source_ports.empty() && o.source_ports.size() != o.lanes) {
    return bad(fmt::format("--source-ports gives {} port{} for --lanes {}: give one per lane",
                           o.source_ports.size(), o.source_ports.size() == 1 ? "" : "s", o.lanes));
  }
  return {};
}

std::vector<std::string> perf_warnings(const PerfOptions& o, unsigned usable_cpus) {
  std::vector<std::string> warnings;
  const unsigned sides = role_of(o) == PerfRole::kLoopback ? 2 : 1;
  const uint64_t spinning = uint64_t{sides} * (1 + o.io_threads);
  if (o.io_threads > 0 && spinning > usable_cpus) {
    warnings.push_back(fmt::format(
        "--io-threads {}: {} polling threads ({} side{} x (1 progress + {} I/O)) on {} usable CPU{}; "
        "they take turns on the CPUs and each packet waits for its thread's turn (on 2 CPUs --loopback "
        "measured 15-16 Gb/s with --io-threads 2 against 27-29 with none), so this measures the host: use "
        "fewer I/O threads or more CPUs",
        o.io_threads, spinning, sides, sides == 1 ? "" : "s", o.io_threads, usable_cpus,
        usable_cpus == 1 ? "" : "s"));
  }
  return warnings;
}

std::vector<uint64_t> sizes_for(const PerfOptions& o, PerfTest test) {
  if (o.all_sizes) {
    const int top = test == PerfTest::kBw ? kSweepMaxLog2Bw : kSweepMaxLog2Lat;
    std::vector<uint64_t> sizes;
    for (int k = 1; k <= top; ++k) sizes.push_back(uint64_t{1} << k);
    return sizes;
  }
  if (o.size_bytes > 0) return {o.size_bytes};
  return {test == PerfTest::kBw ? kDefaultBwSizeBytes : kDefaultLatSizeBytes};
}

uint64_t iterations_for(const PerfOptions& o, PerfTest test, uint64_t size_bytes) {
  if (o.iterations > 0) return o.iterations;
  const uint64_t base = test == PerfTest::kBw ? kDefaultBwIterations : kDefaultLatIterations;
  const uint64_t cap =
      std::max<uint64_t>(kMinDefaultIterations, kDefaultRowBytes / std::max<uint64_t>(size_bytes, 1));
  return std::min(base, cap);
}

uint64_t buffer_bytes(uint64_t count, uint64_t size_bytes) {
  const uint64_t pages = (std::max<uint64_t>(size_bytes, 1) + kBufferPageBytes - 1) / kBufferPageBytes;
  return count * pages * kBufferPageBytes;
}

uint32_t buffers_for(const PerfOptions& o, uint64_t size_bytes) {
  const uint64_t fit = o.buffer_budget_bytes / buffer_bytes(1, size_bytes);
  return static_cast<uint32_t>(std::clamp<uint64_t>(fit, 1, o.window));
}

Status check_buffer_budget(const PerfOptions& o) {
  for (PerfTest test : {PerfTest::kBw, PerfTest::kLat}) {
    if (o.test != PerfTest::kBoth && o.test != test) continue;
    const std::vector<uint64_t> sizes = sizes_for(o, test);
    const uint64_t size = *std::max_element(sizes.begin(), sizes.end());
    const uint64_t count = test == PerfTest::kBw ? 1 : kLatBuffersPerSide;
    const uint64_t need = buffer_bytes(count, size);
    if (need <= o.buffer_budget_bytes) continue;
    const uint64_t need_mib = (need + (1ULL << 20) - 1) >> 20;
    const std::string what =
        test == PerfTest::kBw ? fmt::format("one bw message of {} B", size)
                              : fmt::format("a latency row's {} buffers of {} B", kLatBuffersPerSide, size);
    return make_error(fmt::format(
        "--buffer-mib {}: {} need{} {} MiB of buffers per side{}; give --buffer-mib {} or a smaller size",
        o.buffer_budget_bytes >> 20, what, test == PerfTest::kBw ? "s" : "", need_mib,
        test == PerfTest::kBw && o.bidirectional ? " each way" : "", need_mib));
  }
  return {};
}

}  // namespace megascale::perf
