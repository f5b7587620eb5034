#!/usr/bin/env python3
"""Where each rank's training steps went, from megascale-train --timeline traces.

    train-timeline-summary.py TRACE.json [TRACE.json ...]      # per-rank files or a merged one

Reads the trainer's Chrome traces (its GPU stages, collectives and pipeline sends and receives, one
process per rank, lane 0 the compute stream) and prints one JSON object per rank and one for the job:
the traced steps' mean GPU span, the compute time on the compute stream, the exposed communication by
group (tp, dp, pp, and the gradient norm's job-wide sum: the compute stream's own, and other streams'
while the compute stream was idle), the other streams' communication while it was busy (overlapped),
and the rest of the span (idle: launch gaps, host synchronisations). Exit status 2 with a message naming the file on bad input.

With the traces of a whole job, each tp and dp collective is also matched across its group (ranks named
"rank R (tp T, dp D, pp P)"; the k-th of one name on one lane of each member, in time order), and a
rank's peer wait is the part of its collectives before the group's last member started the same one:
time spent waiting for a peer to arrive (it computed longer, or the shared GPU ran it later), not
moving bytes. The traces share the host's CLOCK_MONOTONIC; each step's start is read within the
synchronisation's wake-up of its end.
"""
import argparse
import json
import re
import sys

import chrome_trace

GROUPS = (("tp ", "tp"), ("dp ", "dp"), ("pp ", "pp"), ("grad-norm", "norm"))


def group_of(name):
    for prefix, group in GROUPS:
        if name.startswith(prefix):
            return group
    return "other"


def union(intervals):
    """Sorted disjoint union of (begin, end) pairs."""
    out = []
    for b, e in sorted(i for i in intervals if i[1] > i[0]):
        if out and b <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([b, e])
    return out


def covered(busy, b, e):
    return sum(max(0.0, min(e, y) - max(b, x)) for x, y in busy)


COORDS = re.compile(r"rank (\d+) \(tp (\d+), dp (\d+), pp (\d+)\)")


def peer_waits(events, names):
    """Per pid, per group (tp, dp): the summed time its collectives waited for the group's last member."""
    coords = {pid: tuple(int(x) for x in m.groups()) for pid, n in names.items() if (m := COORDS.match(n))}
    seqs = {}  # (group kind, group key, name, lane) -> pid -> [(start, dur)]
    for e in events:
        if e.get("ph") != "X" or e.get("cat") != "communication" or e["pid"] not in coords:
            continue
        g = group_of(e["name"])
        if g not in ("tp", "dp"):
            continue
        _, tp, dp, pp = coords[e["pid"]]
        key = (g, (dp, pp) if g == "tp" else (tp, pp), e["name"], e.get("tid"))
        seqs.setdefault(key, {}).setdefault(e["pid"], []).append((e["ts"] / 1000.0, e["dur"] / 1000.0))
    out = {pid: {"tp": 0.0, "dp": 0.0} for pid in coords}
    for (g, _, _, _), members in seqs.items():
        if len(members) < 2 or len({len(v) for v in members.values()}) != 1:
            continue  # one member traced, or the members' counts differ: nothing to match
        for pid in members:
            members[pid].sort()
        for k in range(len(next(iter(members.values())))):
            latest = max(v[k][0] for v in members.values())
            for pid, v in members.items():
                start, dur = v[k]
                out[pid][g] += min(dur, max(0.0, latest - start))
    return out


def summarize(events):
    """Per rank: exposed communication as trainer/include/megascale/trainer/exposure.h counts it. The
    compute stream's (lane 0) is exposed whole; another lane's is overlapped where lane 0 was busy and
    exposed where it was idle (a lane's own overlaps, per group, counted once)."""
    names, ranks = {}, {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            names[e["pid"]] = e.get("args", {}).get("name", "")
        if e.get("ph") != "X" or e.get("cat") not in ("step", "compute", "communication"):
            continue
        r = ranks.setdefault(e["pid"], {"steps": 0, "span": 0.0, "compute": 0.0, "busy": [], "lane0_comm": [],
                                        "other": {}})
        ms = e["dur"] / 1000.0
        at = (e["ts"] / 1000.0, e["ts"] / 1000.0 + ms)
        if e["cat"] == "step":
            r["steps"] += 1
            r["span"] += ms
        elif e.get("tid") != 0:
            r["other"].setdefault((e.get("tid"), group_of(e["name"])), []).append(at)
        elif e["cat"] == "communication":
            r["busy"].append(at)
            r["lane0_comm"].append((group_of(e["name"]), ms))
        else:
            r["busy"].append(at)
            r["compute"] += ms
    waits = peer_waits(events, names)
    out = []
    for pid in sorted(ranks):
        r = ranks[pid]
        n = max(r["steps"], 1)
        exposed = {g: 0.0 for _, g in GROUPS}
        for g, ms in r["lane0_comm"]:
            exposed[g] = exposed.get(g, 0.0) + ms
        busy = union(r["busy"])
        overlapped = 0.0
        for (_, g), intervals in r["other"].items():
            for b, e in union(intervals):
                inside = covered(busy, b, e)
                overlapped += inside
                exposed[g] = exposed.get(g, 0.0) + (e - b) - inside
        exposed = {g: round(v / n, 3) for g, v in exposed.items()}
        span, compute = r["span"] / n, r["compute"] / n
        out.append({"pid": pid, "rank": names.get(pid, ""), "steps": r["steps"], "span_ms": round(span, 3),
                    "compute_ms": round(compute, 3), "exposed_comm_ms": exposed,
                    "exposed_comm_total_ms": round(sum(exposed.values()), 3),
                    "overlapped_comm_ms": round(overlapped / n, 3),
                    "peer_wait_ms": {g: round(v / n, 3) for g, v in waits.get(pid, {"tp": 0.0, "dp": 0.0}).items()},
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
                      "peer_wait_ms": slowest["peer_wait_ms"],
                      "mean_exposed_comm_total_ms": round(sum(r["exposed_comm_total_ms"] for r in ranks) / len(ranks), 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
