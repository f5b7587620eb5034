// MEGASCALE_* environment variables: loading through the schema, unknown names, and the helpers the
// knobs share (see config.h).
#include "config.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <set>
#include <string_view>

#include "config_schema.h"
#include "megascale/engine/packet.h"

namespace megascale::nccl {

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

LocalRanks local_ranks_from_env(const EnvLookup& getenv_fn, const std::string& pci_devices_dir) {
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

TimeNs PluginConfig::keepalive_interval_ns() const {
  TimeNs k = std::clamp<TimeNs>(retry_budget_ns / 4, 10 * kNsPerMs, kNsPerSec);
  if (port_closed_fail_ns > 0) k = std::min(k, std::max<TimeNs>(port_closed_fail_ns, 10 * kNsPerMs));
  return k;
}

std::string echo_line(const Setting& s) {
  return s.name + "=" + s.value + (s.note.empty() ? "" : " (" + s.note + ")") + " (" + s.source + ")";
}

static bool read_by_other_programs(std::string_view name) {
  const auto& other = schema::other_programs_names();
  return std::any_of(other.begin(), other.end(), [&](std::string_view v) {
    return v.back() == '_' ? name.substr(0, v.size()) == v : name == v;
  });
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

Result<PluginConfig> load_plugin_config(const EnvLookup& getenv_fn,
                                        const std::vector<std::string>& set_names) {
  Result<PluginConfig> c = schema::read_all(getenv_fn);
  if (!c) return c;
  const std::vector<std::string> knobs = schema::known_names();
  for (const std::string& name : std::set<std::string>(set_names.begin(), set_names.end())) {
    if (name.rfind("MEGASCALE_", 0) != 0 || std::binary_search(knobs.begin(), knobs.end(), name)) continue;
    if (read_by_other_programs(name)) continue;
    c->warnings.push_back(name + " is not a knob of the plugin and is ignored; did you mean " +
                          closest_name(name, knobs) + "? (docs/CONFIG.md lists them all)");
  }
  return c;
}

std::string_view to_string(WireKind k) {
  switch (k) {
    case WireKind::kAuto:
      return "auto";
    case WireKind::kUdp:
      return "udp";
    case WireKind::kVerbsUd:
      return "verbs-ud";
    case WireKind::kVerbsRc:
      return "verbs-rc";
  }
  return "?";
}

Result<WireKind> parse_wire_kind(const char* text) {
  if (text == nullptr || *text == '\0') return WireKind::kAuto;
  const std::string_view t(text);
  for (WireKind k : {WireKind::kAuto, WireKind::kUdp, WireKind::kVerbsUd, WireKind::kVerbsRc}) {
    if (t == to_string(k)) return k;
  }
  return make_error("MEGASCALE_WIRE=" + std::string(t) + ": must be auto, udp, verbs-ud or verbs-rc");
}

}  // namespace megascale::nccl
