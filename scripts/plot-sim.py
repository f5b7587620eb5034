#!/usr/bin/env python3
"""Draws the output of `megascale sim --out DIR` as PNGs (the simulator itself draws nothing).

    megascale sim configs/sim/poisson-web-search.yaml --out out/
    scripts/plot-sim.py out/                  # writes out/fct_slowdown.png, throughput.png, queue_cdf.png

With `--compare a,b,c` the folder holds one set of files per controller (fct_bins-a.csv, ...); every
figure then draws them side by side. Reads (sim/README.md, "Outputs"):
  fct_bins*.csv    FCT slowdown p50/p95/p99 by flow-size bin  -> fct_slowdown.png
  throughput*.csv  bytes delivered per interval, paused ports -> throughput.png
  queues*.csv      switch port backlog histogram (with CDF)   -> queue_cdf.png

Needs python3 with matplotlib (Debian: python3-matplotlib, installed by scripts/install-deps.sh; where
`python3` is another interpreter without it, the script runs itself again under /usr/bin/python3).
Long throughput series are drawn as means of equal groups of samples (at most 1,000 points; the legend
says how many).
"""

import argparse
import csv
import glob
import os
import sys

SYSTEM_PYTHON = "/usr/bin/python3"

try:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
except ImportError:
    # Debian's python3-matplotlib lives in the system interpreter; a pyenv or venv `python3` first on
    # PATH does not see it. Run again under the system one, once.
    if os.path.realpath(sys.executable) != os.path.realpath(SYSTEM_PYTHON) and os.access(SYSTEM_PYTHON, os.X_OK):
        os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON] + sys.argv)
    sys.exit("plot-sim: matplotlib is missing (apt-get install python3-matplotlib, or scripts/install-deps.sh)")

# Throughput rows beyond this many are averaged in equal groups: 10 us samples of a 200 ms run are
# 20,000 points, each a whole number of frames, which draws as a solid band.
MAX_POINTS = 1000


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def runs_in(folder):
    """The runs in the folder: [(label, suffix)], '' for a single run, '-swift' ... for --compare."""
    runs = []
    for path in sorted(glob.glob(os.path.join(folder, "fct_bins*.csv"))):
        suffix = os.path.basename(path)[len("fct_bins"):-len(".csv")]
        runs.append((suffix[1:] if suffix else "run", suffix))
    return runs


def size_label(lo, hi):
    def short(b):
        b = int(b)
        for unit, scale in (("G", 10**9), ("M", 10**6), ("K", 10**3)):
            if b >= scale and b % scale == 0:
                return f"{b // scale}{unit}"
        return str(b)

    return f"[{short(lo)}, {'inf' if hi == 'inf' else short(hi)})"


def plot_fct(folder, runs, out):
    tables = {label: read_csv(os.path.join(folder, f"fct_bins{suffix}.csv")) for label, suffix in runs}
    # Bins with flows in any run, in order.
    first = next(iter(tables.values()))
    keep = [i for i in range(len(first)) if any(int(t[i]["flows"]) > 0 for t in tables.values())]
    if not keep:
        return False
    labels = [size_label(first[i]["bin_lo_bytes"], first[i]["bin_hi_bytes"]) for i in keep]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4), sharey=True)
    width = 0.8 / len(tables)
    for ax, pct in zip(axes, ("p50", "p95", "p99")):
        for k, (label, rows) in enumerate(tables.items()):
            xs = [j + (k - (len(tables) - 1) / 2) * width for j in range(len(keep))]
            ax.bar(xs, [float(rows[i][f"slowdown_{pct}"]) for i in keep], width, label=label)
        ax.set_xticks(range(len(keep)))
        ax.set_xticklabels(labels, rotation=30, ha="right")
        ax.set_title(f"FCT slowdown {pct}")
        ax.set_xlabel("flow size (bytes)")
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("FCT / FCT alone")
    axes[0].legend()
    counts = ", ".join(f"{labels[j]}: {first[i]['flows']}" for j, i in enumerate(keep))
    fig.suptitle(f"flows per bin: {counts}", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return True


def binned(values, group):
    """Means of consecutive groups of `group` values (the last group may be shorter)."""
    return [sum(values[i : i + group]) / len(values[i : i + group]) for i in range(0, len(values), group)]


def plot_throughput(folder, runs, out):
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    drew = False
    for label, suffix in runs:
        path = os.path.join(folder, f"throughput{suffix}.csv")
        if not os.path.exists(path):
            continue
        rows = read_csv(path)
        if not rows:
            continue
        t = [float(r["t_us"]) for r in rows]
        gbps = [float(r["gbps"]) for r in rows]
        paused = [int(r["paused_ports"]) for r in rows]
        group = -(-len(rows) // MAX_POINTS)  # ceil
        if group > 1:
            t, gbps, paused = (binned(v, group) for v in (t, gbps, paused))
            step = float(rows[1]["t_us"]) - float(rows[0]["t_us"]) if len(rows) > 1 else 0
            label = f"{label} (mean of {group} samples, {step * group:g} us)"
        top.plot(t, gbps, label=label)
        bottom.plot(t, paused, label=label)
        drew = True
    if not drew:
        plt.close(fig)
        return False
    top.set_ylabel("delivered (Gbit/s, all receivers)")
    top.grid(alpha=0.3)
    top.legend()
    bottom.set_ylabel("ports paused")
    bottom.set_xlabel("time since the sends began (us)")
    bottom.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return True


def plot_queues(folder, runs, out):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    drew = False
    for label, suffix in runs:
        path = os.path.join(folder, f"queues{suffix}.csv")
        if not os.path.exists(path):
            continue
        rows = read_csv(path)
        if not rows:
            continue
        # Empty queues sit at x = 1 byte on the log axis; each bucket's CDF is drawn at its upper edge.
        xs = [max(1, int(r["bucket_hi_bytes"])) for r in rows]
        ax.step(xs, [float(r["cdf"]) for r in rows], where="post", label=label)
        drew = True
    if not drew:
        plt.close(fig)
        return False
    ax.set_xscale("log")
    ax.set_xlabel("switch port backlog (bytes, sampled per interval)")
    ax.set_ylabel("CDF over ports and samples")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", help="the --out folder of megascale sim")
    ap.add_argument("--png-dir", help="where the PNGs go (default: the folder)")
    args = ap.parse_args()
    runs = runs_in(args.folder)
    if not runs:
        sys.exit(f"plot-sim: no fct_bins*.csv in {args.folder} (run megascale sim ... --out {args.folder})")
    dest = args.png_dir or args.folder
    os.makedirs(dest, exist_ok=True)
    for name, draw in (("fct_slowdown", plot_fct), ("throughput", plot_throughput), ("queue_cdf", plot_queues)):
        out = os.path.join(dest, f"{name}.png")
        if draw(args.folder, runs, out):
            print(f"wrote {out}")
        else:
            print(f"plot-sim: nothing to draw for {name}", file=sys.stderr)


if __name__ == "__main__":
    main()
