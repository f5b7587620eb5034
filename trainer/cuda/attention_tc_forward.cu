// Tensor-core flash attention forward for bf16 (FlashAttention-2 forward, Dao 2023, arXiv 2307.08691,
// Algorithm 1 and sec. 3.3: one block per (64-query tile, head, batch), each of its 4 warps owns 16
// query rows, so the online-softmax row statistics never leave a warp).
//
//   launch_attention_forward_tc(o, lse, q, k, v, shape, stream);  // rows 16-byte aligned
//
// Per 64-key tile: S = Q K^T (mma.sync, Q fragments kept in registers), the row max taken on the raw
// scores, each weight exp2(s * scale * log2 e - max) as one FMA and one flush-to-zero SFU exp2 (the
// running max lives in the log2 domain), the running max/sum rescaled, P rounded to bf16 straight from the
// S accumulators into A fragments, O += P V. K/V tiles are double-buffered with cp.async, so the next
// tile's loads overlap this tile's math. Key tiles wholly above the diagonal or left of the window are
// never visited; the mask is evaluated only on tiles that straddle an edge.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "attention_internal.cuh"
#include "attention_mma.cuh"

namespace megascale::trainer::attention_detail {
namespace {

constexpr int kRows = 64;  // queries per block (16 per warp) and keys per tile
constexpr int kThreads = 128;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <int D, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    forward_tc_kernel(__nv_bfloat16* o, float* lse, const __nv_bfloat16* q, const __nv_bfloat16* k,
                      const __nv_bfloat16* v, AttentionShape s) {
  constexpr int kStride = D + 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* q_s = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* k_s = q_s + kRows * kStride;      // [2][kRows][kStride]
  __nv_bfloat16* v_s = k_s + 2 * kRows * kStride;  // [2][kRows][kStride]

  const int b = blockIdx.z, h = blockIdx.y;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kRows;  // longest rows first: better tail balance
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;
  const int k_begin = attention_first_key(q0, s.window) / kRows * kRows;
  const int k_last = min(s.T - 1, q0 + kRows - 1);

  load_tile_async<D, kRows, kThreads>(q_s, q, b, q0, h, s, s.ld_qkv);
  load_tile_async<D, kRows, kThreads>(k_s, k, b, k_begin, h, s, s.ld_qkv);
  load_tile_async<D, kRows, kThreads>(v_s, v, b, k_begin, h, s, s.ld_qkv);
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();

  uint32_t q_frag[D / 16][4];
#pragma unroll
  for (int kc = 0; kc < D / 16; ++kc) {
    ldmatrix_x4(q_frag[kc], &q_s[(warp * 16 + (lane & 15)) * kStride + kc * 16 + (lane >> 4) * 8]);
  }

  float o_acc[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) o_acc[n][0] = o_acc[n][1] = o_acc[n][2] = o_acc[n][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY};  // running max of the log2-domain scores, rows g and g + 8
  float l[2] = {0.f, 0.f};              // this lane's share of the running sums
  const int row_i[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  const float scale_log2 = s.scale * kLog2e;

  int buf = 0;
  for (int k0 = k_begin; k0 <= k_last; k0 += kRows, buf ^= 1) {
    if (k0 + kRows <= k_last) {
      load_tile_async<D, kRows, kThreads>(k_s + (buf ^ 1) * kRows * kStride, k, b, k0 + kRows, h, s,
                                          s.ld_qkv);
      load_tile_async<D, kRows, kThreads>(v_s + (buf ^ 1) * kRows * kStride, v, b, k0 + kRows, h, s,
                                          s.ld_qkv);
      cp_async_commit();
    }
    const __nv_bfloat16* ks = k_s + buf * kRows * kStride;
    const __nv_bfloat16* vs = v_s + buf * kRows * kStride;

    float sc[8][4];
#pragma unroll
    for (int n = 0; n < 8; ++n) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.f;
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc) {
#pragma unroll
      for (int p = 0; p < 4; ++p) {
        uint32_t kb[4];
        ldmatrix_x4(
            kb, &ks[(p * 16 + (lane & 7) + ((lane >> 4) << 3)) * kStride + kc * 16 + ((lane >> 3) & 1) * 8]);
        mma_bf16_16816(sc[2 * p], q_frag[kc], kb[0], kb[1]);
        mma_bf16_16816(sc[2 * p + 1], q_frag[kc], kb[2], kb[3]);
      }
    }

    const bool edge =
        k0 + kRows - 1 > q0 || k0 + kRows > s.T || (s.window > 0 && q0 + kRows - 1 - k0 >= s.window);
    // Raw scores here; the scale goes into the exponent's FMA below (scale > 0, so the max commutes).
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (edge) {
          const int j = k0 + n * 8 + 2 * c + (e & 1);
          if (j >= s.T || !attention_visible(row_i[e >> 1], j, s.window)) sc[n][e] = -INFINITY;
        }
        tile_max[e >> 1] = fmaxf(tile_max[e >> 1], sc[n][e]);
      }
    }
    float m_use[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
      const float m_new = fmaxf(m[r], tile_max[r] * scale_log2);
      // A row whose keys in this tile are all masked (window start) keeps exp2 off inf - inf.
      m_use[r] = m_new == -INFINITY ? 0.f : m_new;
      const float correction = exp2_ftz(m[r] - m_use[r]);
      m[r] = m_new;
      l[r] *= correction;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        o_acc[n][2 * r] *= correction;
        o_acc[n][2 * r + 1] *= correction;
      }
    }
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        sc[n][e] = exp2_ftz(fmaf(sc[n][e], scale_log2, -m_use[e >> 1]));
        l[e >> 1] += sc[n][e];
      }
    }

