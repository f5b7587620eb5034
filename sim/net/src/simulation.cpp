// The event queue: a binary heap in a vector, sifted by hand (fewer moves than std::push_heap's
// general form, and no comparator object in the hot loop).
#include "megascale/sim/simulation.h"

#include <utility>

namespace megascale::sim {

void Simulation::schedule_at(TimePs at_ps, EventSource* source) {
  const uint64_t seq = canonical_ ? source->order_key_++ : next_seq_++;
  heap_.push_back(Entry{at_ps < now_ps_ ? now_ps_ : at_ps, seq, source});
  sift_up(heap_.size() - 1);
}

void Simulation::sift_up(size_t i) {
  const Entry e = heap_[i];
  while (i > 0) {
    const size_t parent = (i - 1) / 2;
    if (!before(e, heap_[parent])) break;
    heap_[i] = heap_[parent];
    i = parent;
  }
  heap_[i] = e;
}

void Simulation::sift_down(size_t i) {
  const size_t n = heap_.size();
  const Entry e = heap_[i];
  for (;;) {
    size_t child = 2 * i + 1;
    if (child >= n) break;
    if (child + 1 < n && before(heap_[child + 1], heap_[child])) ++child;
    if (!before(heap_[child], e)) break;
    heap_[i] = heap_[child];
    i = child;
  }
  heap_[i] = e;
}

uint64_t Simulation::run(TimePs until_ps) {
  stopped_ = false;
  uint64_t ran = 0;
  while (!heap_.empty() && !stopped_) {
    const Entry top = heap_.front();
    if (top.at_ps > until_ps) break;
    heap_.front() = heap_.back();
    heap_.pop_back();
    if (!heap_.empty()) {
      sift_down(0);
      // The next event's object is usually cold at 10,000-host scale (one of ~100 k queues, links and
      // hosts): start fetching it while this event runs. A hint only; the order is unchanged.
      __builtin_prefetch(heap_.front().source);
    }
    now_ps_ = top.at_ps;
    ++ran;
    ++events_;
    top.source->on_event();
  }
  if (!stopped_ && until_ps != kNeverPs && now_ps_ < until_ps) now_ps_ = until_ps;
  return ran;
}

uint64_t Simulation::run_before(TimePs end_ps) {
  if (end_ps == 0) return 0;
  // Integer time: "before end" is "at or before end - 1". stop() is not used by partitioned runs.
  const uint64_t ran = run(end_ps - 1);
  if (now_ps_ < end_ps) now_ps_ = end_ps;
  return ran;
}

}  // namespace megascale::sim
