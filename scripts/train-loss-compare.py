#!/usr/bin/env python3
"""Compares a parallel run's loss log with a one-rank run's (megascale-train --loss-log: 'step loss
grad_norm' lines), as scripts/check-train-parallel.sh does for every layout.

  train-loss-compare.py BASE RUN --exact-steps 3 --rtol 1e-4      # fp32: every step within rtol
  train-loss-compare.py BASE RUN --window 10 --window-rtol 0.01    # bf16: 10-step means within 1%

Exact mode compares the first N steps' loss and gradient norm one by one (the same global batch, data
and weights: only the reduction order differs). Window mode compares the means of consecutive windows of
steps over the steps both logs have. Prints one JSON object (the worst differences and where) and exits
0 when within bounds, 1 when not, 2 on unreadable or too short logs.
"""
import argparse
import json
import sys


def read_log(path):
    rows = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            parts = line.split()
            if len(parts) < 2:
                raise ValueError(f"{path}:{n}: expected 'step loss [grad_norm]', got {line.strip()!r}")
            norm = float(parts[2]) if len(parts) > 2 else None
            rows[int(parts[0])] = (float(parts[1]), norm)
    return rows


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base")
    ap.add_argument("run")
    ap.add_argument("--exact-steps", type=int, default=0)
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--window", type=int, default=0)
    ap.add_argument("--window-rtol", type=float, default=0.01)
    args = ap.parse_args()
    try:
        base, run = read_log(args.base), read_log(args.run)
    except (OSError, ValueError) as e:
        print(json.dumps({"error": str(e)}))
        return 2
    steps = sorted(set(base) & set(run))
    out = {"base": args.base, "run": args.run, "steps_compared": len(steps)}
    ok = True
    if args.exact_steps:
        first = [s for s in steps if s < args.exact_steps]
        if len(first) < args.exact_steps:
            print(json.dumps({**out, "error": f"fewer than {args.exact_steps} common steps"}))
            return 2
        worst_loss = max((rel(run[s][0], base[s][0]), s) for s in first)
        out["loss_max_rel"], out["loss_worst_step"] = worst_loss
        if all(base[s][1] is not None and run[s][1] is not None for s in first):
            worst_norm = max((rel(run[s][1], base[s][1]), s) for s in first)
            out["norm_max_rel"], out["norm_worst_step"] = worst_norm
            ok &= worst_norm[0] <= args.rtol
        ok &= worst_loss[0] <= args.rtol
        out["rtol"] = args.rtol
    if args.window:
        if len(steps) < args.window:
            print(json.dumps({**out, "error": f"fewer than {args.window} common steps"}))
            return 2
        worst = (0.0, 0)
        for i in range(0, len(steps) - args.window + 1, args.window):
            w = steps[i:i + args.window]
            mb = sum(base[s][0] for s in w) / len(w)
            mr = sum(run[s][0] for s in w) / len(w)
            worst = max(worst, (rel(mr, mb), w[0]))
        out["window"] = args.window
        out["window_max_rel"], out["window_worst_start"] = worst
        out["window_rtol"] = args.window_rtol
        ok &= worst[0] <= args.window_rtol
    out["pass"] = bool(ok)
    print(json.dumps(out))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
