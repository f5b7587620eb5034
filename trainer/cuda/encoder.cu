// Token + position embedding (GPT-2's wte and wpe), forward and a deterministic backward.
// The backward groups token rows by token id on the host so that every wte row's gradient is summed by
// one thread per channel in one fixed order: no float atomics, bit-reproducible runs (llm.c's
// encoder_backward buckets for the same reason).
#include <algorithm>
#include <numeric>

#include "cuda_check.h"
#include "device_utils.cuh"
#include "kernels.h"

namespace megascale::trainer::cuda {
namespace {

template <class T>
__global__ void encoder_forward_kernel(T* out, const int* tokens, const T* wte, const T* wpe, int N,
                                       int seq_len, int C) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<size_t>(N) * C) return;
  const int n = static_cast<int>(i / C);
  const int c = static_cast<int>(i % C);
  const int t = n % seq_len;
  out[i] = from_float<T>(to_float(wte[static_cast<size_t>(tokens[n]) * C + c]) +
                         to_float(wpe[static_cast<size_t>(t) * C + c]));
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
                     cudaStream_t stream) {
  const size_t total = static_cast<size_t>(B) * seq_len * C;
  encoder_forward_kernel<<<ceil_div(total, 256), 256, 0, stream>>>(out, tokens, wte, wpe, B * seq_len,
                                                                   seq_len, C);
  CUDA_CHECK_LAUNCH();
}

template <class T>
void encoder_backward(float* dwte, float* dwpe, const T* dout, const int* bucket_token,
                      const int* bucket_offset, const int* positions, int num_buckets, int B, int seq_len,
                      int C, cudaStream_t stream) {
  wpe_backward_kernel<<<ceil_div(static_cast<size_t>(seq_len) * C, 256), 256, 0, stream>>>(dwpe, dout, B,
                                                                                           seq_len, C);
  CUDA_CHECK_LAUNCH();
  if (num_buckets > 0) {
    wte_backward_kernel<<<num_buckets, 256, 0, stream>>>(dwte, dout, bucket_token, bucket_offset, positions,
                                                         C);
    CUDA_CHECK_LAUNCH();
  }
}

#define INSTANTIATE(T)                                                                                      \
  template void encoder_forward<T>(T*, const int*, const T*, const T*, int, int, int, cudaStream_t);        \
  template void encoder_backward<T>(float*, float*, const T*, const int*, const int*, const int*, int, int, \
                                    int, int, cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(__nv_bfloat16)
#undef INSTANTIATE

}  // namespace megascale::trainer::cuda
