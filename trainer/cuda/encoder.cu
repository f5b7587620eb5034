// Token + position embedding (GPT-2's wte and wpe), forward and a deterministic backward.
// The backward groups token rows by token id on the host so that every wte row's gradient is summed by
// one thread per channel in one fixed order: no float atomics, bit-reproducible runs (llm.c's
// encoder_backward buckets for the same reason).
#include <algorithm>
#include <numeric>
#include <type_traits>

#include "cuda_check.h"
#include "device_utils.cuh"
#include "kernels.h"

namespace megascale::trainer::cuda {
namespace {

template <class T>
__global__ void encoder_forward_kernel(T* out, const int* tokens, const T* wte, const T* wpe, int N,
                                       int seq_len, int C, int vocab_begin, int vocab_end) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<size_t>(N) * C) return;
  const int n = static_cast<int>(i / C);
  const int c = static_cast<int>(i % C);
  const int t = n % seq_len;
  const int token = tokens[n];
  float x = 0.0f;
  if (token >= vocab_begin && token < vocab_end) x = to_float(wte[static_cast<size_t>(token - vocab_begin) * C + c]);
  if (wpe != nullptr) x += to_float(wpe[static_cast<size_t>(t) * C + c]);
  out[i] = from_float<T>(x);
}

// One thread per (t, c): the sum over the batch in order b = 0, 1, ...
template <class T>
__global__ void wpe_backward_kernel(float* dwpe, const T* dout, int B, int seq_len, int C) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= seq_len * C) return;
  float sum = 0.0f;
  for (int b = 0; b < B; ++b) sum += to_float(dout[static_cast<size_t>(b) * seq_len * C + i]);
  dwpe[i] += sum;
}

// One block per distinct token; threads stride over channels, each summing the bucket's rows in order.
template <class T>
__global__ void wte_backward_kernel(float* dwte, const T* dout, const int* bucket_token,
                                    const int* bucket_offset, const int* positions, int C) {
  const int bucket = blockIdx.x;
  const int begin = bucket_offset[bucket];
  const int end = bucket_offset[bucket + 1];
  float* row = dwte + static_cast<size_t>(bucket_token[bucket]) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float sum = 0.0f;
    for (int p = begin; p < end; ++p) sum += to_float(dout[static_cast<size_t>(positions[p]) * C + c]);
    row[c] += sum;
  }
}

// The bf16 wte backward the model runs (C % 8 == 0): the generic kernel above gives a bucket's whole
// sum per channel to one thread, so a frequent token (the byte-level dataset has ~100 distinct ids in
// 16384 rows, buckets of thousands) is a long serial loop: 0.71 ms per step on GPT-2 124M. Here thread
// (x, y) of a bucket's block owns the 8 channels of chunk x and sums the bucket's positions y, y + R, ...
// in order (16-byte loads); the R row sums then go through shared memory and are added in y order. Fixed
// R for a given C, so the order of every addition is fixed: still bit-reproducible.
constexpr int kWteSharedFloats = 8192;  // R * C <= 1024 threads * 8 channels

__global__ void __launch_bounds__(1024)
    wte_backward_bf16_kernel(float* dwte, const __nv_bfloat16* dout, const int* bucket_token,
                             const int* bucket_offset, const int* positions, int C) {
  __shared__ float row_sums[kWteSharedFloats];  // [R][C]
  const int bucket = blockIdx.x;
  const int begin = bucket_offset[bucket], end = bucket_offset[bucket + 1];
  const int x = threadIdx.x, y = threadIdx.y, R = blockDim.y;
  float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  for (int p = begin + y; p < end; p += R) {
    const uint4 v = reinterpret_cast<const uint4*>(dout + static_cast<size_t>(positions[p]) * C)[x];
    const auto* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 f = __bfloat1622float2(h[e]);
      acc[2 * e] += f.x;
      acc[2 * e + 1] += f.y;
    }
  }
#pragma unroll
  for (int e = 0; e < 8; ++e) row_sums[y * C + x * 8 + e] = acc[e];
  __syncthreads();
  if (y != 0) return;
  float* row = dwte + static_cast<size_t>(bucket_token[bucket]) * C + x * 8;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    float sum = 0.f;
    for (int r = 0; r < R; ++r) sum += row_sums[r * C + x * 8 + e];
    row[e] += sum;
  }
}

}  // namespace

TokenBuckets make_token_buckets(const int* tokens_host, int N) {
  TokenBuckets b;
  b.positions.resize(N);
  std::iota(b.positions.begin(), b.positions.end(), 0);
  // stable: positions stay ascending within a token's bucket, the order the kernel sums them in.
  std::stable_sort(b.positions.begin(), b.positions.end(),
                   [&](int x, int y) { return tokens_host[x] < tokens_host[y]; });
  for (int i = 0; i < N; ++i) {
    const int token = tokens_host[b.positions[i]];
    if (b.bucket_token.empty() || b.bucket_token.back() != token) {
      b.bucket_token.push_back(token);
      b.bucket_offset.push_back(i);
    }
  }
  b.bucket_offset.push_back(N);
  return b;
}

template <class T>
void encoder_forward(T* out, const int* tokens, const T* wte, const T* wpe, int B, int seq_len, int C,
                     cudaStream_t stream, int vocab_begin, int vocab_end) {
  const size_t total = static_cast<size_t>(B) * seq_len * C;
  encoder_forward_kernel<<<ceil_div(total, 256), 256, 0, stream>>>(out, tokens, wte, wpe, B * seq_len,
                                                                   seq_len, C, vocab_begin, vocab_end);
  CUDA_CHECK_LAUNCH();
}

template <class T>
void encoder_backward(float* dwte, float* dwpe, const T* dout, const int* bucket_token,
                      const int* bucket_offset, const int* positions, int num_buckets, int B, int seq_len,
                      int C, cudaStream_t stream) {
  wpe_backward_kernel<<<ceil_div(static_cast<size_t>(seq_len) * C, 256), 256, 0, stream>>>(dwpe, dout, B,
                                                                                           seq_len, C);
  CUDA_CHECK_LAUNCH();
  if (num_buckets == 0) return;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const int chunks = C / 8;
    if (C % 8 == 0 && chunks <= 1024 && reinterpret_cast<uintptr_t>(dout) % 16 == 0) {
      const int rows = std::max(1, std::min(32, 1024 / chunks));
      wte_backward_bf16_kernel<<<num_buckets, dim3(chunks, rows), 0, stream>>>(dwte, dout, bucket_token,
                                                                               bucket_offset, positions, C);
      CUDA_CHECK_LAUNCH();
      return;
    }
  }
  {
    wte_backward_kernel<<<num_buckets, 256, 0, stream>>>(dwte, dout, bucket_token, bucket_offset, positions,
                                                         C);
    CUDA_CHECK_LAUNCH();
  }
}

#define INSTANTIATE(T)                                                                                      \
  template void encoder_forward<T>(T*, const int*, const T*, const T*, int, int, int, cudaStream_t, int, int); \
  template void encoder_backward<T>(float*, float*, const T*, const int*, const int*, const int*, int, int, \
                                    int, int, cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(__nv_bfloat16)
#undef INSTANTIATE

}  // namespace megascale::trainer::cuda
