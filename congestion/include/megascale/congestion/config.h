// Loading, validating and instantiating congestion-control presets.
//
//   auto cfg = load_cc_config("configs/cc/hybrid.yaml");    // or builtin_cc_config("hybrid")
//   if (!cfg) { fmt::print(stderr, "{}\n", cfg.error().message); return 2; }
//   std::unique_ptr<Controller> cc = make_controller(*cfg);
//
// A preset file is YAML with the controller name, optional flow/rto/pacer sections and the section of
// its controller; see configs/cc/README.md for every key, its unit and its default. Every error names the
// file, the key and the offending value: an unknown key, a negative rate, a zero target, a fraction
// outside its range.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "megascale/common/env.h"
#include "megascale/common/result.h"
#include "megascale/congestion/controller.h"
#include "megascale/congestion/params.h"

namespace megascale::cc {

// Parses YAML text; `source` names it in errors (a path, or "builtin:<name>").
Result<CcConfig> parse_cc_config(std::string_view yaml_text, std::string_view source);

// Reads and parses a preset file.
Result<CcConfig> load_cc_config(const std::string& path);

// A preset compiled in from configs/cc/<name>.yaml.
Result<CcConfig> builtin_cc_config(std::string_view name);
std::vector<std::string> builtin_cc_config_names();

// Either a path to a YAML file or the name of a built-in preset.
Result<CcConfig> resolve_cc_config(const std::string& path_or_name);

// Applies the per-key environment overrides on top of `base`: MEGASCALE_CC_<PATH> for every key of the
// schema, the key path upper-cased with '.' -> '_' (swift.beta -> MEGASCALE_CC_SWIFT_BETA,
// hybrid.swift.min_cwnd_packets -> MEGASCALE_CC_HYBRID_SWIFT_MIN_CWND_PACKETS), values in the YAML's
// units, and MEGASCALE_CC_CONTROLLER. Unset or empty variables change nothing. The result is validated
// whole; every error names the variable, its value and the rule. `applied` (optional) gets "VAR=value"
// for each variable used, for the caller's log.
Result<CcConfig> apply_cc_env_overrides(const CcConfig& base,
                                        const EnvLookup& getenv_fn,
                                        std::vector<std::string>* applied = nullptr);

// Settings `config`'s controller never reads: for each section of another controller (swift, dcqcn,
// hybrid, fixed) that holds values other than the defaults, one sentence naming those keys, e.g.
// "dcqcn.g, dcqcn.min_rate_mbps are set, but the swift controller does not read the dcqcn section".
// Loaders log these as warnings: a preset tuned for one controller and run with another is a mistake.
std::vector<std::string> unread_settings(const CcConfig& config);

// Checks every value's range; `source` names the config in the message.
Status validate_cc_config(const CcConfig& config, std::string_view source);

// Parses a controller name: "fixed", "swift", "dcqcn", "hybrid".
Result<ControllerKind> parse_controller_kind(std::string_view name);

// Builds the controller the config names. The config must be valid.
std::unique_ptr<Controller> make_controller(const CcConfig& config);
std::unique_ptr<Controller> make_controller(const CcConfig& config, const FlowParams& flow);

// The generated table of embedded preset files: {file stem, YAML text}.
const std::vector<std::pair<std::string_view, std::string_view>>& embedded_cc_presets();

}  // namespace megascale::cc
