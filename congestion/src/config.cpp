// Preset loading: YAML text -> CcConfig, files, built-in presets and name resolution. The parser walks
// the schema (config_schema.h) over the YAML tree, so every key it accepts is one the validator checks.
// yaml-cpp reports errors by throwing; every throw is caught here and returned as an Error.
#include "megascale/congestion/config.h"

#include <fmt/format.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "config_schema.h"
#include "megascale/common/yaml_text.h"

namespace megascale::cc {
namespace {

using yaml::at_line;
using yaml::duplicate_keys;
using yaml::in_file_order;
using yaml::is_plain_scalar;
using yaml::line_of;
using yaml::node_kind;
using yaml::ParseError;
using yaml::printable;

using schema::Bound;

constexpr std::string_view kBuiltinPrefix = "builtin:";

// What the user wrote, for messages: 'fast', the string "25", a mapping.
std::string shown(const YAML::Node& node) {
  if (!node.IsScalar()) return std::string(node_kind(node));
  if (is_plain_scalar(node)) return fmt::format("'{}'", printable(node.Scalar()));
  return fmt::format("the string \"{}\"", printable(node.Scalar()));
}

// Strict number syntax: what from_chars accepts (decimal, exponent), an optional leading '+', nothing else.
bool parse_number(const std::string& text, double& out) {
  const char* first = text.data();
  const char* last = text.data() + text.size();
  if (first != last && *first == '+') ++first;
  auto [end, ec] = std::from_chars(first, last, out, std::chars_format::general);
  return ec == std::errc() && end == last;
}

// Walks the schema over one YAML mapping per section: converts the keys it finds into fields, records the
// line of each key it set (so range errors found later can point at it) and reports keys it does not know.
class YamlReader {
 public:
  YamlReader(std::vector<ParseError>& errors, std::map<std::string, int>& lines)
      : errors_(errors), lines_(lines) {}

  // Reads the mapping `node` as the section at `prefix` ("" for the top level); `body` visits its keys.
  // A key written twice is reported by yaml::duplicate_keys over the whole document; here the first one
  // counts. Linear in the number of keys: 160k unknown keys take about a second, most of it yaml-cpp's parse.
  template <class Body>
  void read_mapping(const YAML::Node& node, const std::string& prefix, Body&& body) {
    Level level{prefix, {}, {}, {}};
    for (const auto& pair : node) {
      const YAML::Node key = pair.first;  // a copy: yaml-cpp's iterators hand out temporaries
      if (!key.IsScalar()) {
        error(line_of(key),
              fmt::format("{}: keys must be plain names, got {}", where(prefix), node_kind(key)));
        continue;
      }
      if (level.index.emplace(key.Scalar(), level.entries.size()).second) {
        level.entries.push_back({key.Scalar(), key, pair.second});
      }
    }
    Level* saved = level_;
    level_ = &level;
    body();
    level_ = saved;
    std::string valid;  // the same list for every unknown key of this mapping, built once
    for (const Entry& e : level.entries) {
      if (e.known) continue;
      if (valid.empty()) valid = fmt::format("{}", fmt::join(level.known, ", "));
      error(line_of(e.key_node),
            fmt::format("unknown key '{}'; valid keys {}: {}", join(prefix, printable(e.key)),
                        prefix.empty() ? "at the top level" : "in '" + prefix + "'", valid));
    }
  }

  // The YAML value of `key` in the current mapping, or null when absent. Marks the key as known.
  const YAML::Node* lookup(std::string_view key) {
    level_->known.push_back(key);
    auto it = level_->index.find(std::string(key));
    if (it == level_->index.end()) return nullptr;
    Entry& e = level_->entries[it->second];
    e.known = true;
    return &e.value;
  }

  std::string path(std::string_view key) const { return join(level_->prefix, key); }

  void error(int line, std::string text) { errors_.push_back({line, std::move(text)}); }

  // Schema walker interface (config_schema.h).
  template <class Body>
  void section(std::string_view key, Body&& body) {
    const YAML::Node* node = lookup(key);
    if (node == nullptr || node->IsNull()) return;  // absent or `swift:` with no keys: all defaults
    if (!node->IsMap()) {
      error(line_of(*node), fmt::format("{}: expected a mapping of keys, got {}", path(key), shown(*node)));
      return;
    }
    read_mapping(*node, path(key), body);
  }

