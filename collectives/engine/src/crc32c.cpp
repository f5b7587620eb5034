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
// x^e mod P, reflected (bit j stands for x^(31-j)).
constexpr uint32_t xpow_mod(uint32_t e) {
  uint32_t r = 0x80000000U;  // x^0
  for (uint32_t i = 0; i < e; ++i) r = (r >> 1) ^ ((r & 1U) ? kPolyReflected : 0U);
  return r;
}
constexpr uint32_t xpow8n_minus33(uint32_t n) {
  return xpow_mod(8 * n - 33);
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

// The register-level CRC with the crc32 instruction: `c` is the raw register (no inversions).
__attribute__((target("sse4.2,pclmul"))) uint64_t sse42_register(uint64_t c, const uint8_t* p, size_t len) {
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
  return c32;
}

// Folding with VPCLMULQDQ (AVX-512): four 512-bit accumulators, i.e. sixteen 128-bit blocks, move
// 256 bytes per iteration, where the crc32 instruction moves 8 bytes a cycle at best.
//
// A 128-bit block B (B_lo = its first 8 bytes) followed by F more bits of the stream contributes to
// the CRC what B * x^F mod P contributes in its place, and that is a 128-bit value: with the constants
// in the low 32 bits of a lane (bit j standing for x^(63-j)), the carry-less products are
// x^33 * K * B_lo and x^33 * K * B_hi in the reflected order, so K = x^(F+31) for B_lo and x^(F-33) for
// B_hi (the same bookkeeping as shift_crc above; Intel's "Fast CRC Computation for Generic Polynomials
// Using PCLMULQDQ Instruction", Gopal et al., 2009). What is left at the end, one 128-bit block and a
// tail under 16 bytes, goes through the crc32 instruction: a block fed from a zero register gives
// exactly its contribution B * x^32 mod P.
struct FoldConstants {
  uint32_t lo, hi;  // for B_lo and B_hi, folding over F bits
};
constexpr FoldConstants fold_by(uint32_t bits) {
  return {xpow_mod(bits + 31), xpow_mod(bits - 33)};
}
constexpr FoldConstants kFold128 = fold_by(128), kFold256 = fold_by(256), kFold384 = fold_by(384),
                        kFold512 = fold_by(512), kFold2048 = fold_by(2048);

bool detect_avx512_clmul() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq");
}
const bool kHaveAvx512Clmul = kHavePclmul && detect_avx512_clmul();

constexpr size_t kAvx512MinBytes = 512;  // below it the three crc32 streams are as fast (dev VM, AMD EPYC)

__attribute__((target("avx512f,vpclmulqdq"))) inline __m512i fold512(__m512i z, __m512i k) {
  return _mm512_xor_si512(_mm512_clmulepi64_epi128(z, k, 0x00), _mm512_clmulepi64_epi128(z, k, 0x11));
}

__attribute__((target("avx512f"))) inline __m512i load(const uint8_t* p) {
  return _mm512_loadu_si512(p);
}

__attribute__((target("avx512f"))) inline __m512i k512(FoldConstants k) {
  return _mm512_set_epi64(k.hi, k.lo, k.hi, k.lo, k.hi, k.lo, k.hi, k.lo);
}

__attribute__((target("sse4.2,pclmul"))) inline __m128i fold128(__m128i x, FoldConstants k) {
  const __m128i kv = _mm_set_epi64x(k.hi, k.lo);
  return _mm_xor_si128(_mm_clmulepi64_si128(x, kv, 0x00), _mm_clmulepi64_si128(x, kv, 0x11));
}

__attribute__((target("avx512f,vpclmulqdq,sse4.2,pclmul"))) uint64_t avx512_register(uint64_t c,
                                                                                     const uint8_t* p,
                                                                                     size_t len) {
  // The register enters as the first 32 bits of the stream, as the crc32 instruction takes it.
  __m512i z0 = _mm512_xor_si512(load(p), _mm512_zextsi128_si512(_mm_cvtsi32_si128(static_cast<int>(c))));
  __m512i z1 = load(p + 64);
  __m512i z2 = load(p + 128);
  __m512i z3 = load(p + 192);
  p += 256;
  len -= 256;
  const __m512i by2048 = k512(kFold2048);
  while (len >= 256) {
    z0 = _mm512_xor_si512(fold512(z0, by2048), load(p));
    z1 = _mm512_xor_si512(fold512(z1, by2048), load(p + 64));
    z2 = _mm512_xor_si512(fold512(z2, by2048), load(p + 128));
    z3 = _mm512_xor_si512(fold512(z3, by2048), load(p + 192));
    p += 256;
    len -= 256;
  }
  const __m512i by512 = k512(kFold512);
  z1 = _mm512_xor_si512(fold512(z0, by512), z1);
  z2 = _mm512_xor_si512(fold512(z1, by512), z2);
  z3 = _mm512_xor_si512(fold512(z2, by512), z3);
  while (len >= 64) {
    z3 = _mm512_xor_si512(fold512(z3, by512), load(p));
    p += 64;
    len -= 64;
  }
  // z3's four blocks, 48, 32, 16 and 0 bytes before the end of what was folded, into one.
  // (Through memory: GCC 12's lane extracts warn of an undefined operand they never read.)
  alignas(64) __m128i lane[4];
  _mm512_store_si512(lane, z3);
  __m128i x = _mm_xor_si128(fold128(lane[0], kFold384), fold128(lane[1], kFold256));
  x = _mm_xor_si128(x, fold128(lane[2], kFold128));
  x = _mm_xor_si128(x, lane[3]);
  while (len >= 16) {
    x = _mm_xor_si128(fold128(x, kFold128), _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    p += 16;
    len -= 16;
  }
  uint64_t r = __builtin_ia32_crc32di(0, static_cast<uint64_t>(_mm_cvtsi128_si64(x)));
  r = __builtin_ia32_crc32di(r, static_cast<uint64_t>(_mm_extract_epi64(x, 1)));
  return sse42_register(r, p, len);
}

}  // namespace

uint32_t crc32c_sse42_extend(uint32_t crc, const void* data, size_t len) {
  return ~static_cast<uint32_t>(sse42_register(~crc, static_cast<const uint8_t*>(data), len));
}

uint32_t crc32c_avx512_extend(uint32_t crc, const void* data, size_t len) {
  if (len < kAvx512MinBytes) return crc32c_sse42_extend(crc, data, len);
  return ~static_cast<uint32_t>(avx512_register(~crc, static_cast<const uint8_t*>(data), len));
}

bool crc32c_avx512_available() {
  return kHaveAvx512Clmul;
}

uint32_t crc32c_hw_extend(uint32_t crc, const void* data, size_t len) {
  // crc32c_avx512_extend takes short buffers through the SSE4.2 path itself.
  return kHaveAvx512Clmul ? crc32c_avx512_extend(crc, data, len) : crc32c_sse42_extend(crc, data, len);
}

bool crc32c_hw_available() {
  return kHaveSse42;
}

#else

uint32_t crc32c_hw_extend(uint32_t crc, const void* data, size_t len) {
  return crc32c_portable_extend(crc, data, len);
}
uint32_t crc32c_sse42_extend(uint32_t crc, const void* data, size_t len) {
  return crc32c_portable_extend(crc, data, len);
}
uint32_t crc32c_avx512_extend(uint32_t crc, const void* data, size_t len) {
  return crc32c_portable_extend(crc, data, len);
}
bool crc32c_hw_available() {
  return false;
}
bool crc32c_avx512_available() {
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
