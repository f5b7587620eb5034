// The endpoint's service structures: which connections may have a packet to send (a ready set served
// round-robin in creation order) and when each connection's next timer is due (an indexed min-heap).
// With them poll_tx, next_deadline and on_timer cost O(log n) per connection with work instead of a scan
// of all n connections (an incast receiver holds thousands).
//
//   Schedule s;
//   s.resize(n);                             // connection indices 0..n-1 (creation order)
//   s.touch(i, core.next_deadline());        // connection i may have gained tx work or a new deadline
//   size_t i = s.ready.find_cyclic(rr);      // poll_tx: the next candidate at or after rr
//   s.ready.clear(i);                        // ... it had nothing to send
//   TimeNs t = s.deadlines.top_time();       // next_deadline
//
// A connection is in the ready set from the moment something happens to it (a post, a packet, a timer,
// creation, close) until a poll_tx finds nothing to send on it. A connection's poll_tx result can only
// turn from "nothing" to "a packet" through such an event or by time reaching one of its deadlines (a
// delayed ACK, a pacer release, a drain deadline), so the ready set plus the connections whose
// deadline is due holds every connection with a packet to send (Endpoint::poll_tx adds the latter).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "megascale/common/units.h"
#include "megascale/engine/endpoint.h"

namespace megascale::engine::detail {

// A set of indices 0..n-1 as a bitset with summary levels (bit w of level k+1 is set iff word w of
// level k is non-zero): set, clear and "first member at or after i" cost O(log64 n).
class ReadySet {
 public:
  static constexpr size_t kNone = ~size_t{0};

  // Room for indices below n; members below the old size are kept.
  void resize(size_t n) {
    if (levels_.empty()) levels_.emplace_back();
    levels_[0].resize(std::max<size_t>(1, (n + 63) / 64), 0);
    levels_.resize(1);
    while (levels_.back().size() > 1) {
      const std::vector<uint64_t>& below = levels_.back();
      std::vector<uint64_t> up((below.size() + 63) / 64, 0);
      for (size_t w = 0; w < below.size(); ++w) {
        if (below[w] != 0) up[w / 64] |= uint64_t{1} << (w % 64);
      }
      levels_.push_back(std::move(up));
    }
  }

  void set(size_t i) {
    for (std::vector<uint64_t>& words : levels_) {
      uint64_t& w = words[i / 64];
      const bool was_empty = w == 0;
      w |= uint64_t{1} << (i % 64);
      if (!was_empty) return;
      i /= 64;
    }
  }

  void clear(size_t i) {
    for (std::vector<uint64_t>& words : levels_) {
      uint64_t& w = words[i / 64];
      w &= ~(uint64_t{1} << (i % 64));
      if (w != 0) return;
      i /= 64;
    }
  }

  // Every index below n a member (n <= the size given to resize).
  void set_all(size_t n) {
    for (std::vector<uint64_t>& words : levels_) std::fill(words.begin(), words.end(), 0);
    for (size_t i = 0; i < n; ++i) set(i);
  }

  bool empty() const { return levels_.empty() || levels_.back()[0] == 0; }

  // The first member at or after `from`, else the first member (round-robin order); kNone if empty.
  size_t find_cyclic(size_t from) const {
    if (empty()) return kNone;
    const size_t i = find_from(from);
    return i != kNone ? i : find_from(0);
  }

  // The first member at or after `pos`; kNone if none.
  size_t find_from(size_t pos) const {
    size_t level = 0;
    for (;;) {  // climb until a word holds a member at or after pos
      const std::vector<uint64_t>& words = levels_[level];
      const size_t w = pos / 64;
      if (w >= words.size()) return kNone;
      const uint64_t bits = words[w] & (~uint64_t{0} << (pos % 64));
      if (bits != 0) {
        pos = w * 64 + static_cast<size_t>(__builtin_ctzll(bits));
        break;
      }
      if (level + 1 == levels_.size()) return kNone;
      pos = w + 1;  // the next word of this level, as a bit of the level above
      ++level;
    }
    while (level > 0) {  // descend to the lowest member under that summary bit
      --level;
      pos = pos * 64 + static_cast<size_t>(__builtin_ctzll(levels_[level][pos]));
    }
    return pos;
  }

