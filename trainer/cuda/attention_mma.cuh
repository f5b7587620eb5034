// Warp-level tensor-core building blocks for the bf16 attention kernels (sm_80+ PTX, run on sm_90):
// 16-byte asynchronous copies into shared memory, ldmatrix, and mma.sync m16n8k16 bf16 -> fp32.
//
//   uint32_t a[4], b[2]; float c[4] = {};
//   ldmatrix_x4(a, &tile[row * stride + col]);  // lane-dependent row/col, see PTX ISA "ldmatrix"
//   mma_bf16_16816(c, a, b);
//
// Fragment layouts (PTX ISA 8.x, "Matrix fragments for mma.m16n8k16", g = lane / 4, c = lane % 4):
//   A 16x16 row-major, 4 regs of 2 bf16: a0 (g, 2c..2c+1), a1 (g+8, 2c..), a2 (g, 2c+8..), a3 (g+8, 2c+8..)
//   B 16x8 (k x n):    2 regs:           b0 (k = 2c..2c+1, n = g), b1 (k = 2c+8.., n = g)
//   C 16x8 fp32:       4 floats:         c0, c1 (g, 2c..2c+1), c2, c3 (g+8, 2c..2c+1)
// so a C fragment pair (n-blocks 2t, 2t+1) converts to an A fragment of k-chunk t without shuffles.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "attention_internal.cuh"

namespace megascale::trainer::attention_detail {

__device__ inline uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// 16-byte global -> shared copy that bypasses registers (cp.async.cg, L2 only: each tile is read once
/// per block, and L1 would only evict the next one).
__device__ inline void cp_async_16(void* smem, const void* global) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_address(smem)), "l"(global));
}
__device__ inline void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
__device__ inline void cp_async_wait_all() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

/// Four 8x8 bf16 matrices; lanes 8m..8m+7 give the row addresses of matrix m.
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(smem)));
}
/// As ldmatrix_x4, each matrix transposed: lane gets (rows 2c, 2c+1; column g) of the stored matrix.
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(smem)));
}

/// c += a * b on one 16x8x16 tile, bf16 inputs, fp32 accumulators.
__device__ inline void mma_bf16_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// 2^x by the SFU's approximation with subnormal results flushed to 0 (ex2.approx.ftz.f32, the form
/// nvcc emits for exp2f under --use_fast_math): exp2f without it adds range fix-ups around each MUFU.EX2.
/// A softmax weight below 2^-126 of its row maximum is 0 either way in bf16 products; 2^-inf = 0.
__device__ inline float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

/// Two floats as a bf16 pair (low half = first), the register form of A fragments.
__device__ inline uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

/// The A fragment of k-chunk t from the C fragments of n-blocks 2t and 2t+1 (see the layouts above).
__device__ inline void c_pair_to_a(uint32_t (&a)[4], const float (&c_even)[4], const float (&c_odd)[4]) {
  a[0] = pack_bf16(c_even[0], c_even[1]);
  a[1] = pack_bf16(c_even[2], c_even[3]);
  a[2] = pack_bf16(c_odd[0], c_odd[1]);
  a[3] = pack_bf16(c_odd[2], c_odd[3]);
}

/// Copies rows [t0, t0 + kRows) of one head into a [kRows][D + 8] shared tile, 16 bytes per cp.async,
/// zero-filling rows past T. The 8 elements of padding put the 8 rows that one ldmatrix reads in
/// different banks (row pitch 144 or 272 bytes = 16 mod 128).
template <int D, int kRows, int kThreads>
__device__ void load_tile_async(__nv_bfloat16* tile, const __nv_bfloat16* base, int b, int t0, int h,
                                const AttentionShape& s, int ld) {
  constexpr int kChunks = D / 8;
  for (int idx = threadIdx.x; idx < kRows * kChunks; idx += kThreads) {
    const int r = idx / kChunks, c = idx % kChunks;
    __nv_bfloat16* dst = tile + r * (D + 8) + c * 8;
    if (t0 + r < s.T) {
      cp_async_16(dst, base + attention_row(b, t0 + r, h, s, ld) + c * 8);
    } else {
      *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
    }
  }
}

}  // namespace megascale::trainer::attention_detail
