// A single-bottleneck model for seeing what a congestion-control preset does before deploying it: N
// long-lived flows, each with its own Controller, share one FIFO queue of capacity C with RED/ECN
// marking and a finite buffer. It is the model behind `megascale cc`.
//
//   FluidConfig model;                        // 8 flows, 100 Gb/s, 10 us base RTT, 20 ms
//   Result<FluidResult> r = run_fluid(model, cc_config);           // one Controller per flow
//   if (!r) { fmt::print(stderr, "{}\n", r.error().message); return 2; }
//   fmt::print("{:.1f} Gb/s, Jain {:.3f}\n", r->summary.goodput_gbps, r->summary.jain);
//
// The model is a small packet-level event loop in integer picoseconds, deterministic for a given
// config and seed. Each flow is always backlogged and sends one MSS segment at a time, paced at the
// controller's pacing rate and limited by its window (at least one segment may be in flight however
// small the window, so a window below one packet paces, as Swift intends). So its rate is
// min(pacing_rate, cwnd/RTT) as in a fluid model, but with segments, so ECN marks, CNPs and drops are
// counts of real packets. Every controller is driven only through the Controller interface:
//   - on_send per segment as it leaves the sender;
//   - on_ack per delivered segment, rtt_ns = base_rtt + (queue found on arrival) / C;
//   - ECN, marked at the queue with probability RED(q) (Kmin, Kmax, Pmax; a seeded PRNG decides), goes
//     back either as a CNP from a per-flow receiver CNP pacer (DCQCN) or as the ACK's ecn_ce (hybrid);
//   - a tail drop (queue + segment > buffer) reaches the sender when the following data's SACK would,
//     about one RTT later, as on_fast_recovery once per loss episode (NewReno-style: losses of data sent
//     before the episode began are the same episode);
//   - on_timer when next_timer_ns() passes.
// Lost data is not retransmitted as such: a backlogged sender just sends more, which is the same to
// goodput. There are no RTOs (every drop is learnt through SACK). Propagation is split half before the
// queue and half after; the receiver sits right behind the bottleneck (an incast's last hop).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "megascale/common/result.h"
#include "megascale/common/units.h"
#include "megascale/congestion/controller.h"
#include "megascale/congestion/params.h"

namespace megascale::sim {

// RED marking on the bottleneck's egress queue (DCQCN's congestion point):
//   p = 0 for q <= Kmin, Pmax * (q - Kmin) / (Kmax - Kmin) for Kmin < q <= Kmax, 1 above Kmax,
// where q is the queue a segment finds when it arrives.
struct EcnMarking {
  bool enabled = true;
  uint64_t kmin_bytes = 100 * 1024;
  uint64_t kmax_bytes = 400 * 1024;
  double pmax = 0.2;
};

// How the receiver tells the sender about CE marks.
enum class EcnFeedback : uint8_t {
  kAuto,     // DCQCN controllers get CNPs, every other controller the ACK's ECN echo
  kCnp,      // the receiver's CNP pacer sends at most one CNP per flow per cnp_interval_ns
  kAckEcho,  // each ACK carries ecn_ce (and ce_packets) for its segment
};

struct FluidConfig {
  int flows = 8;
  double capacity_bps = gbps(100);      // bottleneck capacity C
  double line_rate_bps = 0;             // senders' NIC rate given to controllers; 0 = capacity_bps
  TimeNs base_rtt_ns = 10'000;          // RTT through an empty queue (includes one segment's serialisation)
  uint32_t mss_bytes = 4096;            // payload bytes per segment
  uint64_t buffer_bytes = 1024 * 1024;  // bottleneck buffer; a segment that does not fit is dropped
  EcnMarking ecn;
  EcnFeedback ecn_feedback = EcnFeedback::kAuto;
  TimeNs cnp_interval_ns =
      50'000;  // receiver CNP pacing (DCQCN's N); run_fluid(model, cc) takes the preset's
  TimeNs duration_ns = 20 * kNsPerMs;
  TimeNs start_stagger_ns = 0;         // flow i starts at i * start_stagger_ns ...
  std::vector<TimeNs> start_ns;        // ... unless explicit start times are given (one per flow)
  TimeNs sample_interval_ns = 10'000;  // time-series sampling period S
  TimeNs rate_window_ns = 100'000;     // the rate series averages over this (rounded to whole S, at least S)
  uint64_t seed = 1;                   // ECN marking PRNG
};

