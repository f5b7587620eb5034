// LAMB (You et al., ICLR 2020, "Large Batch Optimization for Deep Learning", Algorithm 2): Adam's
// normalised step plus decoupled weight decay, scaled per tensor by the trust ratio ||w|| / ||u||.
// MegaScale uses it to grow the batch 4x without a loss penalty (NSDI '24 §3.1). One call per tensor:
// pass 1 updates the moments, writes u into the gradient buffer and sums ||w||^2 and ||u||^2 per block
// of a fixed grid; pass 2 reduces those partials in a fixed order (every block redundantly, which is
// cheaper than a third launch) and applies the step.
#include <algorithm>

#include "cuda_check.h"
#include "device_utils.cuh"
#include "kernels.h"

namespace megascale::trainer::cuda {
namespace {

constexpr int kMaxBlocks = 256;
constexpr int kThreads = 256;

int lamb_blocks(size_t n) {
  return static_cast<int>(std::min<size_t>(kMaxBlocks, (n + kThreads - 1) / kThreads));
}

__global__ void lamb_moments_kernel(const float* master, float* m_state, float* v_state, float* grad,
                                    size_t n, OptimizerStep s, float bias_correction1, float bias_correction2,
                                    float* partial) {
  __shared__ float shared[32];
  float w_sq = 0.0f;
  float u_sq = 0.0f;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float g = grad[i] * s.grad_scale;
    const float m = s.beta1 * m_state[i] + (1.0f - s.beta1) * g;
    const float v = s.beta2 * v_state[i] + (1.0f - s.beta2) * g * g;
    m_state[i] = m;
    v_state[i] = v;
    const float w = master[i];
    const float u = (m / bias_correction1) / (sqrtf(v / bias_correction2) + s.eps) + s.weight_decay * w;
    grad[i] = u;
    w_sq += w * w;
    u_sq += u * u;
  }
  w_sq = block_sum(w_sq, shared);
  u_sq = block_sum(u_sq, shared);
  if (threadIdx.x == 0) {
    partial[blockIdx.x] = w_sq;
    partial[kMaxBlocks + blockIdx.x] = u_sq;
  }
}

// ||w||^2 and ||u||^2 from the moments kernel's per-block partials, summed by the block in a fixed order.
__device__ float2 sum_partials(const float* partial, int num_partials, float* shared) {
  float w_sq = 0.0f;
  float u_sq = 0.0f;
  for (int i = threadIdx.x; i < num_partials; i += blockDim.x) {
    w_sq += partial[i];
    u_sq += partial[kMaxBlocks + i];
  }
  w_sq = block_sum(w_sq, shared);
  u_sq = block_sum(u_sq, shared);
  return make_float2(w_sq, u_sq);
}

// w -= lr * trust * u over the grid, trust = ||w|| / ||u|| (1 when either is 0).
template <class T>
__device__ void apply_trust(float* master, T* param, const float* update, size_t n, float learning_rate, float w_sq,
                            float u_sq) {
  const float w_norm = sqrtf(w_sq);
  const float u_norm = sqrtf(u_sq);
  const float trust = (w_norm > 0.0f && u_norm > 0.0f) ? w_norm / u_norm : 1.0f;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float w_new = master[i] - learning_rate * trust * update[i];
    master[i] = w_new;
    param[i] = from_float<T>(w_new);
  }
}

template <class T>
__global__ void lamb_apply_kernel(float* master, T* param, const float* update, size_t n, float learning_rate,
                                  const float* partial, int num_partials) {
  __shared__ float shared[32];
  const float2 sums = sum_partials(partial, num_partials, shared);
  apply_trust(master, param, update, n, learning_rate, sums.x, sums.y);
}

// sums[0] += sum of partial[0..n), sums[1] += sum of partial[kMaxBlocks..+n), in a fixed order.
__global__ void lamb_sums_kernel(float* sums, const float* partial, int num_partials) {
  __shared__ float shared[32];
  const float2 piece = sum_partials(partial, num_partials, shared);
  if (threadIdx.x == 0) {
    sums[0] += piece.x;
    sums[1] += piece.y;
  }
}

template <class T>
__global__ void lamb_apply_sums_kernel(float* master, T* param, const float* update, size_t n, float learning_rate,
                                       const float* sums) {
  apply_trust(master, param, update, n, learning_rate, sums[0], sums[1]);
}

// Pass 1: the moments, u into grad, and the per-block partials of ||w||^2 and ||u||^2 in scratch; returns
// the number of blocks (partials).
int launch_lamb_moments(float* master, float* m, float* v, float* grad, size_t n, const OptimizerStep& s,
                        float* scratch, cudaStream_t stream) {
  const float bc1 = 1.0f - powf(s.beta1, static_cast<float>(s.step));
  const float bc2 = 1.0f - powf(s.beta2, static_cast<float>(s.step));
  const int blocks = lamb_blocks(n);
  lamb_moments_kernel<<<blocks, kThreads, 0, stream>>>(master, m, v, grad, n, s, bc1, bc2, scratch);
  CUDA_CHECK_LAUNCH();
  return blocks;
}

// The apply pass's grid: every block re-reduces the partials (lamb_update), so it is capped; a
// grid-stride loop covers n.
unsigned int apply_blocks(size_t n) { return std::min(ceil_div(n, kThreads), 1024u); }

}  // namespace

void lamb_moments(float* master, float* m, float* v, float* grad, size_t n, const OptimizerStep& s, float* sums,
                  float* scratch, cudaStream_t stream) {
  if (n == 0) return;
  const int blocks = launch_lamb_moments(master, m, v, grad, n, s, scratch, stream);
  lamb_sums_kernel<<<1, kThreads, 0, stream>>>(sums, scratch, blocks);
  CUDA_CHECK_LAUNCH();
}

template <class T>
void lamb_apply(float* master, T* param, const float* update, size_t n, float learning_rate, const float* sums,
                cudaStream_t stream) {
  if (n == 0) return;
  lamb_apply_sums_kernel<<<apply_blocks(n), kThreads, 0, stream>>>(master, param, update, n, learning_rate, sums);
  CUDA_CHECK_LAUNCH();
}

size_t lamb_scratch_floats(size_t /*n*/) {
  return 2 * kMaxBlocks;
}

template <class T>
void lamb_update(float* master, T* param, float* m, float* v, float* grad, size_t n, const OptimizerStep& s,
                 float* scratch, cudaStream_t stream) {
  if (n == 0) return;
  const int blocks = launch_lamb_moments(master, m, v, grad, n, s, scratch, stream);
  lamb_apply_kernel<<<apply_blocks(n), kThreads, 0, stream>>>(master, param, grad, n, s.learning_rate, scratch,
                                                              blocks);
  CUDA_CHECK_LAUNCH();
}

#define INSTANTIATE(T)                                                                                   \
  template void lamb_update<T>(float*, T*, float*, float*, float*, size_t, const OptimizerStep&, float*, \
                               cudaStream_t);                                                            \
  template void lamb_apply<T>(float*, T*, const float*, size_t, float, const float*, cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(__nv_bfloat16)
#undef INSTANTIATE

}  // namespace megascale::trainer::cuda
