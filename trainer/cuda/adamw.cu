// AdamW (Loshchilov & Hutter, ICLR 2019, Algorithm 2) on fp32 master weights and fp32 moments; the
// compute copy is refreshed from the new master in the same pass. Weight decay is decoupled (applied
// to the weight, not the gradient), and the caller passes 0 for 1-D tensors (biases, LayerNorm).
#include "cuda_check.h"
#include "device_utils.cuh"
#include "kernels.h"

namespace megascale::trainer::cuda {
namespace {

template <class T>
__global__ void adamw_kernel(float* master, T* param, float* m_state, float* v_state, const float* grad,
                             size_t n, OptimizerStep s, float bias_correction1, float bias_correction2) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = grad[i] * s.grad_scale;
  const float m = s.beta1 * m_state[i] + (1.0f - s.beta1) * g;
  const float v = s.beta2 * v_state[i] + (1.0f - s.beta2) * g * g;
  m_state[i] = m;
  v_state[i] = v;
  const float m_hat = m / bias_correction1;
  const float v_hat = v / bias_correction2;
  const float w = master[i];
  const float w_new = w - s.learning_rate * (m_hat / (sqrtf(v_hat) + s.eps) + s.weight_decay * w);
  master[i] = w_new;
  param[i] = from_float<T>(w_new);
}

}  // namespace

template <class T>
void adamw_update(float* master, T* param, float* m, float* v, const float* grad, size_t n,
                  const OptimizerStep& s, cudaStream_t stream) {
  if (n == 0) return;
  const float bc1 = 1.0f - powf(s.beta1, static_cast<float>(s.step));
  const float bc2 = 1.0f - powf(s.beta2, static_cast<float>(s.step));
  adamw_kernel<<<ceil_div(n, 256), 256, 0, stream>>>(master, param, m, v, grad, n, s, bc1, bc2);
  CUDA_CHECK_LAUNCH();
}

#define INSTANTIATE(T)                                                                                  \
  template void adamw_update<T>(float*, T*, float*, float*, const float*, size_t, const OptimizerStep&, \
                                cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(__nv_bfloat16)
#undef INSTANTIATE

}  // namespace megascale::trainer::cuda
