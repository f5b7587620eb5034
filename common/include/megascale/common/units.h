// Time and rate units. Time inside the transport and congestion control is signed 64-bit nanoseconds
// passed in by the caller (a real clock in production, virtual time in the simulator); nothing reads a
// clock itself. The simulator keeps picoseconds internally and converts at the engine boundary.
#pragma once

#include <cstdint>
#include <limits>

namespace megascale {

using TimeNs = int64_t;

// A deadline that never arrives ("no timer pending").
inline constexpr TimeNs kNever = std::numeric_limits<TimeNs>::max();

inline constexpr TimeNs kNsPerUs = 1'000;
inline constexpr TimeNs kNsPerMs = 1'000'000;
inline constexpr TimeNs kNsPerSec = 1'000'000'000;

constexpr TimeNs us(double v) { return static_cast<TimeNs>(v * 1e3); }
constexpr TimeNs ms(double v) { return static_cast<TimeNs>(v * 1e6); }
constexpr TimeNs sec(double v) { return static_cast<TimeNs>(v * 1e9); }

constexpr double gbps(double v) { return v * 1e9; }
constexpr double mbps(double v) { return v * 1e6; }

// Time to serialise `bytes` at `rate_bps`, in ns (fractional).
constexpr double serialize_ns(double bytes, double rate_bps) { return bytes * 8.0 * 1e9 / rate_bps; }

}  // namespace megascale
