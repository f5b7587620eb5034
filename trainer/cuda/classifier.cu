// The fused classifier: softmax + cross-entropy over the padded vocabulary, forward and backward in
// one kernel, one block per token row. The normalised probabilities are never stored: the row's max
// and sum of exponentials are reduced in registers and shared memory, and the gradient
// (softmax - onehot) * dloss_scale overwrites the logits in place (llm.c's fused_classifier does the
// same to avoid a [N, Vp] probability tensor).
//
// bf16 rows with Vp % 8 == 0 (every config: the padded vocabulary is a multiple of 64) take a faster
// kernel: the block holds its whole row in registers (16-byte loads, up to 8 chunks of 8 per thread, so
// Vp <= 65536), reads it from memory once and writes the gradient once. The generic kernel below reads the
// row three times (max, sum, gradient) with 2-byte loads, a tenth of a GPT-2 124M step (figures in
// docs/PERFORMANCE.md).
#include <algorithm>
#include <type_traits>

#include "cuda_check.h"
#include "device_utils.cuh"
#include "kernels.h"

namespace megascale::trainer::cuda {
namespace {

constexpr int kThreads = 512;

template <class T>
__global__ void classifier_kernel(T* logits, float* losses, const int* targets, int V, int Vp,
                                  float dloss_scale, bool write_dlogits) {
  __shared__ float shared[32];
  const int row = blockIdx.x;
  T* x = logits + static_cast<size_t>(row) * Vp;
  float m = -INFINITY;
  for (int i = threadIdx.x; i < V; i += blockDim.x) m = fmaxf(m, to_float(x[i]));
  m = block_max(m, shared);
  float s = 0.0f;
  for (int i = threadIdx.x; i < V; i += blockDim.x) s += expf(to_float(x[i]) - m);
  s = block_sum(s, shared);
  const int target = targets[row];
  const float log_z = m + logf(s);
  if (threadIdx.x == 0) losses[row] = log_z - to_float(x[target]);
  if (!write_dlogits) return;
  __syncthreads();  // every thread has read x[target] before it may be overwritten
  const float inv_s = 1.0f / s;
  for (int i = threadIdx.x; i < Vp; i += blockDim.x) {
    float g = 0.0f;
    if (i < V) g = (expf(to_float(x[i]) - m) * inv_s - (i == target ? 1.0f : 0.0f)) * dloss_scale;
    x[i] = from_float<T>(g);
  }
}

using bf16 = __nv_bfloat16;
constexpr int kRowThreads = 1024;
constexpr int kMaxChunks = 8;

template <int kChunks>
__global__ void __launch_bounds__(kRowThreads)
    classifier_bf16_kernel(bf16* logits, float* losses, const int* targets, int V, int Vp, float dloss_scale,
                           bool write_dlogits) {
  __shared__ float shared[32];
  const int row = blockIdx.x;
  uint4* x = reinterpret_cast<uint4*>(logits + static_cast<size_t>(row) * Vp);
  const int chunks = Vp / 8;
  const int target = targets[row];
  // Read before any thread overwrites the row (the reductions below hold a barrier).
  const float target_logit =
      threadIdx.x == 0 ? __bfloat162float(logits[static_cast<size_t>(row) * Vp + target]) : 0.f;
  uint4 v[kChunks];
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int idx = threadIdx.x + k * kRowThreads;
    if (idx >= chunks) continue;
    v[k] = x[idx];
    const auto* p = reinterpret_cast<const __nv_bfloat162*>(&v[k]);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 f = __bfloat1622float2(p[e]);
      if (idx * 8 + 2 * e < V) m = fmaxf(m, f.x);
      if (idx * 8 + 2 * e + 1 < V) m = fmaxf(m, f.y);
    }
  }
  m = block_max(m, shared);
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int idx = threadIdx.x + k * kRowThreads;
    if (idx >= chunks) continue;
    const auto* p = reinterpret_cast<const __nv_bfloat162*>(&v[k]);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 f = __bfloat1622float2(p[e]);
      if (idx * 8 + 2 * e < V) s += expf(f.x - m);
      if (idx * 8 + 2 * e + 1 < V) s += expf(f.y - m);
    }
  }
  s = block_sum(s, shared);
  if (threadIdx.x == 0) losses[row] = m + logf(s) - target_logit;
  if (!write_dlogits) return;
  const float inv_s = 1.0f / s;
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int idx = threadIdx.x + k * kRowThreads;
    if (idx >= chunks) continue;
    const auto* p = reinterpret_cast<const __nv_bfloat162*>(&v[k]);
    uint4 out;
    auto* q = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 f = __bfloat1622float2(p[e]);
      const int i = idx * 8 + 2 * e;
      const float g0 = i < V ? (expf(f.x - m) * inv_s - (i == target ? 1.0f : 0.0f)) * dloss_scale : 0.f;
      const float g1 =
          i + 1 < V ? (expf(f.y - m) * inv_s - (i + 1 == target ? 1.0f : 0.0f)) * dloss_scale : 0.f;
      q[e] = __floats2bfloat162_rn(g0, g1);
    }
    x[idx] = out;
  }
}

