// An environment variable lookup: the process's own (getenv_lookup()), or a map in tests, so the code
// that reads NCCL_*, MEGASCALE_* and launcher variables is tested without touching the process's
// environment. Returns nullptr for an unset variable, as getenv does.
//
//   Result<PluginConfig> config = load_plugin_config(getenv_lookup(), ...);
#pragma once

#include <cstdlib>
#include <functional>

namespace megascale {

using EnvLookup = std::function<const char*(const char*)>;

inline EnvLookup getenv_lookup() {
  return [](const char* name) -> const char* { return std::getenv(name); };
}

}  // namespace megascale
