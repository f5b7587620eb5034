// The bf16 LayerNorm kernels the model runs (layernorm.cu dispatches here when C % 8 == 0, C <= 2048 and
// the rows are 16-byte aligned; the generic kernels there cover the rest and fp32).
//
// Why a second set: the generic backward reads every element with 2-byte loads in two kernels (one warp
// per row for dx, then one thread per column walking 64 rows for dw/db), about a fifth of a GPT-2 124M
// step (figures in docs/PERFORMANCE.md). Here a warp holds
// its row in registers, loaded once in 16-byte pieces: lane l owns the 8-column chunks l, l + 32, ...;
// the backward computes dx and, in the same pass, adds the row's dout * xhat and dout into the warp's
// column accumulators for dw/db (in shared memory). The block's warps then combine their accumulators in
// warp order, each block writes one partial row, and a second kernel sums the partials in block order: a
// fixed order, so dw/db stay bit-reproducible (no float atomics).
#include <cuda_bf16.h>

#include "cuda_check.h"
#include "device_utils.cuh"
#include "layernorm_bf16.h"

namespace megascale::trainer::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr float kEps = 1e-5f;
constexpr int kForwardWarps = 8;
constexpr int kBackwardWarps = 4;
constexpr int kBackwardRowsPerBlock = 32;  // 512 blocks on 16384 rows: one wave (96-128 registers at C
                                           // 768-1024, 24-32 KiB shared: 4 blocks fit per SM)
constexpr int kMaxC = 2048;
constexpr int kReduceRows = 32;  // thread rows of the partial-sum kernel (32 x 32 threads per block)

