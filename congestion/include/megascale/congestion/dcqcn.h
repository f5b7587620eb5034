// DCQCN (Zhu et al., "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015): the
// reaction point (RP, sender) as a Controller, and the notification point's (NP, receiver) CNP pacing.
// Equations: the paper's RP and NP algorithms; parameter values: the paper's and the firmware's (below,
// each with its sources).
//
//   DcqcnController rp(dcqcn_paper_params(), FlowParams{.line_rate_bps = gbps(40)});
//   CnpPacer np(dcqcn_paper_params().cnp_interval_ns);       // at the receiver, one per flow
//   if (np.on_packet(now, packet_was_ce_marked)) send_cnp();   // ... and at the sender on its arrival:
//   rp.on_cnp(now);                                            // R_T = R_C; R_C *= 1 - alpha/2
//   rp.on_send(now, 4096);                                     // feeds the byte counter B
//   double rate = rp.pacing_rate_bps();                        // R_C
//   TimeNs wake = rp.next_timer_ns();                          // optional: the RP recovers by itself
//
// DCQCN is rate based: it reacts to CNPs only. An ACK's ECN echo is not a CNP (the NP decides CNPs),
// and loss (RTO, fast retransmit) does not change the rate, as on RoCE NICs.
#pragma once

#include <cstdint>

#include "megascale/congestion/controller.h"
#include "megascale/congestion/params.h"

namespace megascale::cc {

// The values of the paper at 40 Gbps: g = 1/256, K = T = 55 us, B = 10 MB, F = 5,
// R_AI = 40 Mbps, N = 50 us, alpha starts at 1, no merging of close CNPs; one cut is at most 50% since
// alpha <= 1. R_HAI is not given there: it keeps the DcqcnParams default.
DcqcnParams dcqcn_paper_params();

// NVIDIA ConnectX firmware style (DOCA "DCQCN CC Parameters" and HPCC-sim's
// Mellanox-style "dcqcn"): alpha updated every 1 us with g = 5/1024 (G = 1019), alpha starts at
// 1023/1024, at most one cut per 4 us (rate_reduce_monitor_period), at most 50% per cut, 1 Mbps floor,
// increase timer 300 us with F = 1, R_AI = 5 Mbps and R_HAI = 50 Mbps per 25 Gbps of `line_rate_bps`.
// B and N are not in our notes for firmware: they keep the paper's values.
DcqcnParams dcqcn_nic_firmware_params(double line_rate_bps);

// DCQCN's reaction point. Timers are virtual: every call first processes, in order, every alpha and
// rate-increase expiry up to its `now`; the clock starts at the first call. Once the rate is back at
// line rate (R_C == R_T == line rate) the increase timer stops, and once alpha decays below
// kAlphaNegligible it is set to 0 and the alpha timer stops, so a long idle gap costs a bounded
// amount of work (at most about line_rate / R_AI increase steps, and ln(1e-6) / ln(1 - g) alpha steps).
class DcqcnController final : public Controller {
 public:
  // Alpha below this is treated as 0: a cut of alpha/2 < 5e-7 is no cut.
  static constexpr double kAlphaNegligible = 1e-6;

  DcqcnController(const DcqcnParams& params, const FlowParams& flow);

  ControllerKind kind() const override { return ControllerKind::kDcqcn; }
  // Counts `bytes` on the byte counter; every B bytes is one byte-counter expiry (a rate increase).
  void on_send(TimeNs now, uint64_t bytes) override;
  // Records the RTT sample (for the optional window cap) and nothing else: ECN echo is not a CNP.
  void on_ack(TimeNs now, const AckSample& ack) override;
  // The rate cut: R_T = R_C, R_C *= 1 - min(alpha/2, max_decrease_fraction), alpha = (1-g) alpha + g,
  // increase counters and timer restart. A CNP within min_decrease_interval_ns of the last cut only
  // updates alpha.
  void on_cnp(TimeNs now) override;
  // No rate change: RoCE NICs running DCQCN do not react to loss (only catches up timers).
  void on_fast_recovery(TimeNs now) override;
  // No rate change, as on_fast_recovery.
  void on_rto(TimeNs now) override;
  void on_timer(TimeNs now) override;

  // The earliest alpha or increase expiry still pending; kNever before the first call and once the
  // rate is at line rate with alpha at 0.
  TimeNs next_timer_ns() const override;
  // window_cap_bdp * R_C * rtt (at least one MSS) when the cap is on, else effectively unlimited.
  double cwnd_bytes() const override;
  // R_C.
  double pacing_rate_bps() const override { return rate_bps_; }
  bool at_floor() const override { return rate_bps_ <= min_rate_bps_; }
  ControllerState state() const override;

  double rate_bps() const { return rate_bps_; }                // R_C
  double target_rate_bps() const { return target_rate_bps_; }  // R_T
  double alpha() const { return alpha_; }
  // Increase-timer and byte-counter expirations since the last cut (i_T, i_B).
  uint64_t timer_expirations() const { return timer_count_; }
  uint64_t byte_expirations() const { return byte_count_; }

 private:
  enum class IncreaseSource : uint8_t { kTimer, kByteCounter };

  void catch_up(TimeNs now);
  void rate_increase(IncreaseSource source);
  bool timer_steps_are_flat() const;
  bool at_line_rate() const { return rate_bps_ == line_rate_bps_ && target_rate_bps_ == line_rate_bps_; }

  DcqcnParams p_;
  FlowParams flow_;
  double line_rate_bps_;
  double min_rate_bps_;
  double rate_bps_;         // R_C
  double target_rate_bps_;  // R_T
  double alpha_;
  uint64_t timer_count_ = 0;    // i_T
  uint64_t byte_count_ = 0;     // i_B
  uint64_t bytes_counted_ = 0;  // bytes towards the next byte-counter expiry
  bool started_ = false;        // the clock starts at the first call
  TimeNs last_now_ = 0;
  TimeNs next_alpha_ns_ = kNever;     // alpha timer K
  TimeNs next_increase_ns_ = kNever;  // rate-increase timer T
  TimeNs last_cut_ns_ = 0;
  bool cut_once_ = false;
  TimeNs rtt_ns_;
  uint64_t decreases_ = 0;
};

// The notification point's CNP pacing for one flow (Zhu et al., NP algorithm): when a CE-marked
// packet arrives and no CNP was sent for this flow within the last `cnp_interval_ns`, send one CNP now. The
// first CE mark always yields a CNP; CE marks inside the interval are absorbed (not deferred); unmarked
// packets never yield one. A CNP exactly `cnp_interval_ns` after the previous one is allowed.
//
//   CnpPacer np(us(50));
//   if (np.on_packet(now, ce)) send_cnp(flow);
class CnpPacer {
 public:
  // `cnp_interval_ns` <= 0 sends a CNP for every CE-marked packet.
  explicit CnpPacer(TimeNs cnp_interval_ns) : interval_ns_(cnp_interval_ns) {}

  // A data packet of this flow arrived at `now`; true iff a CNP must be sent now.
  bool on_packet(TimeNs now, bool ce_marked);

  uint64_t cnps_sent() const { return cnps_sent_; }

 private:
  TimeNs interval_ns_;
  TimeNs last_cnp_ns_ = 0;
  uint64_t cnps_sent_ = 0;
};

}  // namespace megascale::cc
