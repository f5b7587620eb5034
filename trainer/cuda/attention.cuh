// Causal and sliding-window attention for the GPT trainer: a flash-attention kernel of our own
// (FlashAttention-2's tiling and online softmax, Dao 2023, arXiv 2307.08691), forward and backward.
//
// The forward never materializes the T x T score matrix: it keeps a running row maximum and sum per
// query (online softmax, Milakov & Gimelshein 2018) and saves the row log-sum-exp, from which the
// backward recomputes the probabilities tile by tile.
//
//   // qkv: [B, T, 3C] from the packed QKV matmul; C = H * D.
//   attention_forward(att, lse, qkv, qkv + C, qkv + 2 * C, B, T, H, D, 3 * C, C, window, 1 / sqrtf(D), s);
//   ...
//   float* workspace;  // allocated once, reused every step
//   cudaMalloc(&workspace, attention_backward_workspace_bytes(B, T, H, D));
//   attention_backward(dqkv, dqkv + C, dqkv + 2 * C, datt, att, lse, qkv, qkv + C, qkv + 2 * C,
//                      B, T, H, D, 3 * C, C, window, 1 / sqrtf(D), workspace, s);
//
// Layout and masking (the trainer's attention contract, docs in trainer/README.md):
//   q, k, v, dq, dk, dv: element (b, t, h, d) at ptr[(b*T + t)*ld_qkv + h*D + d];
//   o, dout:             element (b, t, h, d) at ptr[(b*T + t)*ld_o + h*D + d];
//   lse: float [B, H, T], natural-log log-sum-exp of the scaled scores of each query row;
//   window 0: full causal, query i sees keys j <= i; window w > 0: keys j with i - w < j <= i.
// D must be 64 or 128; any T >= 1. Every query sees at least itself, so no row is empty.
//
// Numerics: T = float or __nv_bfloat16; products and softmax accumulate in fp32. bf16 inputs whose
// pointers are 16-byte aligned with ld_qkv and ld_o multiples of 8 take the tensor-core kernels
// (mma.sync m16n8k16); everything else (fp32, or odd strides) takes plain tiled CUDA-core kernels.
// Bad arguments (D not 64/128, T < 1, a stride shorter than H*D, window < 0, a null pointer) abort
// with a message naming the argument, like the trainer's CUDA_CHECK.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace megascale::trainer {

/// Attention forward: o = softmax(scale * q k^T + causal/window mask) v, and lse per query row.
/// o and lse are written (not accumulated). Runs on stream `stream`; returns after launching.
template <class T>
void attention_forward(T* o, float* lse, const T* q, const T* k, const T* v, int B, int T_len, int H, int D,
                       int ld_qkv, int ld_o, int window, float scale, cudaStream_t stream);

/// Attention backward from the forward's o and lse: writes dq, dk, dv (strided by ld_qkv; written,
/// not accumulated, so they may alias the three thirds of one packed dqkv buffer). `workspace` is
/// device memory of attention_backward_workspace_bytes(B, T, H, D) bytes, reused across calls; its
/// contents need no initialization and are garbage afterwards. Deterministic by default: the same
/// inputs give bit-identical dq, dk, dv on every call (dQ's per-key-tile terms are added in a fixed
/// order); see attention_set_deterministic for the faster unordered form.
template <class T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* o, const float* lse, const T* q,
                        const T* k, const T* v, int B, int T_len, int H, int D, int ld_qkv, int ld_o,
                        int window, float scale, float* workspace, cudaStream_t stream);

/// Bytes of scratch the backward needs: the fp32 dQ accumulator [B, H, T, D] (key tiles add their
/// contributions in turn, descending), one int turn counter per (b, h, 32 queries) and the fp32
/// D_i = rowsum(dO * O) [B, H, T].
size_t attention_backward_workspace_bytes(int B, int T_len, int H, int D);

/// Whether the tensor-core backward adds dQ's per-key-tile terms in a fixed order (true, the default:
/// bit-reproducible gradients, which the trainer's bit-exact resume relies on) or with unordered fp32
/// atomics (false: faster, and what PyTorch's flash and cuDNN attention backwards do by default; dq then
/// differs in its last bits from run to run, within the same tolerances). The CUDA-core path (fp32, odd
/// strides) is always ordered. The first call reads MEGASCALE_ATTENTION_DETERMINISTIC ("1" or "0"; unset
/// = 1) and aborts with a message naming the variable on any other value.
bool attention_deterministic();
/// Overrides the setting above for the calls that follow (process-wide).
void attention_set_deterministic(bool ordered);

}  // namespace megascale::trainer