  template <class T>
  void field(std::string_view key, T& value, double scale, Bound bound) {
    const YAML::Node* node = lookup(key);
    if (node == nullptr) return;
    std::string at = path(key);
    lines_[at] = line_of(*node);
    if constexpr (std::is_same_v<T, bool>) {
      if (!is_plain_scalar(*node) || !YAML::convert<bool>::decode(*node, value)) {
        error(line_of(*node), fmt::format("{}: expected true or false, got {}", at, shown(*node)));
      }
    } else {
      double number = 0;
      if (!is_plain_scalar(*node) || !parse_number(node->Scalar(), number)) {
        error(line_of(*node), fmt::format("{}: expected a number, got {}", at, shown(*node)));
      } else if (!std::isfinite(number)) {
        error(line_of(*node), fmt::format("{}: expected a finite number, got {}", at, shown(*node)));
      } else {
        store(at, line_of(*node), number, scale, bound, value);  // the range itself is checked later
      }
    }
  }

 private:
  struct Entry {
    std::string key;
    YAML::Node key_node;
    YAML::Node value;
    bool known = false;  // the schema asked for it
  };
  struct Level {
    std::string prefix;
    std::vector<Entry> entries;                     // file order, first of each name
    std::unordered_map<std::string, size_t> index;  // name -> entries[i]
    std::vector<std::string_view> known;            // the names the schema asked for, in its order
  };

  static std::string join(std::string_view prefix, std::string_view key) {
    return prefix.empty() ? std::string(key) : fmt::format("{}.{}", prefix, key);
  }
  static std::string where(std::string_view prefix) {
    return prefix.empty() ? std::string("top level") : std::string(prefix);
  }

  template <class T>
  void store(const std::string& at, int line, double number, double scale, const Bound& bound, T& value) {
    if constexpr (std::is_floating_point_v<T>) {
      value = number * scale;
    } else if (scale == schema::kSame) {
      // Counts and byte sizes: whole numbers that fit the field. A value the field cannot hold is reported
      // against the key's own range where that range excludes it ("must be in [1, 65000], got -1").
      constexpr double kMin = static_cast<double>(std::numeric_limits<T>::min());
      constexpr double kMaxPlusOne = static_cast<double>(std::numeric_limits<T>::max()) + 1.0;
      if (number != std::floor(number)) {
        error(line, fmt::format("{}: must be a whole number, got {}", at, number));
      } else if (number < kMin || number >= kMaxPlusOne) {
        std::string range = bound.contains(number) ? fmt::format("in [{}, {}]", std::numeric_limits<T>::min(),
                                                                 std::numeric_limits<T>::max())
                                                   : schema::describe(bound);
        error(line, fmt::format("{}: must be {}, got {}", at, range, number));
      } else {
        value = static_cast<T>(number);
      }
    } else {
      // Times: rounded to the nearest ns; anything beyond +-2^62 ns (146 years) is a typo, not a setting.
      double ns = std::round(number * scale);
      if (std::fabs(ns) > 0x1p62) {
        error(line, fmt::format("{}: out of range, got {}", at, number));
        return;
      }
      value = static_cast<T>(ns);
    }
  }

  std::vector<ParseError>& errors_;
  std::map<std::string, int>& lines_;
  Level* level_ = nullptr;
};

std::string stem_of(std::string_view source) {
  if (source.substr(0, kBuiltinPrefix.size()) == kBuiltinPrefix) return std::string(source);
  std::string stem = std::filesystem::path(std::string(source)).stem().string();
  return stem.empty() ? std::string("default") : stem;
}

// Sees the document starts of a YAML stream without building nodes. yaml-cpp 0.7's LoadAll loops forever
// on a stray ',' (jbeder/yaml-cpp#1040; fixed upstream by #1319 in 2024): its parser then keeps reporting
// an empty document at the same position. Two starts at one position mean exactly that.
class DocumentStarts final : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> starts;

  void OnDocumentStart(const YAML::Mark& mark) override { starts.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
  }
  void OnMapEnd() override {}
};

// A preset is one document. Returns an error for a second document or for a parser that stopped advancing.
Status check_single_document(const std::string& text, std::string_view source) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentStarts handler;
  std::vector<YAML::Mark>& starts = handler.starts;
  while (starts.size() < 3 && parser.HandleNextDocument(handler)) {
    size_t n = starts.size();
    if (n >= 2 && starts[n - 1].pos == starts[n - 2].pos) {
      const YAML::Mark& at = starts[n - 1];
      char c =
          at.pos >= 0 && static_cast<size_t>(at.pos) < text.size() ? text[static_cast<size_t>(at.pos)] : '?';
      return make_error(
          fmt::format("{}:{}:{}: YAML syntax error: unexpected '{}'", source, at.line + 1, at.column + 1, c));
    }
  }
  if (starts.size() > 1) {
    return make_error(
        fmt::format("{}:{}: expected one YAML document, found another one here", source, starts[1].line + 1));
  }
  return {};
}

