// Every trainer kernel (trainer/cuda/kernels.h), forward and backward, against a float64 CPU reference
// on random inputs, in fp32 and bf16. The inputs are rounded to the compute type first, so the
// reference sees exactly what the GPU sees and the tolerance only has to cover the GPU's own rounding:
//   fp32: |gpu - ref| <= 1e-4 * (1 + |ref|)   (fp32 accumulation over at most a few hundred terms)
//   bf16: |gpu - ref| <= 2e-2 * (1 + |ref|)   (outputs rounded to 8 mantissa bits, bf16 intermediates)
// fp32 gradients of parameters stay fp32 in both modes but sum bf16 products, so bf16 bounds apply.
// Without a GPU every test skips with "no CUDA device".
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels.h"

namespace megascale::trainer::cuda {
namespace {

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define SKIP_WITHOUT_GPU() \
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device"

float round_to(float x, float*) {
  return x;
}
float round_to(float x, __nv_bfloat16*) {
  return __bfloat162float(__float2bfloat16_rn(x));
}
template <class T>
float round_as(float x) {
  return round_to(x, static_cast<T*>(nullptr));
}

template <class T>
double tolerance() {
  return std::is_same_v<T, float> ? 1e-4 : 2e-2;
}

template <class T>
const char* type_name() {
  return std::is_same_v<T, float> ? "fp32" : "bf16";
}

std::vector<float> random_vector(size_t n, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// A device array of T filled from floats, read back as floats.
template <class T>
struct Device {
  T* ptr = nullptr;
  size_t n = 0;
  explicit Device(size_t count) : n(count) {
    EXPECT_EQ(cudaMalloc(&ptr, std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemset(ptr, 0, std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess);
  }
  explicit Device(const std::vector<float>& v) : Device(v.size()) { upload(v); }
  ~Device() { cudaFree(ptr); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  void upload(const std::vector<float>& v) {
    std::vector<T> host(v.size());
    for (size_t i = 0; i < v.size(); ++i) host[i] = static_cast<T>(v[i]);
    EXPECT_EQ(cudaMemcpy(ptr, host.data(), sizeof(T) * v.size(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<float> download() const {
    std::vector<T> host(n);
    EXPECT_EQ(cudaMemcpy(host.data(), ptr, sizeof(T) * n, cudaMemcpyDeviceToHost), cudaSuccess);
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(host[i]);
    return v;
  }
};

// Random values already representable in T (what the GPU will hold).
template <class T>
std::vector<float> random_as(size_t n, float scale, uint32_t seed) {
  auto v = random_vector(n, scale, seed);
  for (auto& x : v) x = round_as<T>(x);
  return v;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& ref, double tol,
                  const char* what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double worst = 0.0;
  size_t worst_i = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(got[i] - ref[i]) / (1.0 + std::abs(ref[i]));
    if (!(err <= worst)) {  // also catches NaN
      worst = std::isnan(err) ? INFINITY : err;
      worst_i = i;
    }
  }
  EXPECT_LE(worst, tol) << what << ": worst at " << worst_i << ": gpu " << got[worst_i] << " ref "
                        << ref[worst_i];
}

void sync() {
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

double gelu_ref(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
double gelu_grad_ref(double x) {
  const double th = std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * std::sqrt(2 / M_PI) * (1 + 3 * 0.044715 * x * x);
}

// ---- encoder ----------------------------------------------------------------------------------------

// bf16 takes the chunked wte backward (encoder.cu) when C % 8 == 0: C = 40 (32 row groups) and 768 with
// buckets of ~800 rows (8 row groups); C = 36 the generic kernel.
template <class T>
void check_encoder(int B = 3, int S = 7, int C = 40) {
  const int V = 11;
  const int N = B * S;
  std::vector<int> tokens(N);
  std::mt19937 rng(1);
  for (auto& t : tokens) t = static_cast<int>(rng() % 5);  // few ids: buckets with many rows
  const auto wte = random_as<T>(static_cast<size_t>(V) * C, 1.0f, 2);
  const auto wpe = random_as<T>(static_cast<size_t>(S) * C, 1.0f, 3);
  const auto dout = random_as<T>(static_cast<size_t>(N) * C, 1.0f, 4);
  Device<T> d_wte(wte), d_wpe(wpe), d_out(static_cast<size_t>(N) * C), d_dout(dout);
  Device<int> d_tokens(N);
  cudaMemcpy(d_tokens.ptr, tokens.data(), sizeof(int) * N, cudaMemcpyHostToDevice);
  encoder_forward<T>(d_out.ptr, d_tokens.ptr, d_wte.ptr, d_wpe.ptr, B, S, C, nullptr);

  const TokenBuckets buckets = make_token_buckets(tokens.data(), N);
  Device<int> d_bt(buckets.bucket_token.size()), d_bo(buckets.bucket_offset.size()),
      d_pos(buckets.positions.size());
  cudaMemcpy(d_bt.ptr, buckets.bucket_token.data(), sizeof(int) * d_bt.n, cudaMemcpyHostToDevice);
  cudaMemcpy(d_bo.ptr, buckets.bucket_offset.data(), sizeof(int) * d_bo.n, cudaMemcpyHostToDevice);
  cudaMemcpy(d_pos.ptr, buckets.positions.data(), sizeof(int) * d_pos.n, cudaMemcpyHostToDevice);
  const auto dwte0 = random_vector(wte.size(), 1.0f, 5);  // gradients accumulate onto what is there
  const auto dwpe0 = random_vector(wpe.size(), 1.0f, 6);
  Device<float> d_dwte(dwte0), d_dwpe(dwpe0);
  encoder_backward<T>(d_dwte.ptr, d_dwpe.ptr, d_dout.ptr, d_bt.ptr, d_bo.ptr, d_pos.ptr,
                      static_cast<int>(buckets.bucket_token.size()), B, S, C, nullptr);
  sync();

  std::vector<double> out_ref(static_cast<size_t>(N) * C), dwte_ref(dwte0.begin(), dwte0.end()),
      dwpe_ref(dwpe0.begin(), dwpe0.end());
  for (int n = 0; n < N; ++n) {
    for (int c = 0; c < C; ++c) {
      out_ref[n * C + c] = static_cast<double>(wte[tokens[n] * C + c]) + wpe[(n % S) * C + c];
      dwte_ref[tokens[n] * C + c] += dout[n * C + c];
      dwpe_ref[(n % S) * C + c] += dout[n * C + c];
    }
  }
  expect_close(d_out.download(), out_ref, tolerance<T>(), "encoder out");
  expect_close(d_dwte.download(), dwte_ref, 1e-5, "encoder dwte");
  expect_close(d_dwpe.download(), dwpe_ref, 1e-5, "encoder dwpe");
}
TEST(TrainerKernels, EncoderFp32) {
  SKIP_WITHOUT_GPU();
  check_encoder<float>();
}
TEST(TrainerKernels, EncoderBf16) {
  SKIP_WITHOUT_GPU();
  check_encoder<__nv_bfloat16>();
  check_encoder<__nv_bfloat16>(4, 1024, 768);
  check_encoder<__nv_bfloat16>(3, 7, 36);
}

// ---- layernorm ----------------------------------------------------------------------------------------

// (N, C): N not a multiple of the 64-row groups (generic and bf16); bf16 C = 96, 768, 2048 take
// the vectorized kernels (layernorm_bf16.cu) with 1, 3 and 8 chunks per lane, C = 100 the generic ones.
template <class T>
void check_layernorm(int N = 130, int C = 96) {
  const auto x = random_as<T>(static_cast<size_t>(N) * C, 2.0f, 10);
  auto w = random_as<T>(C, 0.5f, 11);
  for (auto& v : w) v = round_as<T>(v + 1.0f);
  const auto b = random_as<T>(C, 0.5f, 12);
  const auto dout = random_as<T>(static_cast<size_t>(N) * C, 1.0f, 13);
  const auto dx0 = random_as<T>(static_cast<size_t>(N) * C, 1.0f, 14);
  Device<T> d_x(x), d_w(w), d_b(b), d_out(x.size()), d_dout(dout), d_dx(dx0);
  Device<float> d_mean(N), d_rstd(N), d_dw(C), d_db(C), d_scratch(layernorm_backward_scratch_floats(N, C));
  layernorm_forward<T>(d_out.ptr, d_mean.ptr, d_rstd.ptr, d_x.ptr, d_w.ptr, d_b.ptr, N, C, nullptr);
  layernorm_backward<T>(d_dx.ptr, d_dw.ptr, d_db.ptr, d_dout.ptr, d_x.ptr, d_w.ptr, d_mean.ptr, d_rstd.ptr, N,
                        C, d_scratch.ptr, nullptr);
  sync();
  std::vector<double> out_ref(x.size()), dx_ref(dx0.begin(), dx0.end()), dw_ref(C, 0.0), db_ref(C, 0.0);
  for (int n = 0; n < N; ++n) {
    double mean = 0, var = 0;
    for (int c = 0; c < C; ++c) mean += x[n * C + c];
    mean /= C;
    for (int c = 0; c < C; ++c) var += (x[n * C + c] - mean) * (x[n * C + c] - mean);
    const double rstd = 1.0 / std::sqrt(var / C + 1e-5);
    double g_mean = 0, gx_mean = 0;
    for (int c = 0; c < C; ++c) {
      const double xhat = (x[n * C + c] - mean) * rstd;
      out_ref[n * C + c] = xhat * w[c] + b[c];
      const double g = static_cast<double>(dout[n * C + c]) * w[c];
      g_mean += g / C;
      gx_mean += g * xhat / C;
      dw_ref[c] += dout[n * C + c] * xhat;
      db_ref[c] += dout[n * C + c];
    }
    for (int c = 0; c < C; ++c) {
      const double xhat = (x[n * C + c] - mean) * rstd;
      dx_ref[n * C + c] += rstd * (static_cast<double>(dout[n * C + c]) * w[c] - g_mean - xhat * gx_mean);
    }
  }
  expect_close(d_out.download(), out_ref, tolerance<T>(), "layernorm out");
  expect_close(d_dx.download(), dx_ref, tolerance<T>(), "layernorm dx");
  // dw and db are fp32 sums of N terms of exact inputs.
  expect_close(d_dw.download(), dw_ref, std::is_same_v<T, float> ? 1e-4 : 1e-3, "layernorm dw");
  expect_close(d_db.download(), db_ref, 1e-4, "layernorm db");
  // Deterministic: a second backward from the same dx gives the same bits (dw, db doubled exactly).
  Device<T> d_dx2(dx0);
  layernorm_backward<T>(d_dx2.ptr, d_dw.ptr, d_db.ptr, d_dout.ptr, d_x.ptr, d_w.ptr, d_mean.ptr, d_rstd.ptr,
                        N, C, d_scratch.ptr, nullptr);
  sync();
  const auto dx1 = d_dx.download(), dx2 = d_dx2.download();
  EXPECT_EQ(0, std::memcmp(dx1.data(), dx2.data(), dx1.size() * sizeof(dx1[0]))) << "layernorm dx bits";

  // With dx_colsum: the same dx bits, and dx_colsum += the column sums of dx as stored.
  Device<T> d_dx3(dx0);
  const auto dsum0 = random_vector(C, 1.0f, 15);
  Device<float> d_dsum(dsum0);
  layernorm_backward<T>(d_dx3.ptr, d_dw.ptr, d_db.ptr, d_dout.ptr, d_x.ptr, d_w.ptr, d_mean.ptr, d_rstd.ptr,
                        N, C, d_scratch.ptr, nullptr, d_dsum.ptr);
  sync();
  const auto dx3 = d_dx3.download();
  EXPECT_EQ(0, std::memcmp(dx1.data(), dx3.data(), dx1.size() * sizeof(dx1[0])))
      << "layernorm dx bits (sums)";
  std::vector<double> dsum_ref(dsum0.begin(), dsum0.end());
  for (int n = 0; n < N; ++n) {
    for (int c = 0; c < C; ++c) dsum_ref[c] += dx1[n * C + c];
  }
  expect_close(d_dsum.download(), dsum_ref, 1e-4, "layernorm dx column sums");
}
TEST(TrainerKernels, LayerNormFp32) {
  SKIP_WITHOUT_GPU();
  check_layernorm<float>();
}
TEST(TrainerKernels, LayerNormBf16) {
  SKIP_WITHOUT_GPU();
  check_layernorm<__nv_bfloat16>();
}
TEST(TrainerKernels, LayerNormBf16Gpt2Widths) {
  SKIP_WITHOUT_GPU();
  check_layernorm<__nv_bfloat16>(130, 768);
  check_layernorm<__nv_bfloat16>(67, 2048);
  check_layernorm<__nv_bfloat16>(33, 100);  // generic kernels (C % 8 != 0)
}

// ---- matmul ----------------------------------------------------------------------------------------
// Forward: plain + bias, + residual, + fused GELU. Backward: dW/db accumulate, dinp written and
// accumulated, and the DGELU path. Run with the cuBLASLt epilogues and with the hand fallbacks.

template <class T>
void check_matmul(bool use_epilogues) {
  const int M = 72, K = 64, N = 96;
  MatmulContext ctx = matmul_create(static_cast<size_t>((M + 63) / 64 + 1) * N);
  ctx.use_epilogues = use_epilogues;
  const auto x = random_as<T>(static_cast<size_t>(M) * K, 1.0f, 20);
  const auto w = random_as<T>(static_cast<size_t>(N) * K, 0.2f, 21);
  const auto bias = random_as<T>(N, 0.5f, 22);
  const auto residual = random_as<T>(static_cast<size_t>(M) * N, 1.0f, 23);
  const auto dout = random_as<T>(static_cast<size_t>(M) * N, 1.0f, 24);
  Device<T> d_x(x), d_w(w), d_bias(bias), d_res(residual), d_out(static_cast<size_t>(M) * N),
      d_out_res(static_cast<size_t>(M) * N), d_out_gelu(static_cast<size_t>(M) * N),
      d_pre(static_cast<size_t>(M) * N), d_dout(dout), d_dinp(static_cast<size_t>(M) * K);
  const auto dw0 = random_vector(w.size(), 1.0f, 25);
  const auto db0 = random_vector(N, 1.0f, 26);
  Device<float> d_dw(dw0), d_db(db0);

  matmul_forward<T>(ctx, d_out.ptr, d_x.ptr, d_w.ptr, d_bias.ptr, nullptr, nullptr, M, K, N, nullptr);
  matmul_forward<T>(ctx, d_out_res.ptr, d_x.ptr, d_w.ptr, d_bias.ptr, d_res.ptr, nullptr, M, K, N, nullptr);
  matmul_forward<T>(ctx, d_out_gelu.ptr, d_x.ptr, d_w.ptr, d_bias.ptr, nullptr, d_pre.ptr, M, K, N, nullptr);
  matmul_backward<T>(ctx, d_dinp.ptr, d_dw.ptr, d_db.ptr, d_dout.ptr, d_x.ptr, d_w.ptr, nullptr, false, M, K,
                     N, nullptr);
  sync();

  std::vector<double> y(static_cast<size_t>(M) * N), y_res(y.size()), y_gelu(y.size()), pre(y.size());
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      double s = bias[n];
      for (int k = 0; k < K; ++k) s += static_cast<double>(x[m * K + k]) * w[n * K + k];
      y[m * N + n] = s;
      y_res[m * N + n] = s + residual[m * N + n];
      pre[m * N + n] = s;
      y_gelu[m * N + n] = gelu_ref(s);
    }
  }
  std::vector<double> dinp_ref(x.size(), 0.0), dw_ref(dw0.begin(), dw0.end()), db_ref(db0.begin(), db0.end());
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      const double d = dout[m * N + n];
      db_ref[n] += d;
      for (int k = 0; k < K; ++k) {
        dinp_ref[m * K + k] += d * w[n * K + k];
        dw_ref[n * K + k] += d * x[m * K + k];
      }
    }
  }
  const double tol = tolerance<T>();
  expect_close(d_out.download(), y, tol, "matmul out (bias)");
  expect_close(d_out_res.download(), y_res, tol, "matmul out (bias + residual)");
  expect_close(d_pre.download(), pre, tol, "matmul pre-gelu");
  expect_close(d_out_gelu.download(), y_gelu, tol, "matmul gelu(out)");
  expect_close(d_dinp.download(), dinp_ref, tol, "matmul dinp");
  expect_close(d_dw.download(), dw_ref, 1e-4, "matmul dweight");
  expect_close(d_db.download(), db_ref, 1e-4, "matmul dbias");

  // dweight overwritten (beta = 0): what was there, even a NaN, does not matter.
  {
    std::vector<float> garbage(w.size(), 7.0f);
    garbage[0] = NAN;
    Device<float> d_dw_over(garbage);
    matmul_backward<T>(ctx, nullptr, d_dw_over.ptr, nullptr, d_dout.ptr, d_x.ptr, d_w.ptr, nullptr, false, M,
                       K, N, nullptr, /*overwrite_dweight=*/true);
    sync();
    std::vector<double> dw_only(w.size(), 0.0);
    for (size_t i = 0; i < dw_only.size(); ++i) dw_only[i] = dw_ref[i] - dw0[i];
    expect_close(d_dw_over.download(), dw_only, 1e-4, "matmul dweight overwritten");
  }

  // dinp accumulated onto what is there.
  const auto dinp0 = random_as<T>(x.size(), 1.0f, 27);
  d_dinp.upload(dinp0);
  matmul_backward<T>(ctx, d_dinp.ptr, d_dw.ptr, nullptr, d_dout.ptr, d_x.ptr, d_w.ptr, nullptr, true, M, K, N,
                     nullptr);
  sync();
  std::vector<double> dinp_acc(x.size());
  for (size_t i = 0; i < x.size(); ++i) dinp_acc[i] = dinp_ref[i] + dinp0[i];
  expect_close(d_dinp.download(), dinp_acc, tol, "matmul dinp accumulated");

  // DGELU: treat x as gelu(pre_x); dinp becomes the gradient with respect to pre_x.
  const auto pre_x = random_as<T>(x.size(), 1.0f, 28);
  Device<T> d_pre_x(pre_x);
  matmul_backward<T>(ctx, d_dinp.ptr, d_dw.ptr, nullptr, d_dout.ptr, d_x.ptr, d_w.ptr, d_pre_x.ptr, false, M,
                     K, N, nullptr);
  sync();
  std::vector<double> dpre_ref(x.size());
  for (size_t i = 0; i < x.size(); ++i) dpre_ref[i] = dinp_ref[i] * gelu_grad_ref(pre_x[i]);
  expect_close(d_dinp.download(), dpre_ref, tol, "matmul dinp through dgelu");
  matmul_destroy(ctx);
}
TEST(TrainerKernels, MatmulFp32Epilogues) {
  SKIP_WITHOUT_GPU();
  check_matmul<float>(true);
}
TEST(TrainerKernels, MatmulBf16Epilogues) {
  SKIP_WITHOUT_GPU();
  check_matmul<__nv_bfloat16>(true);
}
TEST(TrainerKernels, MatmulFp32HandKernels) {
  SKIP_WITHOUT_GPU();
  check_matmul<float>(false);
}
TEST(TrainerKernels, MatmulBf16HandKernels) {
  SKIP_WITHOUT_GPU();
  check_matmul<__nv_bfloat16>(false);
}

// ---- gelu ----------------------------------------------------------------------------------------

template <class T>
void check_gelu() {
  const size_t n = 1000;
  const auto x = random_as<T>(n, 2.0f, 30);
  const auto dout = random_as<T>(n, 1.0f, 31);
  Device<T> d_x(x), d_out(n), d_dout(dout), d_dx(n);
  gelu_forward<T>(d_out.ptr, d_x.ptr, n, nullptr);
  gelu_backward<T>(d_dx.ptr, d_dout.ptr, d_x.ptr, n, nullptr);
  sync();
  std::vector<double> y(n), dx(n);
  for (size_t i = 0; i < n; ++i) {
    y[i] = gelu_ref(x[i]);
    dx[i] = dout[i] * gelu_grad_ref(x[i]);
  }
  expect_close(d_out.download(), y, tolerance<T>(), "gelu");
  expect_close(d_dx.download(), dx, tolerance<T>(), "gelu backward");
}
TEST(TrainerKernels, GeluFp32) {
  SKIP_WITHOUT_GPU();
  check_gelu<float>();
}
TEST(TrainerKernels, GeluBf16) {
  SKIP_WITHOUT_GPU();
  check_gelu<__nv_bfloat16>();
}

// ---- classifier ----------------------------------------------------------------------------------------

// bf16 with Vp % 8 == 0 takes the register-row kernel (1024 and 50304: 1 and 7 chunks per thread);
// Vp = 1001 the generic one.
template <class T>
void check_classifier(int N = 37, int V = 1000, int Vp = 1024) {
  auto logits = random_as<T>(static_cast<size_t>(N) * Vp, 3.0f, 40);
  std::vector<int> targets(N);
  std::mt19937 rng(41);
  for (auto& t : targets) t = static_cast<int>(rng() % V);
  Device<T> d_logits(logits);
  Device<int> d_targets(N);
  Device<float> d_losses(N);
  cudaMemcpy(d_targets.ptr, targets.data(), sizeof(int) * N, cudaMemcpyHostToDevice);
  const float scale = 1.0f / N;
  classifier_forward_backward<T>(d_logits.ptr, d_losses.ptr, d_targets.ptr, N, V, Vp, scale, true, nullptr);
  sync();
  std::vector<double> loss_ref(N), grad_ref(logits.size(), 0.0);
  for (int n = 0; n < N; ++n) {
    double m = -INFINITY, s = 0;
    for (int i = 0; i < V; ++i) m = std::max<double>(m, logits[n * Vp + i]);
    for (int i = 0; i < V; ++i) s += std::exp(logits[n * Vp + i] - m);
    loss_ref[n] = m + std::log(s) - logits[n * Vp + targets[n]];
    for (int i = 0; i < V; ++i) {
      grad_ref[n * Vp + i] = (std::exp(logits[n * Vp + i] - m) / s - (i == targets[n] ? 1 : 0)) * scale;
    }
  }
  expect_close(d_losses.download(), loss_ref, 1e-5, "classifier loss");
  // Gradients are O(1/N); compare them scaled to O(1) so the tolerance means the same as elsewhere.
  auto grad = d_logits.download();
  for (auto& g : grad) g *= N;
  for (auto& g : grad_ref) g *= N;
  expect_close(grad, grad_ref, tolerance<T>(), "classifier dlogits");
}
TEST(TrainerKernels, ClassifierFp32) {
  SKIP_WITHOUT_GPU();
  check_classifier<float>();
}
TEST(TrainerKernels, ClassifierBf16) {
  SKIP_WITHOUT_GPU();
  check_classifier<__nv_bfloat16>();
}
TEST(TrainerKernels, ClassifierBf16Gpt2Vocab) {
  SKIP_WITHOUT_GPU();
  check_classifier<__nv_bfloat16>(5, 50257, 50304);
  check_classifier<__nv_bfloat16>(9, 997, 1001);  // generic kernel
}

// ---- global norm ----------------------------------------------------------------------------------------

TEST(TrainerKernels, GlobalNormIsExactAndDeterministic) {
  SKIP_WITHOUT_GPU();
  const size_t n = 1000003;
  const auto g = random_vector(n, 0.01f, 50);
  Device<float> d_g(g), d_norm(1), d_scratch(global_norm_scratch_floats());
  global_norm(d_norm.ptr, d_g.ptr, n, d_scratch.ptr, nullptr);
  sync();
  const float first = d_norm.download()[0];
  global_norm(d_norm.ptr, d_g.ptr, n, d_scratch.ptr, nullptr);
  sync();
  double ref = 0;
  for (float v : g) ref += static_cast<double>(v) * v;
  EXPECT_NEAR(first, std::sqrt(ref), 1e-5 * std::sqrt(ref));
  const float second = d_norm.download()[0];
  EXPECT_EQ(std::memcmp(&first, &second, sizeof(float)), 0) << "the norm is not bit-reproducible";
}

// ---- optimizers ----------------------------------------------------------------------------------------

template <class T>
void check_optimizer(bool lamb) {
  const size_t n = 70001;  // several LAMB blocks, a ragged tail
  const auto w = random_vector(n, 0.5f, 60);
  const auto m0 = random_vector(n, 0.01f, 61);
  auto v0 = random_vector(n, 0.01f, 62);
  for (auto& x : v0) x = x * x;
  const auto g = random_vector(n, 0.1f, 63);
  Device<float> d_w(w), d_m(m0), d_v(v0), d_g(g), d_scratch(lamb_scratch_floats(n));
  Device<T> d_param(n);
  OptimizerStep s;
  s.learning_rate = 1e-2f;
  s.beta1 = 0.9f;
  s.beta2 = 0.95f;
  s.eps = 1e-8f;
  s.weight_decay = 0.1f;
  s.step = 3;
  s.grad_scale = 0.5f;
  if (lamb) {
    lamb_update<T>(d_w.ptr, d_param.ptr, d_m.ptr, d_v.ptr, d_g.ptr, n, s, d_scratch.ptr, nullptr);
  } else {
    adamw_update<T>(d_w.ptr, d_param.ptr, d_m.ptr, d_v.ptr, d_g.ptr, n, s, nullptr);
  }
  sync();
  std::vector<double> w_ref(n), m_ref(n), v_ref(n), u(n);
  const double bc1 = 1 - std::pow(0.9, 3), bc2 = 1 - std::pow(0.95, 3);
  double w_sq = 0, u_sq = 0;
  for (size_t i = 0; i < n; ++i) {
    const double gi = static_cast<double>(g[i]) * 0.5;
    m_ref[i] = 0.9 * m0[i] + 0.1 * gi;
    v_ref[i] = 0.95 * v0[i] + 0.05 * gi * gi;
    u[i] = (m_ref[i] / bc1) / (std::sqrt(v_ref[i] / bc2) + 1e-8) + 0.1 * w[i];
    w_sq += static_cast<double>(w[i]) * w[i];
    u_sq += u[i] * u[i];
  }
  const double trust = lamb ? std::sqrt(w_sq) / std::sqrt(u_sq) : 1.0;
  std::vector<double> param_ref(n);
  for (size_t i = 0; i < n; ++i) {
    w_ref[i] = w[i] - 1e-2 * trust * u[i];
    param_ref[i] = round_as<T>(static_cast<float>(w_ref[i]));
  }
  // Masters: one fp32 update of an O(1) weight; its error is a few fp32 ulps of the step.
  expect_close(d_w.download(), w_ref, 1e-6, lamb ? "lamb master" : "adamw master");
  expect_close(d_m.download(), m_ref, 1e-6, "first moment");
  expect_close(d_v.download(), v_ref, 1e-6, "second moment");
  expect_close(d_param.download(), param_ref, std::is_same_v<T, float> ? 1e-6 : 1e-2, "compute copy");
}
TEST(TrainerKernels, AdamWFp32) {
  SKIP_WITHOUT_GPU();
  check_optimizer<float>(false);
}
TEST(TrainerKernels, AdamWBf16) {
  SKIP_WITHOUT_GPU();
  check_optimizer<__nv_bfloat16>(false);
}
TEST(TrainerKernels, LambFp32) {
  SKIP_WITHOUT_GPU();
  check_optimizer<float>(true);
}
TEST(TrainerKernels, LambBf16) {
  SKIP_WITHOUT_GPU();
  check_optimizer<__nv_bfloat16>(true);
}

// ---- attention (whichever implementation is linked: MEGASCALE_TRAINER_ATTENTION_NAME) -------------------

template <class T>
void check_attention(int S, int window, int D) {
  const int B = 2, H = 3, C = H * D, ld_qkv = 3 * C;
  const int N = B * S;
  const auto qkv = random_as<T>(static_cast<size_t>(N) * ld_qkv, 1.0f, 70);
  const auto dout = random_as<T>(static_cast<size_t>(N) * C, 1.0f, 71);
  Device<T> d_qkv(qkv), d_o(static_cast<size_t>(N) * C), d_dout(dout), d_dqkv(qkv.size());
  Device<float> d_lse(static_cast<size_t>(B) * H * S);
  Device<float> d_ws(attention_backward_workspace_bytes(B, S, H, D) / sizeof(float) + 1);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const T* q = d_qkv.ptr;
  attention_forward<T>(d_o.ptr, d_lse.ptr, q, q + C, q + 2 * C, B, S, H, D, ld_qkv, C, window, scale,
                       nullptr);
  attention_backward<T>(d_dqkv.ptr, d_dqkv.ptr + C, d_dqkv.ptr + 2 * C, d_dout.ptr, d_o.ptr, d_lse.ptr, q,
                        q + C, q + 2 * C, B, S, H, D, ld_qkv, C, window, scale, d_ws.ptr, nullptr);
  sync();
  // Reference with the GPU's own output O in Delta = dO . O, as the backward contract defines it.
  const auto o_gpu = d_o.download();
  std::vector<double> o_ref(static_cast<size_t>(N) * C, 0.0), lse_ref(d_lse.n), dqkv_ref(qkv.size(), 0.0);
  auto at = [&](int b, int t, int part, int h, int d) {
    return qkv[(static_cast<size_t>(b) * S + t) * ld_qkv + part * C + h * D + d];
  };
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < H; ++h) {
      for (int i = 0; i < S; ++i) {
        const int lo = window > 0 ? std::max(0, i - window + 1) : 0;
        std::vector<double> p(i + 1, 0.0);
        double m = -INFINITY;
        for (int j = lo; j <= i; ++j) {
          double s = 0;
          for (int d = 0; d < D; ++d) s += static_cast<double>(at(b, i, 0, h, d)) * at(b, j, 1, h, d);
          p[j] = s * scale;
          m = std::max(m, p[j]);
        }
        double sum = 0;
        for (int j = lo; j <= i; ++j) sum += std::exp(p[j] - m);
        lse_ref[(static_cast<size_t>(b) * H + h) * S + i] = m + std::log(sum);
        for (int j = lo; j <= i; ++j) p[j] = std::exp(p[j] - m) / sum;
        const size_t orow = (static_cast<size_t>(b) * S + i) * C + h * D;
        double delta = 0;
        for (int d = 0; d < D; ++d) {
          for (int j = lo; j <= i; ++j) o_ref[orow + d] += p[j] * at(b, j, 2, h, d);
          delta += static_cast<double>(dout[orow + d]) * o_gpu[orow + d];
        }
        for (int j = lo; j <= i; ++j) {
          double dp = 0;
          for (int d = 0; d < D; ++d) dp += static_cast<double>(dout[orow + d]) * at(b, j, 2, h, d);
          const double ds = p[j] * (dp - delta) * scale;
          for (int d = 0; d < D; ++d) {
            dqkv_ref[(static_cast<size_t>(b) * S + i) * ld_qkv + h * D + d] += ds * at(b, j, 1, h, d);
            dqkv_ref[(static_cast<size_t>(b) * S + j) * ld_qkv + C + h * D + d] += ds * at(b, i, 0, h, d);
            dqkv_ref[(static_cast<size_t>(b) * S + j) * ld_qkv + 2 * C + h * D + d] += p[j] * dout[orow + d];
          }
        }
      }
    }
  }
  SCOPED_TRACE(std::string(type_name<T>()) + " S=" + std::to_string(S) + " window=" + std::to_string(window) +
               " D=" + std::to_string(D) + " (" MEGASCALE_TRAINER_ATTENTION_NAME ")");
  expect_close(o_gpu, o_ref, tolerance<T>(), "attention out");
  expect_close(d_lse.download(), lse_ref, 1e-4, "attention lse");
  expect_close(d_dqkv.download(), dqkv_ref, tolerance<T>(), "attention dq/dk/dv");
}
TEST(TrainerKernels, AttentionCausalOddLengthFp32) {
  SKIP_WITHOUT_GPU();
  check_attention<float>(37, 0, 64);
}
TEST(TrainerKernels, AttentionWindowedFp32) {
  SKIP_WITHOUT_GPU();
  check_attention<float>(45, 8, 64);
}
TEST(TrainerKernels, AttentionCausalBf16D128) {
  SKIP_WITHOUT_GPU();
  check_attention<__nv_bfloat16>(33, 0, 128);
}
TEST(TrainerKernels, AttentionWindowedBf16) {
  SKIP_WITHOUT_GPU();
  check_attention<__nv_bfloat16>(50, 16, 64);
}

}  // namespace
}  // namespace megascale::trainer::cuda
