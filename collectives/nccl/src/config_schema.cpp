// The plugin's knob table and its readers (see config_schema.h).
#include "config_schema.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

#include "megascale/congestion/config.h"
#include "megascale/engine/config.h"
#include "megascale/engine/packet.h"
#include "megascale/wire/udp.h"

namespace megascale::nccl::schema {

struct Reader {
  PluginConfig& c;
  const EnvLookup& getenv_fn;
  LocalRanks local;  // MEGASCALE_LOCAL_RANKS, for the layout

  // The variable's text; nullptr when unset or empty.
  const char* env(std::string_view name) const {
    const char* v = getenv_fn(std::string(name).c_str());
    return (v != nullptr && *v != '\0') ? v : nullptr;
  }
  void set(const Knob& k, std::string value, const char* text, std::string note = {}) {
    c.settings.push_back(
        {std::string(k.name), std::move(value), text ? "environment" : "default", std::move(note)});
  }
};

namespace {

Error bad(std::string_view name, const char* value, const std::string& why) {
  return make_error(std::string(name) + "=" + value + ": " + why);
}

// A whole number in [lo, hi]; the text must be nothing but the number.
Result<long long> parse_int(std::string_view name, const char* text, long long lo, long long hi) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || errno != 0 || v < lo || v > hi) {
    return bad(name, text, "must be an integer in " + std::to_string(lo) + ".." + std::to_string(hi));
  }
  return v;
}

Result<double> parse_seconds(std::string_view name, const char* text, double hi) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || errno != 0 || !std::isfinite(v) || v <= 0 || v > hi) {
    char range[64];
    std::snprintf(range, sizeof range, "must be a number of seconds in (0, %g]", hi);
    return bad(name, text, range);
  }
  return v;
}

std::string seconds_text(TimeNs ns) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", static_cast<double>(ns) / 1e9);
  return text;
}

// A kInteger row in the row's range; `scale` converts its unit into the field's.
template <class T>
Status read_integer(Reader& r, const Knob& k, T& field, long long scale, const std::string& note = {}) {
  const char* text = r.env(k.name);
  if (text != nullptr) {
    auto v = parse_int(k.name, text, k.lo, k.hi);
    if (!v) return v.error();
    field = static_cast<T>(*v * scale);
  }
  r.set(k, std::to_string(static_cast<long long>(field) / scale), text, note);
  return {};
}

template <TimeNs PluginConfig::*F>
Status read_us(Reader& r, const Knob& k) {
  return read_integer(r, k, r.c.*F, kNsPerUs);
}

// Milliseconds, 0 meaning `zero_means`.
Status read_ms(Reader& r, const Knob& k, TimeNs& field, const char* zero_means) {
  Status s = read_integer(r, k, field, kNsPerMs);
  if (s && field == 0) r.c.settings.back().note = zero_means;
  return s;
}

template <bool PluginConfig::*F>
Status read_flag(Reader& r, const Knob& k) {
  const char* text = r.env(k.name);
  if (text != nullptr) {
    const std::string t(text);
    if (t == "1" || t == "true" || t == "yes" || t == "on") {
      r.c.*F = true;
    } else if (t == "0" || t == "false" || t == "no" || t == "off") {
      r.c.*F = false;
    } else {
      return bad(k.name, text, "must be 0 or 1");
    }
  }
  r.set(k, r.c.*F ? "1" : "0", text);
  return {};
}

Status read_wire(Reader& r, const Knob& k) {
  const char* text = r.env(k.name);
  auto kind = parse_wire_kind(text);
  if (!kind) return kind.error();
  r.c.wire = *kind;
  r.set(k, std::string(to_string(*kind)), text,
        *kind == WireKind::kAuto ? "verbs-ud where an RDMA port is usable, else udp" : "");
  return {};
}

