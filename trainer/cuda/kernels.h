// Host launchers for the trainer's CUDA kernels: one file per layer (forward + backward), each a thin
// function that takes a cudaStream_t and launches on it (the llm.c layout). Every launcher that moves
// activations is a template over the compute type T, explicitly instantiated for float (the tight-check
// mode) and __nv_bfloat16 (the default); parameter gradients, optimizer state and master weights are fp32.
//
//   layernorm_forward<__nv_bfloat16>(ln, mean, rstd, x, ln_w, ln_b, B * T, C, stream);
//   matmul_forward<__nv_bfloat16>(lt, qkv, ln, qkv_w, qkv_b, nullptr, nullptr, B * T, C, 3 * C, stream);
//
// Conventions, shared by every file:
// - Row-major activations: [N, C] with N = B * T token rows.
// - Linear weights are [out, in] (PyTorch's nn.Linear), so y = x W^T + b.
// - Gradients named d* into fp32 buffers are ACCUMULATED (+=): they sum over micro-steps, and the
//   caller zeroes them once per optimizer step. Activation gradients are written unless a launcher says
//   otherwise.
// - Every reduction is done in a fixed order (no atomics on floats), so a run is bit-reproducible.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "attention.cuh"

namespace megascale::trainer::cuda {

// ---- encoder.cu: token + position embedding -------------------------------------------------------

// out[n, c] = wte[tokens[n], c] + wpe[n % seq_len, c], n < N = B * seq_len.
// Vocabulary parallel: wte holds rows [vocab_begin, vocab_end) of the table (row 0 is token
// vocab_begin) and a token outside them contributes 0; wpe null contributes 0 (the TP group's sum of
// every rank's out is then the embedding, with wpe passed on one rank).
template <class T>
void encoder_forward(T* out, const int* tokens, const T* wte, const T* wpe, int B, int seq_len, int C,
                     cudaStream_t stream, int vocab_begin = 0, int vocab_end = 1 << 30);

// Deterministic embedding backward: the token rows are grouped by token id on the host
// (TokenBuckets, built once per micro-batch from the host copy of the tokens) so that each wte row sums
// its positions in one fixed order with no atomics (llm.c's bucketed encoder backward does the same).
struct TokenBuckets {
  std::vector<int> bucket_token;   // distinct token ids, ascending
  std::vector<int> bucket_offset;  // bucket b holds positions[bucket_offset[b] .. bucket_offset[b + 1])
  std::vector<int> positions;      // token rows n, grouped by token id, ascending within a bucket
};
TokenBuckets make_token_buckets(const int* tokens_host, int N);

// dwte[v] += sum over rows n with tokens[n] == v of dout[n]; dwpe[t] += sum over b of dout[b * seq_len + t].
// bucket_* are device copies of a TokenBuckets' arrays (num_buckets = bucket_token.size()).
template <class T>
void encoder_backward(float* dwte, float* dwpe, const T* dout, const int* bucket_token,
                      const int* bucket_offset, const int* positions, int num_buckets, int B, int seq_len,
                      int C, cudaStream_t stream);

// ---- layernorm.cu ---------------------------------------------------------------------------------

// out = (x - mean) * rstd * w + b per row (eps 1e-5, PyTorch's default); mean and rstd [N] are saved.
template <class T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* x, const T* w, const T* b, int N, int C,
                       cudaStream_t stream);

// dx += LN'(dout) (accumulated: dx is the residual stream's gradient), dw += sum_n dout * xhat,
// db += sum_n dout. scratch holds layernorm_backward_scratch_floats(N, C) floats. With dx_colsum non-null,
// also dx_colsum += sum_n dx (the new dx, as stored): the bias gradient of the projection whose output was
// added to this residual, so that projection's backward need not read dx again (pass it a null dbias).
template <class T>
void layernorm_backward(T* dx, float* dw, float* db, const T* dout, const T* x, const T* w, const float* mean,
                        const float* rstd, int N, int C, float* scratch, cudaStream_t stream,
                        float* dx_colsum = nullptr);
size_t layernorm_backward_scratch_floats(int N, int C);

// ---- matmul.cu: every linear layer through cuBLASLt (fp32 accumulate) ------------------------------