template <int kChunks>
void launch_bf16(bf16* logits, float* losses, const int* targets, int N, int V, int Vp, float dloss_scale,
                 bool write_dlogits, cudaStream_t stream) {
  classifier_bf16_kernel<kChunks>
      <<<N, kRowThreads, 0, stream>>>(logits, losses, targets, V, Vp, dloss_scale, write_dlogits);
}

}  // namespace

template <class T>
void classifier_forward_backward(T* logits, float* losses, const int* targets, int N, int V, int Vp,
                                 float dloss_scale, bool write_dlogits, cudaStream_t stream) {
  if constexpr (std::is_same_v<T, bf16>) {
    const int chunks_per_thread = (Vp / 8 + kRowThreads - 1) / kRowThreads;
    if (Vp % 8 == 0 && chunks_per_thread <= kMaxChunks && reinterpret_cast<uintptr_t>(logits) % 16 == 0) {
      void (*launch)(bf16*, float*, const int*, int, int, int, float, bool, cudaStream_t) = nullptr;
      switch (chunks_per_thread) {
        case 1:
          launch = launch_bf16<1>;
          break;
        case 2:
          launch = launch_bf16<2>;
          break;
        case 3:
          launch = launch_bf16<3>;
          break;
        case 4:
          launch = launch_bf16<4>;
          break;
        case 5:
          launch = launch_bf16<5>;
          break;
        case 6:
          launch = launch_bf16<6>;
          break;
        case 7:
          launch = launch_bf16<7>;
          break;
        default:
          launch = launch_bf16<8>;
          break;
      }
      launch(logits, losses, targets, N, V, Vp, dloss_scale, write_dlogits, stream);
      CUDA_CHECK_LAUNCH();
      return;
    }
  }
  classifier_kernel<<<N, kThreads, 0, stream>>>(logits, losses, targets, V, Vp, dloss_scale, write_dlogits);
  CUDA_CHECK_LAUNCH();
}

