// GPU tests of the trainer's flash attention (trainer/cuda/attention.cuh) against a float64 CPU
// reference on random inputs: forward output and log-sum-exp, backward dQ, dK, dV, for head dims 64 and
// 128, full causal and sliding windows (1, 17, 100, longer than T), odd sequence lengths, fp32 and bf16,
// both kernel paths (tensor cores for aligned bf16 rows, CUDA cores otherwise); and that the backward is
// deterministic (a second pass, and passes at GPT-2 shapes, reproduce dq, dk, dv to the bit), and that
// the opt-in unordered backward is as accurate. Without a
// GPU every test skips with "no CUDA device".
//
//   ./trainer_attention_test                       # all cases; prints each case's error margins
//   ./trainer_attention_test --gtest_filter='*bf16_D128*'
//
// Tolerances: a value passes when |gpu - ref| <= atol * scale + rtol * |ref|, where scale is the larger
// of the RMS of its row (one token's head vector), the RMS of the whole tensor, and 0.1. Rows matter: a
// query with a handful of visible keys has outputs of order |v|, while rows averaging hundreds of keys
// shrink towards 0, so a tensor-wide scale alone would hold short rows to an unfairly tight standard
// and fail correct kernels. The reference runs on the very values the
// GPU saw (inputs rounded to the storage type first), and its backward forms D_i = rowsum(dO o O) from
// the O the GPU stored, as the backward's contract specifies, so only the kernels' own rounding is
// measured.
//   fp32: atol = rtol = 1e-4. fp32 carries 24 bits (unit roundoff 6e-8); dot products of <= 128 terms and
//     sums over <= 1000 keys lose a few hundred ulps at worst, ~1e-5 relative. The tightest case is
//     window 1, where dq and dk are exactly 0 and fp32 noise of ~5e-6 meets the absolute floor (about
//     half the allowance). A wrongly masked key moves an output by
//     ~1/(visible keys) of its row, caught easily in the short-row and short-window cases.
//   bf16: bf16 carries 8 bits (unit roundoff 2^-9 = 0.2%). Outputs are rounded once to bf16 (0.2%); the
//     tensor-core kernels also round P (forward and backward) and dS (backward) to bf16 before their
//     products, errors of <= 0.4% per term that partly cancel over the sums. o: atol = rtol = 1e-2;
//     dq, dk, dv: atol = rtol = 3e-2 (a few times what the rounding produces, far below what a wrong
//     mask or a missed tile produces). lse is computed from exact bf16 inputs in fp32 throughout, so it
//     keeps a tight 1e-3. A CPU emulation of the kernels' bf16 roundings puts the criterion above at
//     0.64 of the allowance at worst.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attention.cuh"

