// make_controller: a validated CcConfig -> the controller it names, built with that controller's section.
#include "megascale/congestion/config.h"

#include <memory>

#include "megascale/congestion/dcqcn.h"
#include "megascale/congestion/fixed_window.h"
#include "megascale/congestion/hybrid.h"
#include "megascale/congestion/swift.h"

namespace megascale::cc {

std::unique_ptr<Controller> make_controller(const CcConfig& config, const FlowParams& flow) {
  switch (config.kind) {
    case ControllerKind::kFixedWindow:
      return std::make_unique<FixedWindowController>(config.fixed, flow);
    case ControllerKind::kSwift:
      return std::make_unique<SwiftController>(config.swift, flow);
    case ControllerKind::kDcqcn:
      return std::make_unique<DcqcnController>(config.dcqcn, flow);
    // The hybrid takes its Swift part from hybrid.swift, never from the top-level swift section.
    case ControllerKind::kHybrid:
      return std::make_unique<HybridController>(config.hybrid, flow);
  }
  return nullptr;  // not reached: every ControllerKind is handled above
}

std::unique_ptr<Controller> make_controller(const CcConfig& config) {
  return make_controller(config, config.flow);
}

}  // namespace megascale::cc

