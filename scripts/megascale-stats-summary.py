#!/usr/bin/env python3
"""One line per run of the MegaScale NCCL plugin's transport counters, from its stats files.

    scripts/megascale-stats-summary.py LABEL=DIR [LABEL=DIR ...]

DIR is a run's MEGASCALE_STATS_DIR. The "close" records of every *.jsonl file in it (one per connection
that NCCL closed) are summed: timeouts, those undone as spurious, RTO and fast retransmissions,
tail-loss probes, duplicates received, the sends that waited for the peer's receive (its credit: each
waited a one-way trip at least) out of all sends, the largest RTT. Retransmissions that all arrive as
duplicates mean the host stalled ACKs rather than lost data (collectives/nccl/README.md, "Stats"). Where the wires wrote their
"wire" records (when they stopped), their system calls per GiB each way and datagrams per call follow,
where the wires have I/O threads, the share of their awake time (not asleep in epoll) spent in rounds
that moved something (near 100%: the I/O threads are what limits; their CPU time cannot tell, since an
awake thread polls), and, when an I/O thread stalled (MEGASCALE_STALL_US), how much of its work its
siblings took over.
Where the records split NCCL's request latency into phases ("phases", collectives/nccl/README.md,
"Stats"), the line ends with a send's and a receive's time in microseconds: the median over the
connections of each one's median, whole and by phase (medians of parts need not add up to the whole's),
and, where the records have them, the tail: the median over the connections of each one's 99th
percentile, whole and of the transfer phase.
Prints a markdown list; a directory without records says so. Exit status 2 on a bad argument or an
unreadable record.
"""
import glob
import json
import os
import statistics
import sys

FIELDS = ("timeouts", "timeouts_spurious", "retransmits_rto", "retransmits_fast", "tail_probes",
          "duplicates_dropped", "sends_completed", "sends_failed", "sends_waited_for_credit")


PHASES = {"send": ("wait", "transfer", "ack", "report"), "recv": ("wait", "transfer", "report")}


WIRE_FIELDS = ("bytes_sent", "bytes_received", "send_syscalls", "recv_syscalls", "datagrams_sent",
               "datagrams_received", "rx_stolen", "tx_rerouted", "tx_stolen", "io_awake_ns", "io_busy_ns")


def count(record, key, where):
    """A record's counter: a whole number, 0 when absent (older records lack newer counters). The plugin
    writes its metrics as doubles (4.0), so a float with no fraction counts too."""
    value = record.get(key, 0)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where}: {key} is {json.dumps(value)}, not a whole number")
    return value


def summarize(directory):
    totals = dict.fromkeys(FIELDS, 0)
    wires = dict.fromkeys(WIRE_FIELDS, 0)
    wires["count"] = 0
    rtt_max_ns = 0
    records = 0
    # role -> "request" and each phase -> the connections' medians (ns)
    medians = {role: {} for role in PHASES}
    for path in sorted(glob.glob(os.path.join(directory, "*.jsonl"))):
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{number}: not JSON ({e.msg})") from None
                udp = record.get("udp")
                if record.get("event") == "wire" and isinstance(udp, dict):
                    wires["count"] += 1
                    for k in WIRE_FIELDS:
                        wires[k] += count(udp, k, f"{path}:{number}")
                    continue
                engine = record.get("engine")
                if record.get("event") != "close" or not isinstance(engine, dict):
                    continue
                records += 1
                for k in FIELDS:
                    totals[k] += count(engine, k, f"{path}:{number}")
                rtt_max_ns = max(rtt_max_ns, count(engine, "rtt_max_ns", f"{path}:{number}"))
                nccl, role = record.get("nccl"), record.get("role")
                phases = nccl.get("phases") if isinstance(nccl, dict) else None
                if role in PHASES and isinstance(phases, dict):
                    where = f"{path}:{number}"
                    m = medians[role]
                    m.setdefault("request", []).append(count(nccl, "request_latency_p50_ns", where))
                    m.setdefault("request_p99", []).append(count(nccl, "request_latency_p99_ns", where))
                    for name in PHASES[role]:
                        if not isinstance(phases.get(name), dict):
                            raise ValueError(f"{where}: phases has no '{name}' for a {role} connection")
                        m.setdefault(name, []).append(count(phases[name], "p50_ns", f"{where}: phases.{name}"))
                        m.setdefault(name + "_p99", []).append(count(phases[name], "p99_ns", f"{where}: phases.{name}"))
    return records, totals, rtt_max_ns, wires, medians


