// MEGASCALE_* environment variables: parsing, validation and the INFO echo (see config.h).
#include "config.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <set>
#include <string_view>

#include "handle.h"
#include "megascale/congestion/config.h"
#include "megascale/engine/config.h"
#include "megascale/engine/packet.h"
#include "megascale/wire/udp.h"

namespace megascale::nccl {
namespace {

Error bad(const char* name, const char* value, const std::string& why) {
  return make_error(std::string(name) + "=" + value + ": " + why);
}

// A whole number in [lo, hi]; the text must be nothing but the number.
Result<long long> parse_int(const char* name, const char* text, long long lo, long long hi) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || errno != 0 || v < lo || v > hi) {
    return bad(name, text, "must be an integer in " + std::to_string(lo) + ".." + std::to_string(hi));
  }
  return v;
}

Result<double> parse_seconds(const char* name, const char* text, double lo_exclusive, double hi) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || errno != 0 || !std::isfinite(v) || v <= lo_exclusive || v > hi) {
    char range[64];
    std::snprintf(range, sizeof range, "must be a number of seconds in (%g, %g]", lo_exclusive, hi);
    return bad(name, text, range);
  }
  return v;
}

Result<bool> parse_bool(const char* name, const char* text) {
  const std::string t(text);
  if (t == "1" || t == "true" || t == "yes" || t == "on") return true;
  if (t == "0" || t == "false" || t == "no" || t == "off") return false;
  return bad(name, text, "must be 0 or 1");
}

std::string seconds_text(TimeNs ns) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", static_cast<double>(ns) / 1e9);
  return text;
}

}  // namespace

std::string host_name() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return "host";
  return host;
}

std::string expand_file_pattern(const std::string& pattern, const std::string& host, long pid) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char next = i + 1 < pattern.size() ? pattern[i + 1] : '\0';
    if (pattern[i] == '%' && (next == 'h' || next == 'p' || next == '%')) {
      out += next == 'h' ? host : next == 'p' ? std::to_string(pid) : "%";
      ++i;
    } else {
      out.push_back(pattern[i]);
    }
  }
  return out;
}

uint32_t default_segment_bytes(int mtu_bytes, bool ipv6) {
  const int overhead = (ipv6 ? 40 : 20) + 8 + static_cast<int>(engine::kSegHeaderBytes);
  const int fit = mtu_bytes - overhead;
  return static_cast<uint32_t>(std::clamp(fit, 512, static_cast<int>(kMaxDefaultSegmentBytes)));
}

unsigned count_nvidia_gpus(const std::string& pci_devices_dir) {
  DIR* dir = ::opendir(pci_devices_dir.c_str());
  if (dir == nullptr) return 0;
  auto read_hex = [](const std::string& path) -> long {
    std::FILE* f = std::fopen(path.c_str(), "r");
    if (f == nullptr) return -1;
    char text[32] = {};
    const bool ok = std::fgets(text, sizeof text, f) != nullptr;
    std::fclose(f);
    return ok ? std::strtol(text, nullptr, 16) : -1;
  };
  unsigned n = 0;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const std::string dev = pci_devices_dir + "/" + e->d_name;
    if (read_hex(dev + "/vendor") != 0x10de) continue;  // NVIDIA
    const long cls = read_hex(dev + "/class") >> 8;     // base class and subclass
    if (cls == 0x0300 || cls == 0x0302) ++n;            // VGA or 3D controller
  }
  ::closedir(dir);
  return n;
}