// The GID selection on verbs (wire/verbs gid.h); read whatever the wire, so a bad value fails init.
Status read_ib(Reader& r, const Knob& k) {
#if MEGASCALE_NCCL_VERBS
  bool set = false;
  auto sel = wire::verbs::gid_selector_from_env([&](const char* name) -> const char* {
    const char* v = r.env(name);
    set |= v != nullptr;
    return v;
  });
  if (!sel) return sel.error();
  r.c.gid_selector = *sel;
  std::string value = sel->index ? "GID index " + std::to_string(*sel->index)
                                 : std::string(sel->ipv6 ? "AF_INET6" : "AF_INET") + ", RoCE v" +
                                       (sel->roce_version == wire::verbs::GidType::kRoceV1 ? "1" : "2") +
                                       (sel->range_prefix_len > 0 ? ", a range" : "");
  r.c.settings.push_back(
      {std::string(k.name), std::move(value), set ? "environment" : "default", "the GID a verbs wire uses"});
#else
  (void)r;
  (void)k;
#endif
  return {};
}

Status read_cc(Reader& r, const Knob& k) {
  const char* text = r.env(k.name);
  if (text != nullptr) r.c.cc_source = text;
  auto cc = cc::resolve_cc_config(r.c.cc_source);
  if (!cc) return bad(k.name, r.c.cc_source.c_str(), cc.error().message);
  r.c.cc = *cc;
  r.set(k, r.c.cc_source, text, "preset " + r.c.cc.name);
  return {};
}

Status read_cc_keys(Reader& r, const Knob&) {
  std::vector<std::string> applied;  // "MEGASCALE_CC_SWIFT_BETA=0.5"
  auto tuned = cc::apply_cc_env_overrides(r.c.cc, r.getenv_fn, &applied);
  if (!tuned) return make_error(tuned.error().message);
  r.c.cc = *tuned;
  for (const std::string& a : applied) {
    const size_t eq = a.find('=');
    r.c.settings.push_back(
        {a.substr(0, eq), eq == std::string::npos ? "" : a.substr(eq + 1), "environment", ""});
  }
  return {};
}

Status read_segment(Reader& r, const Knob& k) {
  Status s = read_integer(r, k, r.c.segment_bytes, 1);
  if (s && r.c.segment_bytes == 0) {
    r.c.settings.back().value = "auto";
    r.c.settings.back().note = "from each interface's MTU";
  }
  return s;
}

Status read_retry_budget(Reader& r, const Knob& k) {
  const char* text = r.env(k.name);
  r.c.retry_budget_ns = r.c.cc.rto.retry_budget_ns;
  if (text != nullptr) {
    auto v = parse_seconds(k.name, text, 3600.0);
    if (!v) return v.error();
    r.c.retry_budget_ns = static_cast<TimeNs>(*v * 1e9);
    if (r.c.retry_budget_ns < kNsPerMs) return bad(k.name, text, "must be at least 0.001 s");
  }
  r.c.cc.rto.retry_budget_ns = r.c.retry_budget_ns;
  r.set(k, seconds_text(r.c.retry_budget_ns), text);
  return {};
}

// The floor is raised onto the preset's min_rto and may not pass its max_rto.
Status read_rto_floor(Reader& r, const Knob& k) {
  const char* text = r.env(k.name);
  r.c.rto_floor_ns = std::min(r.c.rto_floor_ns, r.c.cc.rto.max_rto_ns);
  if (text != nullptr) {
    auto v = parse_int(k.name, text, 0, r.c.cc.rto.max_rto_ns / kNsPerUs);
    if (!v) return make_error(v.error().message + " (the preset's max_rto)");
    r.c.rto_floor_ns = static_cast<TimeNs>(*v) * kNsPerUs;
  }
  r.set(k, std::to_string(r.c.rto_floor_ns / kNsPerUs), text,
        "timeouts at least " + std::to_string(std::max(r.c.rto_floor_ns, r.c.cc.rto.min_rto_ns) / kNsPerUs) +
            " us");
  return {};
}

Status read_tc(Reader& r, const Knob& k) {
  Status s = read_integer(r, k, r.c.traffic_class, 1);
  if (!s) return s;
  Setting& out = r.c.settings.back();
  if (r.c.traffic_class < 0) {
    out.value = "unset";
    out.note = "NCCL's trafficClass, else 0";
  } else {
    out.note = "DSCP " + std::to_string(r.c.traffic_class >> 2);
  }
  return s;
}

Status read_ifname(Reader& r, const Knob& k) {
  const char* text = r.env(k.name);
  if (text != nullptr) r.c.ifname = text;
  r.set(k, text ? r.c.ifname : "unset", text, text ? "" : "all but lo/docker*/virbr*; lo if nothing else");
  return {};
}