Result<CcConfig> parse_document(const std::string& text, std::string_view source) {
  if (Status single = check_single_document(text, source); !single) return single.error();
  const YAML::Node root = YAML::Load(text);
  if (root.IsNull()) {
    return make_error(
        fmt::format("{}: empty preset; it needs at least 'controller: <fixed|swift|dcqcn|hybrid>'", source));
  }
  if (!root.IsMap()) {
    return make_error(fmt::format("{}: expected a mapping of keys at the top level, got {}",
                                  at_line(source, line_of(root)), shown(root)));
  }

  CcConfig config;
  config.name = stem_of(source);
  std::vector<ParseError> errors = duplicate_keys(root);
  std::map<std::string, int> lines;
  YamlReader reader(errors, lines);
  reader.read_mapping(root, "", [&] {
    const YAML::Node* controller = reader.lookup(schema::kControllerKey);
    if (controller == nullptr) {
      reader.error(0, "missing key 'controller' (one of: fixed, swift, dcqcn, hybrid)");
    } else if (!controller->IsScalar()) {
      reader.error(line_of(*controller),
                   fmt::format("controller: expected a name, got {}", shown(*controller)));
    } else if (Result<ControllerKind> kind = parse_controller_kind(controller->Scalar()); !kind) {
      reader.error(line_of(*controller), fmt::format("controller: {}", kind.error().message));
    } else {
      config.kind = *kind;
    }
    const YAML::Node* description = reader.lookup(schema::kDescriptionKey);
    if (description != nullptr && !description->IsScalar() && !description->IsNull()) {
      reader.error(line_of(*description),
                   fmt::format("description: expected text, got {}", shown(*description)));
    }
    schema::visit_cc_config(config, reader);
  });

  // Structural errors first: ranges are only checked on a config whose every key was understood.
  if (errors.empty()) {
    for (const schema::Violation& v : schema::find_violations(config)) {
      auto it = lines.find(v.key_path);
      errors.push_back({it == lines.end() ? 0 : it->second, fmt::format("{}: {}", v.key_path, v.text)});
    }
  }
  if (errors.empty()) return config;
  // File order; errors without a line (a missing key) go last.
  return make_error(in_file_order(std::move(errors), source));
}

// Every schema key path ("swift.beta", "hybrid.swift.min_cwnd_packets") with its value as a number, in
// schema order.
class KeyValues {
 public:
  std::vector<std::pair<std::string, double>> values;

  template <class Body>
  void section(std::string_view key, Body&& body) {
    const std::string saved = prefix_;
    prefix_ = prefix_.empty() ? std::string(key) : prefix_ + "." + std::string(key);
    body();
    prefix_ = saved;
  }
  template <class T>
  void field(std::string_view key, T& value, double /*scale*/, Bound /*bound*/) {
    values.emplace_back(prefix_.empty() ? std::string(key) : prefix_ + "." + std::string(key),
                        static_cast<double>(value));
  }

 private:
  std::string prefix_;
};

