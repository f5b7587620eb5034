// Throughput of the trainer's flash attention (trainer/cuda/attention.cuh) in bf16 on GPT-2-like shapes,
// forward and backward, full causal and a 256-token sliding window. Compare with
// tests/gpu/attention_sdpa_bench.py (PyTorch scaled_dot_product_attention on the same shapes).
//
//   ./trainer_attention_bench            # default shapes, 20 timed iterations each
//   ./trainer_attention_bench 50         # iterations
//
// FLOP convention (stated in the output): forward = 4 * D FLOPs per visible (query, key) pair (QK^T and
// PV, 2 FLOPs per multiply-add); for full causal attention the pair count is taken as T*T/2, i.e.
// 4*B*H*T*T*D/2, the FlashAttention papers' causal convention; for a window w it is the exact count of
// visible pairs, sum_i min(i + 1, w). Backward = 2.5 x forward (five matrix products instead of two;
// the recomputation of S is counted). The backward is timed twice: deterministic (the default) and with
// unordered dQ atomics (attention_set_deterministic(false)).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "attention.cuh"

namespace {

#define BENCH_CHECK(call)                                                                               \
  do {                                                                                                  \
    const cudaError_t err_ = (call);                                                                    \
    if (err_ != cudaSuccess) {                                                                          \
      std::fprintf(stderr, "[CUDA ERROR] %s at %s:%d\n", cudaGetErrorString(err_), __FILE__, __LINE__); \
      std::exit(1);                                                                                     \
    }                                                                                                   \
  } while (0)

struct Shape {
  int B, T, H, D, window;
};

double visible_pairs(int T, int window) {
  if (window == 0) return static_cast<double>(T) * T / 2;  // the stated causal convention
  double pairs = 0;
  for (int i = 0; i < T; ++i) pairs += i + 1 < window ? i + 1 : window;
  return pairs;
}

void bench(const Shape& s, int iterations) {
  using bf16 = __nv_bfloat16;
  const int C = s.H * s.D;
  const size_t rows = static_cast<size_t>(s.B) * s.T;
  bf16 *qkv, *dqkv, *o, *dout;
  float *lse, *workspace;
  BENCH_CHECK(cudaMalloc(&qkv, rows * 3 * C * sizeof(bf16)));
  BENCH_CHECK(cudaMalloc(&dqkv, rows * 3 * C * sizeof(bf16)));
  BENCH_CHECK(cudaMalloc(&o, rows * C * sizeof(bf16)));
  BENCH_CHECK(cudaMalloc(&dout, rows * C * sizeof(bf16)));
  BENCH_CHECK(cudaMalloc(&lse, static_cast<size_t>(s.B) * s.H * s.T * sizeof(float)));
  BENCH_CHECK(
      cudaMalloc(&workspace, megascale::trainer::attention_backward_workspace_bytes(s.B, s.T, s.H, s.D)));
  {
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::vector<bf16> host(rows * 3 * C);
    for (auto& x : host) x = __float2bfloat16(normal(rng));
    BENCH_CHECK(cudaMemcpy(qkv, host.data(), host.size() * sizeof(bf16), cudaMemcpyHostToDevice));
    BENCH_CHECK(cudaMemcpy(dout, host.data(), rows * C * sizeof(bf16), cudaMemcpyHostToDevice));
  }
  const float scale = 1.f / std::sqrt(static_cast<float>(s.D));
  auto forward = [&] {
    megascale::trainer::attention_forward(o, lse, qkv, qkv + C, qkv + 2 * C, s.B, s.T, s.H, s.D, 3 * C, C,
                                          s.window, scale, nullptr);
  };
  auto backward = [&] {
    megascale::trainer::attention_backward(dqkv, dqkv + C, dqkv + 2 * C, dout, o, lse, qkv, qkv + C,
                                           qkv + 2 * C, s.B, s.T, s.H, s.D, 3 * C, C, s.window, scale,
                                           workspace, nullptr);
  };
  for (int i = 0; i < 3; ++i) {
    forward();
    backward();
  }
  BENCH_CHECK(cudaDeviceSynchronize());
  cudaEvent_t start, stop;
  BENCH_CHECK(cudaEventCreate(&start));
  BENCH_CHECK(cudaEventCreate(&stop));
  float fwd_ms = 0, bwd_ms = 0;
  BENCH_CHECK(cudaEventRecord(start));
  for (int i = 0; i < iterations; ++i) forward();
  BENCH_CHECK(cudaEventRecord(stop));
  BENCH_CHECK(cudaEventSynchronize(stop));
  BENCH_CHECK(cudaEventElapsedTime(&fwd_ms, start, stop));
  const auto time_backward = [&](bool ordered) {
    megascale::trainer::attention_set_deterministic(ordered);
    backward();  // one warm-up in this mode
    float ms = 0;
    BENCH_CHECK(cudaEventRecord(start));
    for (int i = 0; i < iterations; ++i) backward();
    BENCH_CHECK(cudaEventRecord(stop));
    BENCH_CHECK(cudaEventSynchronize(stop));
    BENCH_CHECK(cudaEventElapsedTime(&ms, start, stop));
    return ms / static_cast<float>(iterations);
  };
  bwd_ms = time_backward(true);
  const float bwd_unordered_ms = time_backward(false);
  megascale::trainer::attention_set_deterministic(true);
  fwd_ms /= static_cast<float>(iterations);
  const double fwd_flops = 4.0 * s.B * s.H * s.D * visible_pairs(s.T, s.window);
  const double bwd_flops = 2.5 * fwd_flops;
  std::printf(
      "B=%-3d T=%-5d H=%-3d D=%-4d %-10s fwd %8.3f ms %7.1f TFLOP/s   bwd %8.3f ms %7.1f TFLOP/s   "
      "bwd unordered %8.3f ms %7.1f TFLOP/s\n",
      s.B, s.T, s.H, s.D, s.window == 0 ? "causal" : ("window=" + std::to_string(s.window)).c_str(), fwd_ms,
      fwd_flops / (fwd_ms * 1e-3) / 1e12, bwd_ms, bwd_flops / (bwd_ms * 1e-3) / 1e12, bwd_unordered_ms,
      bwd_flops / (bwd_unordered_ms * 1e-3) / 1e12);
  BENCH_CHECK(cudaEventDestroy(start));
  BENCH_CHECK(cudaEventDestroy(stop));
  for (void* p : {static_cast<void*>(qkv), static_cast<void*>(dqkv), static_cast<void*>(o),
                  static_cast<void*>(dout), static_cast<void*>(lse), static_cast<void*>(workspace)}) {
    BENCH_CHECK(cudaFree(p));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 20;
  if (iterations < 1) {
    std::fprintf(stderr, "usage: %s [iterations >= 1]\n", argv[0]);
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("trainer attention (bf16, tensor-core path), %s, %d iterations after 3 warm-ups\n", prop.name,
              iterations);
  std::printf(
      "FLOPs: fwd = 4*B*H*D*pairs, pairs = T*T/2 causal (4*B*H*T*T*D/2), exact visible pairs "
      "for a window; bwd = 2.5 x fwd\n");
  for (const Shape& s : {Shape{16, 1024, 12, 64, 0}, Shape{16, 1024, 12, 64, 256}, Shape{16, 1024, 16, 64, 0},
                         Shape{8, 1024, 16, 128, 0}, Shape{8, 1024, 16, 128, 256}}) {
    bench(s, iterations);
  }
  return 0;
}
