#!/usr/bin/env python3
"""PyTorch reference of megascale-train's GPT, used only to check the trainer (issue 7).

Plain PyTorch, the same architecture as trainer/cuda/model.h: GPT-2 pre-LN decoder, tied LM head over
the padded vocabulary (cross-entropy over the first vocab_size columns only), GELU (tanh form), the
sequential or the parallel block (x + Attn(LN1(x)) + MLP(LN2(x)), two LayerNorms as in GPT-NeoX), causal
or sliding-window attention (query i sees keys j with i - w < j <= i).

  # step 0: logits, loss and every parameter gradient against the trainer's dump
  megascale-train --config configs/train/tiny.yaml --dtype fp32 --dump-step0 /tmp/d32
  python3 tools/trainer_reference.py check /tmp/d32
  # 200 steps on the same data from the same weights, against the trainer's loss log
  megascale-train --config configs/train/tiny.yaml --steps 200 --loss-log /tmp/tr.txt
  python3 tools/trainer_reference.py train /tmp/d32 --steps 200 --trainer-losses /tmp/tr.txt
  # throughput of the same model under torch.compile + bf16 autocast + SDPA (flash)
  python3 tools/trainer_reference.py bench --config-json /tmp/d124/meta.json

The reference runs in float64 for `check` (the truth both trainer modes are measured against) and in
float32 (TF32 off; --ref-dtype fp64 for float64) for `train`. Tolerances (per tensor; rel = max|trainer - ref| / max|ref|):
  fp32 trainer: logits rel <= 1e-4, loss |diff| <= 1e-5 * loss, every gradient rel <= 1e-3
  bf16 trainer: logits rel <= 5e-2, loss |diff| <= 5e-3 * loss, every gradient rel <= 1e-1 and cosine >= 0.99
  train: the 10-step moving averages of the two loss curves differ by at most 1% at every step.
"""
import argparse
import glob
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

TOLERANCES = {
    "fp32": {"logits": 1e-4, "loss": 1e-5, "grad": 1e-3, "cos": 0.0},
    "bf16": {"logits": 5e-2, "loss": 5e-3, "grad": 1e-1, "cos": 0.99},
}


def load_meta(dump_dir):
    with open(os.path.join(dump_dir, "meta.json")) as f:
        return json.load(f)


def load_tensors(path, meta, device, dtype):
    flat = np.fromfile(path, dtype=np.float32)
    assert flat.size == meta["buffer_floats"], f"{path}: {flat.size} floats, expected {meta['buffer_floats']}"
    out = {}
    for t in meta["tensors"]:
        n = int(np.prod(t["shape"]))
        out[t["name"]] = torch.from_numpy(flat[t["offset"]:t["offset"] + n].copy()).reshape(t["shape"]).to(device, dtype)
    return out


def forward(p, meta, idx, targets, sdpa=False):
    """Logits [B, T, Vp] and the mean loss. p: name -> tensor (stacked over layers as the trainer's)."""
    B, T = idx.shape
    C, H, L = meta["d_model"], meta["n_head"], meta["n_layer"]
    D, V, w = C // H, meta["vocab_size"], meta["attention_window"]
    x = p["wte"][idx] + p["wpe"][:T]
    i = torch.arange(T, device=idx.device)
    visible = (i[None, :] <= i[:, None])
    if w > 0:
        visible &= i[None, :] > i[:, None] - w
    for l in range(L):
        h = F.layer_norm(x, (C,), p["ln1w"][l], p["ln1b"][l], eps=1e-5)
        qkv = h @ p["qkvw"][l].T + p["qkvb"][l]
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in qkv.split(C, dim=2))
        if sdpa and w == 0:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(D)
            att = att.masked_fill(~visible, float("-inf")).softmax(dim=-1)
            y = att @ v
        y = y.transpose(1, 2).reshape(B, T, C)
        a = y @ p["attprojw"][l].T + p["attprojb"][l]
        mlp_in = x if meta["parallel_block"] else x + a
        h2 = F.layer_norm(mlp_in, (C,), p["ln2w"][l], p["ln2b"][l], eps=1e-5)
        f = F.gelu(h2 @ p["fcw"][l].T + p["fcb"][l], approximate="tanh")
        m = f @ p["fcprojw"][l].T + p["fcprojb"][l]
        x = x + a + m
    x = F.layer_norm(x, (C,), p["lnfw"], p["lnfb"], eps=1e-5)
    logits = x @ p["wte"].T
    loss = F.cross_entropy(logits[..., :V].reshape(-1, V).float(), targets.reshape(-1))
    return logits, loss


