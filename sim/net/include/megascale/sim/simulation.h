// The packet-level simulator's kernel: integer picosecond time, events as objects, one event queue,
// one seeded PRNG. Everything in a simulation runs on this one thread in time order, and the same seed
// and inputs give the same run, event for event.
//
//   class Blinker : public EventSource {
//    public:
//     explicit Blinker(Simulation& sim) : sim_(sim) { sim_.schedule_in(ps_from_ns(10), this); }
//     void on_event() override { ++blinks; sim_.schedule_in(ps_from_ns(10), this); }
//     uint64_t blinks = 0;
//    private:
//     Simulation& sim_;
//   };
//   Simulation sim(/*seed=*/7);
//   Blinker b(sim);
//   sim.run(ps_from_ns(100));   // b.blinks == 10
//
// Design (after htsim's eventlist): time is a uint64 count of picoseconds, so a 4 KB
// frame at 400 Gbit/s (81.92 ns) keeps its exact length and nothing drifts over long runs. An event is
// an EventSource pointer; an element keeps at most one or two pending events (a link one, a queue one
// per packet in service), never one per packet in flight, so the queue stays small. The queue is a
// binary heap of (time, sequence, source): the sequence number breaks ties in scheduling order, which
// makes runs deterministic. There is no cancellation: an element whose plans changed lets the old
// event fire and ignores it (cheaper than a handle per entry for the few cases that need it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "megascale/common/splitmix.h"
#include "megascale/common/units.h"

namespace megascale::sim {

using TimePs = uint64_t;

inline constexpr TimePs kPsPerNs = 1'000;
inline constexpr TimePs kPsPerUs = 1'000'000;
inline constexpr TimePs kNeverPs = std::numeric_limits<TimePs>::max();

// Engine time (signed ns) <-> simulator time (ps). ns_from_ps rounds down: the engine sees the
// nanosecond a picosecond instant falls in.
constexpr TimePs ps_from_ns(TimeNs ns) {
  return static_cast<TimePs>(ns) * kPsPerNs;
}
constexpr TimeNs ns_from_ps(TimePs ps) {
  return static_cast<TimeNs>(ps / kPsPerNs);
}
constexpr double us_from_ps(TimePs ps) {
  return static_cast<double>(ps) / 1e6;
}

// Time to put `bytes` on a wire of `rate_bps`, rounded to the nearest picosecond (exact for every
// rate that divides 8e12, e.g. 10/25/40/50/100/200/400/800 Gbit/s). bytes must be < 2^21 (a frame).
constexpr TimePs serialization_ps(uint64_t bytes, uint64_t rate_bps) {
  return (bytes * 8'000'000'000'000ULL + rate_bps / 2) / rate_bps;
}

// SplitMix64 (Steele, Lea, Flood, OOPSLA 2014): small, fast, and the same numbers on every platform
// (std:: distributions are not portable across standard libraries).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next_u64() { return splitmix64_next(state_); }
  // Uniform in [0, 1), 53 bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  // Uniform in [0, n), n > 0 (Lemire's multiply-shift; its bias is below 2^-32 for any n < 2^32).
  uint64_t below(uint64_t n) { return static_cast<uint64_t>((next_u64() >> 32) * n >> 32); }

 private:
  uint64_t state_;
};

// Anything that acts at a point in virtual time: a link delivering, a queue finishing a frame, a host
// whose engine timer is due. The simulation calls on_event() at the time it was scheduled for.
class EventSource {
 public:
  virtual ~EventSource() = default;
  virtual void on_event() = 0;

  // Canonical order (Simulation::set_canonical_order): this source's id, the same whatever the
  // partitioning (its owner gives it, in creation order). Ids are below 2^24.
  void set_order_id(uint32_t id) { order_key_ = uint64_t{id} << 40; }

 private:
  friend class Simulation;
  uint64_t order_key_ = 0;  // id << 40 | events scheduled for this source so far
};

class Simulation {
 public:
  explicit Simulation(uint64_t seed) : rng_(seed) {}
  Simulation(const Simulation&) = delete;
  Simulation& operator=(const Simulation&) = delete;

  TimePs now() const { return now_ps_; }

  // Calls source->on_event() at `at_ps` (>= now; earlier times are taken as now). Events at the same
  // time run in the order they were scheduled.
  void schedule_at(TimePs at_ps, EventSource* source);
  void schedule_in(TimePs delay_ps, EventSource* source) { schedule_at(now_ps_ + delay_ps, source); }

  // Runs events in time order until none is left, the next one lies after `until_ps` (time then
  // stands at until_ps, unless it is kNeverPs), or stop() was called. Returns the events run.
  uint64_t run(TimePs until_ps = kNeverPs);
  // Ends the current run() after the event that calls it.
  void stop() { stopped_ = true; }
  // Partitioned runs (partition.h): runs every event before `end_ps` (strictly), then time stands at
  // end_ps, so frames handed over from other partitions for end_ps or later can still be scheduled.
  // Returns the events run.
  uint64_t run_before(TimePs end_ps);
  // The time of the earliest pending event (kNeverPs when none).
  TimePs next_event_ps() const { return heap_.empty() ? kNeverPs : heap_.front().at_ps; }

  // Canonical order: same-time events run by (source id, that source's scheduling count) instead of
  // the global scheduling order, so the order does not depend on how the fabric is partitioned
  // (partition.h); off (the default), the order is the one of before. Set before scheduling anything.
  void set_canonical_order(bool on) { canonical_ = on; }

  uint64_t events_processed() const { return events_; }
  size_t pending_events() const { return heap_.size(); }
  // The simulation's one PRNG: every random choice (RED marks, workloads) draws from it, in event
  // order, so a seed fixes the run.
  Rng& rng() { return rng_; }

 private:
  struct Entry {
    TimePs at_ps;
    uint64_t seq;
    EventSource* source;
  };
  void sift_up(size_t i);
  void sift_down(size_t i);
  static bool before(const Entry& a, const Entry& b) {
    return a.at_ps != b.at_ps ? a.at_ps < b.at_ps : a.seq < b.seq;
  }

  std::vector<Entry> heap_;
  TimePs now_ps_ = 0;
  uint64_t next_seq_ = 0;
  uint64_t events_ = 0;
  bool stopped_ = false;
  bool canonical_ = false;
  Rng rng_;
};

}  // namespace megascale::sim
