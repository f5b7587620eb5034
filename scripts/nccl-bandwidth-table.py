#!/usr/bin/env python3
"""Bus-bandwidth (or latency) table of MegaScale against NCCL's Socket net, from nccl_check CSVs of
interleaved rounds.

    nccl-bandwidth-table.py --ranks 2 --goal 1.5 \\
        megascale=r1.csv,r2.csv socket=s1.csv,s2.csv socket-4x4=t1.csv,t2.csv
    nccl-bandwidth-table.py --metric time --ranks 2 megascale=... socket=... socket-4x4=...

Each NET=CSV,... names one CSV per round (tests/gpu/nccl_check --csv), in round order; the nets were run
one after another within each round (scripts/check-nccl-plugin.sh). Round k of MegaScale is compared with
round k of each Socket net: on a shared host two calls can differ by more than the nets do, so a ratio is
only taken between runs made minutes apart. Per collective and size the table gives each net's median
over the rounds, and MegaScale's ratio to each Socket net as the median of the per-round ratios with
their range. The summary gives, per collective, the range of MegaScale / tuned Socket ("socket-4x4")
over every size and round, and whether it reaches --goal in every pair.

With --metric time the table gives microseconds per collective (nccl_check's time_us) instead, and the
ratios are MegaScale's time over Socket's (above 1: MegaScale is slower); the summary gives their range
per collective against tuned Socket, with no goal.

With --variants the names are free (MegaScale under several settings, e.g. thread layouts, run in
interleaved rounds by scripts/check-nccl-plugin.sh's layouts step, or other nets: tuned Socket, the Null
net) and each is compared with the first:

    nccl-bandwidth-table.py --variants --ranks 4 default=a1.csv,a2.csv 2x3=b1.csv,b2.csv

With --variants and --goal, each variant's summary also gives, per collective, how many of its pairs
reach the goal over the first: the check script's ceiling step asks this of the Null net against Socket
4x4, where a collective whose Null pairs fall short has a goal that no net reaches at those channels.
Where two or more of the variants are the Null net ("null", untimed: 0 us, and "null-rN": each message
N us, the ceiling step's NULL_RECV_US; and again for "null-gdr" and "null-gdr-rN", the Null net on
NCCL's GPU buffers, NULL_GDR=1, and "null-gdrrx" and "null-gdrrx-rN", on GPU buffers for receives only,
NULL_GDR=rx), a last part gives, per collective, the goal as a time per
message: where goal x the first variant's bandwidth (median over sizes) lies on that curve, straight
in 1 / bandwidth between its points. Compare it with MegaScale's mean from
scripts/megascale-message-times.py: NCCL's bandwidth follows the mean.

Only the Python standard library; prints Markdown.
"""
import argparse
import csv
import statistics
import sys

NETS = ("megascale", "socket", "socket-4x4")


def read_round(path, column):
    """{(op, size_bytes): COLUMN} of one nccl_check CSV (the first type listed for a pair)."""
    rows = {}
    try:
        f = open(path, newline="")
    except OSError as e:
        sys.exit(f"nccl-bandwidth-table: {path}: {e.strerror}")
    with f:
        reader = csv.DictReader(f)
        missing = {"op", "size_bytes", column} - set(reader.fieldnames or [])
        if missing:
            sys.exit(f"nccl-bandwidth-table: {path}: not an nccl_check CSV (no column {sorted(missing)[0]})")
        for row in reader:
            key = (row["op"], int(row["size_bytes"]))
            try:
                rows.setdefault(key, float(row[column]))
            except ValueError:
                sys.exit(f"nccl-bandwidth-table: {path}:{reader.line_num}: {column} is '{row[column]}', not a number")
    return rows


def fmt(x):
    return "-" if x is None else f"{x:.2f}"


def ratio_cell(pairs):
    if not pairs:
        return "-"
    med = statistics.median(pairs)
    if len(pairs) == 1:
        return f"{med:.2f}"
    return f"{med:.2f} ({min(pairs):.2f}-{max(pairs):.2f})"


def row_keys(rounds):
    """The (op, size) rows of a list of rounds, in the order they first appear."""
    keys = []
    for r in rounds:
        for k in r:
            if k not in keys:
                keys.append(k)
    return keys


def median_over(rounds, key):
    """The median of `key` over the rounds that have the row, or None."""
    values = [r[key] for r in rounds if key in r]
    return statistics.median(values) if values else None


def paired_ratios(num, den, key):
    """num / den round by round, for the rounds where both have the row and den's value is > 0."""
    return [a[key] / b[key] for a, b in zip(num, den) if key in a and key in b and b[key] > 0]