Status read_stats_dir(Reader& r, const Knob& k) {
  const char* dir = r.env(k.name);
  if (dir != nullptr) {
    r.c.stats_dir = dir;
    struct stat st {};
    if (::stat(dir, &st) != 0 && ::mkdir(dir, 0755) != 0 && errno != EEXIST) {
      return bad(k.name, dir, std::string("cannot create the directory: ") + std::strerror(errno));
    }
    if (::stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return bad(k.name, dir, "not a directory");
    if (::access(dir, W_OK) != 0) return bad(k.name, dir, "not writable");
  }
  r.set(k, dir ? r.c.stats_dir : "unset", dir, dir ? "" : "no stats files");
  return {};
}

Status read_trace_file(Reader& r, const Knob& k) {
  const char* trace = r.env(k.name);
  if (trace != nullptr) {
    r.c.trace_file = expand_file_pattern(trace, host_name(), static_cast<long>(::getpid()));
    const size_t slash = r.c.trace_file.rfind('/');
    const std::string dir = slash == std::string::npos ? "."
                            : slash == 0               ? "/"
                                                       : r.c.trace_file.substr(0, slash);
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      return bad(k.name, trace, "its directory " + dir + " does not exist");
    if (::access(dir.c_str(), W_OK) != 0)
      return bad(k.name, trace, "its directory " + dir + " is not writable");
    if (std::string(trace).find("%p") == std::string::npos) {
      r.c.warnings.push_back(std::string(k.name) + "=" + trace +
                             " has no %p: processes on one host write the same file and the last one wins");
    }
  }
  r.set(k, trace ? r.c.trace_file : "unset", trace, trace ? "" : "no request timeline");
  return {};
}

Status read_stats_interval(Reader& r, const Knob& k) {
  const char* text = r.env(k.name);
  if (text != nullptr) {
    auto v = parse_seconds(k.name, text, 86400.0);
    if (!v) return v.error();
    r.c.stats_interval_ns = std::max<TimeNs>(static_cast<TimeNs>(*v * 1e9), 10 * kNsPerMs);
  }
  r.set(k, seconds_text(r.c.stats_interval_ns), text);
  return {};
}

Status read_late_ack(Reader& r, const Knob& k) {
  const char* text = r.env(k.name);
  if (text != nullptr) {
    if (std::string_view(text) == "0") {
      r.c.late_ack_window_ns = 0;
    } else {
      auto v = parse_seconds(k.name, text, 3600.0);
      if (!v) return make_error(v.error().message + " (or 0: no warning)");
      r.c.late_ack_window_ns = std::max<TimeNs>(static_cast<TimeNs>(*v * 1e9), 10 * kNsPerMs);
    }
  }
  const bool off = r.c.late_ack_window_ns == 0;
  r.set(k, off ? "0" : seconds_text(r.c.late_ack_window_ns), text,
        off ? "no late-ACK warning" : "WARN when many segments arrive twice");
  return {};
}

Status read_local_ranks(Reader& r, const Knob& k) {
  const char* text = r.env(k.name);
  if (text != nullptr) {
    auto v = parse_int(k.name, text, k.lo, k.hi);
    if (!v) return v.error();
  }
  r.local = local_ranks_from_env(r.getenv_fn);
  r.set(k, std::to_string(r.local.count), text, r.local.source);
  return {};
}

// The keys given are kept and the rest fitted by the rule (layout.h); MEGASCALE_SOURCE_PORTS, bound by
// one wire's pool, a port per lane, makes the unset wires 1 and the unset lanes kDefaultLanes.
Status read_layout(Reader& r, const Knob& k) {
  const char* text = r.env(k.name);
  auto req = parse_layout(text ? text : "");
  if (!req) return req.error();
  if (r.env("MEGASCALE_SOURCE_PORTS") != nullptr) {
    if (!req->wires) req->wires = 1;
    if (!req->lanes) req->lanes = kDefaultLanes;
  }
  const wire::CpuBudget cpus = wire::cpu_budget();
  const LayoutChoice choice = resolve_layout(*req, cpus.usable, r.local.count, cpus.note());
  r.c.layout = choice.layout;
  r.set(k, r.c.layout.text(), text,
        (text ? "given: " + std::string(text) + "; rest auto: " : "auto: ") + choice.why);
  const Layout& t = r.c.layout;
  // Each wire's progress thread and its I/O threads all poll while traffic flows: with fewer CPUs than
  // that they take turns and each packet waits for its thread's turn.
  const uint64_t spinning = uint64_t{t.wires} * (1 + t.io_threads);
  if ((req->wires || req->io_threads) && t.io_threads > 0 && spinning > choice.cpu_share) {
    r.c.warnings.push_back(
        std::string(k.name) + "=" + text + ": " + std::to_string(spinning) + " wire threads (wires=" +
        std::to_string(t.wires) + " x (1 + io_threads=" + std::to_string(t.io_threads) + ")) per device on " +
        std::to_string(choice.cpu_share) + " usable CPUs (" + choice.share_text +
        "); the threads take turns on the CPUs and each packet waits for its thread's turn, so "
        "goodput falls. Leave wires and io_threads out (the rule fits the CPUs) or give the "
        "process more CPUs");
  }
  if (req->stripes && t.stripes > t.wires) {
    r.c.warnings.push_back(
        std::string(k.name) + "=" + text + ": more stripes than the " + std::to_string(t.wires) +
        " wires per device; stripes share wires, and a wire's thread carries each of them in "
        "turn");
  }
  return {};
}

// One wire's pool binds the ports, so they need one wire per device (several wires cannot bind the same
// ports, and wires left on ephemeral ports would carry a share of the connections off the mapping), and
// one port per lane, as the mapping chose them.
Status read_source_ports(Reader& r, const Knob& k) {
  const char* text = r.env(k.name);
  if (text != nullptr) {
    auto v = wire::parse_source_ports(text);
    if (!v) return bad(k.name, text, v.error().message);
    if (v->size() != r.c.layout.lanes) {
      return bad(k.name, text,
                 std::to_string(v->size()) + " ports for MEGASCALE_LAYOUT lanes=" +
                     std::to_string(r.c.layout.lanes) + ": give one port per lane");
    }
    if (r.c.layout.wires != 1) {
      return bad(k.name, text,
                 "needs MEGASCALE_LAYOUT wires=1 (now " + std::to_string(r.c.layout.wires) +
                     "): each wire of a device would bind the same ports");
    }
    r.c.source_ports = *v;
  }
  r.set(k, text ? text : "unset", text, text ? "" : "ephemeral ports");
  return {};
}

Status read_gdr_copy(Reader& r, const Knob& k) {
  const char* text = r.env(k.name);
  if (text != nullptr) {
    const std::string v = text;
    if (v == "0") {
      r.c.gdr_copy = GdrCopyMode::kOff;
    } else if (v == "1") {
      r.c.gdr_copy = GdrCopyMode::kCuda;
    } else if (v == "emulate") {
      r.c.gdr_copy = GdrCopyMode::kEmulate;
    } else {
      return bad(k.name, text, "must be 0, 1 or emulate");
    }
  }
  const GdrCopyMode m = r.c.gdr_copy;
  r.set(k,
        m == GdrCopyMode::kOff    ? "0"
        : m == GdrCopyMode::kCuda ? "1"
                                  : "emulate",
        text,
        m == GdrCopyMode::kOff    ? "host memory only"
        : m == GdrCopyMode::kCuda ? "GPU buffers through pinned host shadows, the copy engines"
                                  : "\"GPU\" buffers are host memory, copied by the CPU");
  return {};
}

Status read_copy_stall(Reader& r, const Knob& k) {
  uint64_t& after = r.c.gdr_copy_limits.stall_after;
  Status s = read_integer(r, k, after, 1);
  if (!s) return s;
  Setting& out = r.c.settings.back();
  out.note = after == 0 ? "off" : "every GPU buffer copy after these is held back";
  if (after > 0 && r.c.gdr_copy == GdrCopyMode::kOff) {
    r.c.warnings.push_back(std::string(k.name) + "=" + out.value +
                           " has no effect: MEGASCALE_GDR_COPY is 0, so no GPU buffer is copied");
  }
  return s;
}

Status read_fault(Reader& r, const Knob& k) {
  auto fault = wire::fault_config_from_env(wire::FaultConfig{}, r.getenv_fn);
  if (!fault) return fault.error();
  r.c.fault = *fault;
  const wire::FaultConfig& f = r.c.fault;
  if (!f.enabled()) {
    r.c.settings.push_back({std::string(k.name), "off", "default", ""});
    return {};
  }
  char text[256];
  std::snprintf(text, sizeof text, "drop %g dup %g reorder %g delay %g (%lld us) corrupt %g ce %g seed %llu",
                f.drop, f.duplicate, f.reorder, f.delay, static_cast<long long>(f.delay_ns / kNsPerUs),
                f.corrupt, f.mark_ce, static_cast<unsigned long long>(f.seed));
  r.c.settings.push_back({std::string(k.name), text, "environment", ""});
  return {};
}

Status read_replaced(Reader& r, const Knob& k) {
  if (r.env(k.name) == nullptr) return {};
  return make_error(std::string(k.name) + " is replaced by MEGASCALE_LAYOUT (e.g. MEGASCALE_LAYOUT=" +
                    std::string(k.allowed) + ")");
}

Status read_port_closed(Reader& r, const Knob& k) {
  return read_ms(r, k, r.c.port_closed_fail_ns, "off: a vanished peer fails after the retry budget");
}

Status read_copy_timeout(Reader& r, const Knob& k) {
  return read_ms(r, k, r.c.gdr_copy_limits.timeout_ns,
                 "a GPU buffer copy is waited for however long it takes");
}

}  // namespace

