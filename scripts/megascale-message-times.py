#!/usr/bin/env python3
"""A net's time per message under NCCL, from the request timelines of the ranks of one host.

    megascale-message-times.py [--min-bytes N] TRACE.json [TRACE.json ...]

Each TRACE is a rank's MEGASCALE_TRACE_FILE (collectives/nccl/README.md, "Request timeline"). Every send
comm is paired with the receive comm of another rank that it feeds, and for each message of at least
--min-bytes (default 512 KiB: NCCL's ring steps; smaller ones are protocol ends; on a comm whose track
says it runs over S stripes, whose requests are stripe 0's part of each message, --min-bytes / S) the
net's time is the
receive's test()-done minus the later of the send's and the receive's posts. That is the start the Null
net's timing model uses (MEGASCALE_NULL_RECV_US), so the figures read straight against the curve the
check script's ceiling step measures with NULL_RECV_US. NCCL's bandwidth follows the mean more than the median.

Pairing: by the connection ids each comm's track carries (a send's "conn" and "peer_conn" are its
receive's "peer_conn" and "conn", which the plugin writes), in any file, the same one too. A send comm
without them (timelines from other writers) is paired by timing with the unpaired receive comm on
another rank, within 2 messages of its count, whose k-th receive completes soonest after the k-th send
is posted, by median; a pairing whose median is not positive is no pairing.

Prints one line for all pairs (saying how they were paired); where the timelines have the requests'
phases (the plugin's do), a line of where the time went, means over all messages and over those over
1 ms: to the send's first segment (its wait for an I/O thread, window or credit), that segment's trip to
the receiver, the rest of the bytes, and from the last byte to the test() that saw it done; then one
line per pair. Exit status 2 with a message naming the file on bad input, or when the files come from
several hosts (their clocks differ) or no pair is found.
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
    """{track: (name, role, ids, [[posted_us, seen_us, first_us, last_us]...] in post order)} of one rank's
    large messages (first and last: its transfer phase, its first and last segment sent or arrived, None
    without one); ids is (conn, peer_conn) where the track carries them, else None."""
    tracks = {e.get("tid"): e.get("args", {}) for e in doc["traceEvents"]
              if e.get("ph") == "M" and e.get("name") == "thread_name"}
    comms, last_of_lane = {}, {}
    for e in doc["traceEvents"]:
        if e.get("ph") != "X":
            continue
        if e.get("cat") == "phase" and e.get("name") == "transfer" and e.get("tid") in last_of_lane:
            # The plugin writes a request's phases right after it, on its lane: its first and last segment.
            last_of_lane.pop(e["tid"])[2:] = [e["ts"], e["ts"] + e["dur"]]
            continue
        if e.get("cat") != "request":
            continue
        track = e["tid"] // 100  # a comm's lanes are tracks 100 * comm + lane
        args = tracks.get(track * 100, {})
        # A striped comm's request is stripe 0's part: a message of min_bytes has min_bytes / stripes there.
        if e.get("args", {}).get("bytes", 0) < min_bytes / max(1, args.get("stripes", 1)):
            continue
        ids = (args["conn"], args["peer_conn"]) if "conn" in args and "peer_conn" in args else None
        msg = [e["ts"], e["ts"] + e["dur"], None, None]  # posted, test()-done, first and last segment
        last_of_lane[e["tid"]] = msg
        comms.setdefault(track, (args.get("name", "?"), e["name"], ids, []))[3].append(msg)
    for *_, msgs in comms.values():
        msgs.sort()
    return comms


def percentile(sorted_values, q):
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def stats_text(times):
    t = sorted(times)
    over = [x for x in t if x > 1000]
    return (f"{len(t)} messages: median {statistics.median(t):,.0f} us, mean {statistics.mean(t):,.0f}, "
            f"p90 {percentile(t, 0.9):,.0f}, p99 {percentile(t, 0.99):,.0f}, max {t[-1]:,.0f}; "
            f"{100 * sum(over) / (sum(t) or 1):.0f}% of the time in {len(over)} messages over 1 ms")


PARTS = ("to the send's first segment", "its trip", "the rest of the bytes", "to test()")


def parts_of(send, got):
    """A message's time split at the send's first segment, the receive's first and its last: each point
    held between the one before it and test()-done, so the parts sum to the message's time."""
    start, end = max(send[0], got[0]), got[1]
    points = [start]
    for t in (send[2], got[2], got[3]):
        points.append(min(max(t, points[-1]), end))
    points.append(end)
    return [b - a for a, b in zip(points, points[1:])]


def parts_text(split):
    return ", ".join(f"{name} {statistics.mean(part):,.0f}" for name, part in zip(PARTS, zip(*split)))


def pair_up(ranks):
    """([(label, send msgs, recv msgs)], how many were paired by id): each send comm with the receive
    comm it feeds."""
    recvs = [(r, track, name, ids, msgs) for r, comms in enumerate(ranks)
             for track, (name, role, ids, msgs) in comms.items() if role == "recv"]
    # A receive comm's ids, swapped, are the ids of the send comm that feeds it.
    by_ids = {(key[3][1], key[3][0]): key for key in recvs if key[3] is not None}
    used, pairs, exact = set(), [], 0
    for r, comms in enumerate(ranks):
        for track, (name, role, ids, sends) in sorted(comms.items()):
            if role != "send":
                continue
            match = by_ids.get(ids) if ids is not None else None
            if match is None:
                best = None
                for key in recvs:
                    rr, rtrack, _, _, got = key
                    if rr == r or (rr, rtrack) in used or abs(len(got) - len(sends)) > 2:
                        continue
                    delay = statistics.median(g[1] - s[0] for s, g in zip(sends, got))
                    if delay > 0 and (best is None or delay < best[0]):
                        best = (delay, key)
                match = best[1] if best is not None else None
            else:
                exact += 1
            if match is None:
                continue
            rr, rtrack, rname, _, got = match
            used.add((rr, rtrack))
            pairs.append((f"rank {r} {name} -> rank {rr} {rname}", sends, got))
    return pairs, exact


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
    pairs, exact = pair_up(ranks)
    if not pairs:
        print(f"megascale-message-times: no send comm paired with a receive comm, by connection id or (on "
              f"another rank) by timing (messages of {a.min_bytes} bytes or more)", file=sys.stderr)
        return 2
    lines, every, intervals, split = [], [], [], []
    for label, sends, got in pairs:
        times = [g[1] - max(s[0], g[0]) for s, g in zip(sends, got)]
        every += times
        split += [(t, parts_of(s, g)) for t, s, g in zip(times, sends, got) if None not in (s[2], g[2])]
        gaps = [y[0] - x[0] for x, y in zip(sends, sends[1:])]
        intervals += gaps
        lines.append(f"- {label}: {stats_text(times)}")
    how = "by connection id" if exact == len(pairs) else "by timing" if exact == 0 else f"{exact} by connection id"
    head = f"{len(pairs)} connections (paired {how}), {stats_text(every)}"
    if intervals:
        head += f"; NCCL posted a connection's sends {statistics.median(intervals):,.0f} us apart by median"
    print(head)
    if split:  # timelines with phases (the plugin's): where the time went, on average
        slow = [p for t, p in split if t > 1000]
        print(f"where it went, means in us: {parts_text([p for _, p in split])}" +
              (f"; in the {len(slow)} messages over 1 ms: {parts_text(slow)}" if slow else ""))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
