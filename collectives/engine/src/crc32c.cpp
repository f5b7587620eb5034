// CRC32C: SSE4.2 `crc32` instruction when the CPU has it, slicing-by-8 tables otherwise.
#include "megascale/engine/crc32c.h"

#include <algorithm>
#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace megascale::engine {
namespace {

constexpr uint32_t kPolyReflected = 0x82F63B78;

// tables[k][b]: the CRC register after feeding byte b followed by k zero bytes (slicing-by-8).
struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t{};
  constexpr Tables() {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t c = b;
      for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1U) ? kPolyReflected : 0U);
      t[0][b] = c;
    }
    for (uint32_t b = 0; b < 256; ++b) {
      for (size_t k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFFU];
    }
  }
};
constexpr Tables kTables{};

uint64_t load_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

uint32_t crc32c_portable_extend(uint32_t crc, const void* data, size_t len) {
  const auto* p = static_cast<const uint8_t*>(data);
  const auto& t = kTables.t;
  uint32_t c = ~crc;
  while (len >= 8) {
    const uint64_t v = load_u64(p) ^ c;  // little-endian host (packet.h)
    c = t[7][v & 0xFF] ^ t[6][(v >> 8) & 0xFF] ^ t[5][(v >> 16) & 0xFF] ^ t[4][(v >> 24) & 0xFF] ^
        t[3][(v >> 32) & 0xFF] ^ t[2][(v >> 40) & 0xFF] ^ t[1][(v >> 48) & 0xFF] ^ t[0][v >> 56];
    p += 8;
    len -= 8;
  }
  while (len-- > 0) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xFFU];
  return ~c;
}

#if defined(__x86_64__)

namespace {

// Shifting a CRC register over n zero bytes multiplies it by x^(8n) mod P. With PCLMULQDQ that is
// one carry-less multiply by the constant x^(8n-33) mod P and one crc32 instruction to reduce the
// 64-bit product (the instruction multiplies by x^32 and the reflected product carries one more x):
// the technique of Intel's "Fast CRC computation for iSCSI polynomial using CRC32 instruction"
// (Gopal et al., 2011), used here to run three independent crc32 streams and join them.
constexpr uint32_t xpow8n_minus33(uint32_t n) {
  uint32_t r = 0x80000000U;  // x^0, reflected
  for (uint32_t e = 0; e < 8 * n - 33; ++e) r = (r >> 1) ^ ((r & 1U) ? kPolyReflected : 0U);
  return r;
}

constexpr uint32_t kMaxStreamWords = 32;  // 3 streams of up to 256 bytes each per round

// kShift[w]: constants for streams of w words (8w bytes): {x^(8*8w-33), x^(8*16w-33)} mod P.
struct ShiftTable {
  uint32_t by_one[kMaxStreamWords + 1] = {};
  uint32_t by_two[kMaxStreamWords + 1] = {};
  constexpr ShiftTable() {
    for (uint32_t w = 1; w <= kMaxStreamWords; ++w) {
      by_one[w] = xpow8n_minus33(8 * w);
      by_two[w] = xpow8n_minus33(16 * w);
    }
  }
};
constexpr ShiftTable kShift{};

__attribute__((target("sse4.2,pclmul"))) inline uint64_t shift_crc(uint64_t crc, uint32_t k) {
  const __m128i prod = _mm_clmulepi64_si128(_mm_cvtsi32_si128(static_cast<int>(crc)),
                                            _mm_cvtsi32_si128(static_cast<int>(k)), 0);
  return __builtin_ia32_crc32di(0, static_cast<uint64_t>(_mm_cvtsi128_si64(prod)));
}

// Decided once, before main: the per-call check is then one load of a constant.
// (__builtin_cpu_init is required when this runs before the constructors that would call it.)
bool detect_sse42() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}
bool detect_pclmul() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("pclmul");
}
const bool kHaveSse42 = detect_sse42();
const bool kHavePclmul = kHaveSse42 && detect_pclmul();

}  // namespace

__attribute__((target("sse4.2,pclmul"))) uint32_t crc32c_hw_extend(uint32_t crc, const void* data,
                                                                   size_t len) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t c = ~crc;
  // The crc32 instruction has a latency of 3 cycles and a throughput of 1: three interleaved streams
  // over thirds of the buffer, joined with two shifts, run ~3x faster than one. Packet headers are
  // 32..312 bytes, so even short buffers take this path.
  if (kHavePclmul) {
    while (len >= 24) {
      const size_t words = std::min<size_t>(len / 24, kMaxStreamWords);
      const size_t third = words * 8;
      uint64_t c1 = 0;
      uint64_t c2 = 0;
      for (size_t i = 0; i < third; i += 8) {
        c = __builtin_ia32_crc32di(c, load_u64(p + i));
        c1 = __builtin_ia32_crc32di(c1, load_u64(p + third + i));
        c2 = __builtin_ia32_crc32di(c2, load_u64(p + 2 * third + i));
      }
      c = shift_crc(c, kShift.by_two[words]) ^ shift_crc(c1, kShift.by_one[words]) ^ c2;
      p += 3 * third;
      len -= 3 * third;
    }
  }
  while (len >= 8) {
    c = __builtin_ia32_crc32di(c, load_u64(p));
    p += 8;
    len -= 8;
  }
  auto c32 = static_cast<uint32_t>(c);
  if (len >= 4) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    c32 = __builtin_ia32_crc32si(c32, v);
    p += 4;
    len -= 4;
  }
  while (len-- > 0) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return ~c32;
}

bool crc32c_hw_available() {
  return kHaveSse42;
}

#else

uint32_t crc32c_hw_extend(uint32_t crc, const void* data, size_t len) {
  return crc32c_portable_extend(crc, data, len);
}
bool crc32c_hw_available() {
  return false;
}

#endif

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t len) {
#if defined(__x86_64__)
  if (kHaveSse42) return crc32c_hw_extend(crc, data, len);
#endif
  return crc32c_portable_extend(crc, data, len);
}

uint32_t crc32c(const void* data, size_t len) {
  return crc32c_extend(0, data, len);
}

}  // namespace megascale::engine
