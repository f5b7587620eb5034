// Tensor-core flash attention backward for bf16 (FlashAttention-2 backward, Dao 2023, arXiv 2307.08691,
// Algorithm 2 and sec. 3.2: parallel over key tiles; dK, dV stay in registers, dQ is summed across key
// tiles into an fp32 workspace, in a fixed order (attention_internal.cuh, "Deterministic dQ"), or, when
// the caller asks for speed over reproducibility (attention_set_deterministic), with unordered atomics).
// In the fixed order the first turn on a query tile stores its terms (so the accumulator needs no
// zeroing) and the last turn reads the sum back from L2, adds its own terms and writes dQ in bf16 (so
// there is no conversion pass). Unordered, the caller zeroes the accumulator and converts it afterwards.
//
//   launch_attention_backward_tc(dq, dk, dv, dq_accum, dq_turns, dout, lse, drow, q, k, v, shape,
//                                ordered, stream);   // ordered: dq written; otherwise dq_accum holds it
//
// One block per (key tile, head, batch); each of its 4 or 8 warps owns 16 keys (64 or 128 keys per
// block: backward_form below). Per 64-query tile the
// warp computes the transposed products S^T = K Q^T and dP^T = V dO^T (16 keys x 64 queries), so that
// P^T = exp(S^T - lse) and dS^T = P^T o (dP^T - D) sit in C fragments whose pairs are already the A
// fragments of dV += P^T dO and dK += dS^T Q (no shuffles). dQ = dS K needs every key of the tile, so
// dS^T goes through shared memory and each warp then produces 16 query rows of dQ. Query tiles below
// the diagonal's reach or beyond the window are never visited. A block waits for its turn on a query
// tile's dQ only after its dS^T is in shared memory, and hands the turn on right after its additions
// (the peek and acquire/release form of the protocol, attention_internal.cuh).
#include <cuda_bf16.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "attention_internal.cuh"
#include "attention_mma.cuh"