// MEGASCALE_CC_ + the key path upper-cased with '.' -> '_' (configs/cc/README.md).
std::string env_name_of(std::string_view key_path) {
  std::string name = "MEGASCALE_CC_";
  for (char c : key_path) {
    name += c == '.' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return name;
}

// A message from the reader or the validator starts with the key path: name the variable instead.
std::string blame_variable(const std::string& text, const std::map<std::string, std::string>& set_by_env) {
  for (const auto& [path, assignment] : set_by_env) {
    if (text.rfind(path + ":", 0) == 0) return fmt::format("{} ({})", assignment, text);
  }
  // A rule between keys (min_rto <= initial_rto) broken by a variable that set the other key: name what
  // the environment set in the same section, or the message blames a key nobody touched.
  const std::string section = text.substr(0, text.find('.') + 1);  // "rto.", or "" without a key path
  if (section.empty()) return text;
  std::string set_here;
  for (const auto& [path, assignment] : set_by_env) {
    if (path.rfind(section, 0) == 0) set_here += (set_here.empty() ? "" : ", ") + assignment;
  }
  return set_here.empty() ? text : fmt::format("{} (the environment set {})", text, set_here);
}

Result<CcConfig> apply_env_overrides(const CcConfig& base,
                                     const EnvLookup& getenv_fn,
                                     std::vector<std::string>* applied) {
  CcConfig config = base;
  CcConfig probe;
  KeyValues keys;
  schema::visit_cc_config(probe, keys);

  std::vector<std::string> errors;
  std::map<std::string, std::string> set_by_env;  // key path -> "VAR=value"
  YAML::Node overlay(YAML::NodeType::Map);
  auto value_of = [&](const std::string& name) -> const char* {
    const char* v = getenv_fn(name.c_str());
    return v != nullptr && *v != '\0' ? v : nullptr;
  };
  if (const char* v = value_of(env_name_of(schema::kControllerKey))) {
    if (Result<ControllerKind> kind = parse_controller_kind(v); !kind) {
      errors.push_back(
          fmt::format("{}={}: {}", env_name_of(schema::kControllerKey), printable(v), kind.error().message));
    } else {
      config.kind = *kind;
      if (applied != nullptr)
        applied->push_back(fmt::format("{}={}", env_name_of(schema::kControllerKey), v));
    }
  }
  for (const auto& [path, unused_value] : keys.values) {
    const std::string name = env_name_of(path);
    const char* v = value_of(name);
    if (v == nullptr) continue;
    set_by_env[path] = fmt::format("{}={}", name, printable(v));
    if (applied != nullptr) applied->push_back(fmt::format("{}={}", name, v));
    // Nested sections of the overlay follow the path; the leaf is the variable's text, a plain scalar.
    std::vector<YAML::Node> chain{overlay};
    size_t start = 0;
    for (size_t dot = path.find('.'); dot != std::string::npos; dot = path.find('.', start)) {
      const std::string part = path.substr(start, dot - start);
      YAML::Node child = chain.back()[part];
      if (!child.IsMap()) child = YAML::Node(YAML::NodeType::Map);
      chain.back()[part] = child;
      chain.push_back(chain.back()[part]);
      start = dot + 1;
    }
    chain.back()[path.substr(start)] = std::string(v);
  }
  if (set_by_env.empty() && errors.empty()) return config;

  std::vector<ParseError> parse_errors;
  std::map<std::string, int> lines;
  YamlReader reader(parse_errors, lines);
  reader.read_mapping(overlay, "", [&] { schema::visit_cc_config(config, reader); });
  for (const ParseError& e : parse_errors) errors.push_back(blame_variable(e.text, set_by_env));
  if (errors.empty()) {
    for (const schema::Violation& v : schema::find_violations(config)) {
      errors.push_back(blame_variable(fmt::format("{}: {}", v.key_path, v.text), set_by_env));
    }
  }
  if (errors.empty()) return config;
  std::string message;
  for (const std::string& e : errors) message += fmt::format("{}{}", message.empty() ? "" : "\n", e);
  return make_error(std::move(message));
}

}  // namespace

Result<ControllerKind> parse_controller_kind(std::string_view name) {
  for (ControllerKind kind : {ControllerKind::kFixedWindow, ControllerKind::kSwift, ControllerKind::kDcqcn,
                              ControllerKind::kHybrid}) {
    if (name == to_string(kind)) return kind;
  }
  return make_error(
      fmt::format("unknown controller '{}' (one of: fixed, swift, dcqcn, hybrid)", printable(name)));
}

Result<CcConfig> parse_cc_config(std::string_view yaml_text, std::string_view source) {
  try {
    return parse_document(std::string(yaml_text), source);
  } catch (const YAML::DeepRecursion& e) {
    // yaml-cpp's own message here is "bad file", and its mark is where the scanner stopped, often past
    // the last line: name the nesting and a line the file has.
    const int last_line = static_cast<int>(std::count(yaml_text.begin(), yaml_text.end(), '\n')) +
                          (yaml_text.empty() || yaml_text.back() == '\n' ? 0 : 1);
    const int line = std::max(1, std::min(e.mark.is_null() ? last_line : e.mark.line + 1, last_line));
    return make_error(fmt::format("{}:{}: YAML syntax error: lists or mappings nested deeper than {} levels",
                                  source, line, e.depth() - 1));
  } catch (const YAML::Exception& e) {
    std::string where = e.mark.is_null()
                            ? std::string(source)
                            : fmt::format("{}:{}:{}", source, e.mark.line + 1, e.mark.column + 1);
    return make_error(fmt::format("{}: YAML syntax error: {}", where, e.msg));
  } catch (const std::exception& e) {
    return make_error(fmt::format("{}: cannot parse: {}", source, e.what()));
  }
}

