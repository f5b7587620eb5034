// CRC32C (Castagnoli, polynomial 0x1EDC6F41, reflected 0x82F63B78): the engine's header checksum and
// payload integrity check, the same CRC iSCSI, ext4 and RoCE's ICRC-like checks use.
//
//   uint32_t c = crc32c(buf, len);                 // one buffer
//   uint32_t d = crc32c_extend(c, more, more_len);  // == crc32c(buf ++ more)
//
// On x86-64 the fastest the CPU has, chosen once at run time with __builtin_cpu_supports: carry-less
// multiply folding over 512-bit registers (AVX-512 VPCLMULQDQ) for buffers of 512 bytes and more, the
// SSE4.2 `crc32` instruction in three interleaved streams otherwise; elsewhere a portable slicing-by-8
// table. All give identical results (CRC32C("123456789") = 0xE3069283). Pure functions, thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace megascale::engine {

// The standard CRC32C of `len` bytes (initial value ~0, final xor ~0).
uint32_t crc32c(const void* data, size_t len);

// Continues a CRC: crc32c_extend(crc32c(a), b) == crc32c(a ++ b); crc32c_extend(0, x) == crc32c(x).
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t len);

// The portable table implementation (always available; used when SSE4.2 is not).
uint32_t crc32c_portable_extend(uint32_t crc, const void* data, size_t len);

// True when this CPU has the SSE4.2 crc32 instruction (and the build targets x86-64).
bool crc32c_hw_available();

// The hardware implementation: the AVX-512 path where the CPU has it and the buffer is long enough,
// else the SSE4.2 one. Only call it when crc32c_hw_available() is true.
uint32_t crc32c_hw_extend(uint32_t crc, const void* data, size_t len);

// The two hardware paths on their own (tests and benchmarks). crc32c_sse42_extend needs
// crc32c_hw_available(); crc32c_avx512_extend needs crc32c_avx512_available() and takes buffers under
// 512 bytes through the SSE4.2 path.
uint32_t crc32c_sse42_extend(uint32_t crc, const void* data, size_t len);
uint32_t crc32c_avx512_extend(uint32_t crc, const void* data, size_t len);
bool crc32c_avx512_available();

}  // namespace megascale::engine
