// LayerNorm (Ba et al. 2016) over the channel dimension, forward and backward, eps 1e-5 as PyTorch.
// Forward: one warp per row (mean, then variance around it: two passes over a row that stays in L1).
// Backward: the input gradient one warp per row; the weight and bias gradients as column sums of
// row groups into scratch, then one ordered sum over the groups, so they are bit-reproducible.
// These are the generic kernels (fp32, any C); bf16 with C % 8 == 0 takes layernorm_bf16.cu.
#include <algorithm>
#include <type_traits>

#include "cuda_check.h"
#include "device_utils.cuh"
#include "kernels.h"
#include "layernorm_bf16.h"

namespace megascale::trainer::cuda {
namespace {

constexpr float kLayerNormEps = 1e-5f;
constexpr int kRowsPerGroup = 64;  // rows per partial column sum in the backward

template <class T>
__global__ void layernorm_forward_kernel(T* out, float* mean_out, float* rstd_out, const T* x, const T* w,
                                         const T* b, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const T* xr = x + static_cast<size_t>(row) * C;
  float sum = 0.0f;
  for (int c = lane; c < C; c += 32) sum += to_float(xr[c]);
  const float mean = warp_sum(sum) / C;
  float var = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float d = to_float(xr[c]) - mean;
    var += d * d;
  }
  const float rstd = rsqrtf(warp_sum(var) / C + kLayerNormEps);
  T* outr = out + static_cast<size_t>(row) * C;
  for (int c = lane; c < C; c += 32) {
    outr[c] = from_float<T>((to_float(xr[c]) - mean) * rstd * to_float(w[c]) + to_float(b[c]));
  }
  if (lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

// dx += rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dout * w.
template <class T>
__global__ void layernorm_backward_dx_kernel(T* dx, const T* dout, const T* x, const T* w,
                                             const float* mean_in, const float* rstd_in, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const size_t base = static_cast<size_t>(row) * C;
  const float mean = mean_in[row];
  const float rstd = rstd_in[row];
  float g_sum = 0.0f;
  float gx_sum = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float g = to_float(dout[base + c]) * to_float(w[c]);
    const float xhat = (to_float(x[base + c]) - mean) * rstd;
    g_sum += g;
    gx_sum += g * xhat;
  }
  const float g_mean = warp_sum(g_sum) / C;
  const float gx_mean = warp_sum(gx_sum) / C;
  for (int c = lane; c < C; c += 32) {
    const float g = to_float(dout[base + c]) * to_float(w[c]);
    const float xhat = (to_float(x[base + c]) - mean) * rstd;
    dx[base + c] = from_float<T>(to_float(dx[base + c]) + rstd * (g - g_mean - xhat * gx_mean));
  }
}

// partial[group][c] = sum over the group's rows of dout * xhat; partial[group][C + c] = sum of dout; with
// dx non-null (the new dx, after the dx kernel), partial[group][2C + c] = sum of dx. Rows of 3C floats.
template <class T>
__global__ void layernorm_backward_partial_kernel(float* partial, const T* dout, const T* x, const T* dx,
                                                  const float* mean_in, const float* rstd_in, int N, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int group = blockIdx.y;
  if (c >= C) return;
  const int row_end = min(N, (group + 1) * kRowsPerGroup);
  float dw = 0.0f;
  float db = 0.0f;
  float ds = 0.0f;
  for (int row = group * kRowsPerGroup; row < row_end; ++row) {
    const size_t i = static_cast<size_t>(row) * C + c;
    const float d = to_float(dout[i]);
    dw += d * (to_float(x[i]) - mean_in[row]) * rstd_in[row];
    db += d;
    if (dx != nullptr) ds += to_float(dx[i]);
  }
  float* out = partial + static_cast<size_t>(group) * 3 * C;
  out[c] = dw;
  out[C + c] = db;
  out[2 * C + c] = ds;
}

__global__ void layernorm_backward_reduce_kernel(float* dw, float* db, float* dsum, const float* partial,
                                                 int groups, int C) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;  // over 3C: weight, bias, dx sum
  if (i >= 3 * C || (i >= 2 * C && dsum == nullptr)) return;
  float sum = 0.0f;
  for (int g = 0; g < groups; ++g) sum += partial[static_cast<size_t>(g) * 3 * C + i];
  float* dst[3] = {dw, db, dsum};
  dst[i / C][i % C] += sum;
}

}  // namespace

size_t layernorm_backward_scratch_floats(int N, int C) {
  return std::max(static_cast<size_t>((N + kRowsPerGroup - 1) / kRowsPerGroup) * 3 * C,
                  layernorm_bf16_scratch_floats(N, C));
}

template <class T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* x, const T* w, const T* b, int N, int C,
                       cudaStream_t stream) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    if (layernorm_bf16_supported(C, {out, x, w, b})) {
      layernorm_forward_bf16(out, mean, rstd, x, w, b, N, C, stream);
      return;
    }
  }
  constexpr int kWarps = 8;
  layernorm_forward_kernel<<<ceil_div(N, kWarps), kWarps * 32, 0, stream>>>(out, mean, rstd, x, w, b, N, C);
  CUDA_CHECK_LAUNCH();
}

template <class T>
void layernorm_backward(T* dx, float* dw, float* db, const T* dout, const T* x, const T* w, const float* mean,
                        const float* rstd, int N, int C, float* scratch, cudaStream_t stream,
                        float* dx_colsum) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    if (layernorm_bf16_supported(C, {dx, dout, x, w})) {
      layernorm_backward_bf16(dx, dw, db, dx_colsum, dout, x, w, mean, rstd, N, C, scratch, stream);
      return;
    }
  }
  constexpr int kWarps = 8;
  layernorm_backward_dx_kernel<<<ceil_div(N, kWarps), kWarps * 32, 0, stream>>>(dx, dout, x, w, mean, rstd, N,
                                                                                C);
  CUDA_CHECK_LAUNCH();
  const int groups = (N + kRowsPerGroup - 1) / kRowsPerGroup;
  const dim3 grid(ceil_div(C, 128), groups);
  layernorm_backward_partial_kernel<<<grid, 128, 0, stream>>>(
      scratch, dout, x, dx_colsum != nullptr ? dx : nullptr, mean, rstd, N, C);
  CUDA_CHECK_LAUNCH();
  layernorm_backward_reduce_kernel<<<ceil_div(3 * static_cast<size_t>(C), 256), 256, 0, stream>>>(
      dw, db, dx_colsum, scratch, groups, C);
  CUDA_CHECK_LAUNCH();
}

#define INSTANTIATE(T)                                                                                \
  template void layernorm_forward<T>(T*, float*, float*, const T*, const T*, const T*, int, int,      \
                                     cudaStream_t);                                                   \
  template void layernorm_backward<T>(T*, float*, float*, const T*, const T*, const T*, const float*, \
                                      const float*, int, int, float*, cudaStream_t, float*);
INSTANTIATE(float)
INSTANTIATE(__nv_bfloat16)
#undef INSTANTIATE

}  // namespace megascale::trainer::cuda