__device__ inline void unpack8(const uint4& v, float (&f)[8]) {
  const auto* p = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 t = __bfloat1622float2(p[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}

__device__ inline uint4 pack8(const float (&f)[8]) {
  uint4 v;
  auto* p = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) p[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  return v;
}

template <int kChunks>
__global__ void __launch_bounds__(kForwardWarps * 32)
    forward_kernel(bf16* out, float* mean_out, float* rstd_out, const bf16* x, const bf16* w, const bf16* b,
                   int N, int C) {
  const int row = blockIdx.x * kForwardWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const int chunks = C / 8;
  const uint4* xr = reinterpret_cast<const uint4*>(x + static_cast<size_t>(row) * C);
  float v[kChunks][8];
  float sum = 0.f;
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int idx = lane + 32 * k;
    if (idx < chunks) {
      unpack8(xr[idx], v[k]);
#pragma unroll
      for (int e = 0; e < 8; ++e) sum += v[k][e];
    }
  }
  const float mean = warp_sum(sum) / C;
  float var = 0.f;
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    if (lane + 32 * k < chunks) {
#pragma unroll
      for (int e = 0; e < 8; ++e) var += (v[k][e] - mean) * (v[k][e] - mean);
    }
  }
  const float rstd = rsqrtf(warp_sum(var) / C + kEps);
  uint4* orow = reinterpret_cast<uint4*>(out + static_cast<size_t>(row) * C);
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int idx = lane + 32 * k;
    if (idx >= chunks) continue;
    float wf[8], bf[8], y[8];
    unpack8(reinterpret_cast<const uint4*>(w)[idx], wf);
    unpack8(reinterpret_cast<const uint4*>(b)[idx], bf);
#pragma unroll
    for (int e = 0; e < 8; ++e) y[e] = (v[k][e] - mean) * rstd * wf[e] + bf[e];
    orow[idx] = pack8(y);
  }
  if (lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

// dx += rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dout * w; partial[block] = (sum dout * xhat,
// sum dout) over the block's rows, columns [0, C) then [C, 2C); with kSumDx also the sum of the new dx (as
// stored, in bf16) in [2C, 3C): the bias gradient of the projection whose output this residual took.
//
// Each warp keeps its dw/db column sums in shared memory, not registers: in registers they took 16 per
// 8 columns a lane owns, which would hold a block to ~150-250 registers a thread, the grid to ~2 blocks
// per SM, and spill at C = 2048 (the shared-memory form makes the step faster at every model size;
// figures in docs/PERFORMANCE.md). A warp's accumulator rows hold element (chunk, e) at
// e * chunks + chunk, so its 32 lanes touch 32 consecutive floats; it adds its rows in row order, and the
// warps are combined in warp order, so dw/db stay bit-reproducible.
template <int kChunks, bool kSumDx>
__global__ void __launch_bounds__(kBackwardWarps * 32)
    backward_kernel(bf16* dx, float* partial, const bf16* dout, const bf16* x, const bf16* w,
                    const float* mean_in, const float* rstd_in, int N, int C) {
  constexpr int kSums = kSumDx ? 3 : 2;
  extern __shared__ float warp_acc[];  // [kBackwardWarps][kSums][C]: dw, db (and the dx sum)
  // Up to C = 1024 a warp loads its next row while it works on this one (the rows' 16-byte pieces held
  // packed: 2 x 12 registers per chunk); one row at a time, it sat idle through every load's round trip
  // (the kernel moved ~1.9 TB/s). Wider rows would spill, so they keep the one-row form.
  constexpr bool kPrefetch = kChunks <= 4;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int chunks = C / 8;
  float* acc_w = warp_acc + static_cast<size_t>(warp) * kSums * C;
  float* acc_b = acc_w + C;
  float* acc_s = acc_b + C;  // used only with kSumDx
  for (int i = lane; i < kSums * C; i += 32) acc_w[i] = 0.f;
  __syncwarp();
  const int row_end = min(N, (blockIdx.x + 1) * kBackwardRowsPerBlock);
  struct Row {
    uint4 d[kChunks], x[kChunks], dx_old[kChunks];  // dx_old: the gradient the residual already brought
    float mean, rstd;
  };
  auto load = [&](Row& r, int row) {
    if (row >= row_end) return;
    const size_t base = static_cast<size_t>(row) * C;
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      const int idx = lane + 32 * k;
      if (idx >= chunks) continue;
      r.d[k] = reinterpret_cast<const uint4*>(dout + base)[idx];
      r.x[k] = reinterpret_cast<const uint4*>(x + base)[idx];
      r.dx_old[k] = reinterpret_cast<const uint4*>(dx + base)[idx];
    }
    r.mean = mean_in[row];
    r.rstd = rstd_in[row];
  };
  Row cur;
  int row = blockIdx.x * kBackwardRowsPerBlock + warp;
  load(cur, row);
  for (; row < row_end; row += kBackwardWarps) {
    Row next;
    if constexpr (kPrefetch) load(next, row + kBackwardWarps);
    // Two passes over the packed row (unpacking twice costs less than holding it unpacked: registers).
    const float mean = cur.mean, rstd = cur.rstd;
    float g_sum = 0.f, gx_sum = 0.f;
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      const int idx = lane + 32 * k;
      if (idx >= chunks) continue;
      float d[8], xh[8], wf[8];
      unpack8(cur.d[k], d);
      unpack8(cur.x[k], xh);
      unpack8(reinterpret_cast<const uint4*>(w)[idx], wf);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        xh[e] = (xh[e] - mean) * rstd;
        const float g = d[e] * wf[e];
        g_sum += g;
        gx_sum += g * xh[e];
        acc_w[e * chunks + idx] += d[e] * xh[e];
        acc_b[e * chunks + idx] += d[e];
      }
    }
    const float g_mean = warp_sum(g_sum) / C;
    const float gx_mean = warp_sum(gx_sum) / C;
    uint4* dxr = reinterpret_cast<uint4*>(dx + static_cast<size_t>(row) * C);
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      const int idx = lane + 32 * k;
      if (idx >= chunks) continue;
      float d[8], xh[8], wf[8], acc[8];
      unpack8(cur.d[k], d);
      unpack8(cur.x[k], xh);
      unpack8(reinterpret_cast<const uint4*>(w)[idx], wf);
      unpack8(cur.dx_old[k], acc);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float xhat = (xh[e] - mean) * rstd;
        acc[e] += rstd * (d[e] * wf[e] - g_mean - xhat * gx_mean);
      }
      const uint4 packed = pack8(acc);
      dxr[idx] = packed;
      if constexpr (kSumDx) {
        float stored[8];
        unpack8(packed, stored);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc_s[e * chunks + idx] += stored[e];
      }
    }
    if constexpr (kPrefetch) {
      cur = next;
    } else {
      load(cur, row + kBackwardWarps);
    }
  }
  __syncthreads();
  // Column c of the block: the warps' sums in warp order.
  float* out = partial + static_cast<size_t>(blockIdx.x) * kSums * C;
  for (int i = threadIdx.x; i < kSums * C; i += blockDim.x) {
    const int part = i / C * C;  // dw, db or the dx sum
    const int c = i - part;
    const int at = part + (c % 8) * chunks + c / 8;
    float total = warp_acc[at];
    for (int k = 1; k < kBackwardWarps; ++k) total += warp_acc[static_cast<size_t>(k) * kSums * C + at];
    out[i] = total;
  }
}

// dw[c] += sum over blocks of partial[block][c], db (and dsum, with 3 sums) likewise: thread row r sums
// blocks r, r + 32, ... in order, then row 0 adds the 32 sums in order.
__global__ void reduce_kernel(float* dw, float* db, float* dsum, const float* partial, int blocks, int C,
                              int num_sums) {
  __shared__ float sums[kReduceRows][32];
  const int col = blockIdx.x * 32 + threadIdx.x;
  const int width = num_sums * C;
  float s = 0.f;
  if (col < width) {
    for (int g = threadIdx.y; g < blocks; g += kReduceRows)
      s += partial[static_cast<size_t>(g) * width + col];
  }
  sums[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y != 0 || col >= width) return;
  float total = 0.f;
#pragma unroll
  for (int r = 0; r < kReduceRows; ++r) total += sums[r][threadIdx.x];
  float* dst[3] = {dw, db, dsum};
  dst[col / C][col % C] += total;
}

