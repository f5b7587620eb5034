#include "megascale/sim/queue.h"

#include <algorithm>

#include "megascale/sim/pfc.h"

namespace megascale::sim {

OutputQueue::OutputQueue(Simulation& sim, PacketPool& pool, const QueueConfig& config, PacketSink* next)
    : sim_(sim), pool_(pool), cfg_(config), next_(next) {}

double OutputQueue::mark_probability(uint64_t q_bytes) const {
  const RedConfig& r = cfg_.red;
  if (!r.enabled || q_bytes < r.kmin_bytes) return 0.0;
  if (q_bytes >= r.kmax_bytes) return 1.0;
  return r.pmax * static_cast<double>(q_bytes - r.kmin_bytes) /
         static_cast<double>(r.kmax_bytes - r.kmin_bytes);
}

void OutputQueue::receive(Packet* pkt) {
  if (backlog_bytes_ + pkt->wire_bytes > cfg_.capacity_bytes) {
    ++stats_.dropped;
    if (pkt->ingress != nullptr) pkt->ingress->on_departure(pkt);
    pool_.release(pkt);
    return;
  }
  if (pkt->ect && cfg_.red.enabled && backlog_bytes_ >= cfg_.red.kmin_bytes) {
    const double p = mark_probability(backlog_bytes_);
    // Draw only between Kmin and Kmax, so the PRNG sequence does not depend on traffic elsewhere.
    if (p >= 1.0 || sim_.rng().uniform() < p) {
      if (!pkt->ce) ++stats_.marked;
      pkt->ce = true;
    }
  }
  pkt->next = nullptr;
  backlog_bytes_ += pkt->wire_bytes;
  stats_.max_bytes = std::max(stats_.max_bytes, backlog_bytes_);
  ++stats_.enqueued;
  if (head_ == nullptr) {
    head_ = tail_ = pkt;
    if (!paused_) start_service();
  } else {
    tail_->next = pkt;
    tail_ = pkt;
  }
}

void OutputQueue::set_paused(bool paused) {
  if (paused == paused_) return;
  paused_ = paused;
  if (paused) {
    ++stats_.pauses;
    paused_since_ = sim_.now();
    return;
  }
  stats_.paused_ps += sim_.now() - paused_since_;
  if (head_ != nullptr && !in_service_) start_service();
}

TimePs OutputQueue::paused_ps() const {
  return stats_.paused_ps + (paused_ ? sim_.now() - paused_since_ : 0);
}

void OutputQueue::start_service() {
  in_service_ = true;
  const TimePs t = serialization_ps(head_->wire_bytes, cfg_.rate_bps);
  stats_.busy_ps += t;
  sim_.schedule_in(t, this);
}

void OutputQueue::on_event() {
  in_service_ = false;
  Packet* pkt = head_;
  head_ = pkt->next;
  if (head_ == nullptr) tail_ = nullptr;
  backlog_bytes_ -= pkt->wire_bytes;
  ++stats_.sent;
  stats_.bytes_sent += pkt->wire_bytes;
  pkt->next = nullptr;
  // The frame has left this switch's buffer: its ingress may resume its upstream (PFC).
  if (pkt->ingress != nullptr) pkt->ingress->on_departure(pkt);
  next_->receive(pkt);
  if (head_ != nullptr) {
    if (!paused_) start_service();
  } else if (idle_listener_ != nullptr) {
    idle_listener_->on_queue_idle(*this);
  }
}

}  // namespace megascale::sim
