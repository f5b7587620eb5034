// SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014): a
// Weyl sequence through a 64-bit finaliser. The project's one deterministic PRNG: small, fast, and its
// output is fixed by the seed alone on every platform (unlike <random>'s distributions), which the
// engine's ids, the fault injector, the RTO jitter and the simulators' reproducibility rely on.
//
//   uint64_t state = seed;
//   uint64_t a = splitmix64_next(state);         // the next value; advances the state
//   double u = unit_interval(splitmix64_next(state));  // uniform in [0, 1)
//   uint64_t h = splitmix64_mix(key);            // the finaliser alone: a bijection spreading every bit
#pragma once

#include <cstdint>

namespace megascale {

inline constexpr uint64_t kSplitMix64Gamma = 0x9E3779B97F4A7C15ULL;  // 2^64 / golden ratio

// The finaliser: a cheap bijection on 64-bit words that spreads every input bit over the word.
constexpr uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// The next value of the sequence whose state is `state` (advanced).
constexpr uint64_t splitmix64_next(uint64_t& state) {
  state += kSplitMix64Gamma;
  return splitmix64_mix(state);
}

// The top 53 bits of `x` as a double uniform in [0, 1).
constexpr double unit_interval(uint64_t x) {
  return static_cast<double>(x >> 11) * 0x1.0p-53;
}

}  // namespace megascale
