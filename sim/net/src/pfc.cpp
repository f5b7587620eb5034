#include "megascale/sim/pfc.h"

#include <algorithm>
#include <cmath>

namespace megascale::sim {

uint64_t pfc_headroom_bytes(const PfcConfig& pfc, TimePs delay_ps, uint64_t rate_bps) {
  if (pfc.headroom_bytes != 0) return pfc.headroom_bytes;
  // Bytes on the wire in one delay, rounded up: delay_ps * rate_bps / (8 * 1e12).
  const auto wire =
      static_cast<uint64_t>(std::ceil(static_cast<double>(delay_ps) * static_cast<double>(rate_bps) / 8e12));
  return 2 * wire + 2 * uint64_t{pfc.max_frame_bytes};
}

SwitchIngress::SwitchIngress(Simulation& sim, PacketPool& pool, PacketSink* sw, OutputQueue* upstream,
                             TimePs link_delay_ps, uint64_t rate_bps, const PfcConfig& pfc)
    : sim_(sim),
      pool_(pool),
      switch_(sw),
      upstream_(upstream),
      delay_ps_(link_delay_ps),
      pfc_(pfc),
      headroom_bytes_(pfc_headroom_bytes(pfc, link_delay_ps, rate_bps)) {}

uint64_t SwitchIngress::xoff_threshold_bytes() const {
  if (!dynamic()) return pfc_.xoff_bytes;
  return static_cast<uint64_t>(pfc_.alpha * static_cast<double>(shared_->free_bytes()));
}

void SwitchIngress::receive(Packet* pkt) {
  ++stats_.frames;
  if (data_only_ && pkt->priority != kPriorityData) {
    switch_->receive(pkt);  // not in the lossless class: no PFC accounting
    return;
  }
  if (dynamic()) {
    receive_dynamic(pkt);
    return;
  }
  if (pfc_.enabled && held_bytes_ + pkt->wire_bytes > pfc_.xoff_bytes + headroom_bytes_) {
    ++stats_.headroom_drops;
    pool_.release(pkt);
    return;
  }
  held_bytes_ += pkt->wire_bytes;
  stats_.max_bytes = std::max(stats_.max_bytes, held_bytes_);
  pkt->ingress = this;
  if (shared_ != nullptr && pfc_.enabled) shared_->add(pkt->wire_bytes);  // lossless: charged here
  if (pfc_.enabled && !pausing_ && held_bytes_ > pfc_.xoff_bytes) send_control(true);
  switch_->receive(pkt);
}

void SwitchIngress::on_departure(const Packet* pkt) {
  if (dynamic()) {
    depart_dynamic(pkt);
    return;
  }
  held_bytes_ -= pkt->wire_bytes;
  if (shared_ != nullptr && pfc_.enabled) shared_->remove(pkt->wire_bytes);
  if (pausing_ && held_bytes_ <= pfc_.xon_bytes) send_control(false);
}

void SwitchIngress::receive_dynamic(Packet* pkt) {
  const uint64_t b = pkt->wire_bytes;
  const uint64_t shared_held = held_bytes_ - headroom_held_;
  if (headroom_held_ == 0 && shared_->admits(shared_held, b, pfc_.alpha)) {
    shared_->add(b);
  } else {
    // Over the dynamic threshold (or already into headroom): the frame is held in headroom, and the
    // upstream is paused.
    if (headroom_held_ + b > headroom_bytes_) {
      ++stats_.headroom_drops;
      pool_.release(pkt);
      return;
    }
    headroom_held_ += b;
    stats_.max_headroom_bytes = std::max(stats_.max_headroom_bytes, headroom_held_);
    if (!pausing_) send_control(true);
  }
  held_bytes_ += b;
  stats_.max_bytes = std::max(stats_.max_bytes, held_bytes_);
  pkt->ingress = this;
  switch_->receive(pkt);
}

void SwitchIngress::depart_dynamic(const Packet* pkt) {
  // Bytes are accounted per ingress, not per frame: a departure frees headroom first, then the shared
  // pool (as switch ASICs credit a priority group's headroom before its shared use), so headroom is
  // empty again before the ingress can resume.
  const uint64_t from_headroom = std::min<uint64_t>(headroom_held_, pkt->wire_bytes);
  headroom_held_ -= from_headroom;
  shared_->remove(pkt->wire_bytes - from_headroom);
  held_bytes_ -= pkt->wire_bytes;
  if (!pausing_ || headroom_held_ > 0) return;
  const uint64_t offset =
      pfc_.xon_offset_bytes != 0 ? pfc_.xon_offset_bytes : 2 * uint64_t{pfc_.max_frame_bytes};
  if (held_bytes_ == 0 || held_bytes_ + offset <= xoff_threshold_bytes()) send_control(false);
}

void SwitchIngress::send_control(bool pause) {
  pausing_ = pause;
  ++(pause ? stats_.pauses_sent : stats_.resumes_sent);
  if (remote_upstream_ != nullptr) {
    remote_upstream_->send_pause(sim_.now() + delay_ps_, pause);
    return;
  }
  in_flight_.push_back(Control{sim_.now() + delay_ps_, pause});
  if (in_flight_.size() == 1) sim_.schedule_at(in_flight_.front().arrive_ps, this);
}

void SwitchIngress::on_event() {
  const TimePs now = sim_.now();
  while (!in_flight_.empty() && in_flight_.front().arrive_ps <= now) {
    upstream_->set_paused(in_flight_.front().pause);
    in_flight_.pop_front();
  }
  if (!in_flight_.empty()) sim_.schedule_at(in_flight_.front().arrive_ps, this);
}

}  // namespace megascale::sim
