// Keyed, position-dependent data patterns.
#include "megascale/perf/pattern.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "megascale/common/splitmix.h"

namespace megascale::perf {
namespace {

// SplitMix64's finaliser (common/splitmix.h).
uint64_t mix(uint64_t z) {
  return splitmix64_mix(z);
}

uint8_t expected_byte(uint64_t key, uint64_t offset) {
  const uint64_t w = pattern_word(key, offset / 8);
  uint8_t bytes[8];
  std::memcpy(bytes, &w, 8);
  return bytes[offset % 8];
}

}  // namespace

uint64_t message_key(uint64_t row, uint64_t index, bool reply) {
  return mix((row << 40) ^ index ^ (reply ? 0x8000000000000000ULL : 0));
}

uint64_t pattern_word(uint64_t key, uint64_t word_index) {
  return mix(key + 0x9E3779B97F4A7C15ULL * (word_index + 1));
}

void fill_pattern(uint8_t* buf, uint64_t size, uint64_t key) {
  uint64_t w = 0;
  for (; (w + 1) * 8 <= size; ++w) {
    const uint64_t v = pattern_word(key, w);
    std::memcpy(buf + w * 8, &v, 8);
  }
  if (w * 8 < size) {
    const uint64_t v = pattern_word(key, w);
    std::memcpy(buf + w * 8, &v, size - w * 8);
  }
}

int64_t find_mismatch(const uint8_t* buf, uint64_t size, uint64_t key) {
  for (uint64_t w = 0; w * 8 < size; ++w) {
    const uint64_t v = pattern_word(key, w);
    const uint64_t n = std::min<uint64_t>(8, size - w * 8);
    if (std::memcmp(buf + w * 8, &v, n) != 0) {
      for (uint64_t i = 0; i < n; ++i) {
        if (buf[w * 8 + i] != expected_byte(key, w * 8 + i)) return static_cast<int64_t>(w * 8 + i);
      }
    }
  }
  return -1;
}

void stamp_ends(uint8_t* buf, uint64_t size, uint64_t key) {
  if (size < 16) {
    fill_pattern(buf, size, key);
    return;
  }
  const uint64_t first = pattern_word(key, 0);
  std::memcpy(buf, &first, 8);
  // The last 8 bytes hold the pattern's bytes for those offsets (they may straddle two words).
  for (uint64_t off = size - 8; off < size; ++off) buf[off] = expected_byte(key, off);
}

int64_t check_ends(const uint8_t* buf, uint64_t size, uint64_t key) {
  if (size < 16) return find_mismatch(buf, size, key);
  for (uint64_t off = 0; off < 8; ++off) {
    if (buf[off] != expected_byte(key, off)) return static_cast<int64_t>(off);
  }
  for (uint64_t off = size - 8; off < size; ++off) {
    if (buf[off] != expected_byte(key, off)) return static_cast<int64_t>(off);
  }
  return -1;
}

std::string describe_mismatch(const uint8_t* buf, uint64_t size, uint64_t key, int64_t offset,
                              uint64_t index) {
  const auto off = static_cast<uint64_t>(offset);
  return fmt::format("message {} ({} B): byte {} is 0x{:02x}, expected 0x{:02x}", index, size, off, buf[off],
                     expected_byte(key, off));
}

}  // namespace megascale::perf
