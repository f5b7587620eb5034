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

// Deterministic dQ: the backward blocks (one per key tile) add their dS K into the fp32 dQ accumulator
// one at a time per query tile, in a fixed order: descending key tile, so key tile kt's turn at query
// tile qt is qt - kt (the diagonal tile kt = qt goes first; every key tile that reaches qt at all is in
// [first, qt], a contiguous range, since a higher key tile reaches at least as far). Each float then
// gets its terms in the same order on every run, so dQ (and the trainer's resume) is bit-reproducible.
// `turns` holds one int per (b, h, query tile), zeroed before the backward; a block waits for
// turns == its turn, adds, and increments it. Key tile kt + 1 reaches query tile qt one iteration before
// kt does (both walk up from their diagonal), so the wait is short when the blocks of a head run side by
// side. Blocks map to key tiles in descending order (blockIdx.x = 0 is the last key tile), so a block
// only ever waits on blocks of lower linear index, which the hardware dispatches first; this in-order
// dispatch assumption is the one stream-K GEMMs and FlashAttention-3's deterministic mode rely on.

/// Number of fp32 words `turns` needs: one per (b, h, 32-query tile), the smaller of the two tile sizes.
__host__ __device__ inline size_t attention_turn_words(int B, int H, int T) {
  return static_cast<size_t>(B) * H * ((T + 31) / 32);
}

// The turn is handed over with PTX's scoped acquire and release (the pattern of CUTLASS's semaphore and
// FlashAttention-3's deterministic mode): every thread issues its dQ additions, the block meets at a
// __syncthreads(), and thread 0 increments the turn with a release (red.release.gpu); the next block's
// thread 0 reads it with an acquire (ld.acquire.gpu) and its block's next __syncthreads() carries the
// order to the other threads. A release is a fence.acq_rel, which waits for less than the sequentially
// consistent __threadfence() (fence.sc) the protocol used before: on the H100 the ordered backward of
// the 350M shape went from 0.779 to 0.693 ms, the same as with no fences at all (a diagnostic build).

/// An acquire load of a turn counter at GPU scope.
__device__ inline int attention_load_turn_acquire(const int* turn) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(turn) : "memory");
  return v;
}

/// Hands the turn on: a release increment at GPU scope (orders this thread's and, through the
/// __syncthreads() before it, the block's earlier writes before it).
__device__ inline void attention_pass_turn_release(int* turn) {
  asm volatile("red.release.gpu.global.add.s32 [%0], 1;" ::"l"(turn) : "memory");
}

/// Thread 0 spins until *turn == expected; the caller's next __syncthreads() releases the block.
__device__ inline void attention_wait_turn(const int* turn, int expected) {
  if (threadIdx.x == 0) {
    while (attention_load_turn_acquire(turn) != expected) __nanosleep(64);
  }
}

/// After the block's dQ additions and a __syncthreads(): thread 0 hands the turn on.
__device__ inline void attention_pass_turn_after_sync(int* turn) {
  if (threadIdx.x == 0) attention_pass_turn_release(turn);
}

// The tensor-core backward (attention_tc_backward.cu) also reads the turn early: thread 0 loads it when
// the tile's work starts (attention_peek_turn, relaxed; the load's latency hides behind the tile's matrix
// products) and spins only if it was not yet its turn.

/// Thread 0's early read of the turn counter (other threads get 0).
__device__ inline int attention_peek_turn(const int* turn) {
  return threadIdx.x == 0 ? *reinterpret_cast<const volatile int*>(turn) : 0;
}

/// Thread 0 waits until *turn == expected, acquiring it (again, if the early read already saw it: that
/// read was relaxed). The caller's next __syncthreads() releases the block.
__device__ inline void attention_wait_turn_peeked(const int* turn, int expected, int peeked) {
  if (threadIdx.x == 0) {
    if (peeked != expected) {
      while (attention_load_turn_acquire(turn) != expected) __nanosleep(32);
    } else {
      (void)attention_load_turn_acquire(turn);
    }
  }
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
void launch_attention_backward_simple(T* dk, T* dv, float* dq_accum, int* dq_turns, const T* dout,
                                      const float* lse, const float* drow, const T* q, const T* k, const T* v,
                                      const AttentionShape& s, cudaStream_t stream);

// Tensor-core kernels (mma.sync bf16), 16-byte aligned rows only (attention_tc_*.cu).
void launch_attention_forward_tc(__nv_bfloat16* o, float* lse, const __nv_bfloat16* q, const __nv_bfloat16* k,
                                 const __nv_bfloat16* v, const AttentionShape& s, cudaStream_t stream);
// The backward: `ordered` writes dq itself and needs only `dq_turns` zeroed; unordered, it adds into a
// zeroed `dq_accum` ([B, H, T, D] fp32) and leaves the conversion to dq to the caller.
void launch_attention_backward_tc(__nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv, float* dq_accum,
                                  int* dq_turns, const __nv_bfloat16* dout, const float* lse,
                                  const float* drow, const __nv_bfloat16* q, const __nv_bfloat16* k,
                                  const __nv_bfloat16* v, const AttentionShape& s, bool ordered,
                                  cudaStream_t stream);

}  // namespace megascale::trainer::attention_detail