 private:
  std::vector<std::vector<uint64_t>> levels_;
};

// Connection deadlines as an indexed binary min-heap: one entry per connection with a deadline,
// ordered by (time, index), updated in place when a connection's deadline moves.
class DeadlineHeap {
 public:
  // Room for indices below n (entries are kept).
  void resize(size_t n) { pos_.resize(n, kAbsent); }

  void clear() {
    for (const Node& node : heap_) pos_[node.index] = kAbsent;
    heap_.clear();
  }

  // Sets index's deadline; kNever removes it.
  void update(uint32_t index, TimeNs t) {
    uint32_t p = pos_[index];
    if (p == kAbsent) {
      if (t == kNever) return;
      p = static_cast<uint32_t>(heap_.size());
      heap_.push_back(Node{t, index});
      pos_[index] = p;
      sift_up(p);
      return;
    }
    if (heap_[p].t == t) return;
    if (t == kNever) {
      remove_at(p);
      return;
    }
    const TimeNs old = heap_[p].t;
    heap_[p].t = t;
    if (t < old) {
      sift_up(p);
    } else {
      sift_down(p);
    }
  }

  bool empty() const { return heap_.empty(); }
  TimeNs top_time() const { return heap_.empty() ? kNever : heap_[0].t; }
  uint32_t top_index() const { return heap_[0].index; }
  void pop() { remove_at(0); }

  // Calls f(index) for every entry with a deadline <= now, without removing them: a walk of the heap
  // that stops below every entry that is not due (O(1) when none is).
  template <class F>
  void for_each_due(TimeNs now, F&& f) const {
    visit_due(0, now, f);
  }

 private:
  static constexpr uint32_t kAbsent = ~uint32_t{0};
  struct Node {
    TimeNs t;
    uint32_t index;
  };

  static bool less(const Node& a, const Node& b) { return a.t != b.t ? a.t < b.t : a.index < b.index; }

  template <class F>
  void visit_due(size_t p, TimeNs now, F& f) const {
    if (p >= heap_.size() || heap_[p].t > now) return;
    f(heap_[p].index);
    visit_due(2 * p + 1, now, f);
    visit_due(2 * p + 2, now, f);
  }

  void place(size_t p, const Node& node) {
    heap_[p] = node;
    pos_[node.index] = static_cast<uint32_t>(p);
  }

  void sift_up(size_t p) {
    const Node node = heap_[p];
    while (p > 0) {
      const size_t parent = (p - 1) / 2;
      if (!less(node, heap_[parent])) break;
      place(p, heap_[parent]);
      p = parent;
    }
    place(p, node);
  }

  void sift_down(size_t p) {
    const Node node = heap_[p];
    const size_t n = heap_.size();
    for (;;) {
      size_t child = 2 * p + 1;
      if (child >= n) break;
      if (child + 1 < n && less(heap_[child + 1], heap_[child])) ++child;
      if (!less(heap_[child], node)) break;
      place(p, heap_[child]);
      p = child;
    }
    place(p, node);
  }

  void remove_at(size_t p) {
    const Node removed = heap_[p];
    pos_[removed.index] = kAbsent;
    const Node last = heap_.back();
    heap_.pop_back();
    if (p == heap_.size()) return;
    place(p, last);
    if (less(last, removed)) {
      sift_up(p);
    } else {
      sift_down(p);
    }
  }

  std::vector<Node> heap_;
  std::vector<uint32_t> pos_;  // heap position by connection index, kAbsent if none
};

// Both, as one connection sees them: ConnectionCore calls touch after an application call (post, close)
// that may give it something to send or move its deadline.
struct Schedule {
  ReadySet ready;
  DeadlineHeap deadlines;

  void resize(size_t n) {
    ready.resize(n);
    deadlines.resize(n);
  }
  void touch(uint32_t index, TimeNs deadline) {
    ready.set(index);
    deadlines.update(index, deadline);
  }
};

}  // namespace megascale::engine::detail
