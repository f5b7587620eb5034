// CUDA-core flash attention: the plain tiled version of the algorithm, for fp32 (the trainer's tight
// check mode) and for bf16 tensors whose strides the tensor-core kernels cannot load 16 bytes at a
// time. Tiles of 32 queries x 32 keys in shared memory, fp32 throughout; four threads share a row.
//
//   launch_attention_forward_simple(o, lse, q, k, v, shape, stream);
//   launch_attention_backward_simple(dk, dv, dq_accum, dq_turns, dout, lse, drow, q, k, v, shape, stream);
//
// The forward is FlashAttention-2's Algorithm 1 (Dao 2023, arXiv 2307.08691, sec. 3.1): per key tile,
// m_new = max(m, rowmax(S)), rescale the running sum and output by exp(m - m_new), add exp(S - m_new).
// The backward is its Algorithm 2 (sec. 3.1.2), parallel over key tiles: P = exp(S - lse),
// dP = dO V^T, dS = P o (dP - rowsum(dO o O)), dV += P^T dO, dK += scale dS^T Q, dQ += scale dS K, the
// dQ additions taking turns per query tile in a fixed order (attention_internal.cuh, "Deterministic dQ").
#include <cuda_bf16.h>

#include <cmath>

#include "attention_internal.cuh"
#include "device_utils.cuh"