// Checks every field's range; the message names the field and the value.
Status validate_fluid_config(const FluidConfig& config);

// Time series sampled every S from t = 0 to the end; index k is time k * S.
struct FlowSeries {
  std::vector<double> rate_gbps;       // data delivered to the receiver over the last rate window
  std::vector<double> cwnd_bytes;      // controller window (rate-based controllers report a large cap)
  std::vector<double> inflight_bytes;  // sent and not yet acknowledged or known lost
  std::vector<double> pacing_gbps;     // controller pacing rate
};

struct FluidSeries {
  std::vector<double> t_us;
  std::vector<double> queue_bytes;     // bytes waiting at the bottleneck behind the segment on the wire
  std::vector<double> queue_delay_us;  // queue_bytes / C
  std::vector<FlowSeries> flows;
};

struct FlowSummary {
  double mean_rate_gbps = 0;  // delivered over the second half of the run
  uint64_t sent_packets = 0;
  uint64_t delivered_bytes = 0;  // over the whole run
  uint64_t ecn_marks = 0;        // this flow's segments marked CE
  uint64_t cnps = 0;             // CNPs the receiver sent for this flow
  uint64_t drops = 0;            // this flow's segments dropped at the buffer
  uint64_t loss_episodes = 0;    // on_fast_recovery calls
};

struct FluidSummary {
  std::vector<FlowSummary> flows;
  double goodput_gbps = 0;       // sum of per-flow mean rates (second half)
  double capacity_fraction = 0;  // goodput / C
  double jain = 1;               // Jain's index of the per-flow mean rates
  // The queue each admitted segment found on arrival (including the rest of the segment on the wire),
  // over the whole run: the queueing delay in its RTT, and that delay times C.
  double queue_p50_bytes = 0, queue_p99_bytes = 0, queue_max_bytes = 0;
  double queue_delay_p50_us = 0, queue_delay_p99_us = 0, queue_delay_max_us = 0;
  uint64_t ecn_marks = 0, cnps = 0, drops = 0, delivered_packets = 0;
};

struct FluidResult {
  FluidSeries series;
  FluidSummary summary;
};

// Makes flow `flow_index`'s controller. Every flow gets its own instance.
using ControllerFactory =
    std::function<std::unique_ptr<cc::Controller>(const cc::FlowParams& flow, int flow_index)>;
// Told the fraction of simulated time done, 0..1, a few dozen times per run.
using ProgressFn = std::function<void(double fraction)>;

// Runs the model with controllers from `make`; FlowParams carry the model's line rate, MSS and base RTT.
Result<FluidResult> run_fluid(const FluidConfig& config, const ControllerFactory& make,
                              const ProgressFn& progress = {});

// Runs the model with cc::make_controller(preset, flow) for every flow; the receiver's CNP interval
// and the flows' hop count come from the preset (its dcqcn.cnp_interval_ns and flow.hops).
Result<FluidResult> run_fluid(const FluidConfig& config, const cc::CcConfig& preset,
                              const ProgressFn& progress = {});

// Windows at or above this are a rate-based controller's "no window" (DCQCN without a window cap).
inline constexpr double kUnboundedWindowBytes = 1e12;

// Writes the series as CSV: t_us, queue_kb, queue_delay_us, then per flow i
// f<i>_rate_gbps, f<i>_cwnd_kb, f<i>_inflight_kb, f<i>_pacing_gbps. An unbounded window is left empty.
Status write_fluid_csv(const FluidSeries& series, const std::string& path);

// 1-based CSV column of flow i's first field (rate); cwnd, inflight and pacing follow it.
inline int fluid_csv_flow_column(int flow_index) {
  return 4 + 4 * flow_index;
}

}  // namespace megascale::sim
