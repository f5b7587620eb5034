// Error checks for CUDA runtime and cuBLAS(Lt) calls in the trainer: on failure they print the call's
// file, line and the library's own message, and abort. A failed kernel launch or a cuBLAS error leaves
// the device state unknown, so there is nothing sensible to return to (the llm.c convention).
//
//   CUDA_CHECK(cudaMalloc(&ptr, bytes));
//   CUBLAS_CHECK(cublasLtMatmul(...));
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace megascale::trainer::cuda {

[[noreturn]] inline void cuda_fail(cudaError_t error, const char* call, const char* file, int line) {
  std::fprintf(stderr, "CUDA error at %s:%d: %s: %s\n", file, line, call, cudaGetErrorString(error));
  std::abort();
}

[[noreturn]] inline void cublas_fail(cublasStatus_t status, const char* call, const char* file, int line) {
  // The status number (cublas_api.h's cublasStatus_t): the name lookup lives in libcublas, not Lt.
  std::fprintf(stderr, "cuBLAS error at %s:%d: %s: status %d\n", file, line, call, static_cast<int>(status));
  std::abort();
}

}  // namespace megascale::trainer::cuda

#define CUDA_CHECK(call)                                                                   \
  do {                                                                                     \
    cudaError_t cuda_check_error_ = (call);                                                \
    if (cuda_check_error_ != cudaSuccess) {                                                \
      ::megascale::trainer::cuda::cuda_fail(cuda_check_error_, #call, __FILE__, __LINE__); \
    }                                                                                      \
  } while (0)

#define CUBLAS_CHECK(call)                                                                      \
  do {                                                                                          \
    cublasStatus_t cublas_check_status_ = (call);                                               \
    if (cublas_check_status_ != CUBLAS_STATUS_SUCCESS) {                                        \
      ::megascale::trainer::cuda::cublas_fail(cublas_check_status_, #call, __FILE__, __LINE__); \
    }                                                                                           \
  } while (0)

// After a kernel launch: catches bad launch configurations at the launch site.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
