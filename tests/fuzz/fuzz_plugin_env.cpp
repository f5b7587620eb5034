// libFuzzer target: the NCCL plugin's environment parser (load_plugin_config), every knob's value
// grammar: integers, seconds, micro- and milliseconds, booleans, sizes, port lists, file patterns,
// presets by name or file, the preset's per-key overrides (MEGASCALE_CC_*) and the wire's fault knobs
// (MEGASCALE_FAULT_*). It may not crash, hang, leak or throw (ASan/UBSan watch), and:
//  - an accepted environment gives a layout (lanes, wires, stripes) and a segment size in their ranges,
//    one setting per knob and a preset that passes validate_cc_config;
//  - a refused one gets a message that names a MEGASCALE_* variable.
//
// Input: lines NAME=VALUE, the process environment as the plugin's getenv sees it. A NAME without the
// MEGASCALE_ prefix gets it (LAYOUT=wires=2 sets MEGASCALE_LAYOUT), except the launchers' LOCAL_WORLD_SIZE
// and OMPI_COMM_WORLD_LOCAL_SIZE. What touches the file system is kept to a private temporary folder:
//  - MEGASCALE_CC: a built-in preset name is passed on; any other value is preset text ("\n" in it a
//    newline), written to a file there whose path the parser gets (so "{controller: swift}" works);
//  - MEGASCALE_STATS_DIR (which the parser creates): by the value's first byte, the folder itself, a
//    regular file in it, or a path whose parent is missing;
//  - MEGASCALE_TRACE_FILE is passed on: the parser only looks at its directory.
// MPI_LOCALNRANKS is always 1, so that the local rank count never falls back to scanning sysfs.
// Inputs above 64 KiB are skipped (env_lines.h).
//
//   fuzz_plugin_env -max_total_time=60 -dict=tests/fuzz/fuzz_plugin_env.dict corpus/
//   tests/fuzz/corpus/fuzz_plugin_env/
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "config.h"
#include "env_lines.h"
#include "megascale/congestion/config.h"
#include "megascale/engine/config.h"
#include "megascale/engine/packet.h"

namespace {

using namespace megascale;

[[noreturn]] void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_plugin_env: %s: %s\n", what, detail.c_str());
  std::abort();
}

// The private folder for MEGASCALE_CC files and MEGASCALE_STATS_DIR, removed at exit. (Its name lives
// on the heap: a static string would be destroyed before an exit handler registered while building it.)
const std::string& scratch() {
  static const std::string* const dir = [] {
    std::string pattern = (std::filesystem::temp_directory_path() / "megascale-fuzz-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) fail("cannot create a temporary folder", pattern);
    std::ofstream(pattern + "/file") << "a regular file\n";
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(*dir, ec);
    });
    return new std::string(pattern);
  }();
  return *dir;
}

std::string variable_of(const std::string& name) {
  if (name.rfind("MEGASCALE_", 0) == 0 || name == "LOCAL_WORLD_SIZE" || name == "OMPI_COMM_WORLD_LOCAL_SIZE")
    return name;
  return "MEGASCALE_" + name;
}

bool is_builtin_preset(const std::string& name) {
  for (const auto& [stem, text] : cc::embedded_cc_presets()) {
    if (stem == name) return true;
  }
  return false;
}

// Rewrites the variables that would reach the file system (see the header).
void confine(std::map<std::string, std::string>& env) {
  if (auto it = env.find("MEGASCALE_CC");
      it != env.end() && !it->second.empty() && !is_builtin_preset(it->second)) {
    std::string text;
    for (size_t i = 0; i < it->second.size(); ++i) {
      if (it->second.compare(i, 2, "\\n") == 0) {
        text += '\n';
        ++i;
      } else {
        text += it->second[i];
      }
    }
    const std::string path = scratch() + "/preset.yaml";
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
    it->second = path;
  }
  if (auto it = env.find("MEGASCALE_STATS_DIR"); it != env.end() && !it->second.empty()) {
    const char* const choices[] = {"", "/file", "/missing/stats"};
    it->second = scratch() + choices[static_cast<unsigned char>(it->second[0]) % 3];
  }
  env.insert_or_assign("MPI_LOCALNRANKS", std::string(1, '1'));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > fuzz::kMaxInputBytes) return 0;
  auto env = fuzz::parse_env_lines(std::string_view(reinterpret_cast<const char*>(data), size), variable_of);
  confine(env);
  Result<nccl::PluginConfig> config =
      nccl::load_plugin_config([&env](const char* name) { return fuzz::lookup(env, name); });
  if (!config) {
    if (config.error().message.find("MEGASCALE_") == std::string::npos)
      fail("an error that names no variable", config.error().message);
    return 0;
  }
  const nccl::PluginConfig& c = *config;
  const nccl::Layout& l = c.layout;
  if (l.lanes < 1 || l.lanes > engine::kMaxLanes) fail("lanes out of range", l.text());
  if (l.wires < 1) fail("no wire per device", l.text());
  if (l.stripes < 1 || l.stripe_bytes == 0) fail("no stripe", l.text());
  if (c.segment_bytes > engine::kMaxSegmentPayload)
    fail("segment too large", std::to_string(c.segment_bytes));
  if (c.source_ports.size() != 0 && c.source_ports.size() != l.lanes)
    fail("a port list not one per lane", "");
  if (c.settings.empty()) fail("nothing echoed", "");
  if (Status s = cc::validate_cc_config(c.cc, "MEGASCALE_CC"); !s)
    fail("accepted an invalid preset", s.error().message);
  return 0;
}
