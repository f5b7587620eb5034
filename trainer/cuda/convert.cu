// Conversions between the fp32 master weights and the compute copies (round-to-nearest-even for bf16;
// llm.c rounds stochastically instead, which we leave out so that a bf16 copy is a pure function of the
// master and a resume needs no rounding RNG).
#include "cuda_check.h"
#include "device_utils.cuh"
#include "kernels.h"

namespace megascale::trainer::cuda {
namespace {

template <class T>
__global__ void to_compute_kernel(T* dst, const float* src, size_t n) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = from_float<T>(src[i]);
}

template <class T>
__global__ void to_float_kernel(float* dst, const T* src, size_t n) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = to_float(src[i]);
}

}  // namespace

template <class T>
void copy_to_compute(T* dst, const float* src, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  to_compute_kernel<<<ceil_div(n, 256), 256, 0, stream>>>(dst, src, n);
  CUDA_CHECK_LAUNCH();
}

template <class T>
void copy_to_float(float* dst, const T* src, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  to_float_kernel<<<ceil_div(n, 256), 256, 0, stream>>>(dst, src, n);
  CUDA_CHECK_LAUNCH();
}

#define INSTANTIATE(T)                                                      \
  template void copy_to_compute<T>(T*, const float*, size_t, cudaStream_t); \
  template void copy_to_float<T>(float*, const T*, size_t, cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(__nv_bfloat16)
#undef INSTANTIATE

}  // namespace megascale::trainer::cuda
