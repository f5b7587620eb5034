#!/usr/bin/env python3
"""bench-train-parallel.sh's table: each run against one rank, and its exposed communication against the
time its bytes need at the net's measured bandwidth.

    bench-table.py RESULTS.jsonl NET-BANDWIDTH.jsonl CONFIG.yaml [TRAIN ARGS...]

RESULTS: a line per run (name, layout, net, span_ms, tok_s, exposed_comm_ms by group, tp_bytes, dp_bytes),
"one" the one-rank run. NET-BANDWIDTH: megascale-coll's out-of-place busbw per net, ranks, group size,
collective and size. The time a group's bytes need ("expected"):
  TP (sequence parallel): half the bytes all-gathered, half reduce-scattered, each [N, C] (N the
    micro-batch's token rows, batch / dp x seq_len; C d_model; 2 bytes in bf16): busbw at that size;
  DP (ZeRO-2): fp32 gradients reduce-scattered (4 of each 6 bytes) and bf16 parameters all-gathered (2 of
    6), a collective a bucket (a layer, 28 MB of fp32 at 124M; the rest, 157 MB): busbw at the largest
    size measured.
busbw is the bytes a rank sends over the time, so bytes / busbw is the transfer time. "exposed / expected"
is 1 when the compute stream waited exactly as long as the transfers need, below 1 when compute hid some;
"less peer wait" takes out the time the rank's collectives waited for the group's last member to arrive
(train-timeline-summary.py's peer_wait_ms), which no bandwidth explains.
The pipeline's exposed time is mostly the bubble (waiting for the other stage's compute), not shown here.
Exit 2 with a message naming the file on an unreadable file or a config without the numbers it needs.
"""
import json
import math
import re
import sys


def arg(args, flag, default):
    for i, a in enumerate(args[:-1]):
        if a == flag:
            return int(args[i + 1])
    return default


def die(message):
    print(f"bench-table.py: {message}", file=sys.stderr)
    sys.exit(2)


def config_int(text, key, path):
    m = re.search(rf"^\s*{key}:\s*(\d+)", text, re.M)
    if not m:
        die(f"{path}: no {key} (a whole number) in the config")
    return int(m.group(1))


def json_lines(path):
    try:
        return [json.loads(line) for line in open(path)]
    except (OSError, ValueError) as e:
        die(f"{path}: {e}")


def busbw(rows, net, nproc, group, collective, size):
    """The busbw (GB/s) at SIZE bytes, log-interpolated between the sizes measured; None if none was."""
    pts = sorted((r["size"], r["busbw_gbs"]) for r in rows
                 if (r["net"], r["nproc"], r["group"], r["collective"]) == (net, nproc, group, collective)
                 and r["busbw_gbs"] > 0)
    if not pts:
        return None
    if size <= pts[0][0]:
        return pts[0][1]
    if size >= pts[-1][0]:
        return pts[-1][1]
    for (s0, b0), (s1, b1) in zip(pts, pts[1:]):
        if s0 <= size <= s1:
            f = (math.log(size) - math.log(s0)) / (math.log(s1) - math.log(s0))
            return b0 + f * (b1 - b0)
    return None


def main():
    results, bandwidth, config = sys.argv[1:4]
    args = sys.argv[4:]
    try:
        cfg = open(config).read()
    except OSError as e:
        die(f"{config}: {e}")
    batch = arg(args, "--batch-size", config_int(cfg, "batch_size", config))
    seq = arg(args, "--seq-len", config_int(cfg, "seq_len", config))
    d_model = config_int(cfg, "d_model", config)
    rows = json_lines(results)
    bw = json_lines(bandwidth) if bandwidth else []
    one = next((r for r in rows if r["name"] == "one"), None)
    print("| layout | net | ranks | GPU ms/step | tok/s | vs one rank | exposed comm ms (tp / dp / pp) |"
          " tp exposed / expected | dp exposed / expected |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        e = r["exposed_comm_ms"]
        ratio = f"{r['tok_s'] / one['tok_s']:.2f}x" if one else ""
        cells = []
        m = re.match(r"(\d+)x(\d+)x(\d+)", r["layout"])
        tp, pp, dp = (int(x) for x in m.groups())
        nproc = tp * pp * dp
        for group, size, bytes_, split in (
                ("tp", tp, r.get("tp_bytes", 0), (("all_gather", 0.5), ("reduce_scatter", 0.5))),
                ("dp", dp, r.get("dp_bytes", 0), (("reduce_scatter", 4 / 6), ("all_gather", 2 / 6)))):
            if size < 2 or not bytes_:
                cells.append("")
                continue
            msg = (batch // dp) * seq * d_model * 2 if group == "tp" else 1 << 40
            ms = 0.0
            for coll, share in split:
                b = busbw(bw, r["net"], nproc, size, coll, msg)
                if b is None:
                    ms = None
                    break
                ms += bytes_ * share / (b * 1e9) * 1e3
            if ms is None:
                cells.append("no bandwidth measured")
                continue
            cell = f"{e[group]:.1f} / {ms:.1f} = {e[group] / ms:.2f}"
            wait = r.get("peer_wait_ms", {}).get(group)
            if wait:  # the part spent waiting for a peer to arrive is not the bytes' time
                cell += f"; less {wait:.1f} peer wait: {(e[group] - wait) / ms:.2f}"
            cells.append(cell)
        print(f"| {r['layout']} | {r['net']} | {r['ranks']} | {r['span_ms']:.1f} | {r['tok_s']:,} | {ratio} | "
              f"{e['tp']:.1f} / {e['dp']:.1f} / {e['pp']:.1f} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
