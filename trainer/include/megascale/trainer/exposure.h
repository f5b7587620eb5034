// Exposed and overlapped communication from a step's GPU intervals: what the per-step profile and the
// timeline summary (scripts/train-timeline-summary.py, the same rule) report.
//
// Lane 0 is the compute stream; its communication is exposed whole (the stream does nothing else while
// it runs). Communication on the other lanes (the data-parallel stream, the pipeline's sends and
// receives) is overlapped where the compute stream was busy at the same time (computing or
// communicating) and exposed where it was not: then the compute stream was waiting for it, or had
// nothing to run. Each lane's own overlaps are counted once (the union of its intervals).
//
//   std::vector<Interval> compute = {{0, 4}}, compute_comm = {{4, 5}}, other = {{3, 7}};
//   Exposure e = exposure(compute, compute_comm, {other});  // exposed 1 + 2, overlapped 2
#pragma once

#include <algorithm>
#include <vector>

namespace megascale::trainer {

struct Interval {
  double begin = 0;
  double end = 0;
};

struct Exposure {
  double exposed = 0;     // lane-0 communication, and the other lanes' outside lane 0's busy time
  double overlapped = 0;  // the other lanes' communication inside lane 0's busy time
};

// The union of `v` as sorted, disjoint intervals (empty and reversed ones dropped).
inline std::vector<Interval> interval_union(std::vector<Interval> v) {
  std::erase_if(v, [](const Interval& i) { return !(i.end > i.begin); });
  std::sort(v.begin(), v.end(), [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
  std::vector<Interval> out;
  for (const Interval& i : v) {
    if (!out.empty() && i.begin <= out.back().end) {
      out.back().end = std::max(out.back().end, i.end);
    } else {
      out.push_back(i);
    }
  }
  return out;
}

// Total length of a sorted disjoint set's intersection with [b, e).
inline double covered(const std::vector<Interval>& set, double b, double e) {
  double sum = 0;
  for (const Interval& i : set) sum += std::max(0.0, std::min(e, i.end) - std::max(b, i.begin));
  return sum;
}

inline Exposure exposure(const std::vector<Interval>& lane0_compute, const std::vector<Interval>& lane0_comm,
                         const std::vector<std::vector<Interval>>& other_lanes_comm) {
  Exposure x;
  std::vector<Interval> busy = lane0_compute;
  busy.insert(busy.end(), lane0_comm.begin(), lane0_comm.end());
  busy = interval_union(std::move(busy));
  for (const Interval& i : interval_union(lane0_comm)) x.exposed += i.end - i.begin;
  for (const std::vector<Interval>& lane : other_lanes_comm) {
    for (const Interval& i : interval_union(lane)) {
      const double in = covered(busy, i.begin, i.end);
      x.overlapped += in;
      x.exposed += (i.end - i.begin) - in;
    }
  }
  return x;
}

}  // namespace megascale::trainer
