#!/usr/bin/env python3
"""A net's time per message under NCCL, from the request timelines of the ranks of one host.

    megascale-message-times.py [--min-bytes N] TRACE.json [TRACE.json ...]

Each TRACE is a rank's MEGASCALE_TRACE_FILE (collectives/nccl/README.md, "Request timeline"). Every send
comm is paired with the receive comm of another rank that it feeds, and for each message of at least
--min-bytes (default 512 KiB: NCCL's ring steps; smaller ones are protocol ends) the net's time is the
receive's test()-done minus the later of the send's and the receive's posts. That is the start the Null
net's timing model uses (MEGASCALE_NULL_RECV_US), so the figures read straight against the curve the
check script's ceiling step measures with NULL_RECV_US (docs/PERFORMANCE.md, "What a net's message time
costs under NCCL"). NCCL's bandwidth follows the mean more than the median.

Pairing: the traces do not name the peer comm, so a send comm is paired with the unpaired receive comm
(on another rank, within 2 messages of its count) whose k-th receive completes soonest after the k-th
send is posted, by median; a pairing whose median is not positive is no pairing. Prints one line for all
pairs, then one per pair; exit status 2 with a message naming the file on bad input, or when the files
come from several hosts (their clocks differ) or no pair is found.
"""
import argparse
import importlib.util
import os
import statistics
import sys

_merge = importlib.util.spec_from_file_location(
    "megascale_trace_merge", os.path.join(os.path.dirname(os.path.abspath(__file__)), "megascale-trace-merge.py"))
trace_merge = importlib.util.module_from_spec(_merge)
_merge.loader.exec_module(trace_merge)


def comms_of(doc, min_bytes):
    """{track: (name, role, [(posted_us, seen_us)...] in post order)} of one rank's large messages."""
    names = {e.get("tid"): e.get("args", {}).get("name", "?") for e in doc["traceEvents"]
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    comms = {}
    for e in doc["traceEvents"]:
        if e.get("ph") != "X" or e.get("cat") != "request":
            continue
        if e.get("args", {}).get("bytes", 0) < min_bytes:
            continue
        track = e["tid"] // 100  # a comm's lanes are tracks 100 * comm + lane
        name = names.get(track * 100, "?")
        comms.setdefault(track, (name, e["name"], []))[2].append((e["ts"], e["ts"] + e["dur"]))
    for _, _, msgs in comms.values():
        msgs.sort()
    return comms


def percentile(sorted_values, q):
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def stats_text(times):
    t = sorted(times)
    over = [x for x in t if x > 1000]
    return (f"{len(t)} messages: median {statistics.median(t):,.0f} us, mean {statistics.mean(t):,.0f}, "
            f"p90 {percentile(t, 0.9):,.0f}, p99 {percentile(t, 0.99):,.0f}, max {t[-1]:,.0f}; "
            f"{100 * sum(over) / sum(t):.0f}% of the time in {len(over)} messages over 1 ms")


def pair_up(ranks):
    """[(label, send msgs, recv msgs)]: each send comm with the receive comm it feeds."""
    recvs = [(r, track, name, msgs) for r, comms in enumerate(ranks)
             for track, (name, role, msgs) in comms.items() if role == "recv"]
    used, pairs = set(), []
    for r, comms in enumerate(ranks):
        for track, (name, role, sends) in sorted(comms.items()):
            if role != "send":
                continue
            best = None
            for key in recvs:
                rr, rtrack, rname, got = key
                if rr == r or (rr, rtrack) in used or abs(len(got) - len(sends)) > 2:
                    continue
                delay = statistics.median(g[1] - s[0] for s, g in zip(sends, got))
                if delay > 0 and (best is None or delay < best[0]):
                    best = (delay, key)
            if best is None:
                continue
            rr, rtrack, rname, got = best[1]
            used.add((rr, rtrack))
            pairs.append((f"rank {r} {name} -> rank {rr} {rname}", sends, got))
    return pairs


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("traces", nargs="+")
    p.add_argument("--min-bytes", type=int, default=512 * 1024)
    a = p.parse_args(argv)
    ranks, hosts = [], set()
    for path in a.traces:
        try:
            doc = trace_merge.load(path)
        except ValueError as e:
            print(f"megascale-message-times: {e}", file=sys.stderr)
            return 2
        hosts.add(doc["otherData"].get("host", "?"))
        ranks.append(comms_of(doc, a.min_bytes))
    if len(hosts) > 1:
        print(f"megascale-message-times: the files come from {len(hosts)} hosts ({', '.join(sorted(hosts))}), "
              "whose clocks differ: a send and its receive cannot be timed across them", file=sys.stderr)
        return 2
    pairs = pair_up(ranks)
    if not pairs:
        print(f"megascale-message-times: no send comm paired with a receive comm of another rank "
              f"(messages of {a.min_bytes} bytes or more)", file=sys.stderr)
        return 2
    lines, every, intervals = [], [], []
    for label, sends, got in pairs:
        times = [g[1] - max(s[0], g[0]) for s, g in zip(sends, got)]
        every += times
        gaps = [y[0] - x[0] for x, y in zip(sends, sends[1:])]
        intervals += gaps
        lines.append(f"- {label}: {stats_text(times)}")
    head = f"{len(pairs)} connections, {stats_text(every)}"
    if intervals:
        head += f"; NCCL posted a connection's sends {statistics.median(intervals):,.0f} us apart by median"
    print(head)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
