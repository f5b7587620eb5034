#include "megascale/sim/link.h"

namespace megascale::sim {

Link::Link(Simulation& sim, TimePs delay_ps, PacketSink* far_end)
    : sim_(sim), delay_ps_(delay_ps), far_end_(far_end), ring_(16) {}

void Link::grow() {
  std::vector<InFlight> bigger(ring_.size() * 2);
  for (size_t i = 0; i < count_; ++i) bigger[i] = ring_[(head_ + i) & (ring_.size() - 1)];
  ring_.swap(bigger);
  head_ = 0;
}

void Link::receive(Packet* pkt) {
  if (count_ == ring_.size()) grow();
  // Frames enter in time order and all wait the same delay, so the ring stays sorted by arrival.
  ring_[(head_ + count_) & (ring_.size() - 1)] = InFlight{sim_.now() + delay_ps_, pkt};
  if (count_++ == 0) sim_.schedule_at(sim_.now() + delay_ps_, this);
}

void Link::on_event() {
  const TimePs now = sim_.now();
  while (count_ > 0 && ring_[head_].arrive_ps <= now) {
    Packet* pkt = ring_[head_].pkt;
    head_ = (head_ + 1) & (ring_.size() - 1);
    --count_;
    ++delivered_;
    far_end_->receive(pkt);
  }
  if (count_ > 0) sim_.schedule_at(ring_[head_].arrive_ps, this);
}

}  // namespace megascale::sim