namespace megascale::trainer::attention_detail {
namespace {

constexpr int kRows = 64;             // queries per tile
constexpr int kDsStride = kRows + 8;  // padded like the input tiles (see load_tile_async)
constexpr float kLog2e = 1.4426950408889634f;

// lse (pre-multiplied into the log2 domain) and D_i = rowsum(dO o O) of one query tile; 0 past T.
__device__ inline void load_row_stats(float* lse_s, float* drow_s, const float* lse, const float* drow,
                                      size_t bh, int q0, int T) {
  if (threadIdx.x < kRows) {
    const int i = q0 + threadIdx.x;
    lse_s[threadIdx.x] = i < T ? lse[bh * T + i] * kLog2e : 0.f;
    drow_s[threadIdx.x] = i < T ? drow[bh * T + i] : 0.f;
  }
}

__device__ inline void add_to_dq(float* dst, float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(dst), make_float2(x, y));  // one 8-byte reduction (sm_90)
#else
  atomicAdd(dst, x);
  atomicAdd(dst + 1, y);
#endif
}

// kWarps warps own 16 keys each: a block holds kKeys = 16 * kWarps keys (64 or 128). With 128 keys the
// Q/dO tiles a block loads serve twice the keys and a query tile gets half as many dQ turns; then the dQ
// product (64 queries x D) is split over the 8 warps as 4 row blocks x 2 column halves.
// kOrdered: dQ terms added in the fixed turn order (bit-reproducible); otherwise with unordered atomics.
template <int D, int kWarps, int kMinBlocks, bool kOrdered>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks)
    backward_tc_kernel(__nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv, float* dq_accum,
                       int* dq_turns, const __nv_bfloat16* dout, const float* lse, const float* drow,
                       const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                       AttentionShape s) {
  constexpr int kThreads = kWarps * 32;
  constexpr int kKeys = kWarps * 16;
  constexpr int kStride = D + 8;
  constexpr int kTile = kRows * kStride;
  constexpr int kKeyTile = kKeys * kStride;
  constexpr int kDqSplit = kWarps / 4;          // column parts of the dQ product per row block
  constexpr int kDqChunks = D / 32 / kDqSplit;  // 32-column chunks per warp
  constexpr int kKeyChunks = kKeys / 16;        // 16-key steps of the dQ product
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* k_s = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* v_s = k_s + kKeyTile;
  __nv_bfloat16* q_s = v_s + kKeyTile;     // [2][kRows][kStride]
  __nv_bfloat16* do_s = q_s + 2 * kTile;   // [2][kRows][kStride]
  __nv_bfloat16* ds_s = do_s + 2 * kTile;  // dS^T, [key][query], [kKeys][kDsStride]
  float* lse_s = reinterpret_cast<float*>(ds_s + kKeys * kDsStride);  // [2][kRows]
  float* drow_s = lse_s + 2 * kRows;                                  // [2][kRows]

  const int b = blockIdx.z, h = blockIdx.y;
  // Descending key tiles (blockIdx.x = 0 is the last): a block waits only on blocks dispatched before it.
  const int key_tile = gridDim.x - 1 - blockIdx.x;
  const int k0 = key_tile * kKeys;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;
  const size_t bh = static_cast<size_t>(b) * s.H + h;
  int* turns = dq_turns + bh * ((s.T + 31) / 32);  // one per 64-query tile here
  const int q_last = attention_last_query(min(s.T - 1, k0 + kKeys - 1), s.window, s.T);
  const int warp_k0 = k0 + warp * 16;  // this warp's first key
  const int key_j[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};
  const float scale_log2 = s.scale * kLog2e;

  load_tile_async<D, kKeys, kThreads>(k_s, k, b, k0, h, s, s.ld_qkv);
  load_tile_async<D, kKeys, kThreads>(v_s, v, b, k0, h, s, s.ld_qkv);
  load_tile_async<D, kRows, kThreads>(q_s, q, b, k0, h, s, s.ld_qkv);
  load_tile_async<D, kRows, kThreads>(do_s, dout, b, k0, h, s, s.ld_o);
  cp_async_commit();
  load_row_stats(lse_s, drow_s, lse, drow, bh, k0, s.T);
  cp_async_wait_all();
  __syncthreads();

  float dk_acc[D / 8][4], dv_acc[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dk_acc[n][e] = dv_acc[n][e] = 0.f;
  }

  int buf = 0;
  for (int q0 = k0; q0 <= q_last; q0 += kRows, buf ^= 1) {
    if (q0 + kRows <= q_last) {
      load_tile_async<D, kRows, kThreads>(q_s + (buf ^ 1) * kTile, q, b, q0 + kRows, h, s, s.ld_qkv);
      load_tile_async<D, kRows, kThreads>(do_s + (buf ^ 1) * kTile, dout, b, q0 + kRows, h, s, s.ld_o);
      cp_async_commit();
      load_row_stats(lse_s + (buf ^ 1) * kRows, drow_s + (buf ^ 1) * kRows, lse, drow, bh, q0 + kRows, s.T);
    }
    const int query_tile = q0 / kRows;
    // Key tiles that reach this query tile take turns in descending order; the highest is the one
    // holding the tile's last query row (the diagonal), so this block's turn counts down from there.
    const int my_turn = query_tile * kRows / kKeys - key_tile;
    // Ordered, the first turn (the diagonal key tile) stores into the accumulator rather than adding, and
    // the last (the lowest key tile that reaches the query tile) writes dQ itself; a tile with one turn
    // does both. (Unordered, letting the last block to arrive write dQ cost more than the conversion pass
    // it saves: a fence and a counter per tile, 0.62 -> 0.77 ms on the 350M shape.)
    const bool first_turn = kOrdered && my_turn == 0;
    const bool last_turn = kOrdered && key_tile == attention_first_key(q0, s.window) / kKeys;
    const int peeked = kOrdered ? attention_peek_turn(&turns[query_tile]) : 0;
    const __nv_bfloat16* qs = q_s + buf * kTile;
    const __nv_bfloat16* dos = do_s + buf * kTile;
    const float* lse_b = lse_s + buf * kRows;
    const float* drow_b = drow_s + buf * kRows;

    // S^T = K Q^T and dP^T = V dO^T for this warp's 16 keys x the tile's 64 queries. A warp whose keys
    // no query of the tile can see (past the diagonal, or beyond the window) only writes zeros to dS^T.
    const bool warp_active =
        warp_k0 < s.T && warp_k0 <= q0 + kRows - 1 && (s.window == 0 || q0 - (warp_k0 + 15) < s.window);
    float st[8][4], dpt[8][4];
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) st[n][e] = dpt[n][e] = 0.f;
    }
    if (warp_active) {
#pragma unroll
      for (int kc = 0; kc < D / 16; ++kc) {
        uint32_t ka[4], va[4];
        const int a_off = (warp * 16 + (lane & 15)) * kStride + kc * 16 + (lane >> 4) * 8;
        ldmatrix_x4(ka, &k_s[a_off]);
        ldmatrix_x4(va, &v_s[a_off]);
#pragma unroll
        for (int p = 0; p < 4; ++p) {
          uint32_t qb[4], ob[4];
          const int b_off =
              (p * 16 + (lane & 7) + ((lane >> 4) << 3)) * kStride + kc * 16 + ((lane >> 3) & 1) * 8;
          ldmatrix_x4(qb, &qs[b_off]);
          ldmatrix_x4(ob, &dos[b_off]);
          mma_bf16_16816(st[2 * p], ka, qb[0], qb[1]);
          mma_bf16_16816(st[2 * p + 1], ka, qb[2], qb[3]);
          mma_bf16_16816(dpt[2 * p], va, ob[0], ob[1]);
          mma_bf16_16816(dpt[2 * p + 1], va, ob[2], ob[3]);
        }
      }

    }  // warp_active

    // P^T = exp(S^T - lse), dS^T = P^T o (dP^T - D_i); masked entries are 0 in both.
    const bool edge = q0 < warp_k0 + 15 || q0 + kRows > s.T || warp_k0 + 16 > s.T ||
                      (s.window > 0 && q0 + kRows - 1 - warp_k0 >= s.window);
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int ii = n * 8 + 2 * c + (e & 1);
        float p = exp2_ftz(fmaf(st[n][e], scale_log2, -lse_b[ii]));
        if (edge) {
          const int i = q0 + ii, j = key_j[e >> 1];
          if (i >= s.T || j >= s.T || !attention_visible(i, j, s.window)) p = 0.f;
        }
        st[n][e] = p;
        dpt[n][e] = p * (dpt[n][e] - drow_b[ii]);
      }
    }

    // dV += P^T dO and dK += dS^T Q: A from the registers above, B = dO, Q read transposed.
    if (warp_active) {
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        uint32_t pa[4], da[4];
        c_pair_to_a(pa, st[2 * t], st[2 * t + 1]);
        c_pair_to_a(da, dpt[2 * t], dpt[2 * t + 1]);
#pragma unroll
        for (int p = 0; p < D / 16; ++p) {
          uint32_t ob[4], qb[4];
          const int off = (t * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kStride + p * 16 + (lane >> 4) * 8;
          ldmatrix_x4_trans(ob, &dos[off]);
          ldmatrix_x4_trans(qb, &qs[off]);
          mma_bf16_16816(dv_acc[2 * p], pa, ob[0], ob[1]);
          mma_bf16_16816(dv_acc[2 * p + 1], pa, ob[2], ob[3]);
          mma_bf16_16816(dk_acc[2 * p], da, qb[0], qb[1]);
          mma_bf16_16816(dk_acc[2 * p + 1], da, qb[2], qb[3]);
        }
      }
    }  // warp_active