std::string_view type_name(Type type) {
  switch (type) {
    case Type::kInteger:
      return "integer";
    case Type::kFlag:
      return "0 or 1";
    case Type::kSeconds:
      return "seconds";
    case Type::kChoice:
      return "choice";
    case Type::kText:
      return "text";
    case Type::kLayout:
      return "key=value list";
    case Type::kFamily:
      return "family";
    case Type::kReplaced:
      return "refused";
  }
  return "?";
}

// clang-format off
const std::vector<Knob>& plugin_knobs() {
  static const std::vector<Knob> knobs = {
    // The replaced layout variables come first: one of them set fails init before anything else is read.
    {"MEGASCALE_NTHREADS", Type::kReplaced, "", "", "wires=4", "Wires per device: now MEGASCALE_LAYOUT's `wires`.", "", 0, 0, read_replaced},
    {"MEGASCALE_IO_THREADS", Type::kReplaced, "", "", "io_threads=2", "I/O threads per wire: now MEGASCALE_LAYOUT's `io_threads`.", "", 0, 0, read_replaced},
    {"MEGASCALE_LANES", Type::kReplaced, "", "", "lanes=4", "Lanes per connection: now MEGASCALE_LAYOUT's `lanes`.", "", 0, 0, read_replaced},
    {"MEGASCALE_STRIPES", Type::kReplaced, "", "", "stripes=2", "Stripes per comm: now MEGASCALE_LAYOUT's `stripes`.", "", 0, 0, read_replaced},
    {"MEGASCALE_STRIPE_BYTES", Type::kReplaced, "", "", "stripe_bytes=512K", "A stripe's part of a message: now MEGASCALE_LAYOUT's `stripe_bytes`.", "", 0, 0, read_replaced},

    {"MEGASCALE_WIRE", Type::kChoice, "", "auto", "auto, udp, verbs-ud, verbs-rc",
     "The wire under the engine: auto takes verbs-ud where an RDMA device has an ACTIVE RoCE port with a GID matching MEGASCALE_IB_*, else udp.", "wire", 0, 0, read_wire},
    {"MEGASCALE_IB_*", Type::kFamily, "index, family, CIDR, version", "RoCE v2, IPv4", "`_GID_INDEX`, `_ADDR_FAMILY` (AF_INET, AF_INET6), `_ADDR_RANGE`, `_ROCE_VERSION_NUM` (1, 2)",
     "The GID a verbs wire uses, as NCCL_IB_* chooses it (collectives/wire/verbs, gid.h).", "gid_selector", 0, 0, read_ib},
    {"MEGASCALE_CC", Type::kText, "preset or path", "hybrid", "a built-in preset (fixed, swift, dcqcn-paper, dcqcn-nic, hybrid) or a YAML file",
     "The congestion control, RTO and pacer preset every lane runs.", "cc_source, cc", 0, 0, read_cc},
    {"MEGASCALE_CC_*", Type::kFamily, "the key's", "the preset's", "the key's range (table above)",
     "One key of the preset, `MEGASCALE_CC_<SECTION>_<KEY>` as in the congestion-control table, applied on top of MEGASCALE_CC.", "cc", 0, 0, read_cc_keys},
    {"MEGASCALE_SEGMENT_BYTES", Type::kInteger, "bytes", "auto", "",
     "Payload per segment; auto is the interface MTU less IP, UDP and engine headers, within 512..61440.", "segment_bytes", 64, engine::kMaxSegmentPayload, read_segment},
    {"MEGASCALE_RETRY_BUDGET_S", Type::kSeconds, "s", "the preset's rto.retry_budget_s (30)", "(0, 3600], at least 0.001",
     "A peer silent this long fails its connections (ncclRemoteError), and a connect gives up after it.", "retry_budget_ns, cc.rto.retry_budget_ns", 0, 0, read_retry_budget},
    {"MEGASCALE_RTO_FLOOR_US", Type::kInteger, "us", "5000", "0..the preset's max_rto",
     "No retransmission timeout is shorter, so that ACKs a busy host delays do not cause spurious retransmissions.", "rto_floor_ns", 0, 0, read_rto_floor},
    {"MEGASCALE_TAIL_PROBE", Type::kFlag, "", "1", "0, 1",
     "A lost last segment is probed for after max(2 x SRTT, MEGASCALE_TAIL_PROBE_MIN_US) instead of waiting for the RTO.", "tail_probe", 0, 0, read_flag<&PluginConfig::tail_probe>},
    {"MEGASCALE_TAIL_PROBE_MIN_US", Type::kInteger, "us", "1000", "",
     "The tail probe's timeout is at least this; 0 leaves 2 x SRTT alone, which probes at every ACK stall.", "tail_probe_min_ns", 0, 1'000'000, read_us<&PluginConfig::tail_probe_min_ns>},
    {"MEGASCALE_PAYLOAD_CRC", Type::kFlag, "", "1", "0, 1",
     "CRC32C over every payload this rank sends; 0 saves a pass over the bytes where the UDP checksum and the NIC's FCS suffice.", "payload_crc", 0, 0, read_flag<&PluginConfig::payload_crc>},
    {"MEGASCALE_TC", Type::kInteger, "traffic class byte", "unset", "",
     "The IP traffic class (DSCP = TC >> 2); unset takes NCCL's trafficClass, else 0.", "traffic_class", 0, 255, read_tc},
    {"MEGASCALE_IFNAME", Type::kText, "interface list", "unset", "prefixes as `eth,ib`, `^` to exclude, `=` for exact names",
     "The interfaces exposed as NCCL devices; unset, all that are up but lo/docker*/virbr*, and lo when nothing else.", "ifname", 0, 0, read_ifname},
    {"MEGASCALE_STATS_DIR", Type::kText, "directory", "unset", "a writable directory (created if missing)",
     "Where per-connection counters go: `megascale-nccl-HOST-rankN.jsonl` (a log, appended) and `.prom` (a Prometheus textfile, removed at exit), N the launcher's rank, else `procK` (collectives/nccl/README.md, Stats); unset, nowhere.", "stats_dir", 0, 0, read_stats_dir},
    {"MEGASCALE_TRACE_FILE", Type::kText, "file name", "unset", "`%h` = host, `%p` = pid; its directory must exist and be writable",
     "Where the request timeline goes as Chrome trace JSON (Perfetto); unset, nowhere.", "trace_file", 0, 0, read_trace_file},
    {"MEGASCALE_STATS_INTERVAL_S", Type::kSeconds, "s", "5", "(0, 86400], at least 0.01",
     "How often the stats files are rewritten.", "stats_interval_ns", 0, 0, read_stats_interval},
    {"MEGASCALE_STATS_KEEP_PROM", Type::kFlag, "", "0", "0, 1",
     "1 leaves the Prometheus textfile at exit with its last values and `megascale_nccl_up 0`, for a collector that must see a job shorter than its scrape interval (the rank's next process replaces it); 0 removes it.", "stats_keep_prom", 0, 0, read_flag<&PluginConfig::stats_keep_prom>},
    {"MEGASCALE_LATE_ACK_WARN_S", Type::kSeconds, "s", "5", "0, or (0, 3600]",
     "Each wire warns once a window this long in which many segments arrived twice (its ACKs came late); 0 = no warning.", "late_ack_window_ns", 0, 0, read_late_ack},
    {"MEGASCALE_LOCAL_RANKS", Type::kInteger, "ranks", "a launcher's count, else the host's NVIDIA GPUs, else 1", "",
     "How many ranks share this host's CPUs, for MEGASCALE_LAYOUT's rule; unset, LOCAL_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE or MPI_LOCALNRANKS.", "(the layout)", 1, kMaxLocalRanks, read_local_ranks},
    {"MEGASCALE_LAYOUT", Type::kLayout, "", "auto", "`auto` or `key=value,...` with wires (1..16), io_threads (0..64), lanes (1..64), stripes (1..8), stripe_bytes (4096..1073741824, K/M/G)",
     "The thread layout: UDP wires per device, I/O threads per wire, lanes per connection, stripes per comm and each stripe's part of a message; keys left out follow the rule below.", "layout", 0, 0, read_layout},
    {"MEGASCALE_SOURCE_PORTS", Type::kText, "port list", "unset", "`P1,P2,...`: distinct ports 1..65535, one per lane; MEGASCALE_LAYOUT wires=1",
     "The UDP source port of each lane (as `megascale topo ports` prints them), bound by one wire per device; unset, ephemeral ports.", "source_ports", 0, 0, read_source_ports},
    {"MEGASCALE_PORT_CLOSED_MS", Type::kInteger, "ms", "200", "",
     "A peer whose port answers ICMP port unreachable this long, with nothing heard since, fails its connections; 0 = off.", "port_closed_fail_ns", 0, 3'600'000, read_port_closed},
    {"MEGASCALE_BUSY_POLL", Type::kFlag, "", "0", "0, 1",
     "Wire threads spin instead of sleeping when idle.", "busy_poll", 0, 0, read_flag<&PluginConfig::busy_poll>},
    {"MEGASCALE_IDLE_POLL_US", Type::kInteger, "us", "50", "",
     "How long wire threads keep polling after their last packet before they sleep.", "idle_poll_ns", 0, 1'000'000, read_us<&PluginConfig::idle_poll_ns>},
    {"MEGASCALE_PENDING_POLL_US", Type::kInteger, "us", "1000", "",
     "The same while NCCL has requests outstanding on the wire (never shorter than the idle window).", "pending_poll_ns", 0, 10'000'000, read_us<&PluginConfig::pending_poll_ns>},
    {"MEGASCALE_TEST_PROGRESS_US", Type::kInteger, "us", "50", "",
     "NCCL's test() runs a round of the wire itself when the wire's thread has finished none for this long (asleep, or waiting for a CPU on a host whose CPUs are all taken); 0 = off.", "help_after_ns", 0, 1'000'000, read_us<&PluginConfig::help_after_ns>},
    {"MEGASCALE_STALL_US", Type::kInteger, "us", "300", "",
     "An I/O thread away from its loop this long is taken as stalled and the others do its work until it is back; 0 = off.", "stall_ns", 0, 1'000'000, read_us<&PluginConfig::stall_ns>},
    {"MEGASCALE_GDR_COPY", Type::kChoice, "", "0", "0, 1, emulate",
     "1 takes NCCL's GPU buffers through pinned host shadows and the GPU's copy engines, emulate does so with host memory and the CPU (for tests), 0 takes host memory only; on UDP and verbs devices alike (NCCL_PTR_CUDA, never NCCL_PTR_DMABUF: the wire sees only the host shadows).", "gdr_copy", 0, 0, read_gdr_copy},
    {"MEGASCALE_GDR_COPY_TIMEOUT_MS", Type::kInteger, "ms", "10000", "",
     "A GPU buffer copy not done this long after it was queued fails its comm (ncclUnhandledCudaError); 0 = wait forever.", "gdr_copy_limits.timeout_ns", 0, 3'600'000, read_copy_timeout},
    {"MEGASCALE_FAULT_COPY_STALL", Type::kInteger, "copies", "0", "",
     "Fault injection: every GPU buffer copy after the first N is held back as if stuck; 0 = off.", "gdr_copy_limits.stall_after", 0, 1LL << 40, read_copy_stall},
    {"MEGASCALE_FAULT_*", Type::kFamily, "probability, datagrams, us, seed", "off", "`_DROP`, `_DUP`, `_REORDER`, `_DELAY`, `_CORRUPT`, `_CE` in [0, 1]; `_REORDER_DEPTH` >= 1; `_DELAY_US` >= 0; `_SEED`",
     "Fault injection on every wire's datagrams (collectives/wire/udp, fault.h).", "fault", 0, 0, read_fault},
  };
  return knobs;
}
// clang-format on