LocalRanks local_ranks_from_env(const GetEnvFn& getenv_fn, const std::string& pci_devices_dir) {
  // Ours first, then what the common launchers export: torchrun, Open MPI, MPICH/Hydra.
  for (const char* name :
       {"MEGASCALE_LOCAL_RANKS", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
    const char* text = getenv_fn(name);
    if (text == nullptr || *text == '\0') continue;
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(text, &end, 10);
    if (*end == '\0' && errno == 0 && v >= 1 && v <= kMaxLocalRanks) return {static_cast<unsigned>(v), name};
  }
  const unsigned gpus = count_nvidia_gpus(pci_devices_dir);
  if (gpus > 0) return {gpus, std::to_string(gpus) + " NVIDIA GPUs on this host"};
  return {1, "no launcher variable, no GPU found"};
}

ThreadLayout thread_layout(unsigned usable_cpus, unsigned local_ranks, int lanes_set, int wires_set,
                           int io_set, const std::string& cpus_note) {
  ThreadLayout t;
  local_ranks = std::max(1u, local_ranks);
  t.cpu_share = std::max(1u, usable_cpus / local_ranks);
  t.share_text = std::to_string(usable_cpus) + " usable CPUs" +
                 (cpus_note.empty() ? "" : " (" + cpus_note + ")") + " / " + std::to_string(local_ranks) +
                 (local_ranks == 1 ? " local rank" : " local ranks");
  // NCCL's own busy threads (the rank's main thread and its proxy) keep two CPUs of the share.
  const unsigned budget = t.cpu_share > kNcclBusyThreads ? t.cpu_share - kNcclBusyThreads : 0;
  // One I/O thread per lane socket at most: with the lanes unset, as many lanes as the layout has
  // I/O threads (default_lanes).
  const uint32_t lanes = lanes_set >= 0 ? static_cast<uint32_t>(lanes_set) : kWideIoThreads;
  const uint32_t io_wide = std::min(lanes, kWideIoThreads);
  const uint32_t io_full = std::min(lanes, kMaxDefaultIoThreads);
  if (io_set < 0 && wires_set < 0 && local_ranks >= kHalfShareRanks && t.cpu_share >= kHalfShareMinCpus) {
    // Many ranks' polling threads on one host: half the share spins (kHalfShareRanks).
    t.wires = 2;
    t.io_threads = std::min(io_wide, t.cpu_share / 4 - 1);
    t.lane_per_io_thread = true;
    t.why = t.share_text + " = " + std::to_string(t.cpu_share) + " each, half of it spinning with " +
            std::to_string(local_ranks) + " local ranks: 2 wires x (1 + " + std::to_string(t.io_threads) +
            " I/O threads)";
    return t;
  }
  if (io_set >= 0) {
    t.io_threads = static_cast<uint32_t>(io_set);
  } else if (wires_set >= 0) {
    const unsigned per_wire = budget / static_cast<unsigned>(wires_set);
    t.io_threads = per_wire >= 2 ? std::min<uint32_t>(per_wire - 1, io_wide) : 0;
  } else if (io_wide > io_full && budget >= 2 * (1 + io_wide) + kWideHeadroomCpus) {
    t.io_threads = io_wide;
  } else {
    // I/O threads only where two wires of them fit: with less room, wires of one thread each moved more
    // and made small collectives faster than one wire of 1 + 4 (docs/PERFORMANCE.md, twenty-ninth
    // session), and a rank's connections spread over several wires.
    t.io_threads = budget >= kMaxDefaultWiresWithIoThreads * (1 + io_full) ? io_full : 0;
  }
  if (wires_set >= 0) {
    t.wires = static_cast<uint32_t>(wires_set);
  } else if (t.io_threads == 0) {
    // One thread a wire, which sleeps in epoll when idle: as many as the budget holds, so that with
    // NCCL's two they do not outnumber the share, but at least kMinDefaultWires. 4 ranks on 16 CPUs
    // (budget 2): 2 wires gave 8-28% more than 4 in every round, 3 no more than 4, 1 about half
    // (docs/PERFORMANCE.md, "Wires for a small CPU share").
    t.wires = std::clamp<uint32_t>(budget, kMinDefaultWires, kMaxDefaultWires);
    if (io_set < 0 && budget >= kStripedDefaultWires) {
      // Room for kStripedDefaultWires: that many wires, each comm cut over kDefaultStripes of them, so
      // that a rank's four connections keep every wire busy. 2 ranks on one H200 (a room of 6): 6 x (1
      // + 0) with 4 stripes moved 1.15-1.30x the bus bandwidth of 4 x (1 + 0) by median in four calls,
      // and took 1.07-1.61x the time for collectives of 8 B - 1 MiB (docs/PERFORMANCE.md, thirtieth
      // session): bandwidth, which is most of what a net plugin carries between nodes, bought with
      // small-collective time. Not for larger shares: on 2 x H200 (16 CPUs a rank) 6 x (1 + 0) with 4
      // stripes moved 0.63-0.94x tuned Socket where 2 x (1 + 4) moved 0.91-1.08x.
      t.wires = kStripedDefaultWires;
      t.stripes = kDefaultStripes;
    }
  } else {
    t.wires = std::clamp<uint32_t>(budget / (1 + t.io_threads), 1, kMaxDefaultWiresWithIoThreads);
  }
  t.why = t.share_text + " = " + std::to_string(t.cpu_share) + " each, " + std::to_string(kNcclBusyThreads) +
          " left to NCCL: " + std::to_string(t.wires) + (t.wires == 1 ? " wire" : " wires") + " x (1 + " +
          std::to_string(t.io_threads) + " I/O threads)" +
          (t.stripes > 1 ? ", each comm over " + std::to_string(t.stripes) + " of them" : "");
  return t;
}

uint32_t default_lanes(const ThreadLayout& layout) {
  if (layout.lane_per_io_thread) return layout.io_threads;
  return std::max(kDefaultLanes, layout.io_threads);
}

TimeNs PluginConfig::keepalive_interval_ns() const {
  TimeNs k = std::clamp<TimeNs>(retry_budget_ns / 4, 10 * kNsPerMs, kNsPerSec);
  if (port_closed_fail_ns > 0) k = std::min(k, std::max<TimeNs>(port_closed_fail_ns, 10 * kNsPerMs));
  return k;
}

// MEGASCALE_* variables that megascale's other programs and scripts read, not the plugin, and that may be
// set in a process that loads it (the conformance harness's peer, the null net, the trainer, the netns
// tests, scripts/test.sh). A name ending in '_' stands for every name it begins.
constexpr std::string_view kOtherProgramsVars[] = {"MEGASCALE_CONFORMANCE_PEER", "MEGASCALE_NULL_",
                                                   "MEGASCALE_TRAIN_PROFILE",    "MEGASCALE_NETNS_",
                                                   "MEGASCALE_TEST_STAGES",      "MEGASCALE_FUZZ_SECONDS"};

static bool read_by_other_programs(std::string_view name) {
  return std::any_of(std::begin(kOtherProgramsVars), std::end(kOtherProgramsVars), [&](std::string_view v) {
    return v.back() == '_' ? name.substr(0, v.size()) == v : name == v;
  });
}

static Result<PluginConfig> read_plugin_config(const GetEnvFn& getenv_fn) {
  PluginConfig c;
  auto env = [&](const char* name) -> const char* {
    const char* v = getenv_fn(name);
    return (v != nullptr && *v != '\0') ? v : nullptr;
  };
  auto echo = [&](const char* name, const std::string& value, bool from_env) {
    c.echo.push_back(std::string(name) + "=" + value + (from_env ? " (environment)" : " (default)"));
  };
  // A knob in whole microseconds, lo..hi, into a TimeNs field; echoed in microseconds.
  auto micros = [&](const char* name, long long lo, long long hi, TimeNs& field) -> Status {
    const char* text = env(name);
    if (text != nullptr) {
      auto v = parse_int(name, text, lo, hi);
      if (!v) return v.error();
      field = static_cast<TimeNs>(*v) * kNsPerUs;
    }
    echo(name, std::to_string(field / kNsPerUs), text != nullptr);
    return {};
  };
  // A knob in whole milliseconds, 0..hi, into a TimeNs field; echoed in milliseconds, 0 as `zero_means`.
  auto millis = [&](const char* name, long long hi, const char* zero_means, TimeNs& field) -> Status {
    const char* text = env(name);
    if (text != nullptr) {
      auto v = parse_int(name, text, 0, hi);
      if (!v) return v.error();
      field = static_cast<TimeNs>(*v) * kNsPerMs;
    }
    echo(name, field == 0 ? std::string("0 (") + zero_means + ")" : std::to_string(field / kNsPerMs),
         text != nullptr);
    return {};
  };
  // A 0/1 knob.
  auto flag = [&](const char* name, bool& field) -> Status {
    const char* text = env(name);
    if (text != nullptr) {
      auto v = parse_bool(name, text);
      if (!v) return v.error();
      field = *v;
    }
    echo(name, field ? "1" : "0", text != nullptr);
    return {};
  };

  // MEGASCALE_CC: a built-in preset name or a YAML file.
  const char* cc_text = env("MEGASCALE_CC");
  if (cc_text != nullptr) c.cc_source = cc_text;
  auto cc = cc::resolve_cc_config(c.cc_source);
  if (!cc) return bad("MEGASCALE_CC", c.cc_source.c_str(), cc.error().message);
  c.cc = *cc;
  echo("MEGASCALE_CC", c.cc_source + " -> " + c.cc.name, cc_text != nullptr);
  // MEGASCALE_CC_<SECTION>_<KEY>: one knob of the preset (configs/cc/README.md lists them all).
  std::vector<std::string> overrides;
  auto tuned = cc::apply_cc_env_overrides(c.cc, getenv_fn, &overrides);
  if (!tuned) return make_error(tuned.error().message);
  c.cc = *tuned;
  for (const std::string& o : overrides) c.echo.push_back(o + " (environment)");

  // MEGASCALE_LANES: echoed with the thread layout below, which sets it when unset.
  const char* lanes = env("MEGASCALE_LANES");
  int lanes_set = -1;
  if (lanes != nullptr) {
    auto v = parse_int("MEGASCALE_LANES", lanes, 1, engine::kMaxLanes);
    if (!v) return v.error();
    c.lanes = static_cast<uint32_t>(*v);
    lanes_set = static_cast<int>(*v);
  }

  const char* seg = env("MEGASCALE_SEGMENT_BYTES");
  if (seg != nullptr) {
    auto v = parse_int("MEGASCALE_SEGMENT_BYTES", seg, 64, engine::kMaxSegmentPayload);
    if (!v) return v.error();
    c.segment_bytes = static_cast<uint32_t>(*v);
  }
  echo("MEGASCALE_SEGMENT_BYTES", seg ? std::to_string(c.segment_bytes) : "auto (from each interface's MTU)",
       seg != nullptr);

  const char* budget = env("MEGASCALE_RETRY_BUDGET_S");
  c.retry_budget_ns = c.cc.rto.retry_budget_ns;
  if (budget != nullptr) {
    auto v = parse_seconds("MEGASCALE_RETRY_BUDGET_S", budget, 0.0, 3600.0);
    if (!v) return v.error();
    c.retry_budget_ns = static_cast<TimeNs>(*v * 1e9);
    if (c.retry_budget_ns < kNsPerMs)
      return bad("MEGASCALE_RETRY_BUDGET_S", budget, "must be at least 0.001 s");
  }
  c.cc.rto.retry_budget_ns = c.retry_budget_ns;
  echo("MEGASCALE_RETRY_BUDGET_S", seconds_text(c.retry_budget_ns), budget != nullptr);

  // MEGASCALE_RTO_FLOOR_US: no retransmission timeout is shorter (UdpConfig::min_rto_floor_ns, raised
  // onto the preset's min_rto). Beside NCCL's busy threads a host can stall ACKs for 5-18 ms: with the
  // wire's own 1 ms floor, such hosts ran thousands of timeouts per run, every retransmission a duplicate,
  // and the windows they cut took all-reduce from ~4.5 to 1.0-1.7 GB/s. A 5 ms floor kept them at 0-7
  // and the bandwidth steady; its cost is a later repair of a lost last segment (docs/PERFORMANCE.md,
  // "RTO storms").
  const char* floor = env("MEGASCALE_RTO_FLOOR_US");
  const long long max_rto_us = c.cc.rto.max_rto_ns / kNsPerUs;
  c.rto_floor_ns = std::min(c.rto_floor_ns, c.cc.rto.max_rto_ns);
  if (floor != nullptr) {
    auto v = parse_int("MEGASCALE_RTO_FLOOR_US", floor, 0, max_rto_us);
    if (!v) return make_error(v.error().message + " (the preset's max_rto)");
    c.rto_floor_ns = static_cast<TimeNs>(*v) * kNsPerUs;
  }
  echo("MEGASCALE_RTO_FLOOR_US",
       std::to_string(c.rto_floor_ns / kNsPerUs) + " (timeouts at least " +
           std::to_string(std::max(c.rto_floor_ns, c.cc.rto.min_rto_ns) / kNsPerUs) + " us)",
       floor != nullptr);

  // MEGASCALE_TAIL_PROBE: tail-loss probes (EngineConfig::tail_probe, RACK-TLP). The 5 ms floor above
  // would otherwise be the repair time of every lost last segment: 2-9x the time of collectives of
  // 64 KiB or less under 1% loss.
  if (Status s = flag("MEGASCALE_TAIL_PROBE", c.tail_probe); !s) return s.error();
  if (Status s = micros("MEGASCALE_TAIL_PROBE_MIN_US", 0, 1'000'000, c.tail_probe_min_ns); !s)
    return s.error();

  // MEGASCALE_PAYLOAD_CRC: 0 saves a pass over every payload byte at both ends (the I/O threads' largest
  // cost above the kernel's: docs/PERFORMANCE.md); the header CRC, the UDP checksum and the NIC's FCS
  // still apply. Payloads from a peer that keeps its CRC are checked whatever this says.
  if (Status s = flag("MEGASCALE_PAYLOAD_CRC", c.payload_crc); !s) return s.error();

  const char* tc = env("MEGASCALE_TC");
  if (tc != nullptr) {
    auto v = parse_int("MEGASCALE_TC", tc, 0, 255);
    if (!v) return v.error();
    c.traffic_class = static_cast<int>(*v);
  }
  echo("MEGASCALE_TC",
       tc ? std::to_string(c.traffic_class) + " (DSCP " + std::to_string(c.traffic_class >> 2) + ")"
          : "unset (NCCL's trafficClass, else 0)",
       tc != nullptr);

  const char* ifname = env("MEGASCALE_IFNAME");
  if (ifname != nullptr) c.ifname = ifname;
  echo("MEGASCALE_IFNAME", ifname ? c.ifname : "unset (all but lo/docker*/virbr*; lo if nothing else)",
       ifname != nullptr);

  const char* dir = env("MEGASCALE_STATS_DIR");
  if (dir != nullptr) {
    c.stats_dir = dir;
    struct stat st {};
    if (::stat(dir, &st) != 0 && ::mkdir(dir, 0755) != 0 && errno != EEXIST) {
      return bad("MEGASCALE_STATS_DIR", dir,
                 std::string("cannot create the directory: ") + std::strerror(errno));
    }
    if (::stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
      return bad("MEGASCALE_STATS_DIR", dir, "not a directory");
    if (::access(dir, W_OK) != 0) return bad("MEGASCALE_STATS_DIR", dir, "not writable");
  }
  echo("MEGASCALE_STATS_DIR", dir ? c.stats_dir : "unset (no stats files)", dir != nullptr);

  const char* trace = env("MEGASCALE_TRACE_FILE");
  if (trace != nullptr) {
    c.trace_file = expand_file_pattern(trace, host_name(), static_cast<long>(::getpid()));
    const size_t slash = c.trace_file.rfind('/');
    const std::string trace_dir = slash == std::string::npos ? "."
                                  : slash == 0               ? "/"
                                                             : c.trace_file.substr(0, slash);
    struct stat st {};
    if (::stat(trace_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      return bad("MEGASCALE_TRACE_FILE", trace, "its directory " + trace_dir + " does not exist");
    if (::access(trace_dir.c_str(), W_OK) != 0)
      return bad("MEGASCALE_TRACE_FILE", trace, "its directory " + trace_dir + " is not writable");
    if (std::string(trace).find("%p") == std::string::npos) {
      c.warnings.push_back(std::string("MEGASCALE_TRACE_FILE=") + trace +
                           " has no %p: processes on one host write the same file and the last one wins");
    }
  }
  echo("MEGASCALE_TRACE_FILE", trace ? c.trace_file : "unset (no request timeline)", trace != nullptr);

  const char* interval = env("MEGASCALE_STATS_INTERVAL_S");
  if (interval != nullptr) {
    auto v = parse_seconds("MEGASCALE_STATS_INTERVAL_S", interval, 0.0, 86400.0);
    if (!v) return v.error();
    c.stats_interval_ns = std::max<TimeNs>(static_cast<TimeNs>(*v * 1e9), 10 * kNsPerMs);
  }
  echo("MEGASCALE_STATS_INTERVAL_S", seconds_text(c.stats_interval_ns), interval != nullptr);

  const char* late = env("MEGASCALE_LATE_ACK_WARN_S");
  if (late != nullptr) {
    if (std::string_view(late) == "0") {
      c.late_ack_window_ns = 0;
    } else {
      auto v = parse_seconds("MEGASCALE_LATE_ACK_WARN_S", late, 0.0, 3600.0);
      if (!v) return make_error(v.error().message + " (or 0: no warning)");
      c.late_ack_window_ns = std::max<TimeNs>(static_cast<TimeNs>(*v * 1e9), 10 * kNsPerMs);
    }
  }
  echo("MEGASCALE_LATE_ACK_WARN_S",
       c.late_ack_window_ns == 0
           ? "0 (no late-ACK warning)"
           : seconds_text(c.late_ack_window_ns) + " (WARN when many segments arrive twice)",
       late != nullptr);

  // The thread layout: MEGASCALE_NTHREADS wires per device, each with MEGASCALE_IO_THREADS I/O threads.
  // Unset, they follow the CPUs this process may use and how many ranks share them (thread_layout).
  const char* threads = env("MEGASCALE_NTHREADS");
  int wires_set = -1;
  if (threads != nullptr) {
    auto v = parse_int("MEGASCALE_NTHREADS", threads, 1, 16);
    if (!v) return v.error();
    wires_set = static_cast<int>(*v);
  }
  const char* io_threads = env("MEGASCALE_IO_THREADS");
  int io_set = -1;
  if (io_threads != nullptr) {
    auto v = parse_int("MEGASCALE_IO_THREADS", io_threads, 0, 64);
    if (!v) return v.error();
    io_set = static_cast<int>(*v);
  }
  const char* local_text = env("MEGASCALE_LOCAL_RANKS");
  if (local_text != nullptr) {
    auto v = parse_int("MEGASCALE_LOCAL_RANKS", local_text, 1, kMaxLocalRanks);
    if (!v) return v.error();
  }
  const LocalRanks local = local_ranks_from_env(getenv_fn);
  echo("MEGASCALE_LOCAL_RANKS", std::to_string(local.count) + " (" + local.source + ")",
       local_text != nullptr);
  // Source ports are bound by one wire per device, a port per lane: unset, MEGASCALE_NTHREADS is then
  // 1 and MEGASCALE_LANES kDefaultLanes (the lanes do not follow the layout).
  if (env("MEGASCALE_SOURCE_PORTS") != nullptr) {
    if (wires_set < 0) wires_set = 1;
    if (lanes_set < 0) lanes_set = static_cast<int>(kDefaultLanes);
  }
  const wire::CpuBudget cpus = wire::cpu_budget();
  const ThreadLayout layout =
      thread_layout(cpus.usable, local.count, lanes_set, wires_set, io_set, cpus.note());
  c.threads_per_device = layout.wires;
  c.io_threads = layout.io_threads;
  if (lanes_set < 0) c.lanes = default_lanes(layout);
  echo("MEGASCALE_LANES",
       std::to_string(c.lanes) + (lanes != nullptr          ? ""
                                  : c.lanes > kDefaultLanes ? " (one per I/O thread)"
                                                            : ""),
       lanes != nullptr);
  echo("MEGASCALE_NTHREADS",
       std::to_string(c.threads_per_device) + (threads != nullptr ? "" : " (" + layout.why + ")"),
       threads != nullptr);
  echo("MEGASCALE_IO_THREADS",
       std::to_string(c.io_threads) + (io_threads != nullptr ? "" : " (" + layout.why + ")"),
       io_threads != nullptr);
  // Each wire's progress thread and its I/O threads all poll while traffic flows. With fewer CPUs than
  // that they take turns (they yield in rounds that find nothing) and each packet waits for its thread's
  // turn: `megascale plugin-check --case throughput` on 2 CPUs, MEGASCALE_NTHREADS=1, gave 0.44 GB/s
  // with 2 I/O threads against 0.67 with none (before the yields, 0.01-0.11, and 4-5 ms a message);
  // with 2 ranks on 16 CPUs, 4 x 3 threads each gave a third of what 1 x 5 gave (docs/PERFORMANCE.md).
  const uint64_t spinning = static_cast<uint64_t>(c.threads_per_device) * (1 + c.io_threads);
  if ((threads != nullptr || io_threads != nullptr) && c.io_threads > 0 && spinning > layout.cpu_share) {
    c.warnings.push_back(
        std::string(io_threads != nullptr ? "MEGASCALE_IO_THREADS=" + std::string(io_threads)
                                          : "MEGASCALE_NTHREADS=" + std::string(threads)) +
        ": " + std::to_string(spinning) +
        " wire threads (MEGASCALE_NTHREADS=" + std::to_string(c.threads_per_device) + " x (1 + " +
        std::to_string(c.io_threads) + " I/O threads)) per device on " + std::to_string(layout.cpu_share) +
        " usable CPUs (" + layout.share_text +
        "); the threads take turns on the CPUs and each packet waits for its thread's turn, so goodput "
        "falls. Unset both (the default fits the CPUs) or give the process more CPUs");
  }

  // MEGASCALE_SOURCE_PORTS: one wire's pool binds them, so they need one wire per device (several
  // wires cannot bind the same ports, and wires left on ephemeral ports would carry a share of the
  // connections off the mapping without a word); and one port per lane, as the mapping chose them.
  const char* sports = env("MEGASCALE_SOURCE_PORTS");
  if (sports != nullptr) {
    auto v = wire::parse_source_ports(sports);
    if (!v) return bad("MEGASCALE_SOURCE_PORTS", sports, v.error().message);
    if (v->size() != c.lanes) {
      return bad("MEGASCALE_SOURCE_PORTS", sports,
                 std::to_string(v->size()) + " ports for MEGASCALE_LANES=" + std::to_string(c.lanes) +
                     ": give one port per lane");
    }
    if (c.threads_per_device != 1) {
      return bad("MEGASCALE_SOURCE_PORTS", sports,
                 "needs MEGASCALE_NTHREADS=1 (now " + std::to_string(c.threads_per_device) +
                     "): each wire of a device would bind the same ports");
    }
    c.source_ports = *v;
  }
  echo("MEGASCALE_SOURCE_PORTS", sports ? std::string(sports) : "unset (ephemeral ports)", sports != nullptr);

  if (Status s = millis("MEGASCALE_PORT_CLOSED_MS", 3'600'000,
                        "off: a vanished peer fails after the retry budget", c.port_closed_fail_ns);
      !s)
    return s.error();

  // MEGASCALE_STRIPES, MEGASCALE_STRIPE_BYTES: how a comm's messages are cut over its wires.
  const char* stripes = env("MEGASCALE_STRIPES");
  c.stripes = layout.stripes;
  if (stripes != nullptr) {
    auto v = parse_int("MEGASCALE_STRIPES", stripes, 1, kMaxStripes);
    if (!v) return v.error();
    c.stripes = static_cast<uint32_t>(*v);
    if (c.stripes > c.threads_per_device) {
      c.warnings.push_back("MEGASCALE_STRIPES=" + std::string(stripes) + ": more stripes than the " +
                           std::to_string(c.threads_per_device) +
                           " wires per device (MEGASCALE_NTHREADS); stripes share wires, and a wire's "
                           "thread carries each of them in turn");
    }
  }
  echo("MEGASCALE_STRIPES",
       std::to_string(c.stripes) + (stripes != nullptr || c.stripes == 1 ? "" : " (" + layout.why + ")"),
       stripes != nullptr);
  const char* stripe_bytes = env("MEGASCALE_STRIPE_BYTES");
  if (stripe_bytes != nullptr) {
    auto v = parse_int("MEGASCALE_STRIPE_BYTES", stripe_bytes, kMinStripeBytes, 1LL << 30);
    if (!v) return v.error();
    c.stripe_bytes = static_cast<uint64_t>(*v);
  } else {
    c.stripe_bytes = (kStripedMessageBytes / c.stripes + 4095) / 4096 * 4096;
  }
  echo("MEGASCALE_STRIPE_BYTES",
       std::to_string(c.stripe_bytes) + (stripe_bytes != nullptr ? "" : " (1 MiB / MEGASCALE_STRIPES)"),
       stripe_bytes != nullptr);

  if (Status s = flag("MEGASCALE_BUSY_POLL", c.busy_poll); !s) return s.error();
  if (Status s = micros("MEGASCALE_IDLE_POLL_US", 0, 1'000'000, c.idle_poll_ns); !s) return s.error();
  if (Status s = micros("MEGASCALE_PENDING_POLL_US", 0, 10'000'000, c.pending_poll_ns); !s) return s.error();
  if (Status s = micros("MEGASCALE_STALL_US", 0, 1'000'000, c.stall_ns); !s) return s.error();

  const char* gdr = env("MEGASCALE_GDR_COPY");
  if (gdr != nullptr) {
    const std::string v = gdr;
    if (v == "0") {
      c.gdr_copy = GdrCopyMode::kOff;
    } else if (v == "1") {
      c.gdr_copy = GdrCopyMode::kCuda;
    } else if (v == "emulate") {
      c.gdr_copy = GdrCopyMode::kEmulate;
    } else {
      return bad("MEGASCALE_GDR_COPY", gdr, "must be 0, 1 or emulate");
    }
  }
  echo("MEGASCALE_GDR_COPY",
       c.gdr_copy == GdrCopyMode::kOff    ? "0 (host memory only)"
       : c.gdr_copy == GdrCopyMode::kCuda ? "1 (GPU buffers through pinned host shadows, the copy engines)"
                                          : "emulate (\"GPU\" buffers are host memory, copied by the CPU)",
       gdr != nullptr);
  if (Status s =
          millis("MEGASCALE_GDR_COPY_TIMEOUT_MS", 3'600'000,
                 "a GPU buffer copy is waited for however long it takes", c.gdr_copy_limits.timeout_ns);
      !s)
    return s.error();
  const char* copy_stall = env("MEGASCALE_FAULT_COPY_STALL");
  if (copy_stall != nullptr) {
    auto v = parse_int("MEGASCALE_FAULT_COPY_STALL", copy_stall, 0, 1LL << 40);
    if (!v) return v.error();
    c.gdr_copy_limits.stall_after = static_cast<uint64_t>(*v);
  }
  if (c.gdr_copy_limits.stall_after > 0 && c.gdr_copy == GdrCopyMode::kOff) {
    c.warnings.push_back("MEGASCALE_FAULT_COPY_STALL=" + std::string(copy_stall) +
                         " has no effect: MEGASCALE_GDR_COPY is 0, so no GPU buffer is copied");
  }
  echo("MEGASCALE_FAULT_COPY_STALL",
       c.gdr_copy_limits.stall_after == 0 ? std::string("0 (off)")
                                          : std::to_string(c.gdr_copy_limits.stall_after) +
                                                " (every GPU buffer copy after these is held back)",
       copy_stall != nullptr);

  // MEGASCALE_FAULT_*: the wire validates and names the variable itself.
  auto fault = wire::fault_config_from_env(wire::FaultConfig{}, getenv_fn);
  if (!fault) return fault.error();
  c.fault = *fault;
  if (c.fault.enabled()) {
    char text[256];
    std::snprintf(text, sizeof text,
                  "drop %g dup %g reorder %g delay %g (%lld us) corrupt %g ce %g seed %llu", c.fault.drop,
                  c.fault.duplicate, c.fault.reorder, c.fault.delay,
                  static_cast<long long>(c.fault.delay_ns / kNsPerUs), c.fault.corrupt, c.fault.mark_ce,
                  static_cast<unsigned long long>(c.fault.seed));
    echo("MEGASCALE_FAULT_*", text, true);
  } else {
    echo("MEGASCALE_FAULT_*", "off", false);
  }

  if (Status s = cc::validate_cc_config(c.cc, "MEGASCALE_CC=" + c.cc_source); !s) {
    return make_error(s.error().message);
  }
  for (const std::string& unread : cc::unread_settings(c.cc)) {
    c.warnings.push_back("MEGASCALE_CC=" + c.cc_source + ": " + unread);
  }
  return c;
}

std::string closest_name(const std::string& name, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::numeric_limits<size_t>::max();
  std::vector<size_t> row(name.size() + 1);
  for (const std::string& c : candidates) {
    // Levenshtein distance, one row at a time.
    for (size_t i = 0; i <= name.size(); ++i) row[i] = i;
    for (size_t j = 1; j <= c.size(); ++j) {
      size_t diagonal = row[0];
      row[0] = j;
      for (size_t i = 1; i <= name.size(); ++i) {
        const size_t above = row[i];
        row[i] = std::min({row[i] + 1, row[i - 1] + 1, diagonal + (name[i - 1] == c[j - 1] ? 0 : 1)});
        diagonal = above;
      }
    }
    if (row[name.size()] < best_distance) {
      best_distance = row[name.size()];
      best = c;
    }
  }
  return best;
}

std::vector<std::string> megascale_env_names(char** envp) {
  std::vector<std::string> names;
  for (char** e = envp; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    if (entry.rfind("MEGASCALE_", 0) != 0) continue;
    names.emplace_back(entry.substr(0, entry.find('=')));
  }
  return names;
}

Result<PluginConfig> load_plugin_config(const GetEnvFn& getenv_fn,
                                        const std::vector<std::string>& set_names) {
  // Every name the readers ask for is a knob; every read is unconditional (a reader that stops early
  // stops on an error, which fails init anyway).
  std::set<std::string> asked;
  auto recording = [&](const char* name) -> const char* {
    asked.insert(name);
    return getenv_fn(name);
  };
  Result<PluginConfig> c = read_plugin_config(recording);
  if (!c) return c;
  std::vector<std::string> knobs;
  for (const std::string& name : asked) {
    if (name.rfind("MEGASCALE_", 0) == 0) knobs.push_back(name);
  }
  for (const std::string& name : std::set<std::string>(set_names.begin(), set_names.end())) {
    if (name.rfind("MEGASCALE_", 0) != 0 || asked.count(name) != 0) continue;
    if (read_by_other_programs(name)) continue;
    c->warnings.push_back(name + " is not a knob of the plugin and is ignored; did you mean " +
                          closest_name(name, knobs) + "? (docs/CONFIG.md lists them all)");
  }
  return c;
}

}  // namespace megascale::nccl