#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        *reinterpret_cast<__nv_bfloat162*>(&ds_s[(warp * 16 + g + 8 * r) * kDsStride + n * 8 + 2 * c]) =
            __floats2bfloat162_rn(dpt[n][2 * r], dpt[n][2 * r + 1]);
      }
    }
    if constexpr (kOrdered) attention_wait_turn_peeked(&turns[query_tile], my_turn, peeked);
    __syncthreads();

    // dQ rows q0 + 16 * row_block ..., columns of this warp's part: dS (queries x keys, read
    // transposed from dS^T) times K.
    const int row_block = warp % 4, column_part = warp / 4;
    uint32_t dsa[kKeyChunks][4];
#pragma unroll
    for (int kc = 0; kc < kKeyChunks; ++kc) {
      ldmatrix_x4_trans(dsa[kc], &ds_s[(kc * 16 + (lane & 7) + (lane >> 4) * 8) * kDsStride + row_block * 16 +
                                       ((lane >> 3) & 1) * 8]);
    }
#pragma unroll
    for (int dci = 0; dci < kDqChunks; ++dci) {
      const int dc = column_part * kDqChunks + dci;
      float acc[4][4];
#pragma unroll
      for (int n = 0; n < 4; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
#pragma unroll
      for (int kc = 0; kc < kKeyChunks; ++kc) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          uint32_t kb[4];
          ldmatrix_x4_trans(kb, &k_s[(kc * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kStride + dc * 32 +
                                     half * 16 + (lane >> 4) * 8]);
          mma_bf16_16816(acc[2 * half], dsa[kc], kb[0], kb[1]);
          mma_bf16_16816(acc[2 * half + 1], dsa[kc], kb[2], kb[3]);
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int i = q0 + row_block * 16 + g + 8 * r;
        if (i >= s.T) continue;
        float* dst = dq_accum + (bh * s.T + i) * D + dc * 32 + 2 * c;
        if (last_turn) {  // the sum so far (acquired by the wait) plus this block's terms, as bf16 dQ
          __nv_bfloat16* out = dq + attention_row(b, i, h, s, s.ld_qkv) + dc * 32 + 2 * c;
#pragma unroll
          for (int n = 0; n < 4; ++n) {
            const float2 sum =
                first_turn ? make_float2(0.f, 0.f) : __ldcg(reinterpret_cast<const float2*>(dst + n * 8));
            *reinterpret_cast<__nv_bfloat162*>(out + n * 8) =
                __floats2bfloat162_rn(sum.x + acc[n][2 * r] * s.scale, sum.y + acc[n][2 * r + 1] * s.scale);
          }
        } else if (first_turn) {  // the accumulator's first value: stored, so no zeroing needed
#pragma unroll
          for (int n = 0; n < 4; ++n)  // 0 + x, as the addition to a zeroed float gave (-0 becomes +0)
            __stcg(reinterpret_cast<float2*>(dst + n * 8),
                   make_float2(0.f + acc[n][2 * r] * s.scale, 0.f + acc[n][2 * r + 1] * s.scale));
        } else {
#pragma unroll
          for (int n = 0; n < 4; ++n)
            add_to_dq(dst + n * 8, acc[n][2 * r] * s.scale, acc[n][2 * r + 1] * s.scale);
        }
      }
    }
    cp_async_wait_all();
    __syncthreads();  // next tile in; dS^T and this buffer free for reuse; dQ additions issued
    if (kOrdered && !last_turn)
      attention_pass_turn_after_sync(&turns[query_tile]);  // none waits after the last
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int j = key_j[r];
    if (j >= s.T) continue;
    __nv_bfloat16* dk_row = dk + attention_row(b, j, h, s, s.ld_qkv);
    __nv_bfloat16* dv_row = dv + attention_row(b, j, h, s, s.ld_qkv);
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<__nv_bfloat162*>(dk_row + n * 8 + 2 * c) =
          __floats2bfloat162_rn(dk_acc[n][2 * r] * s.scale, dk_acc[n][2 * r + 1] * s.scale);
      *reinterpret_cast<__nv_bfloat162*>(dv_row + n * 8 + 2 * c) =
          __floats2bfloat162_rn(dv_acc[n][2 * r], dv_acc[n][2 * r + 1]);
    }
  }
}

