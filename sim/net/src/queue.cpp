#include "megascale/sim/queue.h"

#include <algorithm>

#include "megascale/sim/pfc.h"

namespace megascale::sim {

OutputQueue::OutputQueue(Simulation& sim, PacketPool& pool, const QueueConfig& config, PacketSink* next)
    : sim_(sim), pool_(pool), cfg_(config), next_(next), rng_(&sim.rng()) {}

double OutputQueue::mark_probability(uint64_t q_bytes) const {
  const RedConfig& r = cfg_.red;
  if (!r.enabled || q_bytes < r.kmin_bytes) return 0.0;
  if (q_bytes >= r.kmax_bytes) return 1.0;
  return r.pmax * static_cast<double>(q_bytes - r.kmin_bytes) /
         static_cast<double>(r.kmax_bytes - r.kmin_bytes);
}

void OutputQueue::receive(Packet* pkt) {
  const uint8_t c = class_of(pkt);
  bool admit = true;
  if (cfg_.lossless && c == kPriorityData) {
    admit = true;  // PFC upstream bounds this class
  } else if (shared_ != nullptr) {
    admit = shared_->admits(class_bytes_[c], pkt->wire_bytes);  // Choudhury-Hahne, shared_buffer.h
  } else {
    // Per class (with one priority the class holds everything): lossless data piling up behind a
    // PAUSE must not make the port drop ACKs and CNPs.
    admit = class_bytes_[c] + pkt->wire_bytes <= cfg_.capacity_bytes;
  }
  if (!admit) {
    ++stats_.dropped;
    if (pkt->ingress != nullptr) pkt->ingress->on_departure(pkt);
    pool_.release(pkt);
    return;
  }
  if (pkt->ect && cfg_.red.enabled && backlog_bytes_ >= cfg_.red.kmin_bytes) {
    const double p = mark_probability(backlog_bytes_);
    // Draw only between Kmin and Kmax, so the PRNG sequence does not depend on traffic elsewhere.
    if (p >= 1.0 || rng_->uniform() < p) {
      if (!pkt->ce) ++stats_.marked;
      pkt->ce = true;
    }
  }
  if (egress_charged(c)) shared_->add(pkt->wire_bytes);
  pkt->next = nullptr;
  backlog_bytes_ += pkt->wire_bytes;
  class_bytes_[c] += pkt->wire_bytes;
  stats_.max_bytes = std::max(stats_.max_bytes, backlog_bytes_);
  ++stats_.enqueued;
  if (head_[c] == nullptr) {
    head_[c] = tail_[c] = pkt;
  } else {
    tail_[c]->next = pkt;
    tail_[c] = pkt;
  }
  if (!in_service_) start_service();
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
  if (!in_service_) start_service();
}

TimePs OutputQueue::paused_ps() const {
  return stats_.paused_ps + (paused_ ? sim_.now() - paused_since_ : 0);
}

void OutputQueue::start_service() {
  // With one priority everything is class 0 and a PAUSE stops the port; with two, the control class
  // goes first and is never paused (802.1Qbb pauses one priority).
  uint8_t c = kPriorityControl;
  if (cfg_.priorities < 2 || head_[kPriorityControl] == nullptr) {
    if (paused_ || head_[kPriorityData] == nullptr) return;
    c = kPriorityData;
  }
  serving_ = head_[c];
  head_[c] = serving_->next;
  if (head_[c] == nullptr) tail_[c] = nullptr;
  in_service_ = true;
  const TimePs t = serialization_ps(serving_->wire_bytes, cfg_.rate_bps);
  stats_.busy_ps += t;
  sim_.schedule_in(t, this);
}

void OutputQueue::on_event() {
  in_service_ = false;
  Packet* pkt = serving_;
  serving_ = nullptr;
  const uint8_t c = class_of(pkt);
  backlog_bytes_ -= pkt->wire_bytes;
  class_bytes_[c] -= pkt->wire_bytes;
  if (egress_charged(c)) shared_->remove(pkt->wire_bytes);
  ++stats_.sent;
  stats_.bytes_sent += pkt->wire_bytes;
  pkt->next = nullptr;
  // The frame has left this switch's buffer: its ingress may resume its upstream (PFC).
  if (pkt->ingress != nullptr) pkt->ingress->on_departure(pkt);
  next_->receive(pkt);
  start_service();
  if (!in_service_ && head_[0] == nullptr && head_[1] == nullptr && idle_listener_ != nullptr) {
    idle_listener_->on_queue_idle(*this);
  }
}

}  // namespace megascale::sim
