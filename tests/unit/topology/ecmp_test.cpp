// ECMP hash models: each CRC against its catalogue check value (reveng CRC catalogue, the CRC of the
// ASCII bytes "123456789"), the table-driven hashes against the bit-at-a-time reference, seeds, offsets,
// spec parsing, and collision statistics of random flows against balls-into-bins theory.
#include "megascale/topology/ecmp.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <string_view>
#include <vector>

namespace megascale::topo {
namespace {

std::span<const uint8_t> bytes_of(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

constexpr std::string_view kCheck = "123456789";

TEST(Crc, ReferenceGivesCatalogueCheckValues) {
  // reveng.sourceforge.net/crc-catalogue: CRC-16/ARC check=0xbb3d, CRC-16/UMTS (alias BUYPASS)
  // check=0xfee8, CRC-16/IBM-3740 (alias CCITT-FALSE) check=0x29b1, CRC-16/XMODEM check=0x31c3,
  // CRC-32/ISO-HDLC check=0xcbf43926.
  EXPECT_EQ(crc_reference(kCrc16Arc, bytes_of(kCheck)), 0xBB3Du);
  EXPECT_EQ(crc_reference(kCrc16Umts, bytes_of(kCheck)), 0xFEE8u);
  EXPECT_EQ(crc_reference(kCrc16Ibm3740, bytes_of(kCheck)), 0x29B1u);
  EXPECT_EQ(crc_reference(kCrc16Xmodem, bytes_of(kCheck)), 0x31C3u);
  EXPECT_EQ(crc_reference(kCrc32IsoHdlc, bytes_of(kCheck)), 0xCBF43926u);
}

TEST(Crc, HashFunctionsWithSeedZeroAreTheCatalogueCrcs) {
  EXPECT_EQ(hash_bytes(HashFunction::crc16_bisync, 0, bytes_of(kCheck)), 0xBB3D);
  EXPECT_EQ(hash_bytes(HashFunction::crc16_ccitt, 0, bytes_of(kCheck)), 0x29B1);
  EXPECT_EQ(hash_bytes(HashFunction::crc32_lo, 0, bytes_of(kCheck)), 0x3926);
  EXPECT_EQ(hash_bytes(HashFunction::crc32_hi, 0, bytes_of(kCheck)), 0xCBF4);
  // The seed XORs the initial register: CCITT-FALSE's 0xFFFF cancelled gives XMODEM.
  EXPECT_EQ(hash_bytes(HashFunction::crc16_ccitt, 0xFFFF, bytes_of(kCheck)), 0x31C3);
}

TEST(Crc, TableDrivenMatchesReferenceOnRandomInput) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<uint8_t> data(rng() % 40);
    for (auto& b : data) b = static_cast<uint8_t>(rng());
    uint32_t seed = rng();
    CrcParams arc = kCrc16Arc;
    arc.init ^= seed & 0xFFFF;
    CrcParams ccitt = kCrc16Ibm3740;
    ccitt.init ^= seed & 0xFFFF;
    CrcParams c32 = kCrc32IsoHdlc;
    c32.init ^= seed;
    EXPECT_EQ(hash_bytes(HashFunction::crc16_bisync, seed, data), crc_reference(arc, data));
    EXPECT_EQ(hash_bytes(HashFunction::crc16_ccitt, seed, data), crc_reference(ccitt, data));
    EXPECT_EQ(hash_bytes(HashFunction::crc32_lo, seed, data), crc_reference(c32, data) & 0xFFFF);
    EXPECT_EQ(hash_bytes(HashFunction::crc32_hi, seed, data), crc_reference(c32, data) >> 16);
  }
}

TEST(Hash, XorFoldVariantsAndXor16) {
  // "123456789": bytes XOR to 0x31; folded to 4 bits 0x2, 2 bits 0x2, 1 bit (parity) 0x1.
  const uint16_t crc = 0xBB3D;
  EXPECT_EQ(hash_bytes(HashFunction::crc16_xor8, 0, bytes_of(kCheck)), crc ^ 0x31);
  EXPECT_EQ(hash_bytes(HashFunction::crc16_xor4, 0, bytes_of(kCheck)), crc ^ 0x2);
  EXPECT_EQ(hash_bytes(HashFunction::crc16_xor2, 0, bytes_of(kCheck)), crc ^ 0x2);
  EXPECT_EQ(hash_bytes(HashFunction::crc16_xor1, 0, bytes_of(kCheck)), crc ^ 0x1);
  // 16-bit words 0x3132 ^ 0x3334 ^ 0x3536 ^ 0x3738 ^ 0x3900 = 0x3908.
  EXPECT_EQ(hash_bytes(HashFunction::xor16, 0, bytes_of(kCheck)), 0x3908);
  EXPECT_EQ(hash_bytes(HashFunction::xor16, 0x00FF, bytes_of(kCheck)), 0x39F7);
}

TEST(Hash, FiveTupleKeyLayoutIsNetworkOrder) {
  FiveTuple t{0x0A000001, 0x0A010002, 0xC000, kRoceV2UdpPort, kIpProtocolUdp};
  const std::array<uint8_t, 13> key = {10, 0, 0, 1, 10, 1, 0, 2, 0xC0, 0x00, 0x12, 0xB7, 17};
  HashModel m{HashFunction::crc32_hi, 0, 0, false};
  EXPECT_EQ(ecmp_hash(m, 5, t), hash_bytes(HashFunction::crc32_hi, 0, key));
}

TEST(Hash, OffsetRotatesAndSeedsVaryPerSwitch) {
  FiveTuple t{0x0A000001, 0x0A010002, 0xC123};
  HashModel m{HashFunction::crc16_bisync, 0, 0, false};
  uint16_t h = ecmp_hash(m, 0, t);
  HashModel shifted = m;
  shifted.offset_bits = 4;
  uint16_t rotated = static_cast<uint16_t>((h >> 4) | (h << 12));
  EXPECT_EQ(ecmp_select(shifted, 0, t, 1000), rotated % 1000u);
  EXPECT_EQ(ecmp_select(m, 0, t, 1000), h % 1000u);
  // Without per-switch seeds every switch computes the same hash; with them, they differ.
  EXPECT_EQ(ecmp_hash(m, 1, t), ecmp_hash(m, 2, t));
  HashModel per = m;
  per.seed_per_switch = true;
  EXPECT_NE(ecmp_hash(per, 1, t), ecmp_hash(per, 2, t));
  EXPECT_EQ(ecmp_select(m, 0, t, 1), 0u);
}

TEST(Hash, ASeedXorsOneConstantIntoEveryKeysHash) {
  // Every model is affine in its seed: for keys of one length (the 13-byte 5-tuple), changing the seed
  // XORs the same constant into every key's hash. So switches that differ only in seed (per-switch seeds
  // included) and read the same bits of a power-of-two group relabel one choice the same way for every
  // flow: polarisation that seeds cannot break (ports_test: PerSwitchSeedsDoNotBreakPolarisation).
  std::mt19937 rng(11);
  for (HashFunction f :
       {HashFunction::crc16_bisync, HashFunction::crc16_xor8, HashFunction::crc16_xor1,
        HashFunction::crc16_ccitt, HashFunction::crc32_lo, HashFunction::crc32_hi, HashFunction::xor16}) {
    const uint32_t seed = rng();
    std::array<uint8_t, 13> key{};
    for (auto& b : key) b = static_cast<uint8_t>(rng());
    const uint16_t constant = hash_bytes(f, seed, key) ^ hash_bytes(f, 0, key);
    EXPECT_NE(constant, 0) << hash_function_name(f);
    for (int trial = 0; trial < 100; ++trial) {
      for (auto& b : key) b = static_cast<uint8_t>(rng());
      EXPECT_EQ(hash_bytes(f, seed, key) ^ hash_bytes(f, 0, key), constant) << hash_function_name(f);
    }
  }
}

TEST(Hash, ParseAndPrintSpecs) {
  Result<HashModel> m = parse_hash_model("crc32-hi:seed=0x1234:offset=5:per-switch");
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->function, HashFunction::crc32_hi);
  EXPECT_EQ(m->seed, 0x1234u);
  EXPECT_EQ(m->offset_bits, 5u);
  EXPECT_TRUE(m->seed_per_switch);
  Result<HashModel> back = parse_hash_model(to_string(*m));
  ASSERT_TRUE(back);
  EXPECT_EQ(to_string(*back), to_string(*m));
  for (const char* bad : {"crc17", "crc16-bisync:offset=16", "crc16-bisync:seed=x", "xor16:colour=red", ""}) {
    Result<HashModel> r = parse_hash_model(bad);
    EXPECT_FALSE(r) << bad;
  }
}

