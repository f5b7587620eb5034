#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention on the shapes of trainer_attention_bench, for side-by-side TFLOP/s.

    python3 tests/gpu/attention_sdpa_bench.py            # 20 timed iterations per shape
    python3 tests/gpu/attention_sdpa_bench.py --iters 50

bf16, q/k/v as contiguous [B, H, T, D] tensors (SDPA's own layout, its best case; the trainer's kernel
reads strided heads out of the packed [B, T, 3C] QKV buffer instead). Causal runs use is_causal=True with
PyTorch's default backend choice and, where available, each fused backend forced. SDPA has no
sliding-window flag: the window rows pass a boolean mask, which rules out the flash backend, so those
figures are what a PyTorch model with a window would get, not a flash kernel's.

FLOP convention, the same as trainer_attention_bench: forward = 4*D FLOPs per visible (query, key) pair,
pairs = T*T/2 for causal (4*B*H*T*T*D/2) and the exact count for a window; backward = 2.5 x forward.
Forward and backward are timed separately with CUDA events (backward: torch.autograd.grad on a
retained graph), after 3 warm-ups.
"""
import argparse

import torch
import torch.nn.functional as F

SHAPES = [(16, 1024, 12, 64), (16, 1024, 16, 64), (8, 1024, 16, 128)]
WINDOW = 256


def visible_pairs(t, window):
    if window == 0:
        return t * t / 2
    return sum(min(i + 1, window) for i in range(t))


def time_ms(fn, iters):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / iters


def bench(b, t, h, d, window, backend, iters):
    q, k, v = (torch.randn(b, h, t, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    dout = torch.randn(b, h, t, d, device="cuda", dtype=torch.bfloat16)
    if window == 0:
        kwargs = {"is_causal": True}
    else:
        i = torch.arange(t, device="cuda")
        kwargs = {"attn_mask": (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < window)}

    def forward():
        return F.scaled_dot_product_attention(q, k, v, **kwargs)

    ctx = torch.nn.attention.sdpa_kernel([backend]) if backend is not None else torch.enable_grad()
    with ctx:
        try:
            fwd_ms = time_ms(forward, iters)
            out = forward()
            bwd_ms = time_ms(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True), iters)
        except RuntimeError as err:  # backend not available for this shape or mask
            return f"not available ({str(err).splitlines()[0][:60]})"
    fwd_flops = 4.0 * b * h * d * visible_pairs(t, window)
    return (f"fwd {fwd_ms:8.3f} ms {fwd_flops / fwd_ms / 1e9:7.1f} TFLOP/s   "
            f"bwd {bwd_ms:8.3f} ms {2.5 * fwd_flops / bwd_ms / 1e9:7.1f} TFLOP/s")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    from torch.nn.attention import SDPBackend
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, bf16, {args.iters} iterations after 3 warm-ups")
    print("FLOPs: fwd = 4*B*H*D*pairs, pairs = T*T/2 causal, exact visible pairs for a window; bwd = 2.5 x fwd")
    backends = [("default", None), ("flash", SDPBackend.FLASH_ATTENTION),
                ("cudnn", getattr(SDPBackend, "CUDNN_ATTENTION", None)),
                ("efficient", SDPBackend.EFFICIENT_ATTENTION)]
    for b, t, h, d in SHAPES:
        for window in (0, WINDOW):
            for name, backend in backends:
                if name == "cudnn" and backend is None:
                    continue
                if window and name in ("flash", "cudnn"):
                    continue  # no boolean-mask support in these backends
                label = "causal" if window == 0 else f"window={window}"
                result = bench(b, t, h, d, window, backend, args.iters)
                print(f"B={b:<3d} T={t:<5d} H={h:<3d} D={d:<4d} {label:<10s} sdpa[{name:<9s}] {result}", flush=True)


if __name__ == "__main__":
    main()
