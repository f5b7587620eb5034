// CRC32C throughput, each implementation side by side on the same buffers: the portable table, the
// SSE4.2 crc32 instruction in three streams (the baseline the engine used before the AVX-512 path), and
// VPCLMULQDQ folding over 512-bit registers. Bytes/s per call of one buffer, from L1/L2 (a packet's
// payload has just been written or received when the engine checks it).
//
//   build/bench/megascale_micro_bench --benchmark_filter=Crc32c
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "megascale/engine/crc32c.h"

namespace megascale::engine {
namespace {

enum Impl : int { kPortable, kSse42, kAvx512 };

void BM_Crc32c(benchmark::State& state) {
  const auto impl = static_cast<Impl>(state.range(0));
  const auto len = static_cast<size_t>(state.range(1));
  if (impl != kPortable && !crc32c_hw_available()) {
    state.SkipWithError("no SSE4.2 crc32 instruction on this CPU");
    return;
  }
  if (impl == kAvx512 && !crc32c_avx512_available()) {
    state.SkipWithError("no AVX-512 VPCLMULQDQ on this CPU");
    return;
  }
  std::vector<uint8_t> buf(len);
  std::mt19937_64 rng(1);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  uint32_t crc = 0;
  for (auto _ : state) {
    switch (impl) {
      case kPortable:
        crc = crc32c_portable_extend(crc, buf.data(), len);
        break;
      case kSse42:
        crc = crc32c_sse42_extend(crc, buf.data(), len);
        break;
      case kAvx512:
        crc = crc32c_avx512_extend(crc, buf.data(), len);
        break;
    }
    benchmark::DoNotOptimize(crc);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(len));
  state.SetLabel(impl == kPortable ? "portable" : impl == kSse42 ? "sse4.2 x3" : "avx512 vpclmulqdq");
}
BENCHMARK(BM_Crc32c)->ArgsProduct({{kPortable, kSse42, kAvx512}, {64, 512, 1024, 8192, 16384, 65536}});

}  // namespace
}  // namespace megascale::engine