template <int D, int kWarps, int kMinBlocks, bool kOrdered>
void launch(__nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv, float* dq_accum, int* dq_turns,
            const __nv_bfloat16* dout, const float* lse, const float* drow, const __nv_bfloat16* q,
            const __nv_bfloat16* k, const __nv_bfloat16* v, const AttentionShape& s, cudaStream_t stream) {
  constexpr int kKeys = kWarps * 16;
  const size_t bytes =
      (2 * kKeys * (D + 8) + 4 * kRows * (D + 8) + kKeys * kDsStride) * sizeof(__nv_bfloat16) +
      4 * kRows * sizeof(float);
  cudaFuncSetAttribute(backward_tc_kernel<D, kWarps, kMinBlocks, kOrdered>,
                       cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  const dim3 grid((s.T + kKeys - 1) / kKeys, s.H, s.B);
  backward_tc_kernel<D, kWarps, kMinBlocks, kOrdered>
      <<<grid, kWarps * 32, bytes, stream>>>(dq, dk, dv, dq_accum, dq_turns, dout, lse, drow, q, k, v, s);
}

// The backward's block shape: keys per block (64: 4 warps, 128: 8 warps) and the minimum blocks per SM
// the compiler must fit (a register cap). MEGASCALE_ATTENTION_BWD=KEYSxBLOCKS (64x1, 64x3, 128x1,
// 128x2) overrides the default, to measure one form against another (every form passes
// trainer_attention_test). Defaults are the bench's fastest forms (trainer_attention_bench; figures in
// docs/PERFORMANCE.md): D=64: 64 keys with a 168-register cap (3 blocks per SM), ahead of uncapped and
// of 128 keys; D=128: 128 keys, ahead of 64.
struct BackwardForm {
  int keys = 0, min_blocks = 0;
};
BackwardForm backward_form(int D) {
  // Read once. Unset: the defaults below; any other value than the four forms aborts, naming the variable
  // (a typo would otherwise measure the default while the user believes it measured the form named).
  static const BackwardForm forced = [] {
    const char* env = std::getenv("MEGASCALE_ATTENTION_BWD");
    if (env == nullptr) return BackwardForm{};
    const std::string v(env);
    if (v == "64x1") return BackwardForm{64, 1};
    if (v == "64x3") return BackwardForm{64, 3};
    if (v == "128x1") return BackwardForm{128, 1};
    if (v == "128x2") return BackwardForm{128, 2};
    std::fprintf(stderr, "MEGASCALE_ATTENTION_BWD=\"%s\": must be 64x1, 64x3, 128x1 or 128x2 (unset: the default)\n",
                 env);
    std::abort();
  }();
  if (forced.keys != 0) return forced;
  return D == 64 ? BackwardForm{64, 3} : BackwardForm{128, 1};
}

// One block form, ordered or not.
template <int D, int kWarps, int kMinBlocks>
void launch_form(bool ordered, __nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv, float* dq_accum,
                 int* dq_turns, const __nv_bfloat16* dout, const float* lse, const float* drow,
                 const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                 const AttentionShape& s, cudaStream_t stream) {
  if (ordered) {
    launch<D, kWarps, kMinBlocks, true>(dq, dk, dv, dq_accum, dq_turns, dout, lse, drow, q, k, v, s, stream);
  } else {
    launch<D, kWarps, kMinBlocks, false>(dq, dk, dv, dq_accum, dq_turns, dout, lse, drow, q, k, v, s, stream);
  }
}

}  // namespace

