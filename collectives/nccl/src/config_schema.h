// The plugin's knobs as one table: every MEGASCALE_* variable the plugin reads, with its type, default,
// range or allowed values, unit, one-sentence meaning, the PluginConfig field it sets and the function
// that reads it. load_plugin_config walks the table in order (so the order is also the INFO echo's),
// the unknown-variable warning takes its names as the known ones, and docs/CONFIG.md's plugin tables
// are rendered from it (render_markdown; `megascale_config_doc --write docs/CONFIG.md` rewrites them and
// tests/unit/nccl/plugin_config_schema_test.cpp fails when they differ).
//
//   for (const schema::Knob& k : schema::plugin_knobs()) std::printf("%s\n", k.name.data());
//
// Integer knobs are read by one reader from the row's range (lo..hi, in the row's unit), so the range
// in the docs, in the check and in the error ("MEGASCALE_TC=300: must be an integer in 0..255") is one
// number. Knobs whose value depends on others (the layout on MEGASCALE_LOCAL_RANKS and the CPUs, the
// RTO floor on the preset's max_rto) resolve in their row's reader, which the row's text describes.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "config.h"
#include "megascale/common/env.h"
#include "megascale/common/result.h"

namespace megascale::nccl::schema {

enum class Type {
  kInteger,   // a whole number in lo..hi of `unit`
  kFlag,      // 0 or 1 (also true/false, yes/no, on/off)
  kSeconds,   // a number of seconds
  kChoice,    // one of the words in `allowed`
  kText,      // free text: a name, a path, a list
  kLayout,    // MEGASCALE_LAYOUT's key=value list (layout.h)
  kFamily,    // a family of variables another part of megascale reads and checks (the name has a `*`)
  kReplaced,  // a variable no longer read: set, it fails init naming its replacement (`allowed`)
};
std::string_view type_name(Type type);

struct Reader;  // the state of one load (config_schema.cpp)

struct Knob {
  std::string_view name;  // "MEGASCALE_TC"; a family: "MEGASCALE_FAULT_*"
  Type type;
  std::string_view unit;          // "us", "bytes", ...; empty where the type says it
  std::string_view default_text;  // the default as the docs state it
  std::string_view allowed;       // values or range in words; empty for kInteger (lo..hi)
  std::string_view description;   // one sentence
  std::string_view lands_in;      // the PluginConfig field it sets
  long long lo = 0, hi = 0;       // kInteger: the range, in `unit`
  // Reads the knob (Reader::env), sets its field, records its Setting; fails with the variable's name.
  Status (*read)(Reader& r, const Knob& k) = nullptr;
};

// Every knob, in the order they are read and echoed.
const std::vector<Knob>& plugin_knobs();

// "0..255" for an integer row, else the row's `allowed`.
std::string allowed_text(const Knob& k);

// Every variable name the table covers: each row's name, and each family's members as their readers
// ask for them (MEGASCALE_CC_SWIFT_BETA, MEGASCALE_FAULT_DROP, ...). Sorted.
std::vector<std::string> known_names();

// The other programs' MEGASCALE_* variables that may be set where the plugin is loaded (the
// conformance harness's peer, the null net, the trainer, scripts): no unknown-variable warning. A name
// ending in '_' stands for every name it begins.
const std::vector<std::string_view>& other_programs_names();

// The plugin tables of docs/CONFIG.md: the knobs, then the replaced variables.
std::string render_markdown();

// `doc` with the text between kBeginMarker and kEndMarker lines replaced by `generated`; an error when
// the markers are missing.
inline constexpr std::string_view kBeginMarker =
    "<!-- BEGIN plugin knobs: generated from collectives/nccl/src/config_schema.cpp -->";
inline constexpr std::string_view kEndMarker = "<!-- END plugin knobs -->";
Result<std::string> splice_generated(const std::string& doc, const std::string& generated);

// Reads every row of the table into a PluginConfig (load_plugin_config adds the unknown-name check).
Result<PluginConfig> read_all(const EnvLookup& getenv_fn);

}  // namespace megascale::nccl::schema