namespace megascale::trainer::attention_detail {
namespace {

constexpr int kTile = 32;      // queries and keys per tile
constexpr int kThreads = 128;  // 4 threads per tile row

using cuda::from_float;  // device_utils.cuh: conversions shared with the other kernels
using cuda::to_float;

// Copies rows [t0, t0 + kTile) of one head into a [kTile][stride] fp32 tile; rows past T become 0.
template <class T, int D>
__device__ void load_tile(float* tile, int stride, const T* base, int b, int t0, int h,
                          const AttentionShape& s, int ld) {
  for (int idx = threadIdx.x; idx < kTile * D; idx += kThreads) {
    const int r = idx / D, d = idx % D;
    const int t = t0 + r;
    tile[r * stride + d] = t < s.T ? to_float(base[attention_row(b, t, h, s, ld) + d]) : 0.f;
  }
}

template <class T, int D>
__global__ void __launch_bounds__(kThreads)
    forward_simple_kernel(T* o, float* lse, const T* q, const T* k, const T* v, AttentionShape s) {
  constexpr int kStride = D + 1;  // +1 float: the four rows a warp reads at once fall in different banks
  extern __shared__ float smem[];
  float* q_s = smem;                   // [kTile][kStride], pre-scaled by `scale`
  float* k_s = q_s + kTile * kStride;  // [kTile][kStride]
  float* v_s = k_s + kTile * kStride;  // [kTile][kStride]
  float* p_s = v_s + kTile * kStride;  // [kTile][kTile + 1]

  const int b = blockIdx.z, h = blockIdx.y;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kTile;  // longest rows first: better tail balance
  const int row = threadIdx.x / 4, sub = threadIdx.x % 4;
  const int i = q0 + row;

  load_tile<T, D>(q_s, kStride, q, b, q0, h, s, s.ld_qkv);
  __syncthreads();
  for (int d = sub; d < D; d += 4) q_s[row * kStride + d] *= s.scale;

  float acc[D / 4];
#pragma unroll
  for (int x = 0; x < D / 4; ++x) acc[x] = 0.f;
  float m = -INFINITY, l_part = 0.f;  // l_part: this thread's share of the row sum

  const int k_first = attention_first_key(q0, s.window);
  const int k_last = min(s.T - 1, q0 + kTile - 1);
  for (int k0 = k_first / kTile * kTile; k0 <= k_last; k0 += kTile) {
    __syncthreads();  // the previous tile's readers are done
    load_tile<T, D>(k_s, kStride, k, b, k0, h, s, s.ld_qkv);
    load_tile<T, D>(v_s, kStride, v, b, k0, h, s, s.ld_qkv);
    __syncthreads();

    float sc[kTile / 4];
    float tile_max = -INFINITY;
#pragma unroll
    for (int x = 0; x < kTile / 4; ++x) {
      const int jj = sub + 4 * x, j = k0 + jj;
      float dot = 0.f;
#pragma unroll 8
      for (int d = 0; d < D; ++d) dot += q_s[row * kStride + d] * k_s[jj * kStride + d];
      sc[x] = (j < s.T && attention_visible(i, j, s.window)) ? dot : -INFINITY;
      tile_max = fmaxf(tile_max, sc[x]);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
    const float m_new = fmaxf(m, tile_max);
    // A row can meet a tile where every key is masked (window start): keep exp() away from inf - inf.
    const float m_use = m_new == -INFINITY ? 0.f : m_new;
    const float correction = expf(m - m_use);
    m = m_new;
    l_part *= correction;
#pragma unroll
    for (int x = 0; x < D / 4; ++x) acc[x] *= correction;
#pragma unroll
    for (int x = 0; x < kTile / 4; ++x) {
      const float p = expf(sc[x] - m_use);
      l_part += p;
      p_s[row * (kTile + 1) + sub + 4 * x] = p;
    }
    __syncwarp();  // p_s row `row` is written and read by the same four lanes
    for (int jj = 0; jj < kTile; ++jj) {
      const float p = p_s[row * (kTile + 1) + jj];
#pragma unroll
      for (int x = 0; x < D / 4; ++x) acc[x] += p * v_s[jj * kStride + sub + 4 * x];
    }
  }

  float l = l_part + __shfl_xor_sync(0xffffffffu, l_part, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  if (i < s.T) {
    T* out = o + attention_row(b, i, h, s, s.ld_o);
#pragma unroll
    for (int x = 0; x < D / 4; ++x) out[sub + 4 * x] = from_float<T>(acc[x] / l);
    if (sub == 0) lse[(static_cast<size_t>(b) * s.H + h) * s.T + i] = m + logf(l);
  }
}

template <class T, int D>
__global__ void __launch_bounds__(kThreads)
    backward_simple_kernel(T* dk, T* dv, float* dq_accum, int* dq_turns, const T* dout, const float* lse,
                           const float* drow, const T* q, const T* k, const T* v, AttentionShape s) {
  constexpr int kStride = D + 1;
  extern __shared__ float smem[];
  float* k_s = smem;                          // [kTile][kStride]
  float* v_s = k_s + kTile * kStride;         // [kTile][kStride]
  float* q_s = v_s + kTile * kStride;         // [kTile][kStride]
  float* do_s = q_s + kTile * kStride;        // [kTile][kStride]
  float* p_s = do_s + kTile * kStride;        // [key][query], [kTile][kTile + 1]
  float* ds_s = p_s + kTile * (kTile + 1);    // [key][query], [kTile][kTile + 1]
  float* lse_s = ds_s + kTile * (kTile + 1);  // [kTile]
  float* drow_s = lse_s + kTile;              // [kTile]

  const int b = blockIdx.z, h = blockIdx.y;
  const int key_tile = gridDim.x - 1 - blockIdx.x;  // descending: waits only on earlier blocks
  const int k0 = key_tile * kTile;
  const int row = threadIdx.x / 4, sub = threadIdx.x % 4;  // row: a key in the dK/dV phase, a query in dQ
  const int j = k0 + row;
  const size_t bh = static_cast<size_t>(b) * s.H + h;
  int* turns = dq_turns + bh * ((s.T + 31) / 32);

  load_tile<T, D>(k_s, kStride, k, b, k0, h, s, s.ld_qkv);
  load_tile<T, D>(v_s, kStride, v, b, k0, h, s, s.ld_qkv);
  float dk_acc[D / 4], dv_acc[D / 4];
#pragma unroll
  for (int x = 0; x < D / 4; ++x) dk_acc[x] = dv_acc[x] = 0.f;

  const int q_last = attention_last_query(min(s.T - 1, k0 + kTile - 1), s.window, s.T);
  for (int q0 = k0; q0 <= q_last; q0 += kTile) {
    __syncthreads();
    load_tile<T, D>(q_s, kStride, q, b, q0, h, s, s.ld_qkv);
    load_tile<T, D>(do_s, kStride, dout, b, q0, h, s, s.ld_o);
    if (threadIdx.x < kTile) {
      const int i = q0 + threadIdx.x;
      lse_s[threadIdx.x] = i < s.T ? lse[bh * s.T + i] : 0.f;
      drow_s[threadIdx.x] = i < s.T ? drow[bh * s.T + i] : 0.f;
    }
    __syncthreads();

#pragma unroll
    for (int x = 0; x < kTile / 4; ++x) {
      const int ii = sub + 4 * x, i = q0 + ii;
      float qk = 0.f, dp = 0.f;
#pragma unroll 8
      for (int d = 0; d < D; ++d) {
        qk += k_s[row * kStride + d] * q_s[ii * kStride + d];
        dp += v_s[row * kStride + d] * do_s[ii * kStride + d];
      }
      const bool visible = i < s.T && j < s.T && attention_visible(i, j, s.window);
      const float p = visible ? expf(qk * s.scale - lse_s[ii]) : 0.f;
      p_s[row * (kTile + 1) + ii] = p;
      ds_s[row * (kTile + 1) + ii] = p * (dp - drow_s[ii]);
    }
    const int query_tile = q0 / kTile;
    attention_wait_turn(&turns[query_tile], query_tile - key_tile);
    __syncthreads();  // dQ below reads every key's dS

    for (int ii = 0; ii < kTile; ++ii) {
      const float p = p_s[row * (kTile + 1) + ii], ds = ds_s[row * (kTile + 1) + ii];
#pragma unroll
      for (int x = 0; x < D / 4; ++x) {
        dv_acc[x] += p * do_s[ii * kStride + sub + 4 * x];
        dk_acc[x] += ds * q_s[ii * kStride + sub + 4 * x];
      }
    }
    const int i = q0 + row;
    if (i < s.T) {
      float dq[D / 4];
#pragma unroll
      for (int x = 0; x < D / 4; ++x) dq[x] = 0.f;
      for (int jj = 0; jj < kTile; ++jj) {
        const float ds = ds_s[jj * (kTile + 1) + row];
#pragma unroll
        for (int x = 0; x < D / 4; ++x) dq[x] += ds * k_s[jj * kStride + sub + 4 * x];
      }
      float* dst = dq_accum + (bh * s.T + i) * D;
#pragma unroll
      for (int x = 0; x < D / 4; ++x) atomicAdd(dst + sub + 4 * x, dq[x] * s.scale);
    }
    __syncthreads();  // every thread's additions issued before thread 0's release
    attention_pass_turn_after_sync(&turns[query_tile]);
  }

  if (j < s.T) {
    T* dk_row = dk + attention_row(b, j, h, s, s.ld_qkv);
    T* dv_row = dv + attention_row(b, j, h, s, s.ld_qkv);
#pragma unroll
    for (int x = 0; x < D / 4; ++x) {
      dk_row[sub + 4 * x] = from_float<T>(dk_acc[x] * s.scale);
      dv_row[sub + 4 * x] = from_float<T>(dv_acc[x]);
    }
  }
}

template <class Kernel>
void set_smem(Kernel kernel, size_t bytes) {
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
}

}  // namespace

template <class T>
void launch_attention_forward_simple(T* o, float* lse, const T* q, const T* k, const T* v,
                                     const AttentionShape& s, cudaStream_t stream) {
  const dim3 grid((s.T + kTile - 1) / kTile, s.H, s.B);
  const size_t bytes = (3 * kTile * (s.D + 1) + kTile * (kTile + 1)) * sizeof(float);
  if (s.D == 64) {
    set_smem(forward_simple_kernel<T, 64>, bytes);
    forward_simple_kernel<T, 64><<<grid, kThreads, bytes, stream>>>(o, lse, q, k, v, s);
  } else {
    set_smem(forward_simple_kernel<T, 128>, bytes);
    forward_simple_kernel<T, 128><<<grid, kThreads, bytes, stream>>>(o, lse, q, k, v, s);
  }
  ATTENTION_CHECK_LAUNCH("attention forward (CUDA cores)");
}

template <class T>
void launch_attention_backward_simple(T* dk, T* dv, float* dq_accum, int* dq_turns, const T* dout,
                                      const float* lse, const float* drow, const T* q, const T* k, const T* v,
                                      const AttentionShape& s, cudaStream_t stream) {
  const dim3 grid((s.T + kTile - 1) / kTile, s.H, s.B);
  const size_t bytes = (4 * kTile * (s.D + 1) + 2 * kTile * (kTile + 1) + 2 * kTile) * sizeof(float);
  if (s.D == 64) {
    set_smem(backward_simple_kernel<T, 64>, bytes);
    backward_simple_kernel<T, 64>
        <<<grid, kThreads, bytes, stream>>>(dk, dv, dq_accum, dq_turns, dout, lse, drow, q, k, v, s);
  } else {
    set_smem(backward_simple_kernel<T, 128>, bytes);
    backward_simple_kernel<T, 128>
        <<<grid, kThreads, bytes, stream>>>(dk, dv, dq_accum, dq_turns, dout, lse, drow, q, k, v, s);
  }
  ATTENTION_CHECK_LAUNCH("attention backward (CUDA cores)");
}

template void launch_attention_forward_simple<float>(float*, float*, const float*, const float*, const float*,
                                                     const AttentionShape&, cudaStream_t);
template void launch_attention_forward_simple<__nv_bfloat16>(__nv_bfloat16*, float*, const __nv_bfloat16*,
                                                             const __nv_bfloat16*, const __nv_bfloat16*,
                                                             const AttentionShape&, cudaStream_t);
template void launch_attention_backward_simple<float>(float*, float*, float*, int*, const float*,
                                                      const float*, const float*, const float*, const float*,
                                                      const float*, const AttentionShape&, cudaStream_t);
template void launch_attention_backward_simple<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, float*, int*,
                                                              const __nv_bfloat16*, const float*,
                                                              const float*, const __nv_bfloat16*,
                                                              const __nv_bfloat16*, const __nv_bfloat16*,
                                                              const AttentionShape&, cudaStream_t);

}  // namespace megascale::trainer::attention_detail
