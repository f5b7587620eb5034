// Every linear layer of the trainer through cuBLASLt with fp32 accumulation (CUBLAS_COMPUTE_32F; plain
// fp32, not TF32, in the fp32 mode so that mode can be checked tightly), with the fused epilogues the
// library offers: BIAS and GELU_AUX_BIAS forward, DGELU and BGRADB backward (the set llm.c uses,
// matmul.cuh). Where the heuristic offers no algorithm for an epilogue, the launcher falls back to a
// plain GEMM plus the hand kernels below, so the result is the same either way (the kernel tests
// run both paths).
//
// cuBLASLt is column-major. A row-major [rows, cols] matrix is a column-major [cols, rows] one, so
// y[M, N] = x[M, K] W[N, K]^T is computed as the column-major D[N, M] = op(W) x, with W seen as a
// column-major [K, N] matrix and op = transpose.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>

#include "cuda_check.h"
#include "device_utils.cuh"
#include "kernels.h"

namespace megascale::trainer::cuda {
namespace {

constexpr size_t kWorkspaceBytes = 32u << 20;  // cuBLASLt's suggestion for Hopper is 32 MiB
constexpr int kBiasRowsPerGroup = 64;

template <class T>
constexpr cudaDataType_t data_type() {
  if constexpr (std::is_same_v<T, float>) {
    return CUDA_R_32F;
  } else {
    return CUDA_R_16BF;
  }
}

// The largest power of two (up to 256) dividing the address: cuBLASLt assumes 256-byte alignment
// unless told otherwise, and an algorithm picked under that assumption faults on a less aligned slice.
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

struct Operand {
  const void* ptr = nullptr;
  cudaDataType_t type = CUDA_R_32F;
  bool transposed = false;
  int ld = 0;
};

// Everything cublasLtMatmulAlgoGetHeuristic sees, so that equal keys get the same answer.
struct AlgoKey {
  const void* handle;
  int m, n, k, lda, ldb, ldd, ld_aux;
  int type_a, type_b, type_d, epilogue;
  bool trans_a, trans_b, has_bias;
  uint32_t align_a, align_b, align_d;
  bool operator==(const AlgoKey& o) const {
    return std::tie(handle, m, n, k, lda, ldb, ldd, ld_aux, type_a, type_b, type_d, epilogue, trans_a,
                    trans_b, has_bias, align_a, align_b, align_d) ==
           std::tie(o.handle, o.m, o.n, o.k, o.lda, o.ldb, o.ldd, o.ld_aux, o.type_a, o.type_b, o.type_d,
                    o.epilogue, o.trans_a, o.trans_b, o.has_bias, o.align_a, o.align_b, o.align_d);
  }
};

struct AlgoKeyHash {
  size_t operator()(const AlgoKey& key) const {
    // FNV-1a over the fields (not the padding): a GPT step has a few dozen distinct keys.
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](uint64_t x) { h = (h ^ x) * 1099511628211ull; };
    mix(reinterpret_cast<uintptr_t>(key.handle));
    for (int x : {key.m, key.n, key.k, key.lda, key.ldb, key.ldd, key.ld_aux, key.type_a, key.type_b,
                  key.type_d, key.epilogue})
      mix(static_cast<uint64_t>(static_cast<uint32_t>(x)));
    mix(static_cast<uint64_t>(key.trans_a) | static_cast<uint64_t>(key.trans_b) << 1 |
        static_cast<uint64_t>(key.has_bias) << 2);
    for (uint32_t x : {key.align_a, key.align_b, key.align_d}) mix(x);
    return static_cast<size_t>(h);
  }
};

struct CachedAlgo {
  bool found = false;
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  cublasLtMatmulAlgo_t algo{};
};

// The heuristic's answer per GEMM shape, asked once per process: the query costs tens of microseconds of
// host time per call, and a GPT-2 step makes ~150 GEMM calls over a few dozen shapes. The answer depends
// only on the key, so caching it changes no result (the same algorithm runs either way).
// MEGASCALE_MATMUL_ALGO_CACHE=0 turns the cache off (to measure what it saves).
const bool algo_cache_enabled = [] {
  const char* env = std::getenv("MEGASCALE_MATMUL_ALGO_CACHE");
  return env == nullptr || std::string(env) != "0";
}();
std::mutex algo_cache_mutex;
std::unordered_map<AlgoKey, CachedAlgo, AlgoKeyHash> algo_cache;

// D[m, n] = alpha op(A)[m, k] op(B)[k, n] + beta C (+ epilogue), all column-major; C has D's type and
// layout and is D itself unless `c` is given (the residual add reads C from the residual stream and
// writes D elsewhere, with no copy first).
// Returns false when no algorithm supports the request (only possible with an epilogue).
bool lt_matmul(const MatmulContext& ctx, void* d, cudaDataType_t d_type, int ldd, const Operand& a,
               const Operand& b, int m, int n, int k, float beta, cublasLtEpilogue_t epilogue,
               const void* bias, void* aux, int ld_aux, cudaStream_t stream, const void* c = nullptr) {
  if (c == nullptr) c = d;
  cublasLtMatmulDesc_t desc;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_a = a.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = b.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  if (bias != nullptr) {
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  if (aux != nullptr) {
    const int64_t ld = ld_aux;
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
  }
  cublasLtMatrixLayout_t layout_a, layout_b, layout_d;
  CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&layout_a, a.type, a.transposed ? k : m, a.transposed ? m : k, a.ld));
  CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&layout_b, b.type, b.transposed ? n : k, b.transposed ? k : n, b.ld));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout_d, d_type, m, n, ldd));

  const uint32_t align_a = alignment_of(a.ptr), align_b = alignment_of(b.ptr),
                 align_d = std::min(alignment_of(d), alignment_of(c));
  const AlgoKey key{ctx.handle,
                    m,
                    n,
                    k,
                    a.ld,
                    b.ld,
                    ldd,
                    aux != nullptr ? ld_aux : 0,
                    static_cast<int>(a.type),
                    static_cast<int>(b.type),
                    static_cast<int>(d_type),
                    static_cast<int>(epilogue),
                    a.transposed,
                    b.transposed,
                    bias != nullptr,
                    align_a,
                    align_b,
                    align_d};
  CachedAlgo chosen;
  bool cached = false;
  if (algo_cache_enabled) {
    const std::lock_guard<std::mutex> lock(algo_cache_mutex);
    const auto it = algo_cache.find(key);
    if (it != algo_cache.end()) {
      chosen = it->second;
      cached = true;
    }
  }
  if (!cached) {
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &ctx.workspace_bytes, sizeof(ctx.workspace_bytes)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                      &align_a, sizeof(align_a)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                      &align_b, sizeof(align_b)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                      &align_d, sizeof(align_d)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                      &align_d, sizeof(align_d)));
    cublasLtMatmulHeuristicResult_t heuristic{};
    int found = 0;
    chosen.status = cublasLtMatmulAlgoGetHeuristic(ctx.handle, desc, layout_a, layout_b, layout_d, layout_d,
                                                   pref, 1, &heuristic, &found);
    chosen.found = chosen.status == CUBLAS_STATUS_SUCCESS && found > 0;
    chosen.algo = heuristic.algo;
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    if (algo_cache_enabled) {
      const std::lock_guard<std::mutex> lock(algo_cache_mutex);
      algo_cache.emplace(key, chosen);
    }
  }
  const bool ok = chosen.found;
  const cublasStatus_t status = chosen.status;
  if (ok) {
    const float alpha = 1.0f;
    CUBLAS_CHECK(cublasLtMatmul(ctx.handle, desc, &alpha, a.ptr, layout_a, b.ptr, layout_b, &beta, c,
                                layout_d, d, layout_d, &chosen.algo, ctx.workspace, ctx.workspace_bytes,
                                stream));
  } else if (epilogue == CUBLASLT_EPILOGUE_DEFAULT) {
    std::fprintf(stderr, "cuBLASLt: no algorithm for a %dx%dx%d GEMM (status %d)\n", m, n, k,
                 static_cast<int>(status));
    std::abort();
  }
  CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(layout_d));
  CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(layout_b));
  CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(layout_a));
  CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
  return ok;
}

