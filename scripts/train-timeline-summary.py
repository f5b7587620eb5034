#!/usr/bin/env python3
"""Where each rank's training steps went, from megascale-train --timeline traces.

    train-timeline-summary.py TRACE.json [TRACE.json ...]      # per-rank files or a merged one

Reads the trainer's Chrome traces (its GPU stages, collectives and pipeline sends and receives, one
process per rank, lane 0 the compute stream) and prints one JSON object per rank and one for the job:
the traced steps' mean GPU span, the compute time on the compute stream, the communication the compute
stream waited in (exposed) by group (tp, dp, pp, and the gradient norm's job-wide sum), the communication
on other streams (overlapped with it), and the rest of the span (idle: launch gaps, waits for a
pipeline receive). Exit status 2 with a message naming the file on bad input.
"""
import argparse
import json
import sys

import chrome_trace

GROUPS = (("tp ", "tp"), ("dp ", "dp"), ("pp ", "pp"), ("grad-norm", "norm"))


def group_of(name):
    for prefix, group in GROUPS:
        if name.startswith(prefix):
            return group
    return "other"


def summarize(events):
    names, ranks = {}, {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            names[e["pid"]] = e.get("args", {}).get("name", "")
        if e.get("ph") != "X" or e.get("cat") not in ("step", "compute", "communication"):
            continue
        r = ranks.setdefault(e["pid"], {"steps": 0, "span": 0.0, "compute": 0.0, "overlapped": 0.0,
                                        "exposed": {g: 0.0 for _, g in GROUPS}})
        ms = e["dur"] / 1000.0
        if e["cat"] == "step":
            r["steps"] += 1
            r["span"] += ms
        elif e.get("tid") != 0:
            r["overlapped"] += ms
        elif e["cat"] == "communication":
            r["exposed"][group_of(e["name"])] = r["exposed"].get(group_of(e["name"]), 0.0) + ms
        else:
            r["compute"] += ms
    out = []
    for pid in sorted(ranks):
        r = ranks[pid]
        n = max(r["steps"], 1)
        exposed = {g: round(v / n, 3) for g, v in r["exposed"].items()}
        span, compute = r["span"] / n, r["compute"] / n
        out.append({"pid": pid, "rank": names.get(pid, ""), "steps": r["steps"], "span_ms": round(span, 3),
                    "compute_ms": round(compute, 3), "exposed_comm_ms": exposed,
                    "exposed_comm_total_ms": round(sum(exposed.values()), 3),
                    "overlapped_comm_ms": round(r["overlapped"] / n, 3),
                    "idle_ms": round(span - compute - sum(exposed.values()), 3)})
    return out


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("traces", nargs="+")
    a = p.parse_args(argv)
    events = []
    for path in a.traces:
        try:
            events.extend(chrome_trace.load(path)["traceEvents"])
        except ValueError as e:
            print(f"train-timeline-summary: {e}", file=sys.stderr)
            return 2
    ranks = summarize(events)
    if not ranks or all(r["steps"] == 0 for r in ranks):
        print("train-timeline-summary: no traced steps (was the run made with --timeline?)", file=sys.stderr)
        return 2
    for r in ranks:
        print(json.dumps(r))
    # The job's step is its slowest rank's; exposed communication as that rank saw it.
    slowest = max(ranks, key=lambda r: r["span_ms"])
    print(json.dumps({"job": True, "ranks": len(ranks), "span_ms": slowest["span_ms"],
                      "slowest_rank": slowest["rank"], "exposed_comm_ms": slowest["exposed_comm_ms"],
                      "exposed_comm_total_ms": slowest["exposed_comm_total_ms"],
                      "mean_exposed_comm_total_ms": round(sum(r["exposed_comm_total_ms"] for r in ranks) / len(ranks), 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