Result<CcConfig> load_cc_config(const std::string& path) {
  try {
    std::error_code ec;
    std::filesystem::file_status status = std::filesystem::status(path, ec);
    if (ec && ec != std::errc::no_such_file_or_directory) {
      return make_error(fmt::format("{}: cannot access: {}", path, ec.message()));
    }
    if (!std::filesystem::exists(status)) return make_error(fmt::format("{}: file not found", path));
    if (!std::filesystem::is_regular_file(status)) {
      return make_error(fmt::format("{}: not a regular file", path));
    }
    std::ifstream in(path, std::ios::binary);
    if (!in.is_open()) return make_error(fmt::format("{}: cannot open the file", path));
    std::ostringstream text;
    // Copying an empty stream buffer sets failbit on `text`; an empty file is an empty preset, not an error.
    if (in.peek() != std::ifstream::traits_type::eof()) text << in.rdbuf();
    if (in.bad() || text.fail()) return make_error(fmt::format("{}: cannot read the file", path));
    return parse_cc_config(text.str(), path);
  } catch (const std::exception& e) {
    return make_error(fmt::format("{}: cannot read: {}", path, e.what()));
  }
}

std::vector<std::string> builtin_cc_config_names() {
  std::vector<std::string> names;
  for (const auto& [name, text] : embedded_cc_presets()) names.emplace_back(name);
  return names;
}

Result<CcConfig> builtin_cc_config(std::string_view name) {
  if (name.substr(0, kBuiltinPrefix.size()) == kBuiltinPrefix) name.remove_prefix(kBuiltinPrefix.size());
  for (const auto& [stem, text] : embedded_cc_presets()) {
    if (stem == name) return parse_cc_config(text, fmt::format("{}{}", kBuiltinPrefix, stem));
  }
  return make_error(fmt::format("unknown built-in preset '{}'; built-in presets: {}", printable(name),
                                fmt::join(builtin_cc_config_names(), ", ")));
}

Result<CcConfig> resolve_cc_config(const std::string& path_or_name) {
  std::error_code ec;
  bool is_file = std::filesystem::is_regular_file(path_or_name, ec);
  bool looks_like_path = path_or_name.find('/') != std::string::npos || path_or_name.ends_with(".yaml") ||
                         path_or_name.ends_with(".yml");
  if (is_file || looks_like_path) {
    return load_cc_config(path_or_name);
  }
  for (const auto& [stem, text] : embedded_cc_presets()) {
    if (stem == path_or_name) return builtin_cc_config(stem);
  }
  return make_error(fmt::format("'{}' is neither a preset file nor a built-in preset; built-in presets: {}",
                                printable(path_or_name), fmt::join(builtin_cc_config_names(), ", ")));
}

std::vector<std::string> unread_settings(const CcConfig& config) {
  CcConfig copy = config;
  CcConfig defaults;
  KeyValues set;
  KeyValues unset;
  schema::visit_cc_config(copy, set);
  schema::visit_cc_config(defaults, unset);
  const std::string own(to_string(config.kind));
  std::vector<std::string> sentences;
  for (ControllerKind other : {ControllerKind::kFixedWindow, ControllerKind::kSwift, ControllerKind::kDcqcn,
                               ControllerKind::kHybrid}) {
    const std::string section(to_string(other));
    if (other == config.kind) continue;
    std::vector<std::string> keys;
    for (size_t i = 0; i < set.values.size(); ++i) {
      const auto& [path, value] = set.values[i];
      if (path.rfind(section + ".", 0) == 0 && value != unset.values[i].second) keys.push_back(path);
    }
    if (keys.empty()) continue;
    sentences.push_back(fmt::format("{} {} set, but the {} controller does not read the {} section",
                                    fmt::join(keys, ", "), keys.size() == 1 ? "is" : "are", own, section));
  }
  return sentences;
}

Result<CcConfig> apply_cc_env_overrides(const CcConfig& base,
                                        const EnvLookup& getenv_fn,
                                        std::vector<std::string>* applied) {
  try {
    return apply_env_overrides(base, getenv_fn, applied);
  } catch (const std::exception& e) {
    return make_error(fmt::format("MEGASCALE_CC_*: cannot apply: {}", e.what()));
  }
}

}  // namespace megascale::cc
