// Late ACKs, seen from the receiving side of a wire: windows in which many of the segments that arrived
// were ones this side already had. The peer resent them because no ACK came in time: its RTO or tail
// probe fired. On loopback that is a host whose polling threads wait for a CPU (with more of them than
// CPUs a run gets thousands of duplicates and a several-fold loss of bandwidth, where a good run has a
// few hundred); on a fabric also a path whose delay jumped. Either way the job is slow and nothing else
// says why, so the plugin warns (Registry::tick). The warning also says how much CPU time the hypervisor
// gave to other guests meanwhile (steal, from /proc/stat), a cause outside the job: on VMs the rounds
// with steal are the slow ones, whichever net runs in them (figures in docs/PERFORMANCE.md).
//
//   StallWatch w(5 * kNsPerSec);
//   if (w.due(now))
//     if (auto why = w.look(now, ep.segments_received, ep.duplicates_dropped, read_host_cpu())) warn(*why);
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

#include "megascale/common/units.h"

namespace megascale::nccl {

// The host's CPU time so far, in seconds summed over its CPUs: the part the hypervisor gave to other
// guests while this one's vCPUs wanted to run (steal).
struct HostCpu {
  double steal_s = 0;
};

// The "cpu " line of /proc/stat's text (user nice system idle iowait irq softirq steal ..., in units of
// 1 / ticks_per_s seconds); nullopt without one or with fewer than 8 numbers (no steal column).
inline std::optional<HostCpu> parse_host_cpu(std::string_view stat, long ticks_per_s) {
  if (ticks_per_s <= 0) return std::nullopt;
  size_t at = 0;
  while (at < stat.size() && stat.compare(at, 4, "cpu ") != 0) {
    const size_t nl = stat.find('\n', at);
    if (nl == std::string_view::npos) return std::nullopt;
    at = nl + 1;
  }
  if (at >= stat.size()) return std::nullopt;
  std::string_view line = stat.substr(at + 4);
  line = line.substr(0, line.find('\n'));
  unsigned long long v[8] = {};
  int n = 0;
  for (size_t i = 0; n < 8 && i < line.size();) {
    while (i < line.size() && line[i] == ' ') ++i;
    if (i >= line.size() || line[i] < '0' || line[i] > '9') break;
    unsigned long long x = 0;
    while (i < line.size() && line[i] >= '0' && line[i] <= '9')
      x = x * 10 + static_cast<unsigned>(line[i++] - '0');
    v[n++] = x;
  }
  if (n < 8) return std::nullopt;
  return HostCpu{.steal_s = static_cast<double>(v[7]) / static_cast<double>(ticks_per_s)};
}

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

  // The endpoint's running totals at `now`, and the host's CPU time (nullopt: not known). Returns what to
  // warn of when the window that ends here had many duplicates and no warning was given in the last
  // kQuietNs; the first look only starts a window.
  std::optional<std::string> look(TimeNs now, uint64_t segments, uint64_t duplicates,
                                  const std::optional<HostCpu>& host) {
    if (!started_) {
      started_ = true;
      window_ns_ = now;
      segments_ = segments;
      duplicates_ = duplicates;
      host_ = host;
      return std::nullopt;
    }
    const uint64_t seg = segments - segments_, dup = duplicates - duplicates_;
    const TimeNs took = now - window_ns_;
    // The window's steal, when both ends were read (a counter that went back is not believed).
    const bool steal_known = host && host_ && host->steal_s >= host_->steal_s;
    const double steal_s = steal_known ? host->steal_s - host_->steal_s : 0;
    window_ns_ = now;
    segments_ = segments;
    duplicates_ = duplicates;
    host_ = host;
    const bool many =
        dup >= kMinDuplicates && static_cast<double>(dup) >= kMinShare * static_cast<double>(seg + dup);
    if (!many) return std::nullopt;
    silenced_dup_ += dup;
    silenced_seg_ += seg + dup;
    silenced_ns_ += took;
    silenced_steal_s_ += steal_s;
    silenced_steal_known_ = silenced_steal_known_ && steal_known;
    if (warned_ && now - warned_ns_ < kQuietNs) return std::nullopt;
    char text[512];
    int n = std::snprintf(
        text, sizeof text,
        "%llu of the %llu segments that arrived in %.3g s were ones this side already had: the "
        "peer resent them because its ACKs came late (a host whose threads wait for a CPU, or a "
        "path whose delay jumped)",
        static_cast<unsigned long long>(silenced_dup_), static_cast<unsigned long long>(silenced_seg_),
        static_cast<double>(silenced_ns_) / 1e9);
    if (silenced_steal_known_ && silenced_ns_ > 0 && n > 0 && static_cast<size_t>(n) < sizeof text) {
      std::snprintf(
          text + n, sizeof text - static_cast<size_t>(n),
          "; meanwhile the hypervisor ran other guests on %.2f of this host's CPUs on average (steal "
          "in /proc/stat)",
          silenced_steal_s_ / (static_cast<double>(silenced_ns_) / 1e9));
    }
    warned_ = true;
    warned_ns_ = now;
    silenced_dup_ = silenced_seg_ = 0;
    silenced_ns_ = 0;
    silenced_steal_s_ = 0;
    silenced_steal_known_ = true;
    return std::string(text);
  }

 private:
  TimeNs length_ns_;
  bool started_ = false;
  TimeNs window_ns_ = 0;  // when the current window started
  uint64_t segments_ = 0, duplicates_ = 0;
  std::optional<HostCpu> host_;  // at the window's start
  bool warned_ = false;
  TimeNs warned_ns_ = 0;
  // Windows with many duplicates since the last warning (they go into the next one).
  uint64_t silenced_dup_ = 0, silenced_seg_ = 0;
  TimeNs silenced_ns_ = 0;
  double silenced_steal_s_ = 0;
  bool silenced_steal_known_ = true;  // every one of those windows had the host's CPU time at both ends
};

}  // namespace megascale::nccl