namespace megascale::trainer {
namespace {

bool have_cuda_device() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

#define SKIP_WITHOUT_GPU() \
  if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device"

void check(cudaError_t err, const char* what) {
  ASSERT_EQ(err, cudaSuccess) << what << ": " << cudaGetErrorString(err);
}

template <class T>
T from_double(double x) {
  if constexpr (std::is_same_v<T, float>) {
    return static_cast<float>(x);
  } else {
    return __float2bfloat16(static_cast<float>(x));
  }
}
double to_double(float x) {
  return x;
}
double to_double(__nv_bfloat16 x) {
  return static_cast<double>(__bfloat162float(x));
}

// One attention problem in the trainer's layout: packed qkv [B, T, ld_qkv], o and dout [B, T, ld_o].
struct Problem {
  int B, T, H, D, ld_qkv, ld_o, window;
  double scale;
  // Logical tensors [B][T][H][D] holding exactly the values the GPU receives.
  std::vector<double> q, k, v, dout;
  size_t index(int b, int t, int h, int d) const {
    return ((static_cast<size_t>(b) * T + t) * H + h) * D + d;
  }
};

struct Reference {
  std::vector<double> o, lse, dq, dk, dv;  // lse: [B][H][T]
};

// Attention forward and backward in float64, straight from the definitions (softmax over the visible keys,
// dS = P o (dP - D), D_i = rowsum(P o dP)); no tiling, so it shares no structure with the kernels. With
// `o_given` (the forward output as the GPU stored it), D_i = rowsum(dO o O) is formed from it instead, as
// the backward's contract says: O in bf16 carries a 2^-9 relative rounding, and where the row's softmax
// is nearly one-hot, dP_ij - D_i is a small difference of large numbers that this rounding would swamp.
Reference reference_attention(const Problem& p, const std::vector<double>* o_given = nullptr) {
  Reference r;
  const size_t n = p.q.size();
  for (auto* t : {&r.o, &r.dq, &r.dk, &r.dv}) t->assign(n, 0.0);
  r.lse.assign(static_cast<size_t>(p.B) * p.H * p.T, 0.0);
  std::vector<double> s(p.T), prob(p.T), dp(p.T);
  for (int b = 0; b < p.B; ++b) {
    for (int h = 0; h < p.H; ++h) {
      for (int i = 0; i < p.T; ++i) {
        auto at = [&](int t, int d) { return p.index(b, t, h, d); };
        const int lo = p.window == 0 ? 0 : std::max(0, i - p.window + 1);
        double m = -INFINITY;
        for (int j = lo; j <= i; ++j) {
          double dot = 0;
          for (int d = 0; d < p.D; ++d) dot += p.q[at(i, d)] * p.k[at(j, d)];
          s[j] = p.scale * dot;
          m = std::max(m, s[j]);
        }
        double l = 0;
        for (int j = lo; j <= i; ++j) l += std::exp(s[j] - m);
        r.lse[(static_cast<size_t>(b) * p.H + h) * p.T + i] = m + std::log(l);
        double d_i = 0;  // rowsum(P o dP) = rowsum(dO o O)
        for (int j = lo; j <= i; ++j) {
          prob[j] = std::exp(s[j] - m) / l;
          double dot = 0;
          for (int d = 0; d < p.D; ++d) {
            r.o[at(i, d)] += prob[j] * p.v[at(j, d)];
            dot += p.dout[at(i, d)] * p.v[at(j, d)];
          }
          dp[j] = dot;
          d_i += prob[j] * dot;
        }
        if (o_given != nullptr) {
          d_i = 0;
          for (int d = 0; d < p.D; ++d) d_i += p.dout[at(i, d)] * (*o_given)[at(i, d)];
        }
        for (int j = lo; j <= i; ++j) {
          const double ds = prob[j] * (dp[j] - d_i);
          for (int d = 0; d < p.D; ++d) {
            r.dq[at(i, d)] += p.scale * ds * p.k[at(j, d)];
            r.dk[at(j, d)] += p.scale * ds * p.q[at(i, d)];
            r.dv[at(j, d)] += prob[j] * p.dout[at(i, d)];
          }
        }
      }
    }
  }
  return r;
}

struct Tolerance {
  double atol, rtol;
};

// Counts elements outside tolerance and returns the worst |err| / allowed (< 1 passes). Elements come in
// rows of `row_length` (one token's head vector); a row's own RMS scales its absolute tolerance.
template <class Got>
double compare(const char* name, const std::vector<double>& ref, size_t row_length, Got got, Tolerance tol,
               const std::string& ctx) {
  double sum_sq = 0;
  for (double x : ref) sum_sq += x * x;
  const double rms = ref.empty() ? 0 : std::sqrt(sum_sq / static_cast<double>(ref.size()));
  double worst = 0, row_rms = 0;
  size_t failures = 0, first = 0;
  for (size_t idx = 0; idx < ref.size(); ++idx) {
    if (idx % row_length == 0) {
      double row_sq = 0;
      for (size_t x = idx; x < idx + row_length; ++x) row_sq += ref[x] * ref[x];
      row_rms = std::sqrt(row_sq / static_cast<double>(row_length));
    }
    const double g = got(idx);
    const double allowed = tol.atol * std::max({row_rms, rms, 0.1}) + tol.rtol * std::fabs(ref[idx]);
    const double ratio =
        std::isfinite(g) && std::isfinite(ref[idx]) ? std::fabs(g - ref[idx]) / allowed : INFINITY;
    if (ratio > 1 && failures++ == 0) first = idx;
    worst = std::max(worst, ratio);
  }
  EXPECT_EQ(failures, 0u) << ctx << ": " << name << " has " << failures << " of " << ref.size()
                          << " elements out of tolerance; first at " << first << ": gpu " << got(first)
                          << " vs ref " << ref[first] << " (tensor rms " << rms << ")";
  return worst;
}

template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t count) : count_(count) {
    check(cudaMalloc(&ptr_, std::max<size_t>(count, 1) * sizeof(T)), "cudaMalloc");
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return static_cast<T*>(ptr_); }
  void upload(const std::vector<T>& host) {
    check(cudaMemcpy(ptr_, host.data(), count_ * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    check(cudaMemcpy(host.data(), ptr_, count_ * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return host;
  }
  void fill_bytes(int byte) { check(cudaMemset(ptr_, byte, count_ * sizeof(T)), "cudaMemset"); }

 private:
  void* ptr_ = nullptr;
  size_t count_;
};

struct Case {
  bool bf16;
  int D, T, window;
  int stride_pad = 0;  // added to ld_qkv and ld_o; 2 breaks 16-byte row alignment (CUDA-core path)
  int B = 2, H = 2;
};

std::string case_name(const Case& c) {
  std::string name = std::string(c.bf16 ? "bf16" : "fp32") + "_D" + std::to_string(c.D) + "_T" +
                     std::to_string(c.T) + "_w" + std::to_string(c.window);
  if (c.stride_pad != 0) name += "_pad" + std::to_string(c.stride_pad);
  return name;
}

// The case's random inputs in the trainer's layout (rounded to T) and the same values as a Problem.
template <class T>
Problem make_problem(const Case& c, std::vector<T>& qkv_host, std::vector<T>& dout_host) {
  const int C = c.H * c.D;
  Problem p{c.B, c.T, c.H, c.D, 3 * C + c.stride_pad, C + c.stride_pad, c.window, 1.0 / std::sqrt(c.D),
            {},  {},  {},  {}};
  const size_t n = static_cast<size_t>(c.B) * c.T * C;
  std::mt19937 rng(static_cast<uint32_t>(c.D * 1000003 + c.T * 1009 + c.window * 17 + c.bf16));
  std::normal_distribution<float> normal(0.f, 1.f);
  qkv_host.resize(static_cast<size_t>(c.B) * c.T * p.ld_qkv);
  dout_host.resize(static_cast<size_t>(c.B) * c.T * p.ld_o);
  for (auto& x : qkv_host) x = from_double<T>(normal(rng));  // pad columns get values too
  for (auto& x : dout_host) x = from_double<T>(normal(rng));
  for (auto* t : {&p.q, &p.k, &p.v, &p.dout}) t->resize(n);
  for (int b = 0; b < c.B; ++b) {
    for (int t = 0; t < c.T; ++t) {
      for (int h = 0; h < c.H; ++h) {
        for (int d = 0; d < c.D; ++d) {
          const size_t row = (static_cast<size_t>(b) * c.T + t);
          const size_t col = static_cast<size_t>(h) * c.D + d;
          p.q[p.index(b, t, h, d)] = to_double(qkv_host[row * p.ld_qkv + col]);
          p.k[p.index(b, t, h, d)] = to_double(qkv_host[row * p.ld_qkv + C + col]);
          p.v[p.index(b, t, h, d)] = to_double(qkv_host[row * p.ld_qkv + 2 * C + col]);
          p.dout[p.index(b, t, h, d)] = to_double(dout_host[row * p.ld_o + col]);
        }
      }
    }
  }
  return p;
}

// Elements whose bit patterns differ (NaN pad columns compare equal when their bits do).
template <class T>
size_t count_differing_bits_words(const std::vector<T>& a, const std::vector<T>& b) {
  size_t differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
  return differ + (a.size() > b.size() ? a.size() - b.size() : b.size() - a.size());
}

template <class T>
void run_case(const Case& c) {
  const int C = c.H * c.D;
  std::vector<T> qkv_host, dout_host;
  const Problem p = make_problem(c, qkv_host, dout_host);
  const size_t qkv_count = qkv_host.size(), o_count = dout_host.size();

  DeviceBuffer<T> qkv(qkv_count), o(o_count), dout(o_count), dqkv(qkv_count);
  DeviceBuffer<float> lse(static_cast<size_t>(c.B) * c.H * c.T);
  DeviceBuffer<float> workspace(attention_backward_workspace_bytes(c.B, c.T, c.H, c.D) / sizeof(float));
  qkv.upload(qkv_host);
  dout.upload(dout_host);
  // 0xFF bytes are NaN in both types: any output element the kernels fail to write shows up, and the
  // workspace starts dirty, as the contract allows.
  o.fill_bytes(0xFF);
  lse.fill_bytes(0xFF);
  dqkv.fill_bytes(0xFF);
  workspace.fill_bytes(0xFF);

  const float scale = static_cast<float>(p.scale);
  attention_forward<T>(o.get(), lse.get(), qkv.get(), qkv.get() + C, qkv.get() + 2 * C, c.B, c.T, c.H, c.D,
                       p.ld_qkv, p.ld_o, c.window, scale, nullptr);
  attention_backward<T>(dqkv.get(), dqkv.get() + C, dqkv.get() + 2 * C, dout.get(), o.get(), lse.get(),
                        qkv.get(), qkv.get() + C, qkv.get() + 2 * C, c.B, c.T, c.H, c.D, p.ld_qkv, p.ld_o,
                        c.window, scale, workspace.get(), nullptr);
  check(cudaDeviceSynchronize(), "kernels");
  const std::vector<T> o_gpu = o.download(), dqkv_gpu = dqkv.download();
  // A second backward (dirty workspace again) must reproduce every bit: dQ's terms add in a fixed order
  // (unless the test asked for the unordered form, which only has to be accurate).
  if (attention_deterministic()) {
    workspace.fill_bytes(0xFF);
    DeviceBuffer<T> dqkv_again(qkv_count);
    dqkv_again.fill_bytes(0xFF);
    attention_backward<T>(dqkv_again.get(), dqkv_again.get() + C, dqkv_again.get() + 2 * C, dout.get(),
                          o.get(), lse.get(), qkv.get(), qkv.get() + C, qkv.get() + 2 * C, c.B, c.T, c.H, c.D,
                          p.ld_qkv, p.ld_o, c.window, scale, workspace.get(), nullptr);
    check(cudaDeviceSynchronize(), "second backward");
    EXPECT_EQ(count_differing_bits_words(dqkv_gpu, dqkv_again.download()), 0u)
        << case_name(c) << ": two backward passes differ";
  }
  const std::vector<float> lse_gpu = lse.download();

  // Element idx of a logical [B][T][H][D] tensor inside a strided buffer, at column offset `col0`.
  auto at = [&](const std::vector<T>& buf, int ld, int col0) {
    return [&buf, ld, col0, &c](size_t idx) {
      const size_t d = idx % c.D, h = idx / c.D % c.H, bt = idx / (static_cast<size_t>(c.D) * c.H);
      return to_double(buf[bt * ld + col0 + h * c.D + d]);
    };
  };
  std::vector<double> o_given(p.q.size());
  const auto o_at = at(o_gpu, p.ld_o, 0);
  for (size_t idx = 0; idx < o_given.size(); ++idx) o_given[idx] = o_at(idx);
  const Reference ref = reference_attention(p, &o_given);
  const bool bf16 = c.bf16;
  const Tolerance out_tol = bf16 ? Tolerance{1e-2, 1e-2} : Tolerance{1e-4, 1e-4};
  const Tolerance lse_tol = bf16 ? Tolerance{1e-3, 1e-3} : Tolerance{1e-4, 1e-4};
  const Tolerance grad_tol = bf16 ? Tolerance{3e-2, 3e-2} : Tolerance{1e-4, 1e-4};
  const std::string ctx = case_name(c);
  const double e_o = compare("o", ref.o, c.D, o_at, out_tol, ctx);
  const double e_lse = compare(
      "lse", ref.lse, 1, [&](size_t i) { return static_cast<double>(lse_gpu[i]); }, lse_tol, ctx);
  const double e_dq = compare("dq", ref.dq, c.D, at(dqkv_gpu, p.ld_qkv, 0), grad_tol, ctx);
  const double e_dk = compare("dk", ref.dk, c.D, at(dqkv_gpu, p.ld_qkv, C), grad_tol, ctx);
  const double e_dv = compare("dv", ref.dv, c.D, at(dqkv_gpu, p.ld_qkv, 2 * C), grad_tol, ctx);
  std::printf("  %-24s worst |err|/allowed: o %.3f lse %.3f dq %.3f dk %.3f dv %.3f\n", ctx.c_str(), e_o,
              e_lse, e_dq, e_dk, e_dv);

  // Pad columns are outside every head: the kernels must leave them alone (still 0xFF bytes).
  if (c.stride_pad != 0) {
    size_t touched = 0;
    for (size_t row = 0; row < static_cast<size_t>(c.B) * c.T; ++row) {
      for (int x = 0; x < c.stride_pad; ++x) {
        const T val = dqkv_gpu[row * p.ld_qkv + 3 * C + x];
        const T o_val = o_gpu[row * p.ld_o + C + x];
        touched += !std::isnan(to_double(val)) + !std::isnan(to_double(o_val));
      }
    }
    EXPECT_EQ(touched, 0u) << ctx << ": wrote outside the heads' columns";
  }
}

class AttentionTest : public testing::TestWithParam<Case> {};

TEST_P(AttentionTest, MatchesFloat64Reference) {
  SKIP_WITHOUT_GPU();
  const Case& c = GetParam();
  if (c.bf16) {
    run_case<__nv_bfloat16>(c);
  } else {
    run_case<float>(c);
  }
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (bool bf16 : {false, true}) {
    for (int D : {64, 128}) {
      for (int T : {1, 7, 63, 129, 257}) {
        for (int window : {0, 1, 17, T + 5}) cases.push_back(Case{bf16, D, T, window});
      }
      cases.push_back(Case{bf16, D, 257, 100});  // a window spanning two 64-key tiles
      // Long rows: many key/query tiles through the double-buffered loops; T not a tile multiple.
      cases.push_back(Case{bf16, D, 1000, 0, 0, 1, 1});
      cases.push_back(Case{bf16, D, 1000, 300, 0, 1, 1});
    }
  }
  // bf16 rows that are not 16-byte aligned take the CUDA-core kernels.
  for (int window : {0, 17}) cases.push_back(Case{true, 64, 129, window, 2});
  cases.push_back(Case{true, 128, 63, 0, 2});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, AttentionTest, testing::ValuesIn(all_cases()),
                         [](const testing::TestParamInfo<Case>& param_info) {
                           return case_name(param_info.param);
                         });

// The unordered backward (attention_set_deterministic(false): dQ by plain fp32 atomics, as PyTorch's
// flash and cuDNN backwards) against the same float64 reference and tolerances, on the tensor-core path
// it changes: both head dims, full causal and windowed, T a tile multiple and not.
TEST(AttentionUnorderedTest, MatchesFloat64Reference) {
  SKIP_WITHOUT_GPU();
  struct Restore {
    ~Restore() { attention_set_deterministic(true); }
  } restore;
  attention_set_deterministic(false);
  ASSERT_FALSE(attention_deterministic());
  for (int D : {64, 128}) {
    for (const auto& [T, window] : {std::pair{257, 0}, std::pair{257, 100}, std::pair{1000, 0}}) {
      const Case c{true, D, T, window, 0, T == 1000 ? 1 : 2, T == 1000 ? 3 : 2};
      SCOPED_TRACE(case_name(c));
      run_case<__nv_bfloat16>(c);
    }
  }
}

// Determinism at a training shape (GPT-2 small's attention, B=4): many key tiles per query tile and
// hundreds of blocks in flight, where float atomics used to make dQ differ between runs. Three backward
// passes must agree to the bit in dq, dk and dv, on both kernel paths.
template <class Elem>
void check_backward_bit_identical(int B, int T, int H, int D, int window) {
  const int C = H * D, ld_qkv = 3 * C, ld_o = C;
  const size_t qkv_count = static_cast<size_t>(B) * T * ld_qkv, o_count = static_cast<size_t>(B) * T * ld_o;
  std::mt19937 rng(1234u + static_cast<uint32_t>(D + window));
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<Elem> qkv_host(qkv_count), dout_host(o_count);
  for (auto& x : qkv_host) x = from_double<Elem>(normal(rng));
  for (auto& x : dout_host) x = from_double<Elem>(normal(rng));
  DeviceBuffer<Elem> qkv(qkv_count), o(o_count), dout(o_count);
  DeviceBuffer<float> lse(static_cast<size_t>(B) * H * T);
  DeviceBuffer<float> workspace(attention_backward_workspace_bytes(B, T, H, D) / sizeof(float));
  qkv.upload(qkv_host);
  dout.upload(dout_host);
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  attention_forward<Elem>(o.get(), lse.get(), qkv.get(), qkv.get() + C, qkv.get() + 2 * C, B, T, H, D, ld_qkv,
                          ld_o, window, scale, nullptr);
  std::vector<Elem> first;
  for (int pass = 0; pass < 3; ++pass) {
    DeviceBuffer<Elem> dqkv(qkv_count);
    dqkv.fill_bytes(0xFF);
    workspace.fill_bytes(pass * 0x11);
    attention_backward<Elem>(dqkv.get(), dqkv.get() + C, dqkv.get() + 2 * C, dout.get(), o.get(), lse.get(),
                             qkv.get(), qkv.get() + C, qkv.get() + 2 * C, B, T, H, D, ld_qkv, ld_o, window,
                             scale, workspace.get(), nullptr);
    check(cudaDeviceSynchronize(), "backward");
    std::vector<Elem> got = dqkv.download();
    size_t nonzero = 0;
    for (const Elem& x : got) nonzero += to_double(x) != 0.0;
    EXPECT_GT(nonzero, got.size() / 2) << "pass " << pass << ": gradients mostly zero";
    if (pass == 0) {
      first = std::move(got);
    } else {
      EXPECT_EQ(count_differing_bits_words(first, got), 0u)
          << "pass " << pass << " differs from pass 0 (B=" << B << " T=" << T << " H=" << H << " D=" << D
          << " window=" << window << ")";
    }
  }
}

TEST(AttentionDeterminismTest, BackwardBitIdenticalBf16TensorCores) {
  SKIP_WITHOUT_GPU();
  check_backward_bit_identical<__nv_bfloat16>(4, 1024, 12, 64, 0);
  check_backward_bit_identical<__nv_bfloat16>(2, 1024, 16, 128, 0);
  check_backward_bit_identical<__nv_bfloat16>(2, 1000, 8, 64, 256);
}

TEST(AttentionDeterminismTest, BackwardBitIdenticalFp32CudaCores) {
  SKIP_WITHOUT_GPU();
  check_backward_bit_identical<float>(2, 1024, 4, 64, 0);
  check_backward_bit_identical<float>(1, 777, 4, 128, 100);
}

// Bad arguments abort with a message naming the argument (before any CUDA call).
TEST(AttentionArgumentsDeathTest, RejectBadShapes) {
  SKIP_WITHOUT_GPU();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  float dummy[4] = {};
  float* f = dummy;
  EXPECT_DEATH(attention_forward<float>(f, f, f, f, f, 1, 8, 1, 96, 288, 96, 0, 0.1f, nullptr),
               "head dimension D must be 64 or 128 \\(got 96\\)");
  EXPECT_DEATH(attention_forward<float>(f, f, f, f, f, 1, 0, 1, 64, 192, 64, 0, 0.1f, nullptr),
               "sequence length T must be >= 1");
  EXPECT_DEATH(attention_forward<float>(f, f, f, f, f, 1, 8, 2, 64, 100, 128, 0, 0.1f, nullptr),
               "ld_qkv must be >= H \\* D");
  EXPECT_DEATH(attention_forward<float>(f, f, f, f, f, 1, 8, 1, 64, 192, 64, -1, 0.1f, nullptr),
               "window must be 0");
  EXPECT_DEATH(
      attention_backward<float>(f, f, f, f, f, f, f, f, f, 1, 8, 1, 64, 192, 64, 0, 0.1f, nullptr, nullptr),
      "attention_backward: workspace is null");
}

// The kernel-form knobs read once per process: a value that names no form aborts with a message naming
// the variable (a typo would otherwise measure the default). Each case runs in a fresh process
// (threadsafe death tests re-execute the binary), so the variable is read anew there.
TEST(AttentionArgumentsDeathTest, RejectUnknownKernelForms) {
  SKIP_WITHOUT_GPU();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const Case c{true, 64, 257, 0, 0, 1, 2};
  EXPECT_DEATH(
      {
        setenv("MEGASCALE_ATTENTION_FWD", "x2", 1);
        run_case<__nv_bfloat16>(c);
      },
      "MEGASCALE_ATTENTION_FWD=\"x2\": must be x1 or x4");
  EXPECT_DEATH(
      {
        setenv("MEGASCALE_ATTENTION_BWD", "64x2", 1);
        run_case<__nv_bfloat16>(c);
      },
      "MEGASCALE_ATTENTION_BWD=\"64x2\": must be 64x1, 64x3, 128x1 or 128x2");
}

}  // namespace
}  // namespace megascale::trainer
