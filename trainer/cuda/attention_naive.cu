// A plain reference attention (causal, optional sliding window) implementing the attention contract of
// kernels.h, linked ONLY when the real flash-attention kernel (trainer/cuda/attention.cu, owned by the
// attention engineer) is absent from the tree: it lets the model, the training loop and the PyTorch
// comparison run before that kernel lands. It is exact but slow (one warp per query row walking every
// visible key, O(T^2 D) work with no tiling), so throughput figures taken with it say so.
//
// Forward: online softmax over the keys (Milakov & Gimelshein 2018), saving lse per row.
// Backward (the standard softmax-attention gradient, as in FlashAttention-2 Alg. 2, untiled):
//   P_ij = exp(s_ij - lse_i), dP_ij = dO_i . v_j, Delta_i = dO_i . O_i, dS_ij = P_ij (dP_ij - Delta_i),
//   dq_i = scale sum_j dS_ij k_j,  dk_j = scale sum_i dS_ij q_i,  dv_j = sum_i P_ij dO_i.
// One warp per query row computes Delta and dq; one warp per key row computes dk and dv. No atomics.
#include <cstdio>
#include <cstdlib>

#include "cuda_check.h"
#include "device_utils.cuh"
#include "kernels.h"

namespace megascale::trainer::cuda {
namespace {

constexpr int kMaxPerLane = 4;  // D <= 128
constexpr int kWarpsPerBlock = 4;

struct Row {
  float x[kMaxPerLane];
};

template <class T>
__device__ __forceinline__ Row load_row(const T* p, int per_lane) {
  Row r;
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) r.x[e] = e < per_lane ? to_float(p[e * 32 + threadIdx.x % 32]) : 0.0f;
  return r;
}

__device__ __forceinline__ float dot(const Row& a, const Row& b) {
  float s = 0.0f;
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) s += a.x[e] * b.x[e];
  return warp_sum(s);
}

// The first key query i may see.
__device__ __forceinline__ int first_key(int i, int window) {
  return window > 0 ? max(0, i - window + 1) : 0;
}

template <class T>
__global__ void attention_forward_kernel(T* o, float* lse, const T* q, const T* k, const T* v, int B,
                                         int seq_len, int H, int D, int ld_qkv, int ld_o, int window,
                                         float scale) {
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;  // over B * H * seq_len, (b, h, i)
  if (row >= B * H * seq_len) return;
  const int i = row % seq_len;
  const int h = (row / seq_len) % H;
  const int b = row / (seq_len * H);
  const int per_lane = D / 32;
  const size_t token_base = static_cast<size_t>(b) * seq_len;
  const Row qi = load_row(q + (token_base + i) * ld_qkv + h * D, per_lane);
  float m = -INFINITY;
  float l = 0.0f;
  Row acc{};
  for (int j = first_key(i, window); j <= i; ++j) {
    const float s = dot(qi, load_row(k + (token_base + j) * ld_qkv + h * D, per_lane)) * scale;
    const float m_new = fmaxf(m, s);
    const float correction = expf(m - m_new);
    const float p = expf(s - m_new);
    const Row vj = load_row(v + (token_base + j) * ld_qkv + h * D, per_lane);
#pragma unroll
    for (int e = 0; e < kMaxPerLane; ++e) acc.x[e] = acc.x[e] * correction + p * vj.x[e];
    l = l * correction + p;
    m = m_new;
  }
  T* oi = o + (token_base + i) * ld_o + h * D;
  for (int e = 0; e < per_lane; ++e) oi[e * 32 + threadIdx.x % 32] = from_float<T>(acc.x[e] / l);
  if (threadIdx.x % 32 == 0) lse[(static_cast<size_t>(b) * H + h) * seq_len + i] = m + logf(l);
}

template <class T>
__global__ void attention_backward_dq_kernel(T* dq, float* delta, const T* dout, const T* o, const float* lse,
                                             const T* q, const T* k, const T* v, int B, int seq_len, int H,
                                             int D, int ld_qkv, int ld_o, int window, float scale) {
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= B * H * seq_len) return;
  const int i = row % seq_len;
  const int h = (row / seq_len) % H;
  const int b = row / (seq_len * H);
  const int per_lane = D / 32;
  const size_t token_base = static_cast<size_t>(b) * seq_len;
  const size_t stat = (static_cast<size_t>(b) * H + h) * seq_len + i;
  const Row doi = load_row(dout + (token_base + i) * ld_o + h * D, per_lane);
  const float delta_i = dot(doi, load_row(o + (token_base + i) * ld_o + h * D, per_lane));
  const Row qi = load_row(q + (token_base + i) * ld_qkv + h * D, per_lane);
  const float lse_i = lse[stat];
  Row acc{};
  for (int j = first_key(i, window); j <= i; ++j) {
    const Row kj = load_row(k + (token_base + j) * ld_qkv + h * D, per_lane);
    const float p = expf(dot(qi, kj) * scale - lse_i);
    const float dp = dot(doi, load_row(v + (token_base + j) * ld_qkv + h * D, per_lane));
    const float ds = p * (dp - delta_i);
#pragma unroll
    for (int e = 0; e < kMaxPerLane; ++e) acc.x[e] += ds * kj.x[e];
  }
  T* dqi = dq + (token_base + i) * ld_qkv + h * D;
  for (int e = 0; e < per_lane; ++e) dqi[e * 32 + threadIdx.x % 32] = from_float<T>(acc.x[e] * scale);
  if (threadIdx.x % 32 == 0) delta[stat] = delta_i;
}

