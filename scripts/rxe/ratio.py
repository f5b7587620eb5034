#!/usr/bin/env python3
"""megascale's verbs wire against perftest on the same rxe device, size by size.

    scripts/rxe/ratio.py BASELINE.jsonl [PERF.json...] [--wire verbs-rc|verbs-ud] [--guests 1|2]
                         [--sizes 64K,1M,...] [--json FILE] [--min-bw-ratio R]

BASELINE.jsonl: the perftest figures `scripts/test-rxe.sh --perftest` writes (OUT/one-guest/perftest.jsonl,
OUT/two-guests/perftest.jsonl): one JSON object a line (a `PERFTEST-JSON ` prefix is allowed), with tool
(ib_write_bw, ib_send_bw, ib_write_lat), mode (rc, ud), guests, size_bytes, and bw_avg_gbps and
bw_peak_gbps, or t_typical_us.
PERF.json: `megascale perf --wire verbs-rc|verbs-ud --json` (docs/CLI.md): its bw[] rows are compared
with ib_write_bw (verbs-rc) or ib_send_bw in UD mode (verbs-ud), its lat[] rows with ib_write_lat.
Several documents (a run per size) are read as one; without any the baseline alone is printed.

Each size is compared: megascale's figure, perftest's and the ratio megascale / perftest (bandwidth:
bw_average_gbps over bw_avg_gbps, peaks beside; latency: t_typical_us over t_typical_us, so a latency
ratio above 1 is slower). A size on one side and not the other is an error, as are two rows of one size.
UD is the exception: a UD message is at most the path MTU, so the baseline has one ib_send_bw row (at
the MTU) and every verbs-ud bandwidth row is compared with it.
--wire     the wire PERF.json ran (default: read from its config.wire or config.transport)
--guests   which baseline rows (default: the only guests value the baseline has for the tool)
--sizes    compare only these bandwidth sizes (bytes; K, M, G are powers of 1024)
--json     also write the comparison as JSON (`-`: standard output; the table then goes to standard error)
--min-bw-ratio  exit 1 when a bandwidth ratio is below R (the issue's bound is 0.8)
Exit status: 0, 1 below --min-bw-ratio, 2 bad input or a size missing (the message names it).
"""
import argparse
import json
import sys

BW_TOOL = {"verbs-rc": ("ib_write_bw", "rc"), "verbs-ud": ("ib_send_bw", "ud")}
LAT_TOOL = ("ib_write_lat", "rc")


class Refused(Exception):
    pass


