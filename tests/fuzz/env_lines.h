// Fuzz input helpers shared by fuzz_cc_preset and fuzz_plugin_env: an environment written as lines of
// NAME=VALUE, looked up as getenv would, and the cap on an input's size.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>

namespace megascale::fuzz {

// Inputs above this are skipped, so that one unit's cost stays bounded whatever -max_len libFuzzer is
// given: the loaders' costs grow with the text, and a 60 s run should spend its time on many inputs.
inline constexpr size_t kMaxInputBytes = 64 * 1024;

// NAME=VALUE lines (the first '=' splits; a line without one is skipped; a later line for a name
// replaces an earlier one). `name_of` maps each written name to the variable it sets.
template <class NameOf>
std::map<std::string, std::string> parse_env_lines(std::string_view text, NameOf&& name_of) {
  std::map<std::string, std::string> env;
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    env[name_of(std::string(line.substr(0, eq)))] = std::string(line.substr(eq + 1));
  }
  return env;
}

// getenv over `env`: nullptr when a name is not there.
inline const char* lookup(const std::map<std::string, std::string>& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : it->second.c_str();
}

}  // namespace megascale::fuzz
