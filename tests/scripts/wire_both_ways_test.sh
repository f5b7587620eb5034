#!/usr/bin/env bash
# scripts/wire-both-ways.sh on this host's loopback with a small layout: the layout is read from the
# plugin's stats files of a run (a hand-made settings record and connection), each depth in DEPTHS runs `megascale perf -b` and prints its line
# (GB/s each way per rank, a message's time by Little's law, which the line's own figures must agree
# with, and the I/O threads' busy share), then the plugin's own wire at depth 1 (plugin-check steps_both_ways, a process a rank, with
# that layout, which its own stats files must show), and bad arguments and stats without the plugin's
# settings or connections are refused with exit status 2.
# Usage: wire_both_ways_test.sh SOURCE_DIR MEGASCALE_BINARY PLUGIN_SO
set -uo pipefail
src=$1 megascale=$2 plugin=$3
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
script=$src/scripts/wire-both-ways.sh
mkdir -p "$dir/build/cli" "$dir/build/collectives/nccl"
ln -s "$(realpath "$megascale")" "$dir/build/cli/megascale"
ln -s "$(realpath "$plugin")" "$dir/build/collectives/nccl/libnccl-net-megascale.so"

# A run's stats as the plugin writes them: one wire of 1 + 1 I/O threads, 2 lanes, segments of 61440 B.
log=$dir/stats
mkdir -p "$log"
cat > "$log/megascale-nccl-h-1.jsonl" <<'EOF'
{"event":"settings","host":"h","pid":1,"settings":{"MEGASCALE_CC":{"value":"hybrid -> builtin:hybrid","source":"default"}},"layout":{"wires":1,"io_threads":1,"lanes":2,"stripes":1,"stripe_bytes":1048576,"source":"auto: test"}}
{"event":"periodic","pid":1,"role":"send","conn":"0x1","lanes":2,"segment_bytes":61440}
EOF

OUT=$dir/out SECONDS_PER_RUN=1 DEPTHS="1 2" "$script" "$log" 2 "$dir/build" > "$dir/lines" 2> "$dir/err" ||
  fail "a run: $(cat "$dir/lines" "$dir/err")"
cat "$dir/lines"
grep -qF "wire both ways (1 process x 2 wires x (1 + 1 I/O threads), as 2 ranks x 1 wire; lanes 2, segment 61440 B, cc hybrid;" \
  "$dir/lines" || fail "the heading"
for depth in 1 2; do
  [[ -s $dir/out/wire-t$depth-0.json ]] || fail "no JSON for depth $depth"
done
# Each depth's line: its GB/s and message time agree (one process: a connection moves what a rank does),
# and its summed Gb/s is the JSON's.
python3 - "$dir/lines" "$dir/out" <<'EOF' || fail "the depth lines"
import json, re, sys
lines = open(sys.argv[1]).read()
for depth in (1, 2):
    m = re.search(rf"^- {depth} messages? of 1 MiB in flight a connection \(-t {depth}\): ([0-9.]+) GB/s each way "
                  rf"per rank, ([0-9]+) us a message; ([0-9.]+) Gb/s summed; I/O threads busy ([0-9]+)% of "
                  rf"their awake time$", lines, re.M)
    assert m, f"no line for depth {depth}"
    rate, us, summed, busy = float(m[1]), int(m[2]), float(m[3]), int(m[4])
    row = json.load(open(f"{sys.argv[2]}/wire-t{depth}-0.json"))["bw"][0]
    gbps = row["bw_average_gbps"]  # both directions of the one pair
    assert rate > 0 and us > 0, m[0]
    assert abs(summed - gbps) < 0.051 and abs(rate - gbps / 8 / 2) < 0.0051, m[0]
    # Little's law from the unrounded rate: one process, so a connection moves what a rank does.
    assert abs(us - depth * 1048576 / (gbps / 16 * 1e3)) <= 1, m[0]
    # The I/O threads' busy share is the JSON's (under a loaded host it can round to 0%).
    c = row["counters"]
    assert c["io_awake_ns"] > 0 and abs(busy - 100 * c["io_busy_ns"] / c["io_awake_ns"]) <= 0.51, m[0]
# The plugin's line: the medians of the two processes' own results, which ran with the run's layout.
meds = []
for r in (0, 1):
    log = open(f"{sys.argv[2]}/plugin-{r}.log").read()
    m = re.search(r"PASS steps_both_ways .* ([0-9.]+) us median", log)
    assert m, f"plugin-{r}.log: {log}"
    meds.append(float(m[1]))
m = re.search(r"^- the plugin's own threaded wire, 1 message of 1 MiB in flight each way \(megascale plugin-check "
              r"--case steps_both_ways, 2 processes as the ranks\): ([0-9]+) us a message by median "
              r"\(([0-9]+)-([0-9]+) by process\), p90 ([0-9]+) us$", lines, re.M)
assert m, "no plugin line"
assert (int(m[2]), int(m[3])) == (round(min(meds)), round(max(meds))), m[0]
assert abs(int(m[1]) - (meds[0] + meds[1]) / 2) <= 1, m[0]
EOF
# The plugin took the run's layout, not its own default: its stats files say so.
stats_py=$src/scripts/nccl-plugin/stats.py
[[ $(python3 "$stats_py" layout "$dir/out/plugin-stats" --expect wires=1,io_threads=1,lanes=2) == \
   "wires=1,io_threads=1,lanes=2,stripes=1,stripe_bytes=1048576 (environment)" ]] ||
  fail "plugin-check's layout: $(python3 "$stats_py" layout "$dir/out/plugin-stats" 2>&1)"
[[ $(python3 "$stats_py" setting "$dir/out/plugin-stats" MEGASCALE_SEGMENT_BYTES) == 61440 ]] ||
  fail "plugin-check's segment: $(python3 "$stats_py" setting "$dir/out/plugin-stats" MEGASCALE_SEGMENT_BYTES 2>&1)"
# (plugin-check runs its case in processes of its own: each of the two writes one file or more).
(( $(find "$dir/out/plugin-stats" -name '*.jsonl' | wc -l) >= 2 )) || fail "plugin-check: fewer stats files than processes"

expect_refused "depth 0" "DEPTHS='0': each a number" env DEPTHS=0 "$script" "$log" 2 "$dir/build"
expect_refused "depth x" "DEPTHS='1 x': each a number" env DEPTHS="1 x" "$script" "$log" 2 "$dir/build"
expect_refused "no depth" "DEPTHS is empty" env DEPTHS=" " "$script" "$log" 2 "$dir/build"
expect_refused "no ranks" "NRANKS=0" "$script" "$log" 0 "$dir/build"
mkdir -p "$dir/no-settings" "$dir/no-conns"
tail -1 "$log/megascale-nccl-h-1.jsonl" > "$dir/no-settings/megascale-nccl-h-1.jsonl"
expect_refused "stats without settings" "no settings record in the stats files of $dir/no-settings" \
  "$script" "$dir/no-settings" 2 "$dir/build"
head -1 "$log/megascale-nccl-h-1.jsonl" > "$dir/no-conns/megascale-nccl-h-1.jsonl"
expect_refused "stats without connections" "no connection record with segment_bytes" \
  "$script" "$dir/no-conns" 2 "$dir/build"
expect_refused "no stats folder" "no stats folder '$dir/nothing'" "$script" "$dir/nothing" 2 "$dir/build"
expect_refused "no CLI" "no $dir/none/cli/megascale" "$script" "$log" 2 "$dir/none"
echo "PASS: wire-both-ways.sh"
