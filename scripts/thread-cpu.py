#!/usr/bin/env python3
"""Where a run's CPU time goes, by thread: for the bandwidth step of scripts/check-nccl-plugin.sh.

    scripts/thread-cpu.py watch [--start-after LOG TEXT] FILE PID [PID ...]
    scripts/thread-cpu.py table [--ranks N] LABEL=FILE[,FILE ...] [LABEL=FILE[,FILE ...] ...]

watch samples every thread of each PID and of its descendants (utime + stime from /proc/TID/stat) and
the host's /proc/stat every 0.2 s until every PID has exited, then writes FILE (JSON): the seconds of
CPU each thread used, from the first sample (or its start, if later) to the last sample that saw it (a
thread that started and ended between two samples is missed, and so is a thread's last 0.2 s at most),
the wall time, and the host's busy cores (user, system, softirq, steal and the rest) over the same time. It
exits 0 once the PIDs are gone, whatever their exit status. With --start-after, the window opens at
the first sample at which LOG holds TEXT (e.g. NCCL's "Init COMPLETE"), so that start-up is left out;
if TEXT never shows, the window is the whole run, and FILE says which ("window").

table groups the threads by name and prints a markdown table: one column per LABEL (a net), one row
per group, cores used over each file's window (CPU seconds / wall seconds) per rank (divided by
--ranks, default 1), the median over the LABEL's files (the rounds), and names the files whose window
was the whole run. The host's rows: busy, of which softirq, and of which steal (time a hypervisor gave
to other guests while this one's vCPUs wanted to run: on VMs the rounds with steal are a net's slow
ones, whichever net runs in them); when any file had steal, a line under the table gives each file's, in host CPUs.
Groups:
  - MegaScale wire thread   "msprogress" (the engine's thread of each wire)
  - MegaScale I/O threads   "msio<N>"
  - NCCL proxy progress     "NCCL Progress<N>" (NCCL names threads only with NCCL_SET_THREAD_NAME=1)
  - Socket helper threads   "NCCL Sock..."
  - other NCCL threads      "NCCL ..."
  - rank's other threads    anything else: the main thread, CUDA's, NCCL's when unnamed
Exit status 2 on a bad argument or an unreadable FILE, with a message naming it.
"""
import json
import os
import statistics
import sys
import time

PROC = "/proc"
INTERVAL_S = 0.2
GROUPS = (  # (name, test on the thread's name), first match wins
    ("MegaScale wire thread", lambda c: c.startswith("msprogress")),
    ("MegaScale I/O threads", lambda c: c.startswith("msio")),
    ("NCCL proxy progress", lambda c: c.startswith("NCCL Progress")),
    ("Socket helper threads", lambda c: c.startswith("NCCL Sock")),
    ("other NCCL threads", lambda c: c.startswith("NCCL")),
    ("rank's other threads", lambda c: True),
)


class Usage(Exception):
    pass


def read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None  # gone between listing and reading


def stat_fields(text):
    # /proc/TID/stat: "tid (comm) state ppid ...": comm may hold spaces and parentheses, so split after
    # the last ')'. Fields after it start at field 3 (state).
    rest = text[text.rindex(")") + 2:].split()
    return rest  # rest[0] = state, rest[1] = ppid, rest[11] = utime, rest[12] = stime


def host_ticks():
    # The "cpu" line: user nice system idle iowait irq softirq steal ...
    for line in (read(os.path.join(PROC, "stat")) or "").splitlines():
        if line.startswith("cpu "):
            v = [int(x) for x in line.split()[1:]]
            v += [0] * (8 - len(v))
            return {"user": v[0] + v[1], "system": v[2], "idle": v[3] + v[4], "irq": v[5], "softirq": v[6],
                    "steal": v[7]}
    raise Usage(f"no 'cpu' line in {PROC}/stat")


def descendants(roots):
    children = {}
    for entry in os.listdir(PROC):
        if not entry.isdigit():
            continue
        text = read(os.path.join(PROC, entry, "stat"))
        if text:
            children.setdefault(int(stat_fields(text)[1]), []).append(int(entry))
    seen, todo = [], list(roots)
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.append(pid)
        todo.extend(children.get(pid, []))
    return seen


def alive(pid):
    text = read(os.path.join(PROC, str(pid), "stat"))
    return text is not None and stat_fields(text)[0] != "Z"


