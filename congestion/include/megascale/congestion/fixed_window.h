// No congestion control: a fixed window sent at line rate. The baseline every controller is compared
// with ("what would the fabric do if senders never backed off?"); PFC and loss recovery are all that
// protect the network under it.
//
//   FixedWindowController cc(FixedWindowParams{.window_packets = 64}, FlowParams{.mss_bytes = 4096});
//   cc.on_ack(now, ack);            // ignored, as are CNPs, losses and timeouts
//   double window = cc.cwnd_bytes();  // always 64 * 4096; pacing_rate_bps() is always the line rate
#pragma once

#include "megascale/congestion/controller.h"
#include "megascale/congestion/params.h"

namespace megascale::cc {

class FixedWindowController final : public Controller {
 public:
  // The window is window_packets * flow.mss_bytes for the controller's whole life.
  FixedWindowController(const FixedWindowParams& params, const FlowParams& flow);

  ControllerKind kind() const override { return ControllerKind::kFixedWindow; }
  // Every signal is ignored: that is the baseline's whole point.
  void on_send(TimeNs /*now*/, uint64_t /*bytes*/) override {}
  void on_ack(TimeNs /*now*/, const AckSample& /*ack*/) override {}
  void on_cnp(TimeNs /*now*/) override {}
  void on_fast_recovery(TimeNs /*now*/) override {}
  void on_rto(TimeNs /*now*/) override {}
  void on_timer(TimeNs /*now*/) override {}
  TimeNs next_timer_ns() const override { return kNever; }
  double cwnd_bytes() const override { return cwnd_bytes_; }
  double pacing_rate_bps() const override { return line_rate_bps_; }
  // cwnd and pacing rate; every other field is 0 (no target, no alpha, never a decrease).
  ControllerState state() const override;

 private:
  double cwnd_bytes_;
  double line_rate_bps_;
};

}  // namespace megascale::cc
