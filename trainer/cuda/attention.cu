// The attention entry points (attention.cuh): argument checks, the choice between the tensor-core and
// the CUDA-core kernels, and the small passes around the backward: D_i = rowsum(dO o O) before it
// (FlashAttention-2, Dao 2023, Algorithm 2 line 4) and the fp32 dQ accumulator's conversion after it
// (except in the ordered tensor-core backward, which writes dQ itself: attention_tc_backward.cu).
//
//   attention_forward(o, lse, q, k, v, B, T, H, D, 3 * C, C, window, scale, stream);
#include <cuda_bf16.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string_view>
#include <type_traits>
#include <utility>

#include "attention.cuh"
#include "attention_internal.cuh"

namespace megascale::trainer {
namespace {

using attention_detail::AttentionShape;

[[noreturn]] void bad_argument(const char* function, const char* what, double value) {
  std::fprintf(stderr, "%s: %s (got %g)\n", function, what, value);
  std::abort();
}

AttentionShape checked_shape(const char* function, int B, int T, int H, int D, int ld_qkv, int ld_o,
                             int window, float scale) {
  if (D != 64 && D != 128) bad_argument(function, "head dimension D must be 64 or 128", D);
  if (B < 1) bad_argument(function, "batch size B must be >= 1", B);
  if (T < 1) bad_argument(function, "sequence length T must be >= 1", T);
  if (H < 1) bad_argument(function, "head count H must be >= 1", H);
  if (ld_qkv < H * D) bad_argument(function, "ld_qkv must be >= H * D", ld_qkv);
  if (ld_o < H * D) bad_argument(function, "ld_o must be >= H * D", ld_o);
  if (window < 0) bad_argument(function, "window must be 0 (full causal) or > 0", window);
  if (!(scale > 0.f)) bad_argument(function, "scale must be > 0", scale);
  return AttentionShape{B, T, H, D, ld_qkv, ld_o, window, scale};
}

void require_pointer(const char* function, const char* name, const void* p) {
  if (p == nullptr) {
    std::fprintf(stderr, "%s: %s is null\n", function, name);
    std::abort();
  }
}

// The tensor-core kernels load rows 16 bytes at a time with cp.async.
bool rows_16_byte_aligned(std::initializer_list<const void*> pointers, int ld_qkv, int ld_o) {
  if (ld_qkv % 8 != 0 || ld_o % 8 != 0) return false;
  for (const void* p : pointers) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

__device__ inline float as_float(float x) {
  return x;
}
__device__ inline float as_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

// drow[b, h, i] = sum_d dO[b, i, h, d] * O[b, i, h, d]: one warp per (b, i, h) row.
template <class T>
__global__ void row_dot_kernel(float* drow, const T* dout, const T* o, AttentionShape s) {
  const long long row = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= static_cast<long long>(s.B) * s.T * s.H) return;
  const int h = static_cast<int>(row % s.H), t = static_cast<int>(row / s.H % s.T),
            b = static_cast<int>(row / s.H / s.T);
  const T* dO = dout + attention_detail::attention_row(b, t, h, s, s.ld_o);
  const T* O = o + attention_detail::attention_row(b, t, h, s, s.ld_o);
  float sum = 0.f;
  for (int d = lane; d < s.D; d += 32) sum += as_float(dO[d]) * as_float(O[d]);
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane == 0) drow[(static_cast<size_t>(b) * s.H + h) * s.T + t] = sum;
}

// The same for bf16 rows that are 16-byte aligned: D / 8 threads per row, 8 elements each, 16-byte loads
// (the warp-per-row form above issued 2-byte loads, two per lane, and was launch-bound).
template <int D>
__global__ void row_dot_bf16_kernel(float* drow, const __nv_bfloat16* dout, const __nv_bfloat16* o,
                                    AttentionShape s) {
  constexpr int kPerRow = D / 8;
  const long long t_id = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const long long row = t_id / kPerRow;
  const int part = static_cast<int>(t_id % kPerRow);
  const bool live = row < static_cast<long long>(s.B) * s.T * s.H;
  float sum = 0.f;
  int b = 0, t = 0, h = 0;
  if (live) {
    h = static_cast<int>(row % s.H);
    t = static_cast<int>(row / s.H % s.T);
    b = static_cast<int>(row / s.H / s.T);
    const size_t at = attention_detail::attention_row(b, t, h, s, s.ld_o) + part * 8;
    const uint4 dv = *reinterpret_cast<const uint4*>(dout + at);
    const uint4 ov = *reinterpret_cast<const uint4*>(o + at);
    const auto* d2 = reinterpret_cast<const __nv_bfloat162*>(&dv);
    const auto* o2 = reinterpret_cast<const __nv_bfloat162*>(&ov);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 x = __bfloat1622float2(d2[e]), y = __bfloat1622float2(o2[e]);
      sum += x.x * y.x;
      sum += x.y * y.y;
    }
  }
  // A row's kPerRow threads are consecutive lanes of one warp (32 % kPerRow == 0).
#pragma unroll
  for (int offset = kPerRow / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (live && part == 0) drow[(static_cast<size_t>(b) * s.H + h) * s.T + t] = sum;
}

template <class T>
__device__ inline T from_float(float x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    return __float2bfloat16(x);
  }
}