// out[i] = in[i] + bias[i % N] over a row-major [M, N]: the bias add when no BIAS epilogue ran (rare).
template <class T>
__global__ void add_bias_kernel(T* out, const T* bias, size_t total, int N) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < total) out[i] = from_float<T>(to_float(out[i]) + to_float(bias[i % N]));
}

// Column sums of a row-major [M, N] matrix in row groups (partial[group][n]), then in group order.
template <class T>
__global__ void bias_partial_kernel(float* partial, const T* dout, int M, int N) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const int group = blockIdx.y;
  if (col >= N) return;
  const int row_end = min(M, (group + 1) * kBiasRowsPerGroup);
  float sum = 0.0f;
  for (int row = group * kBiasRowsPerGroup; row < row_end; ++row)
    sum += to_float(dout[static_cast<size_t>(row) * N + col]);
  partial[static_cast<size_t>(group) * N + col] = sum;
}

__global__ void bias_reduce_kernel(float* dbias, const float* partial, int groups, int N) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= N) return;
  float sum = 0.0f;
  for (int g = 0; g < groups; ++g) sum += partial[static_cast<size_t>(g) * N + col];
  dbias[col] += sum;
}

__global__ void accumulate_kernel(float* dst, const float* src, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] += src[i];
}

}  // namespace

