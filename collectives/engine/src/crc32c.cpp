// CRC32C: SSE4.2 `crc32` instruction when the CPU has it, slicing-by-8 tables otherwise.
#include "megascale/engine/crc32c.h"

#include <array>
#include <cstring>

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

__attribute__((target("sse4.2"))) uint32_t crc32c_hw_extend(uint32_t crc, const void* data, size_t len) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t c = ~crc;
  // Three independent streams would hide the instruction's 3-cycle latency; one stream already runs
  // at ~8 bytes per 3 cycles (~20 GB/s at 3 GHz), far above what one core pushes through UDP.
  while (len >= 8) {
    c = __builtin_ia32_crc32di(c, load_u64(p));
    p += 8;
    len -= 8;
  }
  auto c32 = static_cast<uint32_t>(c);
  while (len-- > 0) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return ~c32;
}

bool crc32c_hw_available() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}

#else

uint32_t crc32c_hw_extend(uint32_t crc, const void* data, size_t len) {
  return crc32c_portable_extend(crc, data, len);
}
bool crc32c_hw_available() { return false; }

#endif

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t len) {
  return crc32c_hw_available() ? crc32c_hw_extend(crc, data, len) : crc32c_portable_extend(crc, data, len);
}

uint32_t crc32c(const void* data, size_t len) { return crc32c_extend(0, data, len); }

}  // namespace megascale::engine
