#!/usr/bin/env bash
# scripts/wire-both-ways.sh on this host's loopback with a small layout: the layout is read from a
# plugin echo in a hand-made NCCL log, each depth in DEPTHS runs `megascale perf -b` and prints its line
# (GB/s each way per rank, a message's time by Little's law, which the line's own figures must agree
# with, and the I/O threads' busy share), then the plugin's own wire at depth 1 (plugin-check steps_both_ways, a process a rank, with
# that layout), and bad arguments and a log without the echo are refused with exit status 2.
# Usage: wire_both_ways_test.sh SOURCE_DIR MEGASCALE_BINARY PLUGIN_SO
set -uo pipefail
src=$1 megascale=$2 plugin=$3
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
script=$src/scripts/wire-both-ways.sh
mkdir -p "$dir/build/cli" "$dir/build/collectives/nccl"
ln -s "$(realpath "$megascale")" "$dir/build/cli/megascale"
ln -s "$(realpath "$plugin")" "$dir/build/collectives/nccl/libnccl-net-megascale.so"

# The plugin's echo, as NCCL_DEBUG=INFO prints it: one wire of 1 + 1 I/O threads, 2 lanes.
log=$dir/rank0.log
cat > "$log" <<'EOF'
host:1:2 [0] NCCL INFO NET/MegaScale : MEGASCALE_CC=hybrid (preset hybrid) (default)
host:1:2 [0] NCCL INFO NET/MegaScale : MEGASCALE_LAYOUT=wires=1,io_threads=1,lanes=2,stripes=1,stripe_bytes=1048576 (auto: test) (default)
host:1:2 [0] NCCL INFO NET/MegaScale : Using [0]lo:127.0.0.1<mtu 65536, -1 Mbps, segment 61440 B>
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
    gbps = row["BW_average"]  # Gb/s, both directions of the one pair
    assert rate > 0 and us > 0, m[0]
    assert abs(summed - gbps) < 0.051 and abs(rate - gbps / 8 / 2) < 0.0051, m[0]
    # Little's law from the unrounded rate: one process, so a connection moves what a rank does.
    assert abs(us - depth * 1048576 / (gbps / 16 * 1e3)) <= 1, m[0]
    # The I/O threads' busy share is the JSON's (under a loaded host it can round to 0%).
    c = row["counters"]
    assert c["io_awake_ns"] > 0 and abs(busy - 100 * c["io_busy_ns"] / c["io_awake_ns"]) <= 0.51, m[0]
# The plugin's line: the medians of the two processes' own results, which ran with the log's layout.
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
# The plugin took the log's layout, not its own default.
for r in 0 1; do
  for echo in "MEGASCALE_LAYOUT=wires=1,io_threads=1,lanes=2,[^ ]* (given: wires=1,io_threads=1,lanes=2;.*" \
    "MEGASCALE_SEGMENT_BYTES=61440"; do
    grep -q "NET/MegaScale : $echo (environment)" "$dir/out/plugin-$r.log" || fail "plugin-$r.log: no $echo"
  done
done

expect_refused "depth 0" "DEPTHS='0': each a number" env DEPTHS=0 "$script" "$log" 2 "$dir/build"
expect_refused "depth x" "DEPTHS='1 x': each a number" env DEPTHS="1 x" "$script" "$log" 2 "$dir/build"
expect_refused "no depth" "DEPTHS is empty" env DEPTHS=" " "$script" "$log" 2 "$dir/build"
expect_refused "no ranks" "NRANKS=0" "$script" "$log" 0 "$dir/build"
echo "host:1:2 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>" > "$dir/socket.log"
expect_refused "a log without the echo" "has no plugin echo" "$script" "$dir/socket.log" 2 "$dir/build"
expect_refused "no CLI" "no $dir/none/cli/megascale" "$script" "$log" 2 "$dir/none"
echo "PASS: wire-both-ways.sh"
