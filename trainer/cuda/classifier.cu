// The fused classifier: softmax + cross-entropy over the padded vocabulary, forward and backward in
// one kernel, one block per token row. The normalised probabilities are never stored: the row's max
// and sum of exponentials are reduced in registers and shared memory, and the gradient
// (softmax - onehot) * dloss_scale overwrites the logits in place (llm.c's fused_classifier does the
// same to avoid a [N, Vp] probability tensor).
#include "cuda_check.h"
#include "device_utils.cuh"
#include "kernels.h"

namespace megascale::trainer::cuda {
namespace {

constexpr int kThreads = 512;

template <class T>
__global__ void classifier_kernel(T* logits, float* losses, const int* targets, int V, int Vp,
                                  float dloss_scale, bool write_dlogits) {
  __shared__ float shared[32];
  const int row = blockIdx.x;
  T* x = logits + static_cast<size_t>(row) * Vp;
  float m = -INFINITY;
  for (int i = threadIdx.x; i < V; i += blockDim.x) m = fmaxf(m, to_float(x[i]));
  m = block_max(m, shared);
  float s = 0.0f;
  for (int i = threadIdx.x; i < V; i += blockDim.x) s += expf(to_float(x[i]) - m);
  s = block_sum(s, shared);
  const int target = targets[row];
  const float log_z = m + logf(s);
  if (threadIdx.x == 0) losses[row] = log_z - to_float(x[target]);
  if (!write_dlogits) return;
  __syncthreads();  // every thread has read x[target] before it may be overwritten
  const float inv_s = 1.0f / s;
  for (int i = threadIdx.x; i < Vp; i += blockDim.x) {
    float g = 0.0f;
    if (i < V) g = (expf(to_float(x[i]) - m) * inv_s - (i == target ? 1.0f : 0.0f)) * dloss_scale;
    x[i] = from_float<T>(g);
  }
}

}  // namespace

template <class T>
void classifier_forward_backward(T* logits, float* losses, const int* targets, int N, int V, int Vp,
                                 float dloss_scale, bool write_dlogits, cudaStream_t stream) {
  classifier_kernel<<<N, kThreads, 0, stream>>>(logits, losses, targets, V, Vp, dloss_scale, write_dlogits);
  CUDA_CHECK_LAUNCH();
}

#define INSTANTIATE(T)                                                                             \
  template void classifier_forward_backward<T>(T*, float*, const int*, int, int, int, float, bool, \
                                               cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(__nv_bfloat16)
#undef INSTANTIATE

}  // namespace megascale::trainer::cuda