// One cuBLASLt handle and its workspace, created once per process.
struct MatmulContext {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  float* bias_scratch = nullptr;  // fp32 [max_bias] for the BGRADB epilogue's output
  size_t bias_scratch_floats = 0;
  bool use_epilogues = true;           // false: plain GEMMs + hand kernels (for A/B checks of the fusions)
  bool use_bias_grad_epilogue = true;  // false: the bias gradient by the hand column sums, not BGRADB
};
// MEGASCALE_MATMUL_EPILOGUES=0 and MEGASCALE_MATMUL_BGRADB=0 in the environment turn the fusions off
// (use_epilogues, use_bias_grad_epilogue), to time one form against the other.
MatmulContext matmul_create(size_t max_bias_floats);
void matmul_destroy(MatmulContext& ctx);

// out[M, N] = inp[M, K] W[N, K]^T (+ bias[N]) (+ residual[M, N]). With pre_gelu non-null the GELU
// (tanh form, as GPT-2) is fused: pre_gelu = the affine result, out = gelu(pre_gelu) (cuBLASLt's
// GELU_AUX_BIAS epilogue). residual may alias out (cuBLASLt allows C == D).
template <class T>
void matmul_forward(const MatmulContext& ctx, T* out, const T* inp, const T* weight, const T* bias,
                    const T* residual, T* pre_gelu, int M, int K, int N, cudaStream_t stream);

// Backward of matmul_forward without GELU, given dout [M, N]:
//   dweight[N, K] += dout^T inp (fp32), dbias[N] += colsum(dout) (fp32; may be null),
//   dinp[M, K] = dout W, or += when accumulate_dinp.
// With inp_pre_gelu non-null, inp was gelu(inp_pre_gelu) and dinp receives the gradient with respect
// to inp_pre_gelu instead (the DGELU epilogue); accumulate_dinp must then be false.
// overwrite_dweight: dweight = dout^T inp instead of += (the GEMM's beta = 0), for the first backward after
// the gradients were last cleared, which then need not clear dweight.
template <class T>
void matmul_backward(const MatmulContext& ctx, T* dinp, float* dweight, float* dbias, const T* dout,
                     const T* inp, const T* weight, const T* inp_pre_gelu, bool accumulate_dinp, int M, int K,
                     int N, cudaStream_t stream, bool overwrite_dweight = false);

// ---- gelu.cu: the stand-alone GELU, used when an epilogue is unavailable ---------------------------

// out = gelu(x), tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <class T>
void gelu_forward(T* out, const T* x, size_t n, cudaStream_t stream);
// dx = dout * gelu'(x) (dx may alias dout).
template <class T>
void gelu_backward(T* dx, const T* dout, const T* x, size_t n, cudaStream_t stream);

// ---- classifier.cu: fused softmax + cross-entropy over the padded vocabulary -----------------------

// Per row n: loss[n] = logsumexp(logits[n, :V]) - logits[n, targets[n]]. The padded columns V..Vp are
// never a target and take no probability. With write_dlogits, logits are overwritten IN PLACE by
// dloss_scale * (softmax - onehot(target)) (0 on padded columns): the probabilities live only in
// registers. dloss_scale is usually 1 / (N * grad_accum_steps), the mean over tokens and micro-steps.
template <class T>
void classifier_forward_backward(T* logits, float* losses, const int* targets, int N, int V, int Vp,
                                 float dloss_scale, bool write_dlogits, cudaStream_t stream);

// Vocabulary-parallel cross-entropy (Megatron-LM's), for a tensor-parallel rank whose logits [N, Vl]
// are columns [vocab_begin, vocab_begin + Vl) of the padded vocabulary (columns >= V are padding). Three
// passes around the group's two all-reduces, which the caller runs:
//   classifier_vp_max:    row_max[n] = max of this rank's real columns (-inf if none)     -> max over TP
//   classifier_vp_sums:   stats[n] = sum of exp(logit - row_max[n]) over this rank's real columns,
//                         stats[N + n] = the target's logit if this rank holds it, else 0  -> sum over TP
//   classifier_vp_finish: losses[n] = log(stats[n]) + row_max[n] - stats[N + n], and with write_dlogits
//                         the logits overwritten in place by dloss_scale * (softmax - onehot(target)).
template <class T>
void classifier_vp_max(const T* logits, float* row_max, int N, int Vl, int vocab_begin, int V, cudaStream_t stream);
template <class T>
void classifier_vp_sums(const T* logits, const float* row_max, float* stats, const int* targets, int N, int Vl,
                        int vocab_begin, int V, cudaStream_t stream);