def range_text(pairs):
    """'LO-HIx (median M)' of a list of ratios."""
    return f"{min(pairs):.2f}-{max(pairs):.2f}x (median {statistics.median(pairs):.2f})"


def goal_count(pairs, goal):
    """'reaches G in all N pairs' or 'below G in K of N pairs'."""
    below = sum(1 for x in pairs if x < goal)
    return (f"reaches {goal}x in all {len(pairs)} pairs" if below == 0 else
            f"below {goal}x in {below} of {len(pairs)} pairs")


def curve_time(curve, target):
    """Where bandwidth `target` lies on [(us, GB/s)...] (a net's time per message and NCCL's bandwidth
    over it), straight in 1 / bandwidth between neighbouring points: (us, None), or (None, text) when
    the target lies off the curve's ends."""
    curve = sorted(curve)
    if target > curve[0][1]:
        return None, f"above the curve's first point ({fmt(curve[0][1])} GB/s at {curve[0][0]} us): no message time"
    if target < curve[-1][1]:
        return None, (f"below the curve's last point ({fmt(curve[-1][1])} GB/s at {curve[-1][0]} us): beyond "
                      f"{curve[-1][0]} us, where the curve was not measured")
    for (t0, b0), (t1, b1) in zip(curve, curve[1:]):
        if b1 <= target <= b0:
            if b0 == b1:
                return t0, None
            return t0 + (t1 - t0) * (1 / target - 1 / b0) / (1 / b1 - 1 / b0), None
    return None, "not on the curve (it is not falling)"


def goal_times(medians, ref, names, keys, goal, base="null", what="the Null net's curve"):
    """The goal (goal x the first variant, median over a collective's rows) in message time, on the
    curve of the Null net's variants: BASE (no time: 0 us) and BASE-rN (N us a message); "null" on host
    buffers, "null-gdr" on GPU buffers, "null-gdrrx" on GPU buffers for receives only."""
    timed = {name: int(name.removeprefix(base + "-r")) for name in names
             if name.startswith(base + "-r") and name.removeprefix(base + "-r").isdigit()}
    if base in names:
        timed[base] = 0
    if len(timed) < 2:
        return
    print()
    print(f"The goal in message time: {goal}x {ref} (median over sizes) on {what} "
          f"({', '.join(sorted(timed, key=timed.get))}: us a message against bandwidth, straight in "
          "1 / bandwidth between points):")
    print()

    def over_sizes(name, op):
        values = [v for key in keys if key[0] == op for v in [medians(name, key)] if v is not None]
        return statistics.median(values) if values else None

    for op in dict.fromkeys(op for op, _ in keys):
        base = over_sizes(ref, op)
        curve = [(us, bw) for name, us in timed.items() for bw in [over_sizes(name, op)] if bw is not None]
        if base is None or len(curve) < 2:
            continue
        target = goal * base
        us, why = curve_time(curve, target)
        where = f"about {us:.0f} us a message" if why is None else why
        print(f"- {op}: {fmt(target)} GB/s, {where}")


