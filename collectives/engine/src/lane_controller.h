// Builds a lane's congestion controller from a CcConfig. Temporary: congestion/config.h's
// make_controller (branch wip/config) replaces this once it is on main.
#pragma once

#include <memory>

#include "megascale/congestion/controller.h"
#include "megascale/congestion/params.h"

namespace megascale::engine::detail {

std::unique_ptr<cc::Controller> make_lane_controller(const cc::CcConfig& config, const cc::FlowParams& flow);

}  // namespace megascale::engine::detail