// dq[b, t, h, d] = dq_accum[b, h, t, d], cast to the compute dtype.
template <class T>
__global__ void dq_convert_kernel(T* dq, const float* dq_accum, AttentionShape s) {
  const long long idx = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<long long>(s.B) * s.H * s.T * s.D) return;
  const int d = static_cast<int>(idx % s.D);
  const long long bht = idx / s.D;
  const int t = static_cast<int>(bht % s.T), h = static_cast<int>(bht / s.T % s.H),
            b = static_cast<int>(bht / s.T / s.H);
  dq[attention_detail::attention_row(b, t, h, s, s.ld_qkv) + d] = from_float<T>(dq_accum[idx]);
}

// The same for bf16 dq with 16-byte aligned rows: 8 elements per thread (two 16-byte loads, one store).
__global__ void dq_convert_bf16_kernel(__nv_bfloat16* dq, const float* dq_accum, AttentionShape s) {
  const long long idx = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) * 8;
  if (idx >= static_cast<long long>(s.B) * s.H * s.T * s.D) return;
  const int d = static_cast<int>(idx % s.D);
  const long long bht = idx / s.D;
  const int t = static_cast<int>(bht % s.T), h = static_cast<int>(bht / s.T % s.H),
            b = static_cast<int>(bht / s.T / s.H);
  const float4 lo = *reinterpret_cast<const float4*>(dq_accum + idx);
  const float4 hi = *reinterpret_cast<const float4*>(dq_accum + idx + 4);
  uint4 out;
  auto* o2 = reinterpret_cast<__nv_bfloat162*>(&out);
  o2[0] = __floats2bfloat162_rn(lo.x, lo.y);
  o2[1] = __floats2bfloat162_rn(lo.z, lo.w);
  o2[2] = __floats2bfloat162_rn(hi.x, hi.y);
  o2[3] = __floats2bfloat162_rn(hi.z, hi.w);
  *reinterpret_cast<uint4*>(dq + attention_detail::attention_row(b, t, h, s, s.ld_qkv) + d) = out;
}

}  // namespace

namespace {
// -1 until the environment has been read; then 0 or 1.
std::atomic<int> deterministic_setting{-1};
}  // namespace

bool attention_deterministic() {
  int v = deterministic_setting.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* env = std::getenv("MEGASCALE_ATTENTION_DETERMINISTIC");
    const std::string_view value = env != nullptr ? env : "1";
    if (value != "0" && value != "1") {
      std::fprintf(stderr,
                   "MEGASCALE_ATTENTION_DETERMINISTIC=\"%s\": must be 1 (ordered dQ, bit-reproducible) or 0 "
                   "(unordered atomics)\n",
                   env);
      std::abort();
    }
    int unread = -1;  // a concurrent first call or attention_set_deterministic may have won
    deterministic_setting.compare_exchange_strong(unread, value == "1" ? 1 : 0, std::memory_order_relaxed);
    v = deterministic_setting.load(std::memory_order_relaxed);
  }
  return v == 1;
}

void attention_set_deterministic(bool ordered) {
  deterministic_setting.store(ordered ? 1 : 0, std::memory_order_relaxed);
}

size_t attention_backward_workspace_bytes(int B, int T_len, int H, int D) {
  const size_t rows = static_cast<size_t>(B) * H * T_len;
  // dQ accumulator, the per-query-tile dQ turns, D_i (attention_internal.cuh, "Deterministic dQ").
  return (rows * D + attention_detail::attention_turn_words(B, H, T_len) + rows) * sizeof(float);
}

template <class T>
void attention_forward(T* o, float* lse, const T* q, const T* k, const T* v, int B, int T_len, int H, int D,
                       int ld_qkv, int ld_o, int window, float scale, cudaStream_t stream) {
  const char* fn = "attention_forward";
  const AttentionShape s = checked_shape(fn, B, T_len, H, D, ld_qkv, ld_o, window, scale);
  require_pointer(fn, "o", o);
  require_pointer(fn, "lse", lse);
  require_pointer(fn, "q", q);
  require_pointer(fn, "k", k);
  require_pointer(fn, "v", v);
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    if (rows_16_byte_aligned({o, q, k, v}, ld_qkv, ld_o)) {
      attention_detail::launch_attention_forward_tc(o, lse, q, k, v, s, stream);
      return;
    }
  }
  attention_detail::launch_attention_forward_simple(o, lse, q, k, v, s, stream);
}