// Random flows hashed onto n links use, on average, 1 - (1 - 1/n)^n of them (balls into bins; MegaScale's
// ECMP-collision argument). Each model, random 5-tuples, fixed seed; the mean over trials lies within a
// few standard errors of theory.
TEST(Hash, RandomFlowsUseTheExpectedFractionOfLinks) {
  std::mt19937_64 rng(2024);
  const std::array<HashFunction, 9> functions = {
      HashFunction::crc16_bisync, HashFunction::crc16_xor8, HashFunction::crc16_xor4,
      HashFunction::crc16_xor2,   HashFunction::crc16_xor1, HashFunction::crc16_ccitt,
      HashFunction::crc32_lo,     HashFunction::crc32_hi,   HashFunction::xor16};
  for (uint32_t n : {8u, 32u, 64u}) {
    const double expected = expected_links_used_fraction(n, n);
    EXPECT_NEAR(expected, 1 - std::pow(1 - 1.0 / n, n), 1e-12);
    for (HashFunction fn : functions) {
      SCOPED_TRACE(std::string(hash_function_name(fn)) + " n=" + std::to_string(n));
      HashModel model{fn, static_cast<uint32_t>(rng()), 0, false};
      const int trials = 400;
      double sum = 0;
      double sum_sq = 0;
      std::vector<uint8_t> hit(n);
      for (int trial = 0; trial < trials; ++trial) {
        std::fill(hit.begin(), hit.end(), 0);
        for (uint32_t flow = 0; flow < n; ++flow) {
          FiveTuple t{static_cast<uint32_t>(rng()), static_cast<uint32_t>(rng()),
                      static_cast<uint16_t>(rng())};
          hit[ecmp_select(model, 0, t, n)] = 1;
        }
        double used = 0;
        for (uint8_t h : hit) used += h;
        used /= n;
        sum += used;
        sum_sq += used * used;
      }
      double mean = sum / trials;
      double sd = std::sqrt(std::max(0.0, sum_sq / trials - mean * mean));
      EXPECT_NEAR(mean, expected, 4 * sd / std::sqrt(trials) + 0.005);
    }
  }
  // The limit: 1 - 1/e.
  EXPECT_NEAR(expected_links_used_fraction(100000, 100000), 1 - std::exp(-1.0), 1e-5);
}

}  // namespace
}  // namespace megascale::topo