def per(a, b):
    return a / b if b else 0.0


def wire_text(w):
    # The wires' system calls against the bytes they moved (UDP payload: headers included).
    gib = 1 << 30
    return (f"; wires: {per(w['send_syscalls'], w['bytes_sent'] / gib):,.0f} send and "
            f"{per(w['recv_syscalls'], w['bytes_received'] / gib):,.0f} receive system calls per GiB, "
            f"{per(w['datagrams_sent'], w['send_syscalls']):.1f} datagrams per send call and "
            f"{per(w['datagrams_received'], w['recv_syscalls']):.1f} per receive call "
            f"({w['count']} {'wire' if w['count'] == 1 else 'wires'})" + busy_text(w) + takeover_text(w))


def busy_text(w):
    # Wires with I/O threads: how much of their awake (polling) time moved something.
    if w["io_awake_ns"] == 0:
        return ""
    return (f"; I/O threads busy {100 * w['io_busy_ns'] / w['io_awake_ns']:.0f}% of their "
            f"{w['io_awake_ns'] / 1e9:,.1f} s awake")


def takeover_text(w):
    # Only when it happened: most runs have no stalled I/O thread.
    if w["rx_stolen"] + w["tx_rerouted"] + w["tx_stolen"] == 0:
        return ""
    return (f"; stalled I/O threads' work taken over: {w['rx_stolen']:,} messages received, "
            f"{w['tx_rerouted']:,} packets rerouted, {w['tx_stolen']:,} datagrams sent from their queues")


def phases_text(medians):
    parts, tails = [], []
    for role, word in (("send", "send"), ("recv", "receive")):
        m = medians[role]
        if not m:
            continue
        us = {k: statistics.median(v) / 1e3 for k, v in m.items()}
        inner = ", ".join(f"{name} {us[name]:.0f}" for name in PHASES[role])
        parts.append(f"{word} {us['request']:.0f} us ({inner})")
        # Records from before the plugin wrote 99th percentiles read 0 there: no tail for them.
        if min(m["request_p99"]) > 0:
            tails.append(f"{word} {us['request_p99']:,.0f} us (transfer {us['transfer_p99']:,.0f})")
    if not parts:
        return ""
    text = "; a request's time, median of the connections' medians: " + "; ".join(parts)
    if tails:
        text += "; its 99th percentile, median of the connections': " + ", ".join(tails)
    return text


def line(label, directory):
    records, t, rtt_max_ns, wires, medians = summarize(directory)
    if records == 0:
        return f"- {label}: no stats records in {directory}"
    timeouts = "1 timeout" if t["timeouts"] == 1 else f"{t['timeouts']} timeouts"
    return (f"- {label}: {timeouts} ({t['timeouts_spurious']} undone as spurious), "
            f"{t['retransmits_rto']} RTO and {t['retransmits_fast']} fast retransmissions, "
            f"{t['tail_probes']} tail probes, "
            f"{t['duplicates_dropped']} duplicates received, {t['sends_waited_for_credit']} of "
            f"{t['sends_completed'] + t['sends_failed']} sends waited for a credit, "
            f"RTT max {rtt_max_ns / 1e6:.1f} ms "
            f"({records} connections)" + (wire_text(wires) if wires["count"] else "") + phases_text(medians))


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
