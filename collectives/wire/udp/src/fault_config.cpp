// Fault-injection configuration from a YAML `fault:` section or MEGASCALE_FAULT_* variables.
#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "megascale/common/yaml_text.h"
#include "megascale/wire/fault.h"

namespace megascale::wire {
namespace {

// Parses a whole string as a finite double; no leading/trailing junk.
bool parse_double(std::string_view text, double& out) {
  if (text.empty()) return false;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  if (*first == '+') ++first;  // from_chars refuses a leading '+'
  auto [ptr, ec] = std::from_chars(first, last, out);
  return ec == std::errc() && ptr == last && std::isfinite(out);
}

// A probability: "0.01" or "1%". Returns an error text (empty when fine).
std::string parse_probability(std::string_view text, double& out) {
  bool percent = false;
  if (!text.empty() && text.back() == '%') {
    percent = true;
    text.remove_suffix(1);
  }
  double v = 0;
  if (!parse_double(text, v)) return "not a number";
  if (percent) v /= 100.0;
  if (v < 0.0 || v > 1.0) return "a probability must be in [0, 1] (or 0%..100%)";
  out = v;
  return {};
}

std::string parse_unsigned(std::string_view text, uint64_t max, uint64_t& out) {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) {
    return "not a non-negative integer";
  }
  if (v > max) return "must be at most " + std::to_string(max);
  out = v;
  return {};
}

// Delay in microseconds (fractions allowed) -> ns, at most one minute.
std::string parse_delay_us(std::string_view text, TimeNs& out_ns) {
  double us_value = 0;
  if (!parse_double(text, us_value)) return "not a number of microseconds";
  if (us_value < 0 || us_value > 60e6) return "must be in [0, 60000000] microseconds";
  out_ns = static_cast<TimeNs>(std::llround(us_value * 1e3));
  return {};
}

Error bad(std::string_view where, std::string_view value, const std::string& why) {
  return make_error(std::string(where) + "=" + std::string(value) + ": " + why);
}

// The keys of the YAML section and the suffixes of the environment variables, one table so the two
// stay in step.
enum class Kind { kProbability, kDepth, kDelayUs, kSeed };
struct Knob {
  const char* yaml_key;
  const char* env_suffix;
  Kind kind;
  double FaultConfig::*probability;  // for kProbability
};
constexpr Knob kKnobs[] = {
    {"drop", "DROP", Kind::kProbability, &FaultConfig::drop},
    {"duplicate", "DUP", Kind::kProbability, &FaultConfig::duplicate},
    {"reorder", "REORDER", Kind::kProbability, &FaultConfig::reorder},
    {"delay", "DELAY", Kind::kProbability, &FaultConfig::delay},
    {"corrupt", "CORRUPT", Kind::kProbability, &FaultConfig::corrupt},
    {"mark_ce", "CE", Kind::kProbability, &FaultConfig::mark_ce},
    {"reorder_depth", "REORDER_DEPTH", Kind::kDepth, nullptr},
    {"delay_us", "DELAY_US", Kind::kDelayUs, nullptr},
    {"seed", "SEED", Kind::kSeed, nullptr},
};

// Applies one knob's text to `config`; error text empty on success.
std::string apply_knob(const Knob& knob, std::string_view text, FaultConfig& config) {
  switch (knob.kind) {
    case Kind::kProbability:
      return parse_probability(text, config.*knob.probability);
    case Kind::kDepth: {
      uint64_t v = 0;
      std::string err = parse_unsigned(text, 1u << 20, v);
      if (err.empty() && v == 0) err = "must be at least 1";
      if (err.empty()) config.reorder_depth = static_cast<uint32_t>(v);
      return err;
    }
    case Kind::kDelayUs:
      return parse_delay_us(text, config.delay_ns);
    case Kind::kSeed: {
      uint64_t v = 0;
      std::string err = parse_unsigned(text, std::numeric_limits<uint64_t>::max(), v);
      if (err.empty()) config.seed = v;
      return err;
    }
  }
  return "unknown knob";
}

}  // namespace