std::string allowed_text(const Knob& k) {
  if (k.type == Type::kInteger && k.allowed.empty())
    return std::to_string(k.lo) + ".." + std::to_string(k.hi);
  return std::string(k.allowed);
}

std::vector<std::string> known_names() {
  std::set<std::string> names;
  PluginConfig c;
  // A family's members are the names its reader asks for.
  const EnvLookup record = [&](const char* name) -> const char* {
    names.insert(name);
    return nullptr;
  };
  Reader r{c, record, {}};
  for (const Knob& k : plugin_knobs()) {
    if (k.type == Type::kFamily) {
      (void)k.read(r, k);
    } else {
      names.insert(std::string(k.name));
    }
  }
  std::vector<std::string> out;
  for (const std::string& n : names) {
    if (n.rfind("MEGASCALE_", 0) == 0) out.push_back(n);
  }
  return out;
}

const std::vector<std::string_view>& other_programs_names() {
  static const std::vector<std::string_view> names = {"MEGASCALE_CONFORMANCE_PEER", "MEGASCALE_NULL_",
                                                      "MEGASCALE_TRAIN_PROFILE",    "MEGASCALE_NETNS_",
                                                      "MEGASCALE_TEST_STAGES",      "MEGASCALE_FUZZ_SECONDS"};
  return names;
}