template <int kChunks>
void launch_forward(bf16* out, float* mean, float* rstd, const bf16* x, const bf16* w, const bf16* b, int N,
                    int C, cudaStream_t stream) {
  forward_kernel<kChunks>
      <<<ceil_div(N, kForwardWarps), kForwardWarps * 32, 0, stream>>>(out, mean, rstd, x, w, b, N, C);
}

template <int kChunks, bool kSumDx>
void launch_backward_form(bf16* dx, float* partial, const bf16* dout, const bf16* x, const bf16* w,
                          const float* mean, const float* rstd, int N, int C, cudaStream_t stream) {
  // Per launch, as the attention launchers do: the attribute is per device (and C = 2048 needs 96 KiB).
  const size_t smem = static_cast<size_t>(kBackwardWarps) * (kSumDx ? 3 : 2) * C * sizeof(float);
  CUDA_CHECK(cudaFuncSetAttribute(backward_kernel<kChunks, kSumDx>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  backward_kernel<kChunks, kSumDx><<<ceil_div(N, kBackwardRowsPerBlock), kBackwardWarps * 32, smem, stream>>>(
      dx, partial, dout, x, w, mean, rstd, N, C);
}

template <int kChunks>
void launch_backward(bool sum_dx, bf16* dx, float* partial, const bf16* dout, const bf16* x, const bf16* w,
                     const float* mean, const float* rstd, int N, int C, cudaStream_t stream) {
  if (sum_dx) {
    launch_backward_form<kChunks, true>(dx, partial, dout, x, w, mean, rstd, N, C, stream);
  } else {
    launch_backward_form<kChunks, false>(dx, partial, dout, x, w, mean, rstd, N, C, stream);
  }
}

}  // namespace

bool layernorm_bf16_supported(int C, std::initializer_list<const void*> pointers) {
  if (C % 8 != 0 || C > kMaxC || C < 8) return false;
  for (const void* p : pointers) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

size_t layernorm_bf16_scratch_floats(int N, int C) {
  return static_cast<size_t>((N + kBackwardRowsPerBlock - 1) / kBackwardRowsPerBlock) * 3 * C;
}

// One instantiation per 256 columns (kChunks chunks of 8 per lane): C <= 2048 needs at most 8.
#define LAYERNORM_DISPATCH(C, LAUNCH, ...) \
  switch ((C + 255) / 256) {               \
    case 1:                                \
      LAUNCH<1>(__VA_ARGS__);              \
      break;                               \
    case 2:                                \
      LAUNCH<2>(__VA_ARGS__);              \
      break;                               \
    case 3:                                \
      LAUNCH<3>(__VA_ARGS__);              \
      break;                               \
    case 4:                                \
      LAUNCH<4>(__VA_ARGS__);              \
      break;                               \
    case 5:                                \
      LAUNCH<5>(__VA_ARGS__);              \
      break;                               \
    case 6:                                \
      LAUNCH<6>(__VA_ARGS__);              \
      break;                               \
    case 7:                                \
      LAUNCH<7>(__VA_ARGS__);              \
      break;                               \
    default:                               \
      LAUNCH<8>(__VA_ARGS__);              \
      break;                               \
  }

void layernorm_forward_bf16(bf16* out, float* mean, float* rstd, const bf16* x, const bf16* w, const bf16* b,
                            int N, int C, cudaStream_t stream) {
  LAYERNORM_DISPATCH(C, launch_forward, out, mean, rstd, x, w, b, N, C, stream)
  CUDA_CHECK_LAUNCH();
}

void layernorm_backward_bf16(bf16* dx, float* dw, float* db, float* dx_colsum, const bf16* dout,
                             const bf16* x, const bf16* w, const float* mean, const float* rstd, int N, int C,
                             float* scratch, cudaStream_t stream) {
  const bool sum_dx = dx_colsum != nullptr;
  LAYERNORM_DISPATCH(C, launch_backward, sum_dx, dx, scratch, dout, x, w, mean, rstd, N, C, stream)
  CUDA_CHECK_LAUNCH();
  const int blocks = static_cast<int>(ceil_div(N, kBackwardRowsPerBlock));
  const int sums = sum_dx ? 3 : 2;
  reduce_kernel<<<ceil_div(sums * static_cast<size_t>(C), 32), dim3(32, kReduceRows), 0, stream>>>(
      dw, db, dx_colsum, scratch, blocks, C, sums);
  CUDA_CHECK_LAUNCH();
}
#undef LAYERNORM_DISPATCH

}  // namespace megascale::trainer::cuda
