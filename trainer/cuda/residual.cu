// The residual adds and column sums of the tensor-parallel layers: a row-parallel projection's output
// is a partial sum that must be reduce-scattered before its bias and the residual are added, so they
// cannot ride in the GEMM's epilogue as on one GPU.
#include "cuda_check.h"
#include "device_utils.cuh"
#include "kernels.h"

namespace megascale::trainer::cuda {
namespace {

template <class T>
__global__ void residual_add_kernel(T* out, const T* in, const T* bias_a, const T* bias_b, const T* residual,
                                    size_t total, int C) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int c = static_cast<int>(i % C);
  float x = to_float(in[i]) + to_float(bias_a[c]);
  if (bias_b != nullptr) x += to_float(bias_b[c]);
  out[i] = from_float<T>(x + to_float(residual[i]));
}

// Block (32 x 8) sums 32 columns: each of the 8 rows of threads a strided slice of the rows, in order,
// then the 8 slices in order: a fixed order, so bit-reproducible.
template <class T>
__global__ void column_sum_kernel(float* dst, const T* src, int rows, int C) {
  __shared__ float partial[8][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  float s = 0.0f;
  if (c < C) {
    for (int r = threadIdx.y; r < rows; r += 8) s += to_float(src[static_cast<size_t>(r) * C + c]);
  }
  partial[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  float total = 0.0f;
  for (int y = 0; y < 8; ++y) total += partial[y][threadIdx.x];
  dst[c] += total;
}

}  // namespace

template <class T>
void residual_add(T* out, const T* in, const T* bias_a, const T* bias_b, const T* residual, int rows, int C,
                  cudaStream_t stream) {
  const size_t total = static_cast<size_t>(rows) * C;
  residual_add_kernel<<<ceil_div(total, 256), 256, 0, stream>>>(out, in, bias_a, bias_b, residual, total, C);
  CUDA_CHECK_LAUNCH();
}

template <class T>
void column_sum(float* dst, const T* src, int rows, int C, cudaStream_t stream) {
  column_sum_kernel<<<ceil_div(static_cast<size_t>(C), 32), dim3(32, 8), 0, stream>>>(dst, src, rows, C);
  CUDA_CHECK_LAUNCH();
}

#define INSTANTIATE(T)                                                                                  \
  template void residual_add<T>(T*, const T*, const T*, const T*, const T*, int, int, cudaStream_t); \
  template void column_sum<T>(float*, const T*, int, int, cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(__nv_bfloat16)
#undef INSTANTIATE

}  // namespace megascale::trainer::cuda
