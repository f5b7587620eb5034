// libFuzzer target: the congestion-control preset loader (cc::parse_cc_config) and the per-key
// environment overrides (cc::apply_cc_env_overrides), on arbitrary text. Neither may crash, hang, leak
// or throw (ASan/UBSan watch; every yaml-cpp exception must come back as an Error), and:
//  - a preset the loader accepts passes validate_cc_config and builds its controller;
//  - a refused one gets a message that names the source;
//  - overrides that are accepted give a valid config; refused ones name a MEGASCALE_CC_* variable.
//
// Input: the preset's YAML text, then optionally a line "@env" and lines NAME=VALUE, the environment
// for apply_cc_env_overrides over the parsed preset (over the built-in hybrid one when the text is
// refused). A NAME without the MEGASCALE_ prefix is a key path: swift.beta=0.5 sets
// MEGASCALE_CC_SWIFT_BETA. ("@" cannot start a plain YAML scalar, so no valid preset contains the
// separator line.) Inputs above 64 KiB are skipped (env_lines.h).
//
//   fuzz_cc_preset -max_total_time=60 -dict=tests/fuzz/fuzz_cc_preset.dict corpus/
//   tests/fuzz/corpus/fuzz_cc_preset/
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "env_lines.h"
#include "megascale/congestion/config.h"

namespace {

using namespace megascale;

constexpr std::string_view kSource = "fuzz-preset.yaml";
constexpr std::string_view kEnvSeparator = "\n@env\n";

[[noreturn]] void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_cc_preset: %s: %s\n", what, detail.c_str());
  std::abort();
}

// A key path written as a name (swift.beta) becomes its variable (MEGASCALE_CC_SWIFT_BETA).
std::string variable_of(const std::string& name) {
  if (name.rfind("MEGASCALE_", 0) == 0) return name;
  std::string var = "MEGASCALE_CC_";
  for (char c : name) var += c == '.' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return var;
}

const cc::CcConfig& hybrid() {
  static const cc::CcConfig config = [] {
    auto c = cc::builtin_cc_config("hybrid");
    if (!c) fail("the built-in hybrid preset does not load", c.error().message);
    return *c;
  }();
  return config;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > fuzz::kMaxInputBytes) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find(kEnvSeparator);
  const std::string_view yaml_text = input.substr(0, split);

  Result<cc::CcConfig> preset = cc::parse_cc_config(yaml_text, kSource);
  if (preset) {
    if (Status s = cc::validate_cc_config(*preset, kSource); !s)
      fail("accepted an invalid preset", s.error().message);
    if (cc::make_controller(*preset) == nullptr) fail("accepted a preset without a controller", preset->name);
  } else if (preset.error().message.find(kSource) == std::string::npos) {
    fail("an error that does not name the source", preset.error().message);
  }

  if (split == std::string_view::npos) return 0;
  const auto env = fuzz::parse_env_lines(input.substr(split + kEnvSeparator.size()), variable_of);
  std::vector<std::string> applied;
  const cc::CcConfig& base = preset ? *preset : hybrid();
  Result<cc::CcConfig> tuned = cc::apply_cc_env_overrides(
      base, [&env](const char* name) { return fuzz::lookup(env, name); }, &applied);
  if (tuned) {
    if (Status s = cc::validate_cc_config(*tuned, "environment"); !s)
      fail("overrides gave an invalid preset", s.error().message);
  } else if (tuned.error().message.find("MEGASCALE_CC_") == std::string::npos) {
    fail("an override error that names no variable", tuned.error().message);
  }
  return 0;
}
