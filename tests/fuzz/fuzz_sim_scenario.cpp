// libFuzzer target: the text a `megascale sim` user writes: the scenario loader
// (sim::parse_sim_scenario), the scenario's cc overrides on their preset (sim::scenario_cc_config),
// and the fabric YAML (topo::parse_fabric_yaml). Every input goes to both loaders (a scenario's seeds
// teach the fabric loader YAML, and the other way round). None may crash, hang, leak or throw
// (ASan/UBSan watch), and each refusal gets a message naming the source.
//
// The scenario's source is fuzz/scenario.yaml, a folder that does not exist, so relative fabric and cdf
// paths are looked up against the working directory only; the loader checks that they exist and reads
// nothing. scenario_cc_config runs with the scenario's controller when it is a built-in preset name
// (a path would be read), else with hybrid. Inputs above 64 KiB are skipped (env_lines.h).
//
//   fuzz_sim_scenario -max_total_time=60 -dict=tests/fuzz/fuzz_sim_scenario.dict corpus/
//   tests/fuzz/corpus/fuzz_sim_scenario/
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "env_lines.h"
#include "megascale/congestion/config.h"
#include "megascale/sim/scenario.h"
#include "megascale/topology/fabric.h"

namespace {

using namespace megascale;

constexpr std::string_view kScenarioSource = "fuzz/scenario.yaml";
constexpr std::string_view kFabricSource = "fuzz-fabric.yaml";

[[noreturn]] void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_sim_scenario: %s: %s\n", what, detail.c_str());
  std::abort();
}

bool is_builtin_preset(const std::string& name) {
  for (const auto& [stem, text] : cc::embedded_cc_presets()) {
    if (stem == name) return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > fuzz::kMaxInputBytes) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  Result<sim::SimScenario> scenario = sim::parse_sim_scenario(text, kScenarioSource);
  if (!scenario) {
    if (scenario.error().message.find(kScenarioSource) == std::string::npos)
      fail("a scenario error that does not name the source", scenario.error().message);
  } else {
    const std::string controller = is_builtin_preset(scenario->controller) ? scenario->controller : "hybrid";
    Result<cc::CcConfig> preset = sim::scenario_cc_config(*scenario, controller);
    if (preset) {
      if (Status s = cc::validate_cc_config(*preset, "scenario"); !s)
        fail("cc overrides gave an invalid preset", s.error().message);
    } else if (preset.error().message.find(kScenarioSource) == std::string::npos) {
      fail("a cc error that does not name the source", preset.error().message);
    }
  }

  Result<topo::FabricSpec> fabric = topo::parse_fabric_yaml(text, kFabricSource);
  if (!fabric && fabric.error().message.find(kFabricSource) == std::string::npos)
    fail("a fabric error that does not name the source", fabric.error().message);
  return 0;
}
