// The no-congestion-control baseline: see fixed_window.h.
#include "megascale/congestion/fixed_window.h"

namespace megascale::cc {

FixedWindowController::FixedWindowController(const FixedWindowParams& params, const FlowParams& flow)
    : cwnd_bytes_(params.window_packets * flow.mss_bytes), line_rate_bps_(flow.line_rate_bps) {}

ControllerState FixedWindowController::state() const {
  ControllerState s;
  s.cwnd_bytes = cwnd_bytes_;
  s.pacing_rate_bps = line_rate_bps_;
  return s;
}

}  // namespace megascale::cc
