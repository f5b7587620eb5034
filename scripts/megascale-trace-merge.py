#!/usr/bin/env python3
"""Merges the request timelines of several ranks (MEGASCALE_TRACE_FILE) into one Chrome trace.

    megascale-trace-merge.py OUT.json TRACE.json [TRACE.json ...]
    megascale-trace-merge.py job.json timeline/rank_*.trace.json requests-*.json   # trainer + plugin

The trainer's per-rank timelines (megascale-train --timeline DIR: its GPU stages and collectives) have
the same form and clock, so they merge with each other and with the plugin's of the same processes.

Each rank's file is a Chrome trace JSON whose timestamps are CLOCK_MONOTONIC microseconds, a clock every
process of one host shares, so the ranks of a host line up as they are; each keeps its own pid (one
process track per rank in Perfetto or chrome://tracing). Files from different hosts merge too, but their
clocks differ: the merge refuses them unless --hosts-may-differ is given. Prints one line per input
(its host, pid, requests) and the output's event count; exit status 2 with a message naming the file on
bad input.
"""
import argparse
import json
import sys

import chrome_trace


def load(path):
    doc = chrome_trace.load(path)
    other = doc.get("otherData", {})
    if other.get("clock") != "CLOCK_MONOTONIC":
        raise ValueError(f"{path}: not a MegaScale request timeline (otherData.clock is not CLOCK_MONOTONIC)")
    return doc


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("traces", nargs="+")
    p.add_argument("--hosts-may-differ", action="store_true",
                   help="merge files from several hosts (their clocks are not aligned)")
    a = p.parse_args(argv)
    events, hosts, requests, not_kept = [], set(), 0, 0
    for path in a.traces:
        try:
            doc = load(path)
        except ValueError as e:
            print(f"megascale-trace-merge: {e}", file=sys.stderr)
            return 2
        other = doc["otherData"]
        pids = {e.get("pid") for e in doc["traceEvents"] if "pid" in e}
        hosts.add(other.get("host", "?"))
        requests += other.get("requests", 0)
        not_kept += other.get("requests_not_kept", 0)
        print(f"{path}: host {other.get('host', '?')}, pid {','.join(str(x) for x in sorted(pids))}, "
              f"{other.get('requests', 0)} requests")
        events.extend(doc["traceEvents"])
    if len(hosts) > 1 and not a.hosts_may_differ:
        print(f"megascale-trace-merge: the files come from {len(hosts)} hosts ({', '.join(sorted(hosts))}), "
              "whose clocks differ; give --hosts-may-differ to merge them anyway", file=sys.stderr)
        return 2
    merged = {"displayTimeUnit": "ns",
              "otherData": {"clock": "CLOCK_MONOTONIC", "hosts": sorted(hosts), "requests": requests,
                            "requests_not_kept": not_kept, "merged_from": a.traces},
              "traceEvents": events}
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(merged, f, separators=(",", ":"))
    print(f"{a.out}: {len(events)} events from {len(a.traces)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