void launch_attention_backward_tc(__nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv, float* dq_accum,
                                  int* dq_turns, const __nv_bfloat16* dout, const float* lse,
                                  const float* drow, const __nv_bfloat16* q, const __nv_bfloat16* k,
                                  const __nv_bfloat16* v, const AttentionShape& s, bool ordered,
                                  cudaStream_t stream) {
  const BackwardForm form = backward_form(s.D);
  if (s.D == 64) {
    if (form.keys == 64 && form.min_blocks == 3) {
      launch_form<64, 4, 3>(ordered, dq, dk, dv, dq_accum, dq_turns, dout, lse, drow, q, k, v, s, stream);
    } else if (form.keys == 64) {
      launch_form<64, 4, 1>(ordered, dq, dk, dv, dq_accum, dq_turns, dout, lse, drow, q, k, v, s, stream);
    } else if (form.min_blocks == 2) {
      launch_form<64, 8, 2>(ordered, dq, dk, dv, dq_accum, dq_turns, dout, lse, drow, q, k, v, s, stream);
    } else {
      launch_form<64, 8, 1>(ordered, dq, dk, dv, dq_accum, dq_turns, dout, lse, drow, q, k, v, s, stream);
    }
  } else {
    if (form.keys == 128) {
      launch_form<128, 8, 1>(ordered, dq, dk, dv, dq_accum, dq_turns, dout, lse, drow, q, k, v, s, stream);
    } else {
      launch_form<128, 4, 1>(ordered, dq, dk, dv, dq_accum, dq_turns, dout, lse, drow, q, k, v, s, stream);
    }
  }
  ATTENTION_CHECK_LAUNCH("attention backward (tensor cores)");
}

}  // namespace megascale::trainer::attention_detail
