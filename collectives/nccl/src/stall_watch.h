// Late ACKs, seen from the receiving side of a wire: windows in which many of the segments that arrived
// were ones this side already had. The peer resent them because no ACK came in time: its RTO or tail
// probe fired. On loopback that is a host whose polling threads wait for a CPU (on 4 x H200 with too many
// of them: 3,500-100,000 duplicates a run and a 5-10x loss of bandwidth, where a good run has under
// 600; docs/PERFORMANCE.md, sixteenth session); on a fabric also a path whose delay jumped. Either way
// the job is slow and nothing else says why, so the plugin warns (Registry::tick).
//
//   StallWatch w(5 * kNsPerSec);
//   if (w.due(now)) if (auto why = w.look(now, ep.segments_received, ep.duplicates_dropped)) warn(*why);
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "megascale/common/units.h"

namespace megascale::nccl {

class StallWatch {
 public:
  static constexpr TimeNs kWindowNs = 5 * kNsPerSec;  // the default window (MEGASCALE_LATE_ACK_WARN_S)
  // A window warns with at least this many duplicates, and at least kMinShare of its segments.
  static constexpr uint64_t kMinDuplicates = 500;
  static constexpr double kMinShare = 0.01;
  // At most one warning in this long (the counts of the windows between are summed into it).
  static constexpr TimeNs kQuietNs = 60 * kNsPerSec;

  // `window_ns`: how long each window is; 0: never due (no warnings).
  explicit StallWatch(TimeNs window_ns = kWindowNs) : length_ns_(window_ns) {}

  bool due(TimeNs now) const { return length_ns_ > 0 && (!started_ || now - window_ns_ >= length_ns_); }
  // Whether a window is open: a last look(), when the wire stops, then covers the part of it that ran
  // (a job shorter than a window is told too).
  bool open() const { return length_ns_ > 0 && started_; }

  // The endpoint's running totals at `now`. Returns what to warn of when the window that ends here had
  // many duplicates and no warning was given in the last kQuietNs; the first look only starts a window.
  std::optional<std::string> look(TimeNs now, uint64_t segments, uint64_t duplicates) {
    if (!started_) {
      started_ = true;
      window_ns_ = now;
      segments_ = segments;
      duplicates_ = duplicates;
      return std::nullopt;
    }
    const uint64_t seg = segments - segments_, dup = duplicates - duplicates_;
    const TimeNs took = now - window_ns_;
    window_ns_ = now;
    segments_ = segments;
    duplicates_ = duplicates;
    const bool many = dup >= kMinDuplicates && static_cast<double>(dup) >= kMinShare * static_cast<double>(seg + dup);
    if (!many) return std::nullopt;
    silenced_dup_ += dup;
    silenced_seg_ += seg + dup;
    silenced_ns_ += took;
    if (warned_ && now - warned_ns_ < kQuietNs) return std::nullopt;
    char text[320];
    std::snprintf(text, sizeof text,
                  "%llu of the %llu segments that arrived in %.3g s were ones this side already had: the peer "
                  "resent them because its ACKs came late (a host whose threads wait for a CPU, or a path "
                  "whose delay jumped)",
                  static_cast<unsigned long long>(silenced_dup_), static_cast<unsigned long long>(silenced_seg_),
                  static_cast<double>(silenced_ns_) / 1e9);
    warned_ = true;
    warned_ns_ = now;
    silenced_dup_ = silenced_seg_ = 0;
    silenced_ns_ = 0;
    return std::string(text);
  }

 private:
  TimeNs length_ns_;
  bool started_ = false;
  TimeNs window_ns_ = 0;  // when the current window started
  uint64_t segments_ = 0, duplicates_ = 0;
  bool warned_ = false;
  TimeNs warned_ns_ = 0;
  // Windows with many duplicates since the last warning (they go into the next one).
  uint64_t silenced_dup_ = 0, silenced_seg_ = 0;
  TimeNs silenced_ns_ = 0;
};

}  // namespace megascale::nccl
