// perf's data patterns: a flipped, shifted or stale byte is found at its offset.
#include "megascale/perf/pattern.h"

#include <gtest/gtest.h>

#include <vector>

namespace megascale::perf {
namespace {

TEST(PerfPattern, FullPatternFindsAFlippedByteAtItsOffset) {
  for (uint64_t size : {1, 7, 8, 9, 4096, 65537}) {
    std::vector<uint8_t> buf(size);
    const uint64_t key = message_key(3, 17, false);
    fill_pattern(buf.data(), size, key);
    EXPECT_EQ(find_mismatch(buf.data(), size, key), -1) << size;
    const uint64_t at = size / 2;
    buf[at] ^= 0x10;
    EXPECT_EQ(find_mismatch(buf.data(), size, key), static_cast<int64_t>(at)) << size;
  }
}

TEST(PerfPattern, KeysDifferPerRowMessageAndDirection) {
  const uint64_t k = message_key(1, 5, false);
  EXPECT_NE(k, message_key(1, 6, false));
  EXPECT_NE(k, message_key(2, 5, false));
  EXPECT_NE(k, message_key(1, 5, true));
  std::vector<uint8_t> buf(4096);
  fill_pattern(buf.data(), buf.size(), message_key(1, 4, false));  // the previous message in the buffer
  EXPECT_EQ(find_mismatch(buf.data(), buf.size(), k), 0);
}

TEST(PerfPattern, ShiftedDataIsFound) {
  std::vector<uint8_t> buf(8192), shifted(8192);
  const uint64_t key = message_key(0, 0, false);
  fill_pattern(buf.data(), buf.size(), key);
  // A segment placed 4 KiB too early: the second half copied over the first.
  std::copy(buf.begin() + 4096, buf.end(), shifted.begin());
  std::copy(buf.begin() + 4096, buf.end(), shifted.begin() + 4096);
  EXPECT_EQ(find_mismatch(shifted.data(), shifted.size(), key), 0);
}

TEST(PerfPattern, EndsStampMatchesTheFullPatternAndCatchesStaleEnds) {
  for (uint64_t size : {2, 15, 16, 17, 100, 65536}) {
    std::vector<uint8_t> full(size), stamped(size, 0xEE);
    const uint64_t key = message_key(9, 1, true);
    fill_pattern(full.data(), size, key);
    stamp_ends(stamped.data(), size, key);
    EXPECT_EQ(check_ends(full.data(), size, key), -1) << size;
    EXPECT_EQ(check_ends(stamped.data(), size, key), -1) << size;
    // The last byte from an older message.
    stamped[size - 1] ^= 0xFF;
    EXPECT_EQ(check_ends(stamped.data(), size, key), static_cast<int64_t>(size - 1)) << size;
  }
}

TEST(PerfPattern, MismatchDescriptionNamesMessageByteAndValues) {
  std::vector<uint8_t> buf(64);
  const uint64_t key = message_key(0, 2, false);
  fill_pattern(buf.data(), buf.size(), key);
  const uint8_t good = buf[10];
  buf[10] = static_cast<uint8_t>(good ^ 1);
  const std::string d = describe_mismatch(buf.data(), buf.size(), key, 10, 2);
  EXPECT_NE(d.find("message 2 (64 B): byte 10"), std::string::npos) << d;
  char expected[8];
  std::snprintf(expected, sizeof expected, "0x%02x", good);
  EXPECT_NE(d.find(std::string("expected ") + expected), std::string::npos) << d;
}

}  // namespace
}  // namespace megascale::perf
