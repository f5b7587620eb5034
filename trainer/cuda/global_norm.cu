// The global L2 norm of the gradients, for clipping (Pascanu et al. 2013): a fixed grid of blocks
// sums squares into one partial each, then a single block sums the partials. The grid does not depend
// on the GPU, so the order of every addition, and the norm's last bit, is the same on any device.
#include "cuda_check.h"
#include "device_utils.cuh"
#include "kernels.h"

namespace megascale::trainer::cuda {
namespace {

constexpr int kBlocks = 512;
constexpr int kThreads = 512;

__global__ void squares_partial_kernel(float* partial, const float* g, size_t n) {
  __shared__ float shared[32];
  float sum = 0.0f;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    sum += g[i] * g[i];
  }
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

__global__ void norm_final_kernel(float* norm_out, const float* partial, int num_partials) {
  __shared__ float shared[32];
  float sum = 0.0f;
  for (int i = threadIdx.x; i < num_partials; i += blockDim.x) sum += partial[i];
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) *norm_out = sqrtf(sum);
}

}  // namespace

size_t global_norm_scratch_floats() {
  return kBlocks;
}

void global_norm(float* norm_out, const float* g, size_t n, float* scratch, cudaStream_t stream) {
  squares_partial_kernel<<<kBlocks, kThreads, 0, stream>>>(scratch, g, n);
  CUDA_CHECK_LAUNCH();
  norm_final_kernel<<<1, kThreads, 0, stream>>>(norm_out, scratch, kBlocks);
  CUDA_CHECK_LAUNCH();
}

}  // namespace megascale::trainer::cuda