#pragma unroll
    for (int t = 0; t < 4; ++t) {
      uint32_t p_frag[4];
      c_pair_to_a(p_frag, sc[2 * t], sc[2 * t + 1]);
#pragma unroll
      for (int p = 0; p < D / 16; ++p) {
        uint32_t vb[4];
        ldmatrix_x4_trans(
            vb, &vs[(t * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kStride + p * 16 + (lane >> 4) * 8]);
        mma_bf16_16816(o_acc[2 * p], p_frag, vb[0], vb[1]);
        mma_bf16_16816(o_acc[2 * p + 1], p_frag, vb[2], vb[3]);
      }
    }
    cp_async_wait_all();
    __syncthreads();  // the next tile is in, and nobody reads the buffer the next loads overwrite
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    const int i = row_i[r];
    if (i >= s.T) continue;
    const float inv_l = 1.f / l[r];
    __nv_bfloat16* out = o + attention_row(b, i, h, s, s.ld_o);
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<__nv_bfloat162*>(out + n * 8 + 2 * c) =
          __floats2bfloat162_rn(o_acc[n][2 * r] * inv_l, o_acc[n][2 * r + 1] * inv_l);
    }
    if (c == 0) lse[(static_cast<size_t>(b) * s.H + h) * s.T + i] = (m[r] + log2f(l[r])) * kLn2;
  }
}

template <int D, int kMinBlocks>
void launch(__nv_bfloat16* o, float* lse, const __nv_bfloat16* q, const __nv_bfloat16* k,
            const __nv_bfloat16* v, const AttentionShape& s, cudaStream_t stream) {
  const size_t bytes = 5 * kRows * (D + 8) * sizeof(__nv_bfloat16);
  cudaFuncSetAttribute(forward_tc_kernel<D, kMinBlocks>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       static_cast<int>(bytes));
  const dim3 grid((s.T + kRows - 1) / kRows, s.H, s.B);
  forward_tc_kernel<D, kMinBlocks><<<grid, kThreads, bytes, stream>>>(o, lse, q, k, v, s);
}

}  // namespace

void launch_attention_forward_tc(__nv_bfloat16* o, float* lse, const __nv_bfloat16* q, const __nv_bfloat16* k,
                                 const __nv_bfloat16* v, const AttentionShape& s, cudaStream_t stream) {
  // Blocks per SM the compiler must fit (a register cap). D=64: 4 (<= 128 registers, an 8-byte spill),
  // a few percent faster than uncapped (132 registers, 3 blocks); D=128: uncapped (172 registers), since
  // the cap spills 368 bytes and costs more than it gains (figures in docs/PERFORMANCE.md).
  // MEGASCALE_ATTENTION_FWD=x1 (no cap) or x4 overrides the default, to measure one against the other.
  // Read once; any other value aborts, naming the variable. 0: unset, 1: x1, 4: x4.
  static const int forced = [] {
    const char* env = std::getenv("MEGASCALE_ATTENTION_FWD");
    if (env == nullptr) return 0;
    if (std::strcmp(env, "x1") == 0) return 1;
    if (std::strcmp(env, "x4") == 0) return 4;
    std::fprintf(stderr, "MEGASCALE_ATTENTION_FWD=\"%s\": must be x1 or x4 (unset: the default)\n", env);
    std::abort();
  }();
  const bool four = forced != 0 ? forced == 4 : s.D == 64;
  if (s.D == 64) {
    four ? launch<64, 4>(o, lse, q, k, v, s, stream) : launch<64, 0>(o, lse, q, k, v, s, stream);
  } else {
    four ? launch<128, 4>(o, lse, q, k, v, s, stream) : launch<128, 0>(o, lse, q, k, v, s, stream);
  }
  ATTENTION_CHECK_LAUNCH("attention forward (tensor cores)");
}

}  // namespace megascale::trainer::attention_detail
