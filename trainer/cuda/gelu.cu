// GELU, tanh approximation (Hendrycks & Gimpel 2016, eq. in §2; GPT-2's "gelu_new"), forward and
// backward. The model fuses GELU into the cuBLASLt epilogues (matmul.cu); these kernels are the
// fallback when the library offers no such algorithm, and the kernel tests' second path.
#include "cuda_check.h"
#include "device_utils.cuh"
#include "kernels.h"

namespace megascale::trainer::cuda {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

template <class T>
__global__ void gelu_forward_kernel(T* out, const T* x, size_t n) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = to_float(x[i]);
  const float inner = kSqrt2OverPi * (v + kGeluCubic * v * v * v);
  out[i] = from_float<T>(0.5f * v * (1.0f + tanhf(inner)));
}

template <class T>
__global__ void gelu_backward_kernel(T* dx, const T* dout, const T* x, size_t n) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = to_float(x[i]);
  const float inner = kSqrt2OverPi * (v + kGeluCubic * v * v * v);
  const float th = tanhf(inner);
  const float dinner = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * v * v);
  const float grad = 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * dinner;
  dx[i] = from_float<T>(to_float(dout[i]) * grad);
}

}  // namespace

template <class T>
void gelu_forward(T* out, const T* x, size_t n, cudaStream_t stream) {
  gelu_forward_kernel<<<ceil_div(n, 256), 256, 0, stream>>>(out, x, n);
  CUDA_CHECK_LAUNCH();
}

template <class T>
void gelu_backward(T* dx, const T* dout, const T* x, size_t n, cudaStream_t stream) {
  gelu_backward_kernel<<<ceil_div(n, 256), 256, 0, stream>>>(dx, dout, x, n);
  CUDA_CHECK_LAUNCH();
}

#define INSTANTIATE(T)                                               \
  template void gelu_forward<T>(T*, const T*, size_t, cudaStream_t); \
  template void gelu_backward<T>(T*, const T*, const T*, size_t, cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(__nv_bfloat16)
#undef INSTANTIATE

}  // namespace megascale::trainer::cuda