template <class T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* o, const float* lse, const T* q,
                        const T* k, const T* v, int B, int T_len, int H, int D, int ld_qkv, int ld_o,
                        int window, float scale, float* workspace, cudaStream_t stream) {
  const char* fn = "attention_backward";
  const AttentionShape s = checked_shape(fn, B, T_len, H, D, ld_qkv, ld_o, window, scale);
  for (const auto& [name, p] : {std::pair<const char*, const void*>{"dq", dq},
                                {"dk", dk},
                                {"dv", dv},
                                {"dout", dout},
                                {"o", o},
                                {"lse", lse},
                                {"q", q},
                                {"k", k},
                                {"v", v},
                                {"workspace", workspace}}) {
    require_pointer(fn, name, p);
  }
  if (reinterpret_cast<uintptr_t>(workspace) % 16 != 0) {
    bad_argument(fn, "workspace must be 16-byte aligned (address mod 16)",
                 static_cast<double>(reinterpret_cast<uintptr_t>(workspace) % 16));
  }
  const size_t rows = static_cast<size_t>(B) * H * T_len;
  const size_t turn_words = attention_detail::attention_turn_words(B, H, T_len);
  float* dq_accum = workspace;                                   // [B, H, T, D]
  int* dq_turns = reinterpret_cast<int*>(workspace + rows * D);  // [B, H, ceil(T / 32)]
  float* drow = workspace + rows * D + turn_words;               // [B, H, T]

  bool tensor_cores = false, ordered = false;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    tensor_cores = rows_16_byte_aligned({dq, dk, dv, dout, o, q, k, v}, ld_qkv, ld_o);
    ordered = tensor_cores && attention_deterministic();
  }
  // The turns always start at 0; the accumulator only when something adds into it from zero (the
  // ordered tensor-core backward stores its first terms).
  if (ordered) {
    cudaMemsetAsync(dq_turns, 0, turn_words * sizeof(float), stream);
  } else {
    cudaMemsetAsync(dq_accum, 0, (rows * D + turn_words) * sizeof(float), stream);
  }
  constexpr int kThreads = 256;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    if (tensor_cores) {
      const auto row_grid = static_cast<unsigned>((rows * (D / 8) + kThreads - 1) / kThreads);
      if (D == 64) {
        row_dot_bf16_kernel<64><<<row_grid, kThreads, 0, stream>>>(drow, dout, o, s);
      } else {
        row_dot_bf16_kernel<128><<<row_grid, kThreads, 0, stream>>>(drow, dout, o, s);
      }
      ATTENTION_CHECK_LAUNCH("attention backward rowsum(dO * O)");
      attention_detail::launch_attention_backward_tc(dq, dk, dv, dq_accum, dq_turns, dout, lse, drow, q, k, v,
                                                     s, ordered, stream);
      if (!ordered) {  // the ordered backward wrote dq itself
        dq_convert_bf16_kernel<<<static_cast<unsigned>((rows * D / 8 + kThreads - 1) / kThreads), kThreads, 0,
                                 stream>>>(dq, dq_accum, s);
        ATTENTION_CHECK_LAUNCH("attention backward dQ conversion");
      }
      return;
    }
  }
  row_dot_kernel<T><<<static_cast<unsigned>((rows * 32 + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      drow, dout, o, s);
  ATTENTION_CHECK_LAUNCH("attention backward rowsum(dO * O)");
  attention_detail::launch_attention_backward_simple(dk, dv, dq_accum, dq_turns, dout, lse, drow, q, k, v, s,
                                                     stream);
  dq_convert_kernel<T>
      <<<static_cast<unsigned>((rows * D + kThreads - 1) / kThreads), kThreads, 0, stream>>>(dq, dq_accum, s);
  ATTENTION_CHECK_LAUNCH("attention backward dQ conversion");
}

template void attention_forward<float>(float*, float*, const float*, const float*, const float*, int, int,
                                       int, int, int, int, int, float, cudaStream_t);
template void attention_forward<__nv_bfloat16>(__nv_bfloat16*, float*, const __nv_bfloat16*,
                                               const __nv_bfloat16*, const __nv_bfloat16*, int, int, int, int,
                                               int, int, int, float, cudaStream_t);
template void attention_backward<float>(float*, float*, float*, const float*, const float*, const float*,
                                        const float*, const float*, const float*, int, int, int, int, int,
                                        int, int, float, float*, cudaStream_t);
template void attention_backward<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*,
                                                const __nv_bfloat16*, const __nv_bfloat16*, const float*,
                                                const __nv_bfloat16*, const __nv_bfloat16*,
                                                const __nv_bfloat16*, int, int, int, int, int, int, int,
                                                float, float*, cudaStream_t);

}  // namespace megascale::trainer
