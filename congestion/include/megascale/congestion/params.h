// Parameters of every controller, the RTO estimator and the pacer, with units in the names.
// Defaults are the documented starting points (congestion/README.md cites where each comes from);
// presets in configs/cc/*.yaml override them, and config.h validates every value on load.
#pragma once

#include <cstdint>
#include <string>

#include "megascale/common/units.h"
#include "megascale/congestion/controller.h"

namespace megascale::cc {

// Swift (Kumar et al., SIGCOMM '20, Algorithm 1 and §3.5). The paper publishes names, not values, for
// ai/beta/max_mdf/h/fs_*; these are the common starting set (htsim's labelled guesses).
struct SwiftParams {
  double ai_packets = 1.0;            // additive increase per RTT, packets
  double beta = 0.8;                  // multiplicative-decrease gain on excess delay
  double max_mdf = 0.5;               // largest multiplicative decrease per RTT (0..1)
  TimeNs base_target_ns = 25'000;     // delay target for one hop and few flows (paper: ~25 us on 50G)
  TimeNs per_hop_ns = 3'800;          // topology scaling: target added per forward hop (h)
  TimeNs fs_range_ns = 125'000;       // flow scaling: most the target can grow as cwnd shrinks
  double fs_min_cwnd_packets = 0.1;   // flow scaling reaches fs_range at this cwnd
  double fs_max_cwnd_packets = 100;   // flow scaling is zero at and above this cwnd
  uint32_t retx_reset_threshold = 5;  // consecutive RTOs after which cwnd drops to min_cwnd
  double min_cwnd_packets = 0.001;    // below 1 packet Swift paces (paper: as low as 0.001)
  double max_cwnd_packets = 1000;     // window ceiling
  double init_cwnd_packets = 10;      // window at start
  bool use_fabric_delay = true;       // compare rtt - remote_delay (fabric delay) with the target
};

// DCQCN reaction point (Zhu et al., SIGCOMM '15) and notification-point CNP pacing.
struct DcqcnParams {
  double g = 1.0 / 256;               // alpha EWMA gain
  double alpha_init = 1.0;            // alpha at start
  TimeNs alpha_update_ns = 55'000;    // K: alpha decays by (1-g) per period without a CNP
  TimeNs rate_increase_timer_ns = 55'000;  // T: rate-increase timer period
  uint64_t byte_counter_bytes = 10'000'000;  // B: rate-increase byte counter
  uint32_t fast_recovery_steps = 5;   // F: steps of fast recovery before additive increase
  double rate_ai_bps = 40e6;          // R_AI: additive increase step
  double rate_hai_bps = 400e6;        // R_HAI: hyper increase step
  double min_rate_bps = 1e6;          // floor on R_C
  TimeNs min_decrease_interval_ns = 0;  // cuts closer than this are merged (NIC firmware: 4 us)
  double max_decrease_fraction = 0.5;   // most one CNP may cut (NIC firmware: 50%)
  TimeNs cnp_interval_ns = 50'000;    // N: NP sends at most one CNP per flow per interval
  double window_cap_bdp = 0;          // >0: also cap in-flight at this many BDPs (DCQCN+w); 0 = none
};

// MegaScale's hybrid (NSDI '24 §3.6): Swift's RTT-vs-target plus DCQCN-style fast ECN response.
// The control law is documented in congestion/README.md.
struct HybridParams {
  SwiftParams swift;                  // delay target, AI, delay-proportional MD, pacing below 1 packet
  double g = 1.0 / 16;                // alpha EWMA gain (per RTT with/without ECN)
  double ecn_min_cut = 0.05;          // smallest cut an ECN signal causes even when alpha is tiny
};

// No congestion control: a fixed window at line rate. The baseline for comparisons.
struct FixedWindowParams {
  double window_packets = 64;         // in-flight cap, packets
};

// Adaptive retransmission timeout (RFC 6298 SRTT/RTTVAR) with a floor, a ceiling, exponential backoff,
// a randomised first timeout (NVIDIA's adaptive retransmission de-synchronises QPs the same way) and a
// total retry budget after which the connection must fail.
struct RtoParams {
  TimeNs initial_rto_ns = 1'000'000;    // before the first RTT sample
  TimeNs min_rto_ns = 100'000;          // floor
  TimeNs max_rto_ns = 1'000'000'000;    // ceiling for the backed-off timeout
  double first_jitter = 0.5;            // first timeout drawn from rto * [1 - j, 1 + j]
  uint32_t rttvar_k = 4;                // RTO = SRTT + k * RTTVAR
  TimeNs retry_budget_ns = 30'000'000'000;  // give up after this long without progress (> link flaps)
  uint32_t max_retries = 64;            // ... or after this many consecutive timeouts
};

// Rate pacer: turns a rate into send times, with a small burst allowance.
struct PacerParams {
  uint64_t burst_bytes = 16384;         // bytes that may leave back to back after an idle period
};

// A whole congestion-control preset: which controller, its parameters, RTO and pacing.
struct CcConfig {
  std::string name = "default";         // preset name (file stem or "builtin:<name>")
  ControllerKind kind = ControllerKind::kHybrid;
  FlowParams flow;
  SwiftParams swift;
  DcqcnParams dcqcn;
  HybridParams hybrid;
  FixedWindowParams fixed;
  RtoParams rto;
  PacerParams pacer;
};

}  // namespace megascale::cc
