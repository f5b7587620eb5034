#!/usr/bin/env python3
"""megascale coll against nccl-tests from both tools' -J files (bench-coll-nccl-tests.sh's comparison).

    compare.py rows OUT RANKS NET COLLECTIVE ROUNDS   # a JSON line per size from OUT/RANKS-NET-COLL-K.{nccl-tests,coll}.json
    compare.py table RESULTS.jsonl                    # the markdown table and the verdict line

Per size and tool: the median over the rounds of the out-of-place time and busbw, and the busbw's spread
(largest over smallest round: how far the tool moved against itself). The ratios are coll / nccl-tests.
A size is within the goal when both ratios are within 2%; it can only be judged where each tool's own
spread is within 2% too, which the verdict line counts. Exit 2 with a message on unreadable input.
"""
import json
import statistics
import sys


def die(message):
    print(f"compare.py: {message}", file=sys.stderr)
    sys.exit(2)


def rows_of(path):
    """Size -> out-of-place placement of one -J document; {} when the file is missing (a failed run)."""
    try:
        doc = json.load(open(path))
    except OSError:
        return {}
    except ValueError as e:
        die(f"{path}: not JSON ({e})")
    # nccl-tests nests its results under its run; megascale coll writes them at the top level.
    found = doc.get("results") or next(
        (v["results"] for v in doc.values() if isinstance(v, dict) and "results" in v), [])
    return {int(r["size"]): r["out_of_place"] for r in found}


def spread(values):
    values = [v for v in values if v]
    return max(values) / min(values) if len(values) > 1 else None


def rows(out, n, net, coll, rounds):
    runs = {tool: [rows_of(f"{out}/{n}-{net}-{coll}-{k}.{tool}.json") for k in range(1, rounds + 1)]
            for tool in ("nccl-tests", "coll")}
    sizes = sorted(set().union(*[set(r) for r in runs["nccl-tests"] + runs["coll"]]))
    for size in sizes:
        med, spr = {}, {}
        for tool, per_round in runs.items():
            times = [r[size]["time"] for r in per_round if size in r]
            bws = [r[size]["bus_bw"] for r in per_round if size in r]
            med[tool] = (statistics.median(times) if times else None, statistics.median(bws) if bws else None)
            spr[tool] = spread(bws)
        (tn, bn), (tc, bc) = med["nccl-tests"], med["coll"]
        print(json.dumps({"ranks": n, "net": net, "collective": coll, "size": size, "rounds": rounds,
                          "nccl_tests_time_us": tn, "coll_time_us": tc, "nccl_tests_busbw": bn, "coll_busbw": bc,
                          "time_ratio": tc / tn if tn and tc else None,
                          "busbw_ratio": bc / bn if bn and bc else None,
                          "nccl_tests_busbw_spread": spr["nccl-tests"], "coll_busbw_spread": spr["coll"]}))


def table(path):
    try:
        rs = [json.loads(line) for line in open(path)]
    except (OSError, ValueError) as e:
        die(f"{path}: {e}")
    print("| ranks | net | collective | size (B) | nccl-tests time (us) | coll time (us) | time ratio |"
          " nccl-tests busbw | coll busbw | busbw ratio | busbw spread: nccl-tests; coll |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    f = lambda v, spec: "n/a" if v is None else format(v, spec)
    for r in rs:
        print(f"| {r['ranks']} | {r['net']} | {r['collective']} | {r['size']} | {f(r['nccl_tests_time_us'], '.2f')} | "
              f"{f(r['coll_time_us'], '.2f')} | {f(r['time_ratio'], '.3f')} | {f(r['nccl_tests_busbw'], '.2f')} | "
              f"{f(r['coll_busbw'], '.2f')} | {f(r['busbw_ratio'], '.3f')} | "
              f"{f(r.get('nccl_tests_busbw_spread'), '.3f')}; {f(r.get('coll_busbw_spread'), '.3f')} |")
    near = lambda v: v is not None and abs(v - 1) <= 0.02
    within = [r for r in rs if near(r["time_ratio"]) and near(r["busbw_ratio"])]
    quiet = [r for r in rs if r.get("nccl_tests_busbw_spread") and r.get("coll_busbw_spread")
             and r["nccl_tests_busbw_spread"] <= 1.02 and r["coll_busbw_spread"] <= 1.02]
    print(f"\n{len(within)} of {len(rs)} sizes within 2% on both time and busbw; {len(quiet)} sizes where each "
          f"tool's own busbw moved 2% or less between rounds (only those can be judged)")


def main(argv):
    if len(argv) == 6 and argv[0] == "rows":
        rows(argv[1], int(argv[2]), argv[3], argv[4], int(argv[5]))
    elif len(argv) == 2 and argv[0] == "table":
        table(argv[1])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
