// Temporary controller factory (see lane_controller.h).
#include "lane_controller.h"

#include "megascale/congestion/dcqcn.h"
#include "megascale/congestion/fixed_window.h"
#include "megascale/congestion/hybrid.h"
#include "megascale/congestion/swift.h"

namespace megascale::engine::detail {

std::unique_ptr<cc::Controller> make_lane_controller(const cc::CcConfig& config, const cc::FlowParams& flow) {
  switch (config.kind) {
    case cc::ControllerKind::kFixedWindow: return std::make_unique<cc::FixedWindowController>(config.fixed, flow);
    case cc::ControllerKind::kSwift: return std::make_unique<cc::SwiftController>(config.swift, flow);
    case cc::ControllerKind::kDcqcn: return std::make_unique<cc::DcqcnController>(config.dcqcn, flow);
    case cc::ControllerKind::kHybrid: return std::make_unique<cc::HybridController>(config.hybrid, flow);
  }
  return std::make_unique<cc::HybridController>(config.hybrid, flow);
}

}  // namespace megascale::engine::detail
