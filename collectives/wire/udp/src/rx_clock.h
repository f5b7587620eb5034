// Kernel receive timestamps in the transport's clock. The kernel stamps every received datagram when it
// enters the stack (SO_TIMESTAMPNS: software receive timestamp) with CLOCK_REALTIME; the transport runs on
// CLOCK_MONOTONIC. RxClock keeps the offset between the two, measured now and then at progress time.
//
//   RxClock clock;
//   if (clock.stale(now)) clock.refresh();
//   TimeNs rx = clock.to_monotonic(realtime_stamp_ns);   // then sanity-check against now
//
// Error: the kernel derives both clocks from one clocksource read plus a per-clock offset
// (CLOCK_REALTIME = CLOCK_MONOTONIC + offs_real), and NTP frequency slewing moves both alike, so their
// difference is constant until the realtime clock is stepped (settimeofday, an NTP step, a leap second).
// The offset is measured by reading CLOCK_MONOTONIC, CLOCK_REALTIME, CLOCK_MONOTONIC (vDSO, no system
// call) and taking the tightest of three brackets: its error is at most half that bracket, typically
// 10-30 ns (error_ns()). A step of the realtime clock makes stamps wrong by the step until the next
// refresh (kRefreshNs); the wire drops stamps that land in the future or too far in the past
// (kMaxRxAgeNs) and falls back to the processing time. Internal to collectives/wire/udp.
#pragma once

#include <time.h>

#include <cstdint>

#include "megascale/common/units.h"

namespace megascale::wire::detail {

class RxClock {
 public:
  static constexpr TimeNs kRefreshNs = kNsPerMs;
  // Stamps older than this (or later than now by more than kMaxRxAheadNs) are treated as wrong.
  static constexpr TimeNs kMaxRxAgeNs = kNsPerSec;
  static constexpr TimeNs kMaxRxAheadNs = 100 * kNsPerUs;

  // Measures the offset (CLOCK_REALTIME - CLOCK_MONOTONIC).
  void refresh() {
    TimeNs best_width = kNever;
    for (int i = 0; i < 3; ++i) {
      const TimeNs m0 = read(CLOCK_MONOTONIC);
      const TimeNs r = read(CLOCK_REALTIME);
      const TimeNs m1 = read(CLOCK_MONOTONIC);
      if (m1 - m0 < best_width) {
        best_width = m1 - m0;
        offset_ns_ = r - (m0 + (m1 - m0) / 2);
        measured_at_ns_ = m1;
      }
    }
    error_ns_ = (best_width + 1) / 2;
    valid_ = true;
  }

  // True when refresh() is due at monotonic time `now`.
  bool stale(TimeNs now) const { return !valid_ || now - measured_at_ns_ >= kRefreshNs; }

  // A CLOCK_REALTIME stamp (ns) as CLOCK_MONOTONIC ns.
  TimeNs to_monotonic(TimeNs realtime_ns) const { return realtime_ns - offset_ns_; }

  // A converted stamp is plausible at monotonic time `now` (see the file comment).
  static bool plausible(TimeNs rx_ns, TimeNs now) {
    return rx_ns <= now + kMaxRxAheadNs && rx_ns >= now - kMaxRxAgeNs;
  }

  TimeNs offset_ns() const { return offset_ns_; }
  // Bound on the conversion error of the last measurement, ns.
  TimeNs error_ns() const { return error_ns_; }

  static TimeNs read(clockid_t clock) {
    timespec ts{};
    clock_gettime(clock, &ts);
    return static_cast<TimeNs>(ts.tv_sec) * kNsPerSec + ts.tv_nsec;
  }

 private:
  TimeNs offset_ns_ = 0;
  TimeNs measured_at_ns_ = 0;
  TimeNs error_ns_ = 0;
  bool valid_ = false;
};

}  // namespace megascale::wire::detail