MatmulContext matmul_create(size_t max_bias_floats) {
  MatmulContext ctx;
  CUBLAS_CHECK(cublasLtCreate(&ctx.handle));
  ctx.workspace_bytes = kWorkspaceBytes;
  CUDA_CHECK(cudaMalloc(&ctx.workspace, ctx.workspace_bytes));
  ctx.bias_scratch_floats = max_bias_floats;
  const auto env_off = [](const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr && std::string(v) == "0";
  };
  ctx.use_epilogues = !env_off("MEGASCALE_MATMUL_EPILOGUES");
  ctx.use_bias_grad_epilogue = !env_off("MEGASCALE_MATMUL_BGRADB");
  CUDA_CHECK(cudaMalloc(&ctx.bias_scratch, std::max<size_t>(max_bias_floats, 1) * sizeof(float)));
  return ctx;
}

void matmul_destroy(MatmulContext& ctx) {
  if (ctx.bias_scratch != nullptr) CUDA_CHECK(cudaFree(ctx.bias_scratch));
  if (ctx.workspace != nullptr) CUDA_CHECK(cudaFree(ctx.workspace));
  if (ctx.handle != nullptr) CUBLAS_CHECK(cublasLtDestroy(ctx.handle));
  ctx = MatmulContext{};
}

template <class T>
void matmul_forward(const MatmulContext& ctx, T* out, const T* inp, const T* weight, const T* bias,
                    const T* residual, T* pre_gelu, int M, int K, int N, cudaStream_t stream) {
  const cudaDataType_t type = data_type<T>();
  const Operand a{weight, type, true, K};
  const Operand b{inp, type, false, K};
  // The residual is cuBLASLt's C operand (beta = 1), read in place: no copy into out first.
  const float beta = residual != nullptr ? 1.0f : 0.0f;
  if (pre_gelu == nullptr) {
    const cublasLtEpilogue_t epi = bias != nullptr ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    if (lt_matmul(ctx, out, type, N, a, b, N, M, K, beta, epi, bias, nullptr, 0, stream, residual)) return;
    lt_matmul(ctx, out, type, N, a, b, N, M, K, beta, CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr, 0, stream,
              residual);
    const size_t total = static_cast<size_t>(M) * N;
    add_bias_kernel<<<ceil_div(total, 256), 256, 0, stream>>>(out, bias, total, N);
    CUDA_CHECK_LAUNCH();
    return;
  }
  // GELU: a residual makes no sense after an activation; the model never asks for both.
  if (ctx.use_epilogues) {
    const cublasLtEpilogue_t epi =
        bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    if (lt_matmul(ctx, out, type, N, a, b, N, M, K, 0.0f, epi, bias, pre_gelu, N, stream)) return;
  }
  matmul_forward<T>(ctx, pre_gelu, inp, weight, bias, nullptr, nullptr, M, K, N, stream);
  gelu_forward<T>(out, pre_gelu, static_cast<size_t>(M) * N, stream);
}

