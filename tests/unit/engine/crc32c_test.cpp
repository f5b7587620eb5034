// CRC32C: the standard check value, hardware and portable paths agreeing, and extension.
#include "megascale/engine/crc32c.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace megascale::engine {
namespace {

TEST(Crc32c, StandardCheckValue) {
  const char* s = "123456789";
  EXPECT_EQ(crc32c(s, 9), 0xE3069283U);
  EXPECT_EQ(crc32c_portable_extend(0, s, 9), 0xE3069283U);
  if (crc32c_hw_available()) {
    EXPECT_EQ(crc32c_hw_extend(0, s, 9), 0xE3069283U);
  } else {
    GTEST_LOG_(INFO) << "no SSE4.2 crc32 instruction: only the portable path was checked";
  }
}

// RFC 3720 (iSCSI) appendix B.4 test vectors.
TEST(Crc32c, IscsiVectors) {
  std::vector<uint8_t> zeros(32, 0x00), ones(32, 0xFF), inc(32), dec(32);
  for (int i = 0; i < 32; ++i) {
    inc[i] = static_cast<uint8_t>(i);
    dec[i] = static_cast<uint8_t>(31 - i);
  }
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAU);
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43U);
  EXPECT_EQ(crc32c(inc.data(), 32), 0x46DD794EU);
  EXPECT_EQ(crc32c(dec.data(), 32), 0x113FDB5CU);
  EXPECT_EQ(crc32c(nullptr, 0), 0U);
}

TEST(Crc32c, HardwareAndPortableAgreeOnRandomData) {
  if (!crc32c_hw_available()) GTEST_SKIP() << "no SSE4.2 crc32 instruction on this CPU";
  std::mt19937_64 rng(7);
  std::vector<uint8_t> buf(70'000);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (int trial = 0; trial < 500; ++trial) {
    const size_t off = rng() % 64;  // unaligned starts
    const size_t len = rng() % (buf.size() - off);
    const uint32_t seed = trial % 3 == 0 ? 0 : static_cast<uint32_t>(rng());
    ASSERT_EQ(crc32c_hw_extend(seed, buf.data() + off, len),
              crc32c_portable_extend(seed, buf.data() + off, len))
        << "off " << off << " len " << len;
  }
}

// Every length from 0 to 1000 at every alignment mod 8: covers the three-stream path's block sizes,
// its joins and the tails.
TEST(Crc32c, HardwareAndPortableAgreeOnEveryShortLength) {
  if (!crc32c_hw_available()) GTEST_SKIP() << "no SSE4.2 crc32 instruction on this CPU";
  std::mt19937_64 rng(11);
  std::vector<uint8_t> buf(1100);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t len = 0; len <= 1000; ++len) {
    for (size_t off = 0; off < 8; ++off) {
      ASSERT_EQ(crc32c_hw_extend(0x1234567U * static_cast<uint32_t>(len), buf.data() + off, len),
                crc32c_portable_extend(0x1234567U * static_cast<uint32_t>(len), buf.data() + off, len))
          << "len " << len << " off " << off;
    }
  }
}

// The AVX-512 folding path against the table: every length to 3,000 bytes (its 512-byte threshold, the
// 256-byte main loop, the 64- and 16-byte folds and the tails) at three alignments, then long buffers.
TEST(Crc32c, Avx512AndPortableAgree) {
  if (!crc32c_avx512_available()) GTEST_SKIP() << "no AVX-512 VPCLMULQDQ on this CPU: path not checked";
  std::mt19937_64 rng(13);
  std::vector<uint8_t> buf(70'000);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t len = 0; len <= 3000; ++len) {
    for (size_t off : {0, 1, 13}) {
      const auto seed = static_cast<uint32_t>(len * 0x9E3779B1U);
      ASSERT_EQ(crc32c_avx512_extend(seed, buf.data() + off, len),
                crc32c_portable_extend(seed, buf.data() + off, len))
          << "len " << len << " off " << off;
    }
  }
  for (size_t len : {8191, 8192, 16384 + 72, 65000, 69'990}) {
    ASSERT_EQ(crc32c_avx512_extend(0, buf.data() + 3, len), crc32c_portable_extend(0, buf.data() + 3, len))
        << len;
  }
  // A single flipped bit anywhere changes it.
  const uint32_t whole = crc32c_avx512_extend(0, buf.data(), 4096);
  for (size_t bit : {0, 7, 8 * 255, 8 * 256 + 1, 8 * 4095 + 7}) {
    buf[bit / 8] ^= static_cast<uint8_t>(1U << (bit % 8));
    EXPECT_NE(crc32c_avx512_extend(0, buf.data(), 4096), whole) << bit;
    buf[bit / 8] ^= static_cast<uint8_t>(1U << (bit % 8));
  }
}

TEST(Crc32c, ExtendEqualsWholeBuffer) {
  std::vector<uint8_t> buf(1000);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(i * 31 + 7);
  const uint32_t whole = crc32c(buf.data(), buf.size());
  for (size_t cut : {0, 1, 7, 8, 9, 500, 999, 1000}) {
    EXPECT_EQ(crc32c_extend(crc32c(buf.data(), cut), buf.data() + cut, buf.size() - cut), whole) << cut;
    EXPECT_EQ(crc32c_portable_extend(crc32c_portable_extend(0, buf.data(), cut), buf.data() + cut,
                                     buf.size() - cut),
              whole);
  }
  buf[500] ^= 1;
  EXPECT_NE(crc32c(buf.data(), buf.size()), whole);
}

}  // namespace
}  // namespace megascale::engine
