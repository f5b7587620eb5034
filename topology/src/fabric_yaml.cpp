// Fabric YAML -> FabricSpec, and loading by preset name or path. yaml-cpp reports errors by throwing;
// every throw is caught here and returned as an Error naming the source and line.
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "megascale/common/yaml_text.h"
#include "megascale/topology/fabric.h"

namespace megascale::topo {

// Generated from configs/fabrics/*.yaml by cmake/EmbedFiles.cmake.
const std::vector<std::pair<std::string_view, std::string_view>>& embedded_fabric_presets();

namespace {

using yaml::at_line;
using yaml::line_of;
using yaml::node_kind;

// The line of `key` itself in a mapping (a section's value starts on the line after its key).
int key_line(const YAML::Node& map, std::string_view key) {
  for (const auto& pair : map) {
    if (pair.first.IsScalar() && pair.first.Scalar() == key) return line_of(pair.first);
  }
  return 0;
}

// What the user wrote, for messages: 'fast', a mapping. Control characters become '?'.
std::string shown(const YAML::Node& node) {
  if (!node.IsScalar()) return std::string(node_kind(node));
  std::string text = node.Scalar().substr(0, 60);
  for (char& c : text) {
    if (static_cast<unsigned char>(c) < 0x20) c = '?';
  }
  return fmt::format("'{}'", text);
}

// Reads one mapping level: hands out the keys the schema knows and reports the rest.
class Reader {
 public:
  Reader(std::string_view source, FabricSpec& spec) : source_(source), spec_(spec) {}

  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }

  void fail(int line, std::string_view key, std::string_view value, std::string_view why) {
    if (failed()) return;  // the first error is the one to fix
    const std::string where = at_line(source_, line);
    error_ = value.empty() ? fmt::format("{}: {}: {}", where, key, why)
                           : fmt::format("{}: {}: {}: {}", where, key, value, why);
  }

  // Checks that every key of `node` (a mapping at `prefix`) is one of `known`.
  bool check_keys(const YAML::Node& node, std::string_view prefix,
                  std::initializer_list<std::string_view> known) {
    if (!node.IsMap()) {
      fail(line_of(node), prefix.empty() ? "top level" : prefix, shown(node), "expected a mapping of keys");
      return false;
    }
    // A repeated key is refused before this (yaml::duplicate_keys over the whole file).
    for (const auto& pair : node) {
      const YAML::Node key = pair.first;
      std::string name = key.IsScalar() ? key.Scalar() : "?";
      bool ok = false;
      for (std::string_view k : known) ok = ok || k == name;
      if (!ok) {
        std::string valid;
        for (std::string_view k : known) valid += fmt::format("{}{}", valid.empty() ? "" : ", ", k);
        fail(line_of(key), join(prefix, name), "",
             fmt::format("unknown key; valid keys {}: {}",
                         prefix.empty() ? std::string("at the top level") : fmt::format("in '{}'", prefix),
                         valid));
        return false;
      }
    }
    return true;
  }

  // The value of `key` in `map`, remembering its line; null when absent.
  YAML::Node get(const YAML::Node& map, std::string_view prefix, std::string_view key) {
    YAML::Node value = map[std::string(key)];
    if (value) spec_.key_lines.emplace_back(join(prefix, key), line_of(value));
    return value;
  }

  template <class T>
  void count(const YAML::Node& map, std::string_view prefix, std::string_view key, T& out) {
    YAML::Node node = get(map, prefix, key);
    if (!node) return;
    uint64_t value = 0;
    const std::string& text = node.IsScalar() ? node.Scalar() : std::string();
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (!node.IsScalar() || node.Tag() == "!" || text.empty() || ec != std::errc() ||
        end != text.data() + text.size() || value == 0 || value > 1'000'000) {
      fail(line_of(node), join(prefix, key), shown(node), "expected a whole number from 1 to 1000000");
      return;
    }
    out = static_cast<T>(value);
  }

  void speed_gbps(const YAML::Node& map, std::string_view prefix, std::string_view key, int64_t& out_bps) {
    YAML::Node node = get(map, prefix, key);
    if (!node) return;
    double value = 0;
    const std::string& text = node.IsScalar() ? node.Scalar() : std::string();
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (!node.IsScalar() || node.Tag() == "!" || ec != std::errc() || end != text.data() + text.size() ||
        !std::isfinite(value) || value <= 0 || value > 100'000) {
      fail(line_of(node), join(prefix, key), shown(node),
           "expected a speed in Gb/s, above 0 and at most 100000");
      return;
    }
    out_bps = std::llround(value * 1e9);
  }

  void flag(const YAML::Node& map, std::string_view prefix, std::string_view key, bool& out) {
    YAML::Node node = get(map, prefix, key);
    if (!node) return;
    if (!node.IsScalar() || node.Tag() == "!" || !YAML::convert<bool>::decode(node, out))
      fail(line_of(node), join(prefix, key), shown(node), "expected true or false");
  }

  static std::string join(std::string_view prefix, std::string_view key) {
    return prefix.empty() ? std::string(key) : fmt::format("{}.{}", prefix, key);
  }