std::string render_markdown() {
  std::string out = "| Env var | Type | Default | Unit | Allowed | Meaning |\n|---|---|---|---|---|---|\n";
  for (const Knob& k : plugin_knobs()) {
    if (k.type == Type::kReplaced) continue;
    out += "| `" + std::string(k.name) + "` | " + std::string(type_name(k.type)) + " | " +
           std::string(k.default_text) + " | " + (k.unit.empty() ? "—" : std::string(k.unit)) + " | " +
           allowed_text(k) + " | " + std::string(k.description) + " |\n";
  }
  out += "\nThe automatic layout (`MEGASCALE_LAYOUT` unset, `auto`, or keys left out): ";
  out += kLayoutRuleText;
  out += "\n\nReplaced variables: set, each fails `init` with a WARN naming its replacement.\n\n";
  out += "| Env var | Replacement | Was |\n|---|---|---|\n";
  for (const Knob& k : plugin_knobs()) {
    if (k.type != Type::kReplaced) continue;
    out += "| `" + std::string(k.name) + "` | `MEGASCALE_LAYOUT=" + std::string(k.allowed) + "` | " +
           std::string(k.description) + " |\n";
  }
  return out;
}

Result<std::string> splice_generated(const std::string& doc, const std::string& generated) {
  const size_t begin = doc.find(kBeginMarker);
  const size_t end = doc.find(kEndMarker);
  if (begin == std::string::npos || end == std::string::npos || end < begin) {
    return make_error("docs/CONFIG.md has no '" + std::string(kBeginMarker) + "' ... '" +
                      std::string(kEndMarker) + "' section for the plugin's knobs");
  }
  const size_t body = begin + kBeginMarker.size();
  return doc.substr(0, body) + "\n" + generated + doc.substr(end);
}

Result<PluginConfig> read_all(const EnvLookup& getenv_fn) {
  PluginConfig c;
  Reader r{c, getenv_fn, {}};
  for (const Knob& k : plugin_knobs()) {
    if (Status s = k.read(r, k); !s) return s.error();
  }
  if (Status s = cc::validate_cc_config(c.cc, "MEGASCALE_CC=" + c.cc_source); !s)
    return make_error(s.error().message);
  for (const std::string& unread : cc::unread_settings(c.cc))
    c.warnings.push_back("MEGASCALE_CC=" + c.cc_source + ": " + unread);
  return c;
}

}  // namespace megascale::nccl::schema