class LogWatch:
    """Whether TEXT has appeared in LOG yet, reading only what was appended since the last look."""

    def __init__(self, log, text):
        self.log, self.text, self.offset, self.tail = log, text.encode(), 0, b""

    def seen(self):
        try:
            with open(self.log, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return False  # not written yet
        self.offset += len(data)
        found = self.text in self.tail + data
        self.tail = (self.tail + data)[-len(self.text):]
        return found


def watch(path, pids, start=None):
    tck = os.sysconf("SC_CLK_TCK")
    first, last, names = {}, {}, {}
    host0, t0 = host_ticks(), time.monotonic()
    window = "whole run"
    sample = 0
    while True:
        if start is not None and start.seen():
            # The window opens now: what every thread used so far, and the host's ticks, are left out.
            start, window = None, f"after '{start.text.decode()}' in {start.log}"
            first.clear()
            host0, t0, sample = host_ticks(), time.monotonic(), 0
        for pid in descendants(pids):
            task_dir = os.path.join(PROC, str(pid), "task")
            try:
                tids = os.listdir(task_dir)
            except OSError:
                continue
            for tid in tids:
                text = read(os.path.join(task_dir, tid, "stat"))
                if not text:
                    continue
                f = stat_fields(text)
                key = (pid, int(tid))
                ticks = int(f[11]) + int(f[12])
                # A thread already running at the first sample counts from there; one that started
                # later, from its start.
                first.setdefault(key, ticks if sample == 0 else 0)
                last[key] = ticks
                names[key] = text[text.index("(") + 1:text.rindex(")")]
        if not any(alive(p) for p in pids):
            break
        sample += 1
        time.sleep(INTERVAL_S)
    host1, wall = host_ticks(), time.monotonic() - t0
    delta = {k: host1[k] - host0[k] for k in host0}
    total = sum(delta.values()) or 1
    cpus = os.cpu_count() or 1
    cores = {k: round(v / total * cpus, 3) for k, v in delta.items() if k != "idle"}
    cores["busy"] = round(sum(v for k, v in delta.items() if k != "idle") / total * cpus, 3)
    result = {
        "window": window,
        "wall_s": round(wall, 3),
        "host_cpus": cpus,
        "host_cores": cores,
        "threads": [{"pid": k[0], "tid": k[1], "name": names[k], "cpu_s": (last[k] - first[k]) / tck}
                    for k in sorted(first)],
    }
    with open(path, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)


def group_of(name):
    return next(g for g, test in GROUPS if test(name))


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            run = json.load(f)
        wall = float(run["wall_s"])
        threads = run["threads"]
        host = run["host_cores"]
        window = run.get("window", "whole run")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise Usage(f"{path}: not a thread-cpu.py watch file ({e})") from None
    if wall <= 0:
        raise Usage(f"{path}: wall_s {wall} is not positive")
    return wall, threads, host, window


def table(args):
    ranks = 1
    if args[:1] == ["--ranks"]:
        if len(args) < 2 or not args[1].isdigit() or int(args[1]) < 1:
            raise Usage("--ranks needs a whole number, 1 or more")
        ranks, args = int(args[1]), args[2:]
    if not args:
        raise Usage("table needs LABEL=FILE[,FILE ...] arguments")
    columns = []  # (label, {row: median cores per rank})
    whole = []  # files whose window was the whole run
    steal = []  # (label, [host CPUs of steal, file by file])
    for arg in args:
        label, sep, files = arg.partition("=")
        if not sep or not label or not files:
            raise Usage(f"'{arg}' is not LABEL=FILE[,FILE ...]")
        per_file = []
        steal.append((label, []))
        for path in files.split(","):
            wall, threads, host, window = load(path)
            steal[-1][1].append(host.get("steal", 0.0))
            if window == "whole run":
                whole.append(path)
            rows = {"host busy (all processes, kernel included)": host.get("busy", 0.0) / ranks,
                    "of which softirq": host.get("softirq", 0.0) / ranks,
                    "of which steal (the hypervisor ran other guests)": host.get("steal", 0.0) / ranks}
            for g, _ in GROUPS:
                rows[g] = 0.0
            for t in threads:
                rows[group_of(str(t["name"]))] += float(t["cpu_s"]) / wall / ranks
            per_file.append(rows)
        columns.append((label, {r: statistics.median(f[r] for f in per_file) for r in per_file[0]}))
    rows = list(columns[0][1])
    out = ["| cores per rank | " + " | ".join(label for label, _ in columns) + " |",
           "|---|" + "---:|" * len(columns)]
    for r in rows:
        if all(c[r] == 0 for _, c in columns):
            continue  # a group no net has
        out.append(f"| {r} | " + " | ".join(f"{c[r]:.2f}" for _, c in columns) + " |")
    # Steal differs from round to round more than from net to net: each run's, so a round that had it
    # can be told from one that did not.
    if any(v > 0 for _, values in steal for v in values):
        out.append("")
        out.append("Steal in each file, in host CPUs (a hypervisor running other guests): " +
                   "; ".join(f"{label} " + " / ".join(f"{v:.2f}" for v in values) for label, values in steal))
    if whole:
        out.append("")
        out.append("Start-up included (the window's text never showed) in: " + ", ".join(whole))
    print("\n".join(out))


def main(argv):
    if len(argv) < 2 or argv[1] not in ("watch", "table"):
        raise Usage("the first argument is watch or table (see the top of scripts/thread-cpu.py)")
    if argv[1] == "watch":
        args, start = argv[2:], None
        if args[:1] == ["--start-after"]:
            if len(args) < 3 or not args[2]:
                raise Usage("--start-after needs LOG and a TEXT that is not empty")
            start, args = LogWatch(args[1], args[2]), args[3:]
        if len(args) < 2:
            raise Usage("watch needs FILE and at least one PID")
        if not all(a.isdigit() for a in args[1:]):
            raise Usage(f"watch: PIDs are numbers, got {' '.join(args[1:])}")
        watch(args[0], [int(a) for a in args[1:]], start)
    else:
        table(argv[2:])


if __name__ == "__main__":
    try:
        main(sys.argv)
    except Usage as e:
        print(f"thread-cpu.py: {e}", file=sys.stderr)
        sys.exit(2)
