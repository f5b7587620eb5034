#!/usr/bin/env python3
"""What the MegaScale NCCL plugin's stats files say about a run (MEGASCALE_STATS_DIR): for
check-nccl-plugin.sh, which reads them instead of NCCL's log.

    stats.py connections DIR NRANKS   every rank's file (one per process) has the plugin's "settings"
                                      record and connection records, sends and receives: NCCL used
                                      the plugin. Prints one line; exit 1 when not.
    stats.py layout DIR [--expect K=V,...]
                                      the layout in force, "wires=4,io_threads=0,lanes=4,stripes=2,
                                      stripe_bytes=524288 (auto: ...)", one line per distinct layout
                                      of the ranks; with --expect (a MEGASCALE_LAYOUT value, or
                                      "auto"), exit 1 unless every rank's layout has those values
                                      (auto: the plugin chose it).
    stats.py setting DIR NAME         the value of one knob in force (the first rank's).
    stats.py segment DIR              the engine segment size of the first connection, in bytes.
    stats.py retransmits DIR [--at-least N]
                                      segments the engines retransmitted (fast and after a timeout),
                                      summed over every connection's last record; with --at-least,
                                      exit 1 when fewer (a run with injected loss must recover).

The plugin writes DIR/megascale-nccl-HOST-rankN.jsonl per rank (procK without a launcher's rank), a log
that each process of that name appends to: its "settings" record first (every knob by name,
{"value", "source"}, its "pid" and "layout"), then "periodic"/"close" records per connection (with "conn"
and "role") and "wire" records. Each settings record starts a process; records before any belong to a
process without one. Exit status 2 when DIR has no readable stats.
"""
import glob
import json
import os
import sys

LAYOUT_KEYS = ("wires", "io_threads", "lanes", "stripes", "stripe_bytes")


class StatsError(Exception):
    pass


def processes(directory):
    """[(name, settings record or None, [connection records])] for each process of each .jsonl file of
    DIR: name is the file's path, with ", pid P" when the file holds several processes."""
    paths = sorted(glob.glob(os.path.join(directory, "*.jsonl")))
    if not paths:
        raise StatsError(f"no stats files (*.jsonl) in {directory}")
    out = []
    for path in paths:
        parts = [[None, []]]  # [settings, conns] per process, in the file's order
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as e:
                    raise StatsError(f"{path}:{n}: not a JSON record ({e})") from None
                event = record.get("event")
                if event == "settings":
                    if parts[-1][0] is not None or parts[-1][1]:
                        parts.append([None, []])
                    parts[-1][0] = record
                elif event in ("periodic", "close") and "conn" in record:
                    parts[-1][1].append(record)
        for settings, conns in parts:
            name = path
            if len(parts) > 1:
                name += f", pid {settings.get('pid', '?')}" if settings is not None else ", before a settings record"
            out.append((name, settings, conns))
    return out


def layout_text(layout):
    return ",".join(f"{k}={layout.get(k)}" for k in LAYOUT_KEYS) + f" ({layout.get('source', '?')})"


def parse_expect(text):
    if text == "auto":
        return {}
    want = {}
    for part in text.split(","):
        key, eq, value = part.partition("=")
        if not eq or key not in LAYOUT_KEYS or not value.isdigit():
            raise StatsError(f"--expect {text}: each part is KEY=NUMBER, KEY one of {', '.join(LAYOUT_KEYS)}")
        want[key] = int(value)
    return want


def connections(directory, nranks):
    procs = processes(directory)
    with_settings = [p for p in procs if p[1] is not None]
    problems = [f"{os.path.basename(p[0])} has no settings record" for p in procs if p[1] is None]
    if len(with_settings) != nranks:
        problems.append(f"{len(with_settings)} processes wrote the plugin's settings, not {nranks} (one per rank)")
    sends = recvs = 0
    for path, _, conns in with_settings:
        ids = {(c.get("role"), c.get("conn")) for c in conns}
        s = sum(1 for role, _ in ids if role == "send")
        r = sum(1 for role, _ in ids if role == "recv")
        if s == 0 or r == 0:
            problems.append(f"{os.path.basename(path)} shows {s} send and {r} receive connections")
        sends += s
        recvs += r
    if problems:
        print(f"the plugin's stats in {directory}: " + "; ".join(problems))
        return 1
    print(f"the plugin's stats files of all {nranks} ranks show its connections ({sends} send, {recvs} receive)")
    return 0


def layout(directory, expect):
    procs = [p for p in processes(directory) if p[1] is not None]
    if not procs:
        raise StatsError(f"no settings record in the stats files of {directory}")
    texts = []
    bad = []
    for path, settings, _ in procs:
        lay = settings.get("layout")
        if not isinstance(lay, dict):
            raise StatsError(f"{path}: the settings record has no layout")
        text = layout_text(lay)
        if text not in texts:
            texts.append(text)
        if expect is not None:
            want = parse_expect(expect)
            wrong = [f"{k}={lay.get(k)}" for k, v in want.items() if lay.get(k) != v]
            if expect == "auto" and not str(lay.get("source", "")).startswith("auto"):
                wrong.append(f"source {lay.get('source')}")
            if wrong:
                bad.append(f"{os.path.basename(path)}: {', '.join(wrong)}")
    print("\n".join(texts))
    if bad:
        print(f"the layout in force is not {expect}: " + "; ".join(bad))
        return 1
    return 0


def setting(directory, name):
    for path, settings, _ in processes(directory):
        if settings is None:
            continue
        entry = settings.get("settings", {}).get(name)
        if not isinstance(entry, dict) or "value" not in entry:
            raise StatsError(f"{path}: the settings record has no {name}")
        print(entry["value"])
        return 0
    raise StatsError(f"no settings record in the stats files of {directory}")


def segment(directory):
    for _, _, conns in processes(directory):
        for c in conns:
            if isinstance(c.get("segment_bytes"), int) and c["segment_bytes"] > 0:
                print(c["segment_bytes"])
                return 0
    raise StatsError(f"no connection record with segment_bytes in the stats files of {directory}")


def retransmits(directory, at_least):
    last = {}
    for path, _, conns in processes(directory):
        for c in conns:
            if "engine" in c:
                last[(path, c.get("role"), c.get("conn"))] = c["engine"]
    total = int(sum(e.get("retransmits_fast", 0) + e.get("retransmits_rto", 0) for e in last.values()))
    print(f"{total} segments retransmitted over {len(last)} connections")
    return 0 if at_least is None or total >= at_least else 1


def main(argv):
    try:
        if len(argv) == 3 and argv[0] == "connections" and argv[2].isdigit() and int(argv[2]) > 0:
            return connections(argv[1], int(argv[2]))
        if len(argv) in (2, 4) and argv[0] == "layout" and (len(argv) == 2 or argv[2] == "--expect"):
            return layout(argv[1], argv[3] if len(argv) == 4 else None)
        if len(argv) == 2 and argv[0] == "segment":
            return segment(argv[1])
        if len(argv) in (2, 4) and argv[0] == "retransmits" and (len(argv) == 2 or argv[2] == "--at-least"):
            return retransmits(argv[1], int(argv[3]) if len(argv) == 4 else None)
        if len(argv) == 3 and argv[0] == "setting":
            return setting(argv[1], argv[2])
    except (StatsError, OSError) as e:
        print(f"stats.py: {e}", file=sys.stderr)
        return 2
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