def parse_size(text):
    units = {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = t[-1] if t and t[-1] in "KMG" else ""
    digits = t[:-1] if unit else t
    if not digits.isdigit() or int(digits) == 0:
        raise Refused(f"--sizes: '{text}' is not a size (bytes, or with K, M, G)")
    return int(digits) * units[unit]


def size_name(n):
    for unit, scale in (("MiB", 1024 ** 2), ("KiB", 1024)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def number(row, key, where):
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Refused(f"{where}: no number '{key}'")
    return value


def read_baseline(path):
    try:
        lines = sys.stdin.readlines() if path == "-" else open(path, encoding="utf-8").readlines()
    except OSError as e:
        raise Refused(f"baseline {path}: {e.strerror}") from None
    rows = []
    for n, line in enumerate(lines, 1):
        line = line.strip().removeprefix("PERFTEST-JSON ").strip()
        if not line:
            continue
        where = f"{path}:{n}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise Refused(f"{where}: not a JSON object ({e.msg})") from None
        if not isinstance(row, dict):
            raise Refused(f"{where}: not a JSON object")
        for key in ("tool", "mode"):
            if not isinstance(row.get(key), str):
                raise Refused(f"{where}: no string '{key}'")
        for key in ("guests", "size_bytes"):
            number(row, key, where)
        metric = "t_typical_us" if row["tool"] == LAT_TOOL[0] else "bw_avg_gbps"
        number(row, metric, where)
        row["_where"] = where
        rows.append(row)
    if not rows:
        raise Refused(f"baseline {path}: no perftest rows")
    return rows


def read_perf(path):
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as e:
        raise Refused(f"megascale document {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise Refused(f"megascale document {path}: not JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(doc, dict) or doc.get("command") != "perf":
        raise Refused(f"megascale document {path}: not a `megascale perf --json` document (command is not \"perf\")")
    if doc.get("status") != "ok":
        why = doc.get("error", f"status {doc.get('status')}")
        raise Refused(f"megascale document {path}: the run failed: {why}")
    for key in ("bw", "lat"):
        if not isinstance(doc.get(key, []), list):
            raise Refused(f"megascale document {path}: '{key}' is not a list")
    return doc


def wire_of(doc, path, given):
    config = doc.get("config") if isinstance(doc.get("config"), dict) else {}
    found = None
    for text in (config.get("wire"), config.get("transport")):
        if isinstance(text, str):
            for wire in BW_TOOL:
                if wire in text:
                    found = wire
                    break
        if found:
            break
    if given and found and given != found:
        raise Refused(f"--wire {given}, but {path} ran {found}")
    wire = given or found
    if not wire:
        raise Refused(f"{path} names no verbs wire in config.wire or config.transport: "
                      "give --wire verbs-rc or verbs-ud")
    return wire


def pick_guests(rows, tool, mode, guests, path):
    mine = [r for r in rows if r["tool"] == tool and r["mode"] == mode]
    if not mine:
        raise Refused(f"baseline {path} has no {tool} ({mode.upper()}) rows")
    if guests is None:
        values = sorted({r["guests"] for r in mine})
        if len(values) > 1:
            listed = ", ".join(map(str, values))
            raise Refused(f"baseline {path} has {tool} rows of {listed} guests: pick one with --guests")
        guests = values[0]
    mine = [r for r in mine if r["guests"] == guests]
    if not mine:
        raise Refused(f"baseline {path} has no {tool} ({mode.upper()}) rows of {guests} guest(s)")
    return mine, guests


def by_size(rows, what):
    out = {}
    for r in rows:
        size = r["size_bytes"]
        if size in out:
            raise Refused(f"{what}: two rows of {size_name(size)}")
        out[size] = r
    return out


def match_sizes(mine, base, sizes, mine_what, base_what):
    wanted = sizes if sizes else sorted(set(mine) | set(base))
    for size in wanted:
        name = f"size {size_name(size)} ({size} B)"
        if size not in mine and size in base:
            raise Refused(f"{name}: in {base_what} but not in {mine_what}")
        if size not in mine:
            raise Refused(f"{name}: in neither {mine_what} nor {base_what}")
        if size not in base:
            raise Refused(f"{name}: in {mine_what} but not in {base_what}")
    return wanted


def ratio(a, b, what):
    if b <= 0:
        raise Refused(f"{what}: the baseline's figure is {b}, no ratio")
    return round(a / b, 3)


def compare(args):
    rows = read_baseline(args.baseline)
    sizes = [parse_size(s) for s in args.sizes.split(",")] if args.sizes else []
    result = {"command": "rxe-ratio", "baseline": args.baseline, "bw": [], "lat": []}
    if not args.perfs:
        result["baseline_rows"] = [{k: v for k, v in r.items() if k != "_where"} for r in rows]
        return result
    # Several documents (one size a run, perftest's way) are read as one: their rows together.
    wire, bw_rows, lat_rows = None, [], []
    for path in args.perfs:
        doc = read_perf(path)
        this = wire_of(doc, path, args.wire)
        if wire and this != wire:
            raise Refused(f"{path} ran {this}, {args.perfs[0]} {wire}: one wire at a time")
        wire = this
        bw_rows += doc.get("bw", [])
        lat_rows += doc.get("lat", [])
    perf_name = args.perfs[0] if len(args.perfs) == 1 else "the megascale documents"
    owner = f"{perf_name}'s" if len(args.perfs) == 1 else "the megascale documents'"
    result.update(megascale=args.perfs, wire=wire)
    if not bw_rows and not lat_rows:
        raise Refused(f"{perf_name} has no bw or lat rows")
    for kind, mine_rows, (tool, mode) in (("bw", bw_rows, BW_TOOL[wire]), ("lat", lat_rows, LAT_TOOL)):
        if not mine_rows:
            continue
        base_rows, guests = pick_guests(rows, tool, mode, args.guests, args.baseline)
        result.setdefault("guests", guests)
        for i, r in enumerate(mine_rows):
            if not isinstance(r, dict):
                raise Refused(f"{perf_name}: {kind}[{i}] is not an object")
            number(r, "size_bytes", f"{perf_name}: {kind}[{i}]")
        mine = by_size(mine_rows, f"{perf_name} {kind}[]")
        base = by_size(base_rows, f"baseline {tool}")
        mine_what, base_what = f"{owner} {kind}[] rows", f"the baseline's {tool} rows"
        if kind == "bw" and mode == "ud":
            # One UD baseline row (the MTU-sized message) stands for every megascale size.
            if len(base) != 1:
                raise Refused(f"baseline {tool} UD: {len(base)} rows of {guests} guest(s), "
                              "want one (the MTU-sized message)")
            (base_size, base_row), = base.items()
            wanted = sizes if sizes else sorted(mine)
            for size in wanted:
                if size not in mine:
                    raise Refused(f"size {size_name(size)} ({size} B): not in {mine_what}")
            pairs = [(size, mine[size], base_row) for size in wanted]
            result["ud_baseline_size_bytes"] = base_size
        else:
            wanted = match_sizes(mine, base, sizes if kind == "bw" else [], mine_what, base_what)
            pairs = [(size, mine[size], base[size]) for size in wanted]
        for size, m, b in pairs:
            what = f"{tool} {size_name(size)}"
            if kind == "bw":
                m_avg = number(m, "bw_average_gbps", f"{perf_name}: bw row {size}")
                m_peak = number(m, "bw_peak_gbps", f"{perf_name}: bw row {size}")
                b_avg, b_peak = b["bw_avg_gbps"], number(b, "bw_peak_gbps", b["_where"])
                result["bw"].append({"size_bytes": size, "baseline_size_bytes": b["size_bytes"],
                                     "megascale_bw_average_gbps": m_avg, "baseline_bw_avg_gbps": b_avg,
                                     "ratio": ratio(m_avg, b_avg, what),
                                     "megascale_bw_peak_gbps": m_peak, "baseline_bw_peak_gbps": b_peak,
                                     # perftest's UD receiver reports no peak (0): no peak ratio.
                                     "peak_ratio": ratio(m_peak, b_peak, what) if b_peak > 0 else None})
            else:
                m_t = number(m, "t_typical_us", f"{perf_name}: lat row {size}")
                result["lat"].append({"size_bytes": size, "megascale_t_typical_us": m_t,
                                      "baseline_t_typical_us": b["t_typical_us"],
                                      "ratio": ratio(m_t, b["t_typical_us"], what)})
        result[f"{kind}_tool"] = tool
    return result


def fixed(value, digits, width):
    """value with DIGITS decimals right-aligned in WIDTH, or `-` when it is absent."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:>{width}.{digits}f}"
    return f"{'-':>{width}}"


def table(result, out):
    if "baseline_rows" in result:
        print(f"perftest on rxe ({result['baseline']}):", file=out)
        print(f"{'tool':<13}{'mode':<5}{'guests':>7}{'size':>10}{'iters':>8}{'avg Gb/s':>11}{'peak Gb/s':>11}"
              f"{'typical us':>12}", file=out)
        for r in result["baseline_rows"]:
            print(f"{r['tool']:<13}{r['mode']:<5}{r['guests']:>7}{size_name(r['size_bytes']):>10}"
                  f"{r.get('iterations', ''):>8}{fixed(r.get('bw_avg_gbps'), 3, 11)}"
                  f"{fixed(r.get('bw_peak_gbps'), 3, 11)}{fixed(r.get('t_typical_us'), 2, 12)}", file=out)
        return
    guests = result.get("guests")
    if result["bw"]:
        note = ""
        if "ud_baseline_size_bytes" in result:
            note = f" (perftest at {result['ud_baseline_size_bytes']} B, the largest UD message)"
        print(f"{result['wire']} against {result['bw_tool']}, {guests} guest(s){note}: bandwidth, Gb/s", file=out)
        print(f"{'size':>10}{'megascale avg':>15}{'perftest avg':>14}{'ratio':>8}{'megascale peak':>16}"
              f"{'perftest peak':>15}{'ratio':>8}", file=out)
        for r in result["bw"]:
            print(f"{size_name(r['size_bytes']):>10}{r['megascale_bw_average_gbps']:>15.3f}"
                  f"{r['baseline_bw_avg_gbps']:>14.3f}{r['ratio']:>8.2f}{r['megascale_bw_peak_gbps']:>16.3f}"
                  f"{r['baseline_bw_peak_gbps']:>15.3f}{fixed(r['peak_ratio'], 2, 8)}", file=out)
    if result["lat"]:
        print(f"{result['wire']} against {result['lat_tool']}, {guests} guest(s): typical one-way latency, us "
              "(ratio above 1: slower)", file=out)
        print(f"{'size':>10}{'megascale':>11}{'perftest':>10}{'ratio':>8}", file=out)
        for r in result["lat"]:
            print(f"{size_name(r['size_bytes']):>10}{r['megascale_t_typical_us']:>11.2f}"
                  f"{r['baseline_t_typical_us']:>10.2f}{r['ratio']:>8.2f}", file=out)


def main():
    p = argparse.ArgumentParser(description="megascale's verbs wire against perftest on rxe, per size")
    p.add_argument("baseline")
    p.add_argument("perfs", nargs="*", metavar="perf")
    p.add_argument("--wire", choices=sorted(BW_TOOL))
    p.add_argument("--guests", type=int, choices=(1, 2))
    p.add_argument("--sizes")
    p.add_argument("--json", dest="json_out")
    p.add_argument("--min-bw-ratio", type=float)
    args = p.parse_args()
    try:
        result = compare(args)
    except Refused as e:
        print(f"ratio.py: {e}", file=sys.stderr)
        return 2
    table(result, sys.stderr if args.json_out == "-" else sys.stdout)
    status = 0
    if args.min_bw_ratio is not None:
        result["min_bw_ratio"] = args.min_bw_ratio
        low = [r["size_bytes"] for r in result["bw"] if r["ratio"] < args.min_bw_ratio]
        result["below_min_bw_ratio"] = low
        if low:
            print(f"ratio.py: bandwidth ratio below {args.min_bw_ratio} at {', '.join(map(size_name, low))}",
                  file=sys.stderr)
            status = 1
    if args.json_out:
        text = json.dumps(result, indent=1) + "\n"
        if args.json_out == "-":
            sys.stdout.write(text)
        else:
            with open(args.json_out, "w", encoding="utf-8") as f:
                f.write(text)
    return status


if __name__ == "__main__":
    sys.exit(main())
