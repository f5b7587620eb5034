#include "megascale/sim/link.h"

namespace megascale::sim {

Link::Link(Simulation& sim, TimePs delay_ps, PacketSink* far_end, PacketPool* pool)
    : sim_(sim), delay_ps_(delay_ps), far_end_(far_end), pool_(pool), ring_(16) {}

void Link::set_up(bool up) {
  up_ = up;
  if (up) return;
  // The frames in flight are lost. Their ring entries stay (empty) so the one pending event keeps its
  // meaning; on_event skips them.
  for (size_t i = 0; i < count_; ++i) {
    InFlight& f = ring_[(head_ + i) & (ring_.size() - 1)];
    if (f.pkt == nullptr) continue;
    pool_->release(f.pkt);
    f.pkt = nullptr;
    ++down_drops_;
  }
}

void Link::grow() {
  std::vector<InFlight> bigger(ring_.size() * 2);
  for (size_t i = 0; i < count_; ++i) bigger[i] = ring_[(head_ + i) & (ring_.size() - 1)];
  ring_.swap(bigger);
  head_ = 0;
}

void Link::receive(Packet* pkt) {
  if (!up_) {
    pool_->release(pkt);
    ++down_drops_;
    return;
  }
  if (count_ == ring_.size()) grow();
  // Frames enter in time order and all wait the same delay, so the ring stays sorted by arrival.
  ring_[(head_ + count_) & (ring_.size() - 1)] = InFlight{sim_.now() + delay_ps_, pkt};
  if (count_++ == 0) sim_.schedule_at(sim_.now() + delay_ps_, this);
}

void Link::deliver_at(TimePs arrive_ps, Packet* pkt) {
  if (!up_) {
    pool_->release(pkt);
    ++down_drops_;
    return;
  }
  if (count_ == ring_.size()) grow();
  ring_[(head_ + count_) & (ring_.size() - 1)] = InFlight{arrive_ps, pkt};
  if (count_++ == 0) sim_.schedule_at(arrive_ps, this);
}

void Link::on_event() {
  const TimePs now = sim_.now();
  while (count_ > 0 && ring_[head_].arrive_ps <= now) {
    Packet* pkt = ring_[head_].pkt;
    head_ = (head_ + 1) & (ring_.size() - 1);
    --count_;
    if (pkt == nullptr) continue;  // lost when the link went down
    ++delivered_;
    far_end_->receive(pkt);
  }
  if (count_ > 0) sim_.schedule_at(ring_[head_].arrive_ps, this);
}

}  // namespace megascale::sim
