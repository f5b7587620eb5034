// Device-side helpers shared by the trainer's kernels: fp32 <-> compute-type conversion and warp and
// block sums in a fixed order (no atomics, so every reduction is bit-reproducible).
//
//   float x = to_float(in[i]);            // in: const T*
//   out[i] = from_float<T>(x * 2.0f);     // round-to-nearest-even for bf16
//   float s = warp_sum(x);                // every lane gets the sum
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace megascale::trainer::cuda {

__device__ __forceinline__ float to_float(float x) {
  return x;
}
__device__ __forceinline__ float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Butterfly sum: the same order on every lane, so every lane holds the identical result.
__device__ __forceinline__ float warp_sum(float x) {
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

__device__ __forceinline__ float warp_max(float x) {
  for (int offset = 16; offset > 0; offset >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

// Sum over a block of blockDim.x threads (a multiple of 32, at most 1024); every thread gets the result.
// shared must hold 32 floats. Ends with a barrier so shared can be reused at once.
__device__ __forceinline__ float block_sum(float x, float* shared) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int num_warps = blockDim.x / 32;
  x = warp_sum(x);
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  float total = lane < num_warps ? shared[lane] : 0.0f;
  total = warp_sum(total);
  __syncthreads();
  return total;
}

__device__ __forceinline__ float block_max(float x, float* shared) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int num_warps = blockDim.x / 32;
  x = warp_max(x);
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  float m = lane < num_warps ? shared[lane] : -INFINITY;
  m = warp_max(m);
  __syncthreads();
  return m;
}

inline unsigned int ceil_div(size_t a, size_t b) {
  return static_cast<unsigned int>((a + b - 1) / b);
}

}  // namespace megascale::trainer::cuda