def variants_table(items, ranks, metric, goal=None):
    """--variants: each NAME=CSV,... against the first, paired round by round."""
    column = "busbw_gbps" if metric == "busbw" else "time_us"
    rounds = {}
    for item in items:
        name, sep, files = item.partition("=")
        if not sep or not name or not files:
            sys.exit(f"nccl-bandwidth-table: '{item}': expected NAME=CSV[,CSV...]")
        if name in rounds:
            sys.exit(f"nccl-bandwidth-table: '{name}' given twice")
        rounds[name] = [read_round(p, column) for p in files.split(",")]
    names = list(rounds)
    if len(names) < 2:
        sys.exit("nccl-bandwidth-table: --variants needs two or more NAME=CSV,... to compare")
    ref = names[0]
    n_rounds = len(rounds[ref])
    for name in names[1:]:
        if len(rounds[name]) != n_rounds:
            sys.exit(f"nccl-bandwidth-table: '{name}' has {len(rounds[name])} rounds, '{ref}' {n_rounds}: "
                     "pairs are taken round by round")
    keys = row_keys(rounds[ref])

    def median(name, key):
        return median_over(rounds[name], key)

    def paired(name, key):
        return paired_ratios(rounds[name], rounds[ref], key)

    what = "Bus bandwidth (GB/s)" if metric == "busbw" else "Time per collective (us)"
    print(f"# {what} of each net or setting, {ranks} ranks, fp32, over the net (P2P/SHM off), "
          f"median of {n_rounds} round{'s' if n_rounds != 1 else ''}")
    print()
    print("| collective | size (B) | " + " | ".join(names) + " | " +
          " | ".join(f"{n} / {ref}" for n in names[1:]) + " |")
    print("|---|---:|" + "---:|" * (2 * len(names) - 1))
    for key in keys:
        op, size = key
        print(f"| {op} | {size} | " + " | ".join(fmt(median(n, key)) for n in names) + " | " +
              " | ".join(ratio_cell(paired(n, key)) for n in names[1:]) + " |")
    print()
    print(f"Each against {ref}, every size and round" +
          (" (above 1: slower):" if metric == "time" else " (above 1: more bandwidth):"))
    print()
    for name in names[1:]:
        pairs = [x for key in keys for x in paired(name, key)]
        if pairs:
            print(f"- {name}: {range_text(pairs)}")
        if goal is None or metric != "busbw":
            continue
        for op in dict.fromkeys(op for op, _ in keys):
            op_pairs = [x for key in keys if key[0] == op for x in paired(name, key)]
            if op_pairs:
                print(f"  - {op}: {range_text(op_pairs)}; {goal_count(op_pairs, goal)}")
    if goal is not None and metric == "busbw":
        goal_times(median, ref, names, keys, goal)
        goal_times(median, ref, names, keys, goal, "null-gdr", "the Null net's curve with GPU buffers")
        goal_times(median, ref, names, keys, goal, "null-gdrrx",
                   "the Null net's curve with GPU buffers for receives only")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--goal", type=float, default=None,
                    help="MegaScale / tuned Socket to reach (default 1.5; with --variants, none unless given)")
    ap.add_argument("--metric", choices=("busbw", "time"), default="busbw",
                    help="busbw: bus bandwidth, GB/s (default); time: microseconds per collective")
    ap.add_argument("--variants", action="store_true",
                    help="free NAME=CSV,... (MegaScale under several settings), each against the first")
    ap.add_argument("nets", nargs="+", metavar="NET=CSV,...")
    args = ap.parse_args()
    if args.variants:
        variants_table(args.nets, args.ranks, args.metric, args.goal)
        return
    if args.goal is None:
        args.goal = 1.5

    column = "busbw_gbps" if args.metric == "busbw" else "time_us"
    rounds = {}
    for item in args.nets:
        net, sep, files = item.partition("=")
        if not sep or net not in NETS or not files:
            sys.exit(f"nccl-bandwidth-table: '{item}': expected NET=CSV[,CSV...] with NET one of {', '.join(NETS)}")
        rounds[net] = [read_round(p, column) for p in files.split(",")]
    if "megascale" not in rounds:
        sys.exit("nccl-bandwidth-table: no megascale=... CSVs given")

    keys = row_keys(rounds["megascale"])

    def median(net, key):
        """NET's median over the rounds that have the row, or None."""
        return median_over(rounds.get(net, []), key)

    def paired(net, key):
        """MegaScale / NET, round by round, for the rounds where both have the row and NET is > 0."""
        return paired_ratios(rounds["megascale"], rounds.get(net, []), key)

    n_rounds = len(rounds["megascale"])
    what = "Bus bandwidth (GB/s)" if args.metric == "busbw" else "Time per collective (us)"
    print(f"# {what}, {args.ranks} ranks, fp32, over the net (P2P/SHM off), "
          f"median of {n_rounds} round{'s' if n_rounds != 1 else ''}")
    print()
    print("| collective | size (B) | MegaScale | Socket | Socket 4x4 | MegaScale / Socket | MegaScale / Socket 4x4 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for key in keys:
        op, size = key
        med = {net: median(net, key) for net in NETS}
        print(f"| {op} | {size} | {fmt(med['megascale'])} | {fmt(med['socket'])} | {fmt(med['socket-4x4'])} | "
              f"{ratio_cell(paired('socket', key))} | {ratio_cell(paired('socket-4x4', key))} |")

    if "socket-4x4" not in rounds:
        return
    print()
    if args.metric == "time":
        print("MegaScale's time / Socket 4x4's (the tuned baseline; above 1: MegaScale is slower), every size and round:")
    else:
        print(f"MegaScale / Socket 4x4 (the tuned baseline), every size and round, against the goal of {args.goal}x:")
    print()
    for op in dict.fromkeys(op for op, _ in keys):
        pairs = [x for key in keys if key[0] == op for x in paired("socket-4x4", key)]
        if not pairs:
            continue
        line = f"- {op}: {range_text(pairs)}"
        if args.metric == "busbw":
            line += "; " + goal_count(pairs, args.goal)
        print(line)

if __name__ == "__main__":
    main()
