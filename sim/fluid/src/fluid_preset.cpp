// run_fluid over a congestion-control preset. Kept apart from the model so that code (and tests)
// driving the model with their own controllers do not pull in the controller factory.
#include "megascale/congestion/config.h"
#include "megascale/sim/fluid.h"

namespace megascale::sim {

Result<FluidResult> run_fluid(const FluidConfig& config, const cc::CcConfig& preset,
                              const ProgressFn& progress) {
  if (Status s = cc::validate_cc_config(preset, preset.name); !s) return s.error();
  FluidConfig model = config;
  model.cnp_interval_ns =
      preset.dcqcn.cnp_interval_ns;  // the receiver NIC's CNP pacing goes with DCQCN's preset
  const uint8_t hops = preset.flow.hops;
  auto make = [&preset, hops](const cc::FlowParams& flow, int /*flow_index*/) {
    cc::FlowParams params = flow;
    params.hops = hops;
    return cc::make_controller(preset, params);
  };
  return run_fluid(model, make, progress);
}

}  // namespace megascale::sim
