// The vectorized bf16 LayerNorm kernels (layernorm_bf16.cu), called by layernorm.cu's launchers when
// layernorm_bf16_supported(); same contract as layernorm_forward/layernorm_backward in kernels.h.
//
//   if (layernorm_bf16_supported(C, {x, out})) layernorm_forward_bf16(out, mean, rstd, x, w, b, N, C, s);
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <initializer_list>

namespace megascale::trainer::cuda {

/// C a multiple of 8 in [8, 2048] and every pointer 16-byte aligned (rows are loaded 16 bytes at a time).
bool layernorm_bf16_supported(int C, std::initializer_list<const void*> pointers);

/// Floats of scratch layernorm_backward_bf16 needs (one partial row of 3C per 32 rows).
size_t layernorm_bf16_scratch_floats(int N, int C);

void layernorm_forward_bf16(__nv_bfloat16* out, float* mean, float* rstd, const __nv_bfloat16* x,
                            const __nv_bfloat16* w, const __nv_bfloat16* b, int N, int C,
                            cudaStream_t stream);

void layernorm_backward_bf16(__nv_bfloat16* dx, float* dw, float* db, float* dx_colsum,
                             const __nv_bfloat16* dout, const __nv_bfloat16* x, const __nv_bfloat16* w,
                             const float* mean, const float* rstd, int N, int C, float* scratch,
                             cudaStream_t stream);

}  // namespace megascale::trainer::cuda