def compare(name, got, ref, tol, cos_min):
    got = got.double().flatten()
    ref = ref.double().flatten()
    err = (got - ref).abs().max().item()
    scale = ref.abs().max().item()
    rel = err / scale if scale > 0 else err
    cos = F.cosine_similarity(got, ref, dim=0).item() if scale > 0 else 1.0
    ok = rel <= tol and cos >= cos_min
    print(f"  {name:10s} max abs err {err:.3e}  max |ref| {scale:.3e}  rel {rel:.3e}  cos {cos:.6f}  "
          f"{'ok' if ok else 'FAIL'}")
    return ok


def cmd_check(args):
    meta = load_meta(args.dump)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tol = TOLERANCES[meta["dtype"]]
    p = load_tensors(os.path.join(args.dump, "params.bin"), meta, device, torch.float64)
    for t in p.values():
        t.requires_grad_(True)
    n = meta["batch_size"] * meta["seq_len"]
    batch = torch.from_numpy(np.fromfile(os.path.join(args.dump, "batch.bin"), dtype=np.int32).astype(np.int64))
    idx = batch[:n].view(meta["batch_size"], meta["seq_len"]).to(device)
    targets = batch[n:].view(meta["batch_size"], meta["seq_len"]).to(device)
    logits, loss = forward(p, meta, idx, targets)
    loss.backward()
    print(f"step-0 check of a {meta['dtype']} trainer dump ({args.dump}) against float64 PyTorch on {device}; "
          f"tolerances {tol}")
    ok = True
    got_logits = torch.from_numpy(np.fromfile(os.path.join(args.dump, "logits.bin"), dtype=np.float32))
    ok &= compare("logits", got_logits.to(device), logits.detach().reshape(-1), tol["logits"], tol["cos"])
    loss_err = abs(meta["loss"] - loss.item())
    loss_ok = loss_err <= tol["loss"] * abs(loss.item())
    print(f"  loss       trainer {meta['loss']:.7f}  reference {loss.item():.7f}  |diff| {loss_err:.3e}  "
          f"{'ok' if loss_ok else 'FAIL'}")
    ok &= loss_ok
    grads = load_tensors(os.path.join(args.dump, "grads.bin"), meta, device, torch.float64)
    for name, t in p.items():
        ok &= compare(name, grads[name], t.grad, tol["grad"], tol["cos"])
    print(f"step-0 check: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


class ShardLoader:
    """The trainer's loader (trainer/include/megascale/trainer/loader.h): sequential B*T+1 spans over sorted
    llm.c shards, advancing B*T; a span that does not fit moves to the next shard, wrapping after the last."""

    def __init__(self, pattern, B, T):
        self.files = sorted(glob.glob(pattern))
        assert self.files, f"no shards match {pattern}"
        self.B, self.T, self.shard, self.offset = B, T, 0, 0
        self.tokens = self._read(0)

    def _read(self, i):
        header = np.fromfile(self.files[i], dtype=np.int32, count=256)
        assert header[0] == 20240520 and header[1] == 1, f"{self.files[i]}: bad header"
        return np.fromfile(self.files[i], dtype=np.uint16, offset=1024)[: header[2]]

    def next(self):
        span = self.B * self.T + 1
        if self.offset + span > len(self.tokens):
            self.shard = (self.shard + 1) % len(self.files)
            self.tokens, self.offset = self._read(self.shard), 0
        buf = torch.from_numpy(self.tokens[self.offset:self.offset + span].astype(np.int64))
        self.offset += self.B * self.T
        return buf[:-1].view(self.B, self.T), buf[1:].view(self.B, self.T)


def learning_rate(meta, step):
    peak, floor = meta["learning_rate"], meta["learning_rate"] * meta["min_lr_fraction"]
    warmup, total = meta["warmup_steps"], meta["steps"]
    if step < warmup:
        return peak * (step + 1) / warmup
    if step >= total:
        return floor
    progress = (step - warmup) / max(1, total - warmup)
    return floor + (peak - floor) * (1 + math.cos(math.pi * progress)) / 2


def cmd_train(args):
    meta = load_meta(args.dump)
    if args.total_steps:
        meta["steps"] = args.total_steps
    device = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dtype = torch.float64 if args.ref_dtype == "fp64" else torch.float32
    p = load_tensors(os.path.join(args.dump, "params.bin"), meta, device, dtype)
    decayed = {t["name"]: t["decayed"] for t in meta["tensors"]}
    for t in p.values():
        t.requires_grad_(True)
    m = {k: torch.zeros_like(t) for k, t in p.items()}
    v = {k: torch.zeros_like(t) for k, t in p.items()}
    loader = ShardLoader(meta["train_glob"], meta["batch_size"], meta["seq_len"])
    b1, b2, eps, wd, clip = meta["beta1"], meta["beta2"], meta["eps"], meta["weight_decay"], meta["grad_clip"]
    accum = meta["grad_accum_steps"]
    losses = []
    for step in range(args.steps):
        loss_sum = 0.0
        for _ in range(accum):
            idx, targets = loader.next()
            _, loss = forward(p, meta, idx.to(device), targets.to(device))
            (loss / accum).backward()
            loss_sum += loss.item() / accum
        with torch.no_grad():
            norm = math.sqrt(sum((t.grad.double() ** 2).sum().item() for t in p.values()))
            scale = clip / norm if clip > 0 and norm > clip else 1.0
            lr = learning_rate(meta, step)
            bc1, bc2 = 1 - b1 ** (step + 1), 1 - b2 ** (step + 1)
            for k, t in p.items():
                g = t.grad * scale
                m[k].mul_(b1).add_(g, alpha=1 - b1)
                v[k].mul_(b2).add_(g * g, alpha=1 - b2)
                decay = wd if decayed[k] else 0.0
                u = (m[k] / bc1) / ((v[k] / bc2).sqrt() + eps) + decay * t
                if meta["optimizer"] == "lamb":
                    wn, un = t.norm().item(), u.norm().item()
                    trust = wn / un if wn > 0 and un > 0 else 1.0
                    t.sub_(lr * trust * u)
                else:
                    t.sub_(lr * u)
                t.grad = None
        losses.append(loss_sum)
        if args.save_losses:
            with open(args.save_losses, "a" if step else "w") as f:
                f.write(f"{step} {loss_sum:.9g}\n")
        if step % 20 == 0 or step == args.steps - 1:
            print(f"reference step {step + 1:4d}/{args.steps} | loss {loss_sum:.6f} | norm {norm:.4f} | lr {lr:.2e}")
    if not args.trainer_losses:
        return 0
    trainer = {}
    with open(args.trainer_losses) as f:
        for line in f:
            s, l = line.split()[:2]  # step, loss (then the gradient norm)
            trainer[int(s)] = float(l)
    n = min(len(losses), len(trainer))
    ours = np.array([trainer[i] for i in range(n)])
    ref = np.array(losses[:n])
    k = 10
    smooth = lambda a: np.convolve(a, np.ones(k) / k, mode="valid")
    rel = np.abs(smooth(ours) - smooth(ref)) / smooth(ref)
    raw = np.abs(ours - ref) / ref
    print(f"loss curves over {n} steps: trainer {ours[0]:.4f} -> {ours[-1]:.4f}, reference {ref[0]:.4f} -> "
          f"{ref[-1]:.4f}; per-step |diff|/ref max {raw.max():.4f} mean {raw.mean():.4f}; "
          f"10-step moving average max {rel.max():.4f}")
    ok = rel.max() <= 0.01
    print(f"loss-curve check (10-step averages within 1%): {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


def cmd_bench(args):
    """tok/s of the same model under torch.compile + bf16 autocast + SDPA flash, random init."""
    meta = load_meta(args.dump) if args.dump else json.load(open(args.config_json))
    device = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = True
    C, L, Vp, Tmax = meta["d_model"], meta["n_layer"], meta["padded_vocab_size"], meta["max_seq_len"]
    shapes = {"wte": (Vp, C), "wpe": (Tmax, C), "ln1w": (L, C), "ln1b": (L, C), "qkvw": (L, 3 * C, C),
              "qkvb": (L, 3 * C), "attprojw": (L, C, C), "attprojb": (L, C), "ln2w": (L, C), "ln2b": (L, C),
              "fcw": (L, 4 * C, C), "fcb": (L, 4 * C), "fcprojw": (L, C, 4 * C), "fcprojb": (L, C),
              "lnfw": (C,), "lnfb": (C,)}
    p = {k: (torch.randn(s, device=device) * 0.02).requires_grad_(True) for k, s in shapes.items()}
    opt = torch.optim.AdamW(list(p.values()), lr=1e-4, fused=True)
    B, T = meta["batch_size"], meta["seq_len"]
    fwd = torch.compile(lambda i, t: forward(p, meta, i, t, sdpa=True)[1])
    idx = torch.randint(0, meta["vocab_size"], (B, T), device=device)
    n_params = sum(int(np.prod(s)) for s in shapes.values())
    flops = 6 * n_params + 6 * L * C * T

    def train_step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(idx, idx)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(p.values()), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    times = []
    for step in range(args.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        train_step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    dt = sum(times[3:]) / len(times[3:])
    print(f"pytorch (compile, bf16 autocast, SDPA) {B}x{T}: {dt * 1e3:.1f} ms/step, {B * T / dt:,.0f} tok/s, "
          f"{flops * B * T / dt / 989e12 * 100:.1f}% MFU (steps 4..{args.steps})")
    if args.profile > 0:
        # Where PyTorch's step goes, to set beside megascale-train --profile: GPU time per kernel over
        # args.profile more steps (torch.profiler; these steps are not in the figure above).
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(args.profile):
                train_step()
            torch.cuda.synchronize()
        print(f"torch.profiler, {args.profile} steps (GPU time summed over them):")
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=40, max_name_column_width=90))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="step-0 logits, loss, gradients against a --dump-step0 directory")
    c.add_argument("dump")
    t = sub.add_parser("train", help="train from the dump's weights on the same data; compare loss curves")
    t.add_argument("dump")
    t.add_argument("--steps", type=int, default=200)
    t.add_argument("--total-steps", type=int, default=0, help="schedule length if not the dump's")
    t.add_argument("--trainer-losses", default="", help="megascale-train --loss-log file")
    t.add_argument("--ref-dtype", choices=["fp32", "fp64"], default="fp32", help="the reference's precision")
    t.add_argument("--save-losses", default="", help="write this run's 'step loss' lines here")
    b = sub.add_parser("bench", help="PyTorch throughput of the same model")
    b.add_argument("dump", nargs="?", default="")
    b.add_argument("--config-json", default="")
    b.add_argument("--steps", type=int, default=10)
    b.add_argument("--profile", type=int, default=0, help="then profile this many steps (torch.profiler)")
    args = ap.parse_args()
    return {"check": cmd_check, "train": cmd_train, "bench": cmd_bench}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