template <class T>
void classifier_vp_finish(T* logits, float* losses, const float* row_max, const float* stats, const int* targets,
                          int N, int Vl, int vocab_begin, int V, float dloss_scale, bool write_dlogits,
                          cudaStream_t stream);

// acc[0] += scale * mean of losses[0..N): a micro-batch's loss summed on the device, one block in a fixed
// order (a pipeline's last stage keeps the step's loss without reading it back per micro-batch).
void loss_accumulate(float* acc, const float* losses, int N, float scale, cudaStream_t stream);

// ---- residual.cu: what the tensor-parallel layers do outside cuBLASLt's epilogues ----------------

// out[n, c] = in[n, c] + bias_a[c] (+ bias_b[c]) + residual[n, c], summed in fp32 and rounded once; out
// may alias in. The row-parallel projections' epilogue, after their reduce-scatter.
template <class T>
void residual_add(T* out, const T* in, const T* bias_a, const T* bias_b, const T* residual, int rows, int C,
                  cudaStream_t stream);
// dst[c] += sum over rows n of src[n, c], in row order: a replicated bias's gradient over this rank's rows.
template <class T>
void column_sum(float* dst, const T* src, int rows, int C, cudaStream_t stream);

// ---- global_norm.cu --------------------------------------------------------------------------------

// ||g||_2 over n fp32 values, in a fixed order; scratch holds global_norm_scratch_floats() floats.
// The result is written to norm_out (device, one float).
void global_norm(float* norm_out, const float* g, size_t n, float* scratch, cudaStream_t stream);
size_t global_norm_scratch_floats();

// ---- adamw.cu / lamb.cu: fp32 master weights and state, compute copies refreshed ------------------

struct OptimizerStep {
  float learning_rate = 0;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0;  // the caller passes 0 for tensors that are not decayed (1-D)
  int step = 1;            // 1-based, for bias correction
  float grad_scale = 1;    // gradient clipping factor min(1, clip / ||g||)
};

// AdamW (Loshchilov & Hutter 2019, Alg. 2): decoupled decay w -= lr * (mhat / (sqrt(vhat) + eps) + wd w).
// param (the compute copy) is refreshed from the master with round-to-nearest-even.
template <class T>
void adamw_update(float* master, T* param, float* m, float* v, const float* grad, size_t n,
                  const OptimizerStep& s, cudaStream_t stream);

// LAMB (You et al. 2020, Alg. 2): u = mhat / (sqrt(vhat) + eps) + wd w, trust = ||w|| / ||u|| (1 when
// either norm is 0), w -= lr * trust * u, over this one tensor. grad is overwritten with u (it is zeroed
// before the next step anyway). scratch holds lamb_scratch_floats(n) floats.
template <class T>
void lamb_update(float* master, T* param, float* m, float* v, float* grad, size_t n, const OptimizerStep& s,
                 float* scratch, cudaStream_t stream);
size_t lamb_scratch_floats(size_t n);

// LAMB over a tensor held in pieces (a sharded optimizer, tensor or pipeline parallel): lamb_moments on
// each local piece updates its moments, writes u into grad and adds its ||w||^2 and ||u||^2 to sums[0]
// and sums[1]; once the caller has summed `sums` over the ranks holding the tensor's pieces, lamb_apply
// steps each piece with the whole tensor's trust ratio sqrt(sums[0] / sums[1]) (1 when either is 0).
void lamb_moments(float* master, float* m, float* v, float* grad, size_t n, const OptimizerStep& s, float* sums,
                  float* scratch, cudaStream_t stream);
template <class T>
void lamb_apply(float* master, T* param, const float* update, size_t n, float learning_rate, const float* sums,
                cudaStream_t stream);

// ---- convert.cu ----------------------------------------------------------------------------------

// dst = (T) src, round-to-nearest-even: the compute copy of the fp32 master weights.
template <class T>
void copy_to_compute(T* dst, const float* src, size_t n, cudaStream_t stream);
// dst = (float) src.
template <class T>
void copy_to_float(float* dst, const T* src, size_t n, cudaStream_t stream);

}  // namespace megascale::trainer::cuda

// Attention: trainer/cuda/attention.cuh (the flash kernel), included above.