template <class T>
void matmul_backward(const MatmulContext& ctx, T* dinp, float* dweight, float* dbias, const T* dout,
                     const T* inp, const T* weight, const T* inp_pre_gelu, bool accumulate_dinp, int M, int K,
                     int N, cudaStream_t stream, bool overwrite_dweight) {
  const cudaDataType_t type = data_type<T>();
  // dweight (row-major [N, K] = column-major [K, N]) += inp^T dout, with the bias gradient of dout
  // (a reduction over the GEMM's k = M dimension) fused where cuBLASLt offers BGRADB.
  {
    const Operand a{inp, type, false, K};
    const Operand b{dout, type, true, N};
    const float dw_beta = overwrite_dweight ? 0.0f : 1.0f;
    bool bias_done = dbias == nullptr;
    if (!bias_done && ctx.use_epilogues && ctx.use_bias_grad_epilogue &&
        static_cast<size_t>(N) <= ctx.bias_scratch_floats) {
      if (lt_matmul(ctx, dweight, CUDA_R_32F, K, a, b, K, N, M, dw_beta, CUBLASLT_EPILOGUE_BGRADB,
                    ctx.bias_scratch, nullptr, 0, stream)) {
        accumulate_kernel<<<ceil_div(N, 256), 256, 0, stream>>>(dbias, ctx.bias_scratch, N);
        CUDA_CHECK_LAUNCH();
        bias_done = true;
      }
    }
    if (!bias_done) {
      lt_matmul(ctx, dweight, CUDA_R_32F, K, a, b, K, N, M, dw_beta, CUBLASLT_EPILOGUE_DEFAULT, nullptr,
                nullptr, 0, stream);
      const int groups = (M + kBiasRowsPerGroup - 1) / kBiasRowsPerGroup;
      if (static_cast<size_t>(groups) * N > ctx.bias_scratch_floats) {
        std::fprintf(stderr, "matmul_backward: bias scratch of %zu floats < %d x %d\n",
                     ctx.bias_scratch_floats, groups, N);
        std::abort();
      }
      bias_partial_kernel<<<dim3(ceil_div(N, 128), groups), 128, 0, stream>>>(ctx.bias_scratch, dout, M, N);
      CUDA_CHECK_LAUNCH();
      bias_reduce_kernel<<<ceil_div(N, 256), 256, 0, stream>>>(dbias, ctx.bias_scratch, groups, N);
      CUDA_CHECK_LAUNCH();
    } else if (dbias == nullptr) {
      lt_matmul(ctx, dweight, CUDA_R_32F, K, a, b, K, N, M, dw_beta, CUBLASLT_EPILOGUE_DEFAULT, nullptr,
                nullptr, 0, stream);
    }
  }
  // dinp (column-major [K, M]) = W (column-major [K, N]) dout (column-major [N, M]).
  if (dinp != nullptr) {
    const Operand a{weight, type, false, K};
    const Operand b{dout, type, false, N};
    if (inp_pre_gelu != nullptr) {
      if (ctx.use_epilogues && lt_matmul(ctx, dinp, type, K, a, b, K, M, N, 0.0f, CUBLASLT_EPILOGUE_DGELU,
                                         nullptr, const_cast<T*>(inp_pre_gelu), K, stream)) {
        return;
      }
      lt_matmul(ctx, dinp, type, K, a, b, K, M, N, 0.0f, CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr, 0,
                stream);
      gelu_backward<T>(dinp, dinp, inp_pre_gelu, static_cast<size_t>(M) * K, stream);
      return;
    }
    lt_matmul(ctx, dinp, type, K, a, b, K, M, N, accumulate_dinp ? 1.0f : 0.0f, CUBLASLT_EPILOGUE_DEFAULT,
              nullptr, nullptr, 0, stream);
  }
}

#define INSTANTIATE(T)                                                                                       \
  template void matmul_forward<T>(const MatmulContext&, T*, const T*, const T*, const T*, const T*, T*, int, \
                                  int, int, cudaStream_t);                                                   \
  template void matmul_backward<T>(const MatmulContext&, T*, float*, float*, const T*, const T*, const T*,   \
                                   const T*, bool, int, int, int, cudaStream_t, bool);
INSTANTIATE(float)
INSTANTIATE(__nv_bfloat16)
#undef INSTANTIATE

}  // namespace megascale::trainer::cuda