template <class T>
__global__ void attention_backward_dkv_kernel(T* dk, T* dv, const float* delta, const T* dout,
                                              const float* lse, const T* q, const T* k, const T* v, int B,
                                              int seq_len, int H, int D, int ld_qkv, int ld_o, int window,
                                              float scale) {
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;  // (b, h, j): a key row
  if (row >= B * H * seq_len) return;
  const int j = row % seq_len;
  const int h = (row / seq_len) % H;
  const int b = row / (seq_len * H);
  const int per_lane = D / 32;
  const size_t token_base = static_cast<size_t>(b) * seq_len;
  const size_t stat_base = (static_cast<size_t>(b) * H + h) * seq_len;
  const Row kj = load_row(k + (token_base + j) * ld_qkv + h * D, per_lane);
  const Row vj = load_row(v + (token_base + j) * ld_qkv + h * D, per_lane);
  const int last = window > 0 ? min(seq_len - 1, j + window - 1) : seq_len - 1;
  Row dk_acc{};
  Row dv_acc{};
  for (int i = j; i <= last; ++i) {
    const Row qi = load_row(q + (token_base + i) * ld_qkv + h * D, per_lane);
    const Row doi = load_row(dout + (token_base + i) * ld_o + h * D, per_lane);
    const float p = expf(dot(qi, kj) * scale - lse[stat_base + i]);
    const float ds = p * (dot(doi, vj) - delta[stat_base + i]);
#pragma unroll
    for (int e = 0; e < kMaxPerLane; ++e) {
      dv_acc.x[e] += p * doi.x[e];
      dk_acc.x[e] += ds * qi.x[e];
    }
  }
  T* dkj = dk + (token_base + j) * ld_qkv + h * D;
  T* dvj = dv + (token_base + j) * ld_qkv + h * D;
  for (int e = 0; e < per_lane; ++e) {
    dkj[e * 32 + threadIdx.x % 32] = from_float<T>(dk_acc.x[e] * scale);
    dvj[e * 32 + threadIdx.x % 32] = from_float<T>(dv_acc.x[e]);
  }
}

void check_head_dim(int D) {
  if (D % 32 != 0 || D > 32 * kMaxPerLane) {
    std::fprintf(stderr, "attention_naive: head dim %d unsupported (a multiple of 32, at most 128)\n", D);
    std::abort();
  }
}

}  // namespace
}  // namespace megascale::trainer::cuda

namespace megascale::trainer {
using cuda::attention_backward_dkv_kernel;
using cuda::attention_backward_dq_kernel;
using cuda::attention_forward_kernel;
using cuda::ceil_div;
using cuda::check_head_dim;
using cuda::kWarpsPerBlock;

size_t attention_backward_workspace_bytes(int B, int seq_len, int H, int /*D*/) {
  return sizeof(float) * static_cast<size_t>(B) * H * seq_len;
}

template <class T>
void attention_forward(T* o, float* lse, const T* q, const T* k, const T* v, int B, int seq_len, int H, int D,
                       int ld_qkv, int ld_o, int window, float scale, cudaStream_t s) {
  check_head_dim(D);
  const size_t rows = static_cast<size_t>(B) * H * seq_len;
  attention_forward_kernel<<<ceil_div(rows, kWarpsPerBlock), kWarpsPerBlock * 32, 0, s>>>(
      o, lse, q, k, v, B, seq_len, H, D, ld_qkv, ld_o, window, scale);
  CUDA_CHECK_LAUNCH();
}

template <class T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* o, const float* lse, const T* q,
                        const T* k, const T* v, int B, int seq_len, int H, int D, int ld_qkv, int ld_o,
                        int window, float scale, float* workspace, cudaStream_t s) {
  check_head_dim(D);
  const size_t rows = static_cast<size_t>(B) * H * seq_len;
  attention_backward_dq_kernel<<<ceil_div(rows, kWarpsPerBlock), kWarpsPerBlock * 32, 0, s>>>(
      dq, workspace, dout, o, lse, q, k, v, B, seq_len, H, D, ld_qkv, ld_o, window, scale);
  CUDA_CHECK_LAUNCH();
  attention_backward_dkv_kernel<<<ceil_div(rows, kWarpsPerBlock), kWarpsPerBlock * 32, 0, s>>>(
      dk, dv, workspace, dout, lse, q, k, v, B, seq_len, H, D, ld_qkv, ld_o, window, scale);
  CUDA_CHECK_LAUNCH();
}

#define INSTANTIATE(T)                                                                                       \
  template void attention_forward<T>(T*, float*, const T*, const T*, const T*, int, int, int, int, int, int, \
                                     int, float, cudaStream_t);                                              \
  template void attention_backward<T>(T*, T*, T*, const T*, const T*, const float*, const T*, const T*,      \
                                      const T*, int, int, int, int, int, int, int, float, float*,            \
                                      cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(__nv_bfloat16)
#undef INSTANTIATE

}  // namespace megascale::trainer