 private:
  std::string_view source_;
  FabricSpec& spec_;
  std::string error_;
};

Result<FabricSpec> read_spec(const YAML::Node& root, std::string_view source) {
  FabricSpec s;
  s.source = std::string(source);
  Reader r(source, s);
  if (!r.check_keys(
          root, "",
          {"name", "description", "tiers", "switch", "servers", "tor", "spine", "aggregation", "core"})) {
    return make_error(r.error());
  }
  if (YAML::Node name = r.get(root, "", "name")) {
    if (!name.IsScalar()) r.fail(line_of(name), "name", shown(name), "expected a name");
    s.name = name.IsScalar() ? name.Scalar() : "";
  }
  r.count(root, "", "tiers", s.tiers);
  if (!r.failed() && s.tiers != 2 && s.tiers != 3) {
    r.fail(line_of(root["tiers"]), "tiers", shown(root["tiers"]), "must be 2 or 3");
  }
  const bool two = s.tiers == 2;
  // Sections that the tier count rules out are errors, not silently ignored.
  for (const char* key : {"spine", "aggregation", "core"}) {
    bool wanted = two ? std::string_view(key) == "spine" : std::string_view(key) != "spine";
    if (YAML::Node node = root[key]; node && !wanted) {
      r.fail(key_line(root, key), key, "",
             fmt::format("not used in a {}-tier fabric (tiers: {})", s.tiers, s.tiers));
    }
  }
  auto section = [&](const char* key, std::initializer_list<std::string_view> known, auto&& body) {
    YAML::Node node = root[key];
    if (r.failed()) return;
    if (!node) {
      r.fail(0, key, "", "missing section");
      return;
    }
    if (r.check_keys(node, key, known)) body(node);
  };
  section("switch", {"radix", "port_gbps"}, [&](const YAML::Node& n) {
    r.count(n, "switch", "radix", s.switch_radix);
    r.speed_gbps(n, "switch", "port_gbps", s.port_speed_bps);
  });
  section("servers", {"count", "nics_per_server", "nic_gbps", "rail_optimized"}, [&](const YAML::Node& n) {
    r.count(n, "servers", "count", s.servers);
    r.count(n, "servers", "nics_per_server", s.nics_per_server);
    r.speed_gbps(n, "servers", "nic_gbps", s.nic_speed_bps);
    r.flag(n, "servers", "rail_optimized", s.rail_optimized);
  });
  section("tor", {"downlink_ports", "downlink_split", "uplink_ports"}, [&](const YAML::Node& n) {
    r.count(n, "tor", "downlink_ports", s.tor_downlink_ports);
    r.count(n, "tor", "downlink_split", s.tor_downlink_split);
    r.count(n, "tor", "uplink_ports", s.tor_uplink_ports);
  });
  if (two) {
    section("spine", {"count"}, [&](const YAML::Node& n) { r.count(n, "spine", "count", s.tier2_per_pod); });
  } else {
    section("aggregation", {"pods", "per_pod", "uplink_ports"}, [&](const YAML::Node& n) {
      r.count(n, "aggregation", "pods", s.pods);
      r.count(n, "aggregation", "per_pod", s.tier2_per_pod);
      r.count(n, "aggregation", "uplink_ports", s.aggregation_uplink_ports);
    });
    section("core", {"planes", "per_plane"}, [&](const YAML::Node& n) {
      r.count(n, "core", "planes", s.core_planes);
      r.count(n, "core", "per_plane", s.core_per_plane);
    });
  }
  if (r.failed()) return make_error(r.error());
  return s;
}

Result<std::string> read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return make_error(fmt::format("fabric {}: cannot open the file", path.string()));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

Result<FabricSpec> parse_fabric_yaml(std::string_view text, std::string_view source) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return make_error(
        fmt::format("{}:{}: not valid YAML: {}", source, e.mark.is_null() ? 0 : e.mark.line + 1, e.msg));
  } catch (const std::exception& e) {
    return make_error(fmt::format("{}: cannot parse: {}", source, e.what()));
  }
  try {
    if (auto dups = yaml::duplicate_keys(root); !dups.empty())
      return make_error(yaml::in_file_order(std::move(dups), source));
    return read_spec(root, source);
  } catch (const YAML::Exception& e) {
    return make_error(fmt::format("{}:{}: {}", source, e.mark.is_null() ? 0 : e.mark.line + 1, e.msg));
  } catch (const std::exception& e) {
    return make_error(fmt::format("{}: cannot parse: {}", source, e.what()));
  }
}

Result<Fabric> load_fabric(std::string_view name_or_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path path(name_or_path);
  bool looks_like_path = name_or_path.find('/') != std::string_view::npos || path.extension() == ".yaml" ||
                         path.extension() == ".yml";
  Result<FabricSpec> spec = make_error("");
  if (fs::is_regular_file(path, ec)) {
    Result<std::string> text = read_file(path);
    if (!text) return text.error();
    spec = parse_fabric_yaml(*text, path.string());
  } else {
    bool found = false;
    for (const auto& [stem, text] : embedded_fabric_presets()) {
      if (stem == name_or_path) {
        spec = parse_fabric_yaml(text, fmt::format("{}.yaml (built-in preset)", stem));
        found = true;
      }
    }
    if (!found) {
      std::string names;
      for (const std::string& n : fabric_preset_names())
        names += fmt::format("{}{}", names.empty() ? "" : ", ", n);
      return make_error(fmt::format("fabric '{}': {}; built-in presets: {}", name_or_path,
                                    looks_like_path ? "no such file" : "no such file or preset", names));
    }
  }
  if (!spec) return spec.error();
  return Fabric::build(std::move(*spec));
}

std::vector<std::string> fabric_preset_names() {
  std::vector<std::string> names;
  for (const auto& preset : embedded_fabric_presets()) names.emplace_back(preset.first);
  return names;
}

}  // namespace megascale::topo
