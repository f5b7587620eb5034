// Internals shared by the attention kernels (trainer/cuda/attention*.cu); not for the model.
//
//   AttentionShape shape{B, T, H, D, ld_qkv, ld_o, window, scale};
//   if (attention_visible(i, j, shape.window)) ...;   // the one definition of the mask
//   launch_attention_forward_tc(o, lse, q, k, v, shape, stream);
//
// attention.cu validates the arguments and picks a path; the launchers here assume valid input.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace megascale::trainer::attention_detail {

struct AttentionShape {
  int B;
  int T;  // sequence length
  int H;
  int D;  // head dimension, 64 or 128
  int ld_qkv;
  int ld_o;
  int window;  // 0 = full causal
  float scale;
};

/// The mask: query i sees key j iff j <= i and, with a window w > 0, i - j < w.
__host__ __device__ inline bool attention_visible(int i, int j, int window) {
  return j <= i && (window == 0 || i - j < window);
}

/// First key any query in [q_first, ...) can see.
__host__ __device__ inline int attention_first_key(int q_first, int window) {
  return window == 0 ? 0 : (q_first - window + 1 > 0 ? q_first - window + 1 : 0);
}

/// Last query (exclusive bound clipped to T - 1) that can see a key in [..., k_last].
__host__ __device__ inline int attention_last_query(int k_last, int window, int T) {
  if (window == 0) return T - 1;
  const int last = k_last + window - 1;
  return last < T - 1 ? last : T - 1;
}

/// Offset of element (b, t, h, 0) in a [B, T, *] tensor with row stride ld.
__host__ __device__ inline size_t attention_row(int b, int t, int h, const AttentionShape& s, int ld) {
  return (static_cast<size_t>(b) * s.T + t) * ld + static_cast<size_t>(h) * s.D;
}

/// Aborts with file:line when the last launch failed (the trainer's CUDA_CHECK convention).
inline void attention_check_launch(const char* what, const char* file, int line) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    std::fprintf(stderr, "[CUDA ERROR] %s: %s at %s:%d\n", what, cudaGetErrorString(err), file, line);
    std::abort();
  }
}
#define ATTENTION_CHECK_LAUNCH(what) \
  ::megascale::trainer::attention_detail::attention_check_launch(what, __FILE__, __LINE__)

// CUDA-core kernels for any T and stride, fp32 or bf16 storage (attention_simple.cu).
template <class T>
void launch_attention_forward_simple(T* o, float* lse, const T* q, const T* k, const T* v,
                                     const AttentionShape& s, cudaStream_t stream);
template <class T>
void launch_attention_backward_simple(T* dk, T* dv, float* dq_accum, const T* dout, const float* lse,
                                      const float* drow, const T* q, const T* k, const T* v,
                                      const AttentionShape& s, cudaStream_t stream);

// Tensor-core kernels (mma.sync bf16), 16-byte aligned rows only (attention_tc_*.cu).
void launch_attention_forward_tc(__nv_bfloat16* o, float* lse, const __nv_bfloat16* q, const __nv_bfloat16* k,
                                 const __nv_bfloat16* v, const AttentionShape& s, cudaStream_t stream);
void launch_attention_backward_tc(__nv_bfloat16* dk, __nv_bfloat16* dv, float* dq_accum,
                                  const __nv_bfloat16* dout, const float* lse, const float* drow,
                                  const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                  const AttentionShape& s, cudaStream_t stream);

}  // namespace megascale::trainer::attention_detail