Status validate_fault_config(const FaultConfig& c, std::string_view source) {
  for (const Knob& knob : kKnobs) {
    if (knob.kind != Kind::kProbability) continue;
    const double p = c.*knob.probability;
    if (!(p >= 0.0 && p <= 1.0)) {
      return make_error(std::string(source) + ": fault." + knob.yaml_key + "=" + std::to_string(p) +
                        ": a probability must be in [0, 1]");
    }
  }
  if (c.reorder_depth == 0) return make_error(std::string(source) + ": fault.reorder_depth must be >= 1");
  if (c.delay_ns < 0) return make_error(std::string(source) + ": fault.delay_us must be >= 0");
  return {};
}

static Result<FaultConfig> parse_fault_document(std::string_view yaml_text, std::string_view source) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml_text));
  } catch (const YAML::Exception& e) {
    return make_error(std::string(source) + ": YAML: " + e.what());
  } catch (const std::exception& e) {
    return make_error(std::string(source) + ": cannot parse: " + e.what());
  }
  if (auto dups = yaml::duplicate_keys(root); !dups.empty())
    return make_error(yaml::in_file_order(std::move(dups), source));
  FaultConfig config;
  if (!root.IsMap() || !root["fault"]) return config;
  const YAML::Node section = root["fault"];
  if (section.IsNull()) return config;
  if (!section.IsMap()) return make_error(std::string(source) + ": `fault` must be a mapping");
  bool delay_given = false;
  bool delay_us_given = false;
  for (const auto& entry : section) {
    const std::string key = entry.first.as<std::string>("");
    const Knob* knob = nullptr;
    for (const Knob& k : kKnobs) {
      if (key == k.yaml_key) knob = &k;
    }
    const std::string where = std::string(source) + ": fault." + key;
    if (knob == nullptr) {
      return make_error(where +
                        ": unknown key (known: drop, duplicate, reorder, reorder_depth, delay, "
                        "delay_us, corrupt, mark_ce, seed)");
    }
    if (!entry.second.IsScalar()) return make_error(where + ": must be a scalar");
    const std::string value = entry.second.Scalar();
    if (std::string err = apply_knob(*knob, value, config); !err.empty()) return bad(where, value, err);
    delay_given |= knob->kind == Kind::kProbability && knob->probability == &FaultConfig::delay;
    delay_us_given |= knob->kind == Kind::kDelayUs;
  }
  if (delay_us_given && !delay_given && config.delay_ns > 0) config.delay = 1.0;
  if (Status s = validate_fault_config(config, source); !s) return s.error();
  return config;
}

// yaml-cpp reports by throwing, also while a tree is walked: every throw ends here as an error.
Result<FaultConfig> parse_fault_config(std::string_view yaml_text, std::string_view source) {
  try {
    return parse_fault_document(yaml_text, source);
  } catch (const std::exception& e) {
    return make_error(std::string(source) + ": cannot parse: " + e.what());
  }
}

Result<FaultConfig> load_fault_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) return make_error(path + ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  return parse_fault_config(text.str(), path);
}

Result<FaultConfig> fault_config_from_env(const FaultConfig& base, const EnvLookup& getenv_fn) {
  FaultConfig config = base;
  bool delay_given = false;
  bool delay_us_given = false;
  for (const Knob& knob : kKnobs) {
    const std::string name = std::string("MEGASCALE_FAULT_") + knob.env_suffix;
    const char* value = getenv_fn(name.c_str());
    if (value == nullptr) continue;
    if (std::string err = apply_knob(knob, value, config); !err.empty()) return bad(name, value, err);
    delay_given |= knob.kind == Kind::kProbability && knob.probability == &FaultConfig::delay;
    delay_us_given |= knob.kind == Kind::kDelayUs;
  }
  if (delay_us_given && !delay_given && config.delay_ns > 0 && config.delay == 0.0) config.delay = 1.0;
  if (Status s = validate_fault_config(config, "environment"); !s) return s.error();
  return config;
}

Result<FaultConfig> fault_config_from_env(const FaultConfig& base) {
  return fault_config_from_env(base, [](const char* name) -> const char* { return std::getenv(name); });
}

}  // namespace megascale::wire
