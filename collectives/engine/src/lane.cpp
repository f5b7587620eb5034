// The send half's lanes: one congestion controller, pacer, in-flight count and path id each; lane
// choice per segment; PLB-style repathing.
#include <algorithm>

#include "megascale/congestion/config.h"
#include "sender.h"

namespace megascale::engine::detail {

void SendHalf::init_lanes(TimeNs now) {
  cc::FlowParams flow = cfg_.cc.flow;
  flow.mss_bytes = seg_bytes_;
  if (cfg_.tail_probe) tlp_seqs_.reserve(lanes_.size());  // never allocates on the probe path
  for (size_t i = 0; i < lanes_.size(); ++i) {
    Lane& lane = lanes_[i];
    lane.cc = cc::make_controller(cfg_.cc, flow);
    lane.pacer = cc::Pacer(cfg_.cc.pacer, lane.cc->pacing_rate_bps());
    do {
      lane.stats.path_id = static_cast<uint32_t>(splitmix64(rng_));
    } while (lane.stats.path_id == kHomePathId);  // reserved for packets without a lane
    lane_refresh(now, lane);
  }
}

void SendHalf::lane_refresh(TimeNs now, Lane& lane) {
  lane.cwnd_bytes = lane.cc->cwnd_bytes();
  // No lane waits longer to send a segment than the transport ever waits for an ACK (the RTO ceiling).
  // Swift paces one segment per rtt/cwnd below one packet; at its 0.001-packet floor that is 1,000 RTTs,
  // which with an RTT inflated by a stalled host (milliseconds) would be tens of seconds of silence.
  // In a fabric (RTTs of microseconds) the cap never binds: Swift's gaps stay far below it.
  const double rate = std::max(lane.cc->pacing_rate_bps(), pacing_floor_bps_);
  if (rate != lane.pacer.rate_bps()) lane.pacer.set_rate(now, rate);
  lane.stats.cwnd_bytes = lane.cwnd_bytes;
  lane.stats.pacing_rate_bps = rate;
}

int SendHalf::pick_lane(TimeNs now, uint32_t len, TimeNs* wake) {
  const auto n = static_cast<uint32_t>(lanes_.size());
  const uint64_t wire_bytes = uint64_t{len} + kSegHeaderBytes;
  for (uint32_t k = 0; k < n; ++k) {
    uint32_t i = lane_rr_ + k;
    if (i >= n) i -= n;
    Lane& lane = lanes_[i];
    // Below one segment of window a controller paces instead (Swift §3.4): one segment may always be
    // in flight.
    if (lane.in_flight != 0 && static_cast<double>(lane.in_flight + len) > lane.cwnd_bytes) continue;
    TimeNs t = lane.pacer.next_send_ns(now, wire_bytes);
    if (t > now) {
      // A rate-based controller (DCQCN) raises its rate by its own timers: catch them up before
      // concluding that the pacer blocks.
      if (lane.cc->next_timer_ns() <= now) {
        lane.cc->on_timer(now);
        lane_refresh(now, lane);
        t = lane.pacer.next_send_ns(now, wire_bytes);
      }
      if (t > now) {
        *wake = std::min(*wake, t);
        // Those timers are no deadline of ours: a later poll may find the rate raised before `wake`.
        if (lane.cc->next_timer_ns() != kNever) poll_again_ = true;
        continue;
      }
    }
    lane_rr_ = i + 1 >= n ? 0 : i + 1;
    return static_cast<int>(i);
  }
  return -1;
}

void SendHalf::lane_rtt_sample(TimeNs now, Lane& lane, TimeNs rtt_ns, bool ce) {
  if (cfg_.repath_delay_rtts == 0) return;
  if (lane.target_delay_ns > 0 && rtt_ns > lane.target_delay_ns) lane.round_over_target = true;
  if (ce) lane.round_ce = true;
  if (now < lane.round_end_ns) return;
  // One round per RTT: a lane is "bad" in a round where its delay exceeded the controller's target and
  // ECN marked it; repeated bad rounds mean its path is congested while others may not be (PLB).
  if (lane.round_end_ns != 0) {
    lane.bad_rounds = (lane.round_over_target && lane.round_ce) ? lane.bad_rounds + 1 : 0;
    if (lane.bad_rounds >= cfg_.repath_delay_rtts) repath(now, lane);
  }
  lane.round_over_target = false;
  lane.round_ce = false;
  lane.round_end_ns = now + std::max<TimeNs>(rtt_ns, 1);
  lane.target_delay_ns = static_cast<TimeNs>(lane.cc->state().target_delay_ns);
}

void SendHalf::lane_floor_check(TimeNs now, Lane& lane) {
  if (!lane.cc->at_floor()) {
    lane.floor_since_ns = kNever;
    lane.floor_counted = false;
    return;
  }
  if (lane.floor_since_ns == kNever) lane.floor_since_ns = now;
  // ACKs keep arriving, so neither the RTO nor the retry budget will ever end this: only a count says
  // that the lane crawls (a delay-based controller reading a host's own scheduling as fabric delay).
  if (cfg_.floor_stall_ns == 0 || lane.floor_counted || now - lane.floor_since_ns < cfg_.floor_stall_ns)
    return;
  lane.floor_counted = true;
  ++lane.stats.floor_stalls;
  ++stats_.floor_stalls;
  ++ep_stats_->floor_stalls;
}

void SendHalf::repath(TimeNs now, Lane& lane) {
  uint32_t next = lane.stats.path_id;
  while (next == lane.stats.path_id || next == kHomePathId) next = static_cast<uint32_t>(splitmix64(rng_));
  lane.stats.path_id = next;
  lane.path_since_ns = now;
  ++lane.stats.repaths;
  ++stats_.repaths;
  lane.bad_rounds = 0;
}

}  // namespace megascale::engine::detail