#define INSTANTIATE(T)                                                                             \
  template void classifier_forward_backward<T>(T*, float*, const int*, int, int, int, float, bool, \
                                               cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(__nv_bfloat16)
#undef INSTANTIATE

// ---- vocabulary parallel (kernels.h) ----

namespace {

template <class T>
__global__ void vp_max_kernel(const T* logits, float* row_max, int Vl, int real) {
  __shared__ float shared[32];
  const T* x = logits + static_cast<size_t>(blockIdx.x) * Vl;
  float m = -INFINITY;
  for (int i = threadIdx.x; i < real; i += blockDim.x) m = fmaxf(m, to_float(x[i]));
  m = block_max(m, shared);
  if (threadIdx.x == 0) row_max[blockIdx.x] = m;
}

template <class T>
__global__ void vp_sums_kernel(const T* logits, const float* row_max, float* stats, const int* targets, int N,
                               int Vl, int real, int vocab_begin) {
  __shared__ float shared[32];
  const int row = blockIdx.x;
  const T* x = logits + static_cast<size_t>(row) * Vl;
  const float m = row_max[row];
  float s = 0.0f;
  for (int i = threadIdx.x; i < real; i += blockDim.x) s += expf(to_float(x[i]) - m);
  s = block_sum(s, shared);
  if (threadIdx.x != 0) return;
  stats[row] = s;
  const int local = targets[row] - vocab_begin;
  stats[N + row] = local >= 0 && local < real ? to_float(x[local]) : 0.0f;
}

template <class T>
__global__ void vp_finish_kernel(T* logits, float* losses, const float* row_max, const float* stats,
                                 const int* targets, int N, int Vl, int real, int vocab_begin, float dloss_scale,
                                 bool write_dlogits) {
  const int row = blockIdx.x;
  const float m = row_max[row], s = stats[row];
  if (threadIdx.x == 0) losses[row] = logf(s) + m - stats[N + row];
  if (!write_dlogits) return;
  T* x = logits + static_cast<size_t>(row) * Vl;
  const int target = targets[row] - vocab_begin;
  const float inv_s = 1.0f / s;
  for (int i = threadIdx.x; i < Vl; i += blockDim.x) {
    float g = 0.0f;
    if (i < real) g = (expf(to_float(x[i]) - m) * inv_s - (i == target ? 1.0f : 0.0f)) * dloss_scale;
    x[i] = from_float<T>(g);
  }
}

__global__ void loss_accumulate_kernel(float* acc, const float* losses, int N, float scale) {
  __shared__ float shared[32];
  float s = 0.0f;
  for (int i = threadIdx.x; i < N; i += blockDim.x) s += losses[i];
  s = block_sum(s, shared);
  if (threadIdx.x == 0) acc[0] += scale * s / static_cast<float>(N);
}

// This rank's real (unpadded) columns: those of [vocab_begin, vocab_begin + Vl) below V.
int real_columns(int Vl, int vocab_begin, int V) { return std::max(0, std::min(Vl, V - vocab_begin)); }

}  // namespace

template <class T>
void classifier_vp_max(const T* logits, float* row_max, int N, int Vl, int vocab_begin, int V, cudaStream_t stream) {
  vp_max_kernel<<<N, kThreads, 0, stream>>>(logits, row_max, Vl, real_columns(Vl, vocab_begin, V));
  CUDA_CHECK_LAUNCH();
}

template <class T>
void classifier_vp_sums(const T* logits, const float* row_max, float* stats, const int* targets, int N, int Vl,
                        int vocab_begin, int V, cudaStream_t stream) {
  vp_sums_kernel<<<N, kThreads, 0, stream>>>(logits, row_max, stats, targets, N, Vl,
                                             real_columns(Vl, vocab_begin, V), vocab_begin);
  CUDA_CHECK_LAUNCH();
}

template <class T>
void classifier_vp_finish(T* logits, float* losses, const float* row_max, const float* stats, const int* targets,
                          int N, int Vl, int vocab_begin, int V, float dloss_scale, bool write_dlogits,
                          cudaStream_t stream) {
  vp_finish_kernel<<<N, kThreads, 0, stream>>>(logits, losses, row_max, stats, targets, N, Vl,
                                               real_columns(Vl, vocab_begin, V), vocab_begin, dloss_scale,
                                               write_dlogits);
  CUDA_CHECK_LAUNCH();
}

void loss_accumulate(float* acc, const float* losses, int N, float scale, cudaStream_t stream) {
  loss_accumulate_kernel<<<1, kThreads, 0, stream>>>(acc, losses, N, scale);
  CUDA_CHECK_LAUNCH();
}

#define INSTANTIATE_VP(T)                                                                                    \
  template void classifier_vp_max<T>(const T*, float*, int, int, int, int, cudaStream_t);                    \
  template void classifier_vp_sums<T>(const T*, const float*, float*, const int*, int, int, int, int,        \
                                      cudaStream_t);                                                         \
  template void classifier_vp_finish<T>(T*, float*, const float*, const float*, const int*, int, int, int, int, \
                                        float, bool, cudaStream_t);
INSTANTIATE_VP(float)
INSTANTIATE_VP(__nv_bfloat16)
#undef INSTANTIATE_VP

}  // namespace megascale::trainer::cuda
