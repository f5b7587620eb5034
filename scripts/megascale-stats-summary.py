#!/usr/bin/env python3
"""One line per run of the MegaScale NCCL plugin's transport counters, from its stats files.

    scripts/megascale-stats-summary.py LABEL=DIR [LABEL=DIR ...]

DIR is a run's MEGASCALE_STATS_DIR. The "close" records of every *.jsonl file in it (one per connection
that NCCL closed) are summed: timeouts, those undone as spurious, RTO and fast retransmissions,
tail-loss probes, duplicates received, the largest RTT. Retransmissions that all arrive as duplicates mean the host
stalled ACKs rather than lost data (collectives/nccl/README.md, "Stats"). Prints a markdown list; a
directory without records says so. Exit status 2 on a bad argument or an unreadable record.
"""
import glob
import json
import os
import sys

FIELDS = ("timeouts", "timeouts_spurious", "retransmits_rto", "retransmits_fast", "tail_probes",
          "duplicates_dropped")


def summarize(directory):
    totals = dict.fromkeys(FIELDS, 0)
    rtt_max_ns = 0
    records = 0
    for path in sorted(glob.glob(os.path.join(directory, "*.jsonl"))):
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{number}: not JSON ({e.msg})") from None
                engine = record.get("engine")
                if record.get("event") != "close" or not isinstance(engine, dict):
                    continue
                records += 1
                for k in FIELDS:
                    totals[k] += int(engine.get(k, 0))
                rtt_max_ns = max(rtt_max_ns, int(engine.get("rtt_max_ns", 0)))
    return records, totals, rtt_max_ns


def line(label, directory):
    records, t, rtt_max_ns = summarize(directory)
    if records == 0:
        return f"- {label}: no stats records in {directory}"
    timeouts = "1 timeout" if t["timeouts"] == 1 else f"{t['timeouts']} timeouts"
    return (f"- {label}: {timeouts} ({t['timeouts_spurious']} undone as spurious), "
            f"{t['retransmits_rto']} RTO and {t['retransmits_fast']} fast retransmissions, "
            f"{t['tail_probes']} tail probes, "
            f"{t['duplicates_dropped']} duplicates received, RTT max {rtt_max_ns / 1e6:.1f} ms "
            f"({records} connections)")


def main(argv):
    if not argv:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    out = []
    for arg in argv:
        label, sep, directory = arg.partition("=")
        if not sep or not label or not directory:
            print(f"megascale-stats-summary: '{arg}' is not LABEL=DIR", file=sys.stderr)
            return 2
        try:
            out.append(line(label, directory))
        except (OSError, ValueError) as e:
            print(f"megascale-stats-summary: {e}", file=sys.stderr)
            return 2
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
