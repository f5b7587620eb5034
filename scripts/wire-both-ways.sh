#!/usr/bin/env bash
# What the transport alone moves both ways per rank on this host's CPUs, with the thread layout the NCCL
# plugin chose for a run: `megascale perf -b` (both directions at once, a ring's pattern) over loopback,
# no GPU and no NCCL in the way.
#
#   scripts/wire-both-ways.sh STATS_DIR NRANKS [BUILD_DIR]    # BUILD_DIR defaults to build/
#
# STATS_DIR is the MEGASCALE_STATS_DIR of a run through the plugin: its "settings" record gives the
# layout (wires, I/O threads, lanes) and MEGASCALE_CC, its connection records the segment size
# (scripts/nccl-plugin/stats.py reads them). NRANKS is the
# number of ranks that run had on this host. The script starts NRANKS x wires / 2 processes at once, each
# a pair of wires with that layout sending to each other, so as many wires and threads run as the ranks
# had, once for each depth in DEPTHS (messages of 1 MiB in flight a connection; default "1 4"). For each
# it prints their summed rate divided by NRANKS, GB/s each way per rank, a message's time by Little's
# law (depth x 1 MiB / a connection's rate) and, with I/O threads, the share of their awake time that
# moved something (near 100%: the threads are the limit). For a ring collective GB/s each way per rank is what busbw
# measures (each rank sends busbw bytes per second), so the two can be read together. NCCL keeps about one
# message in flight a connection, so read it against the depth-1 row, and its message time
# (scripts/megascale-message-times.py) against that row's: a plugin far below them loses its time above
# the wire (NCCL, the GPU, the host's memory); one at them is held by the wire. The deeper rows say what
# the wire carries when it is kept busy. `megascale perf` drives its wires from its own thread, and its
# rows give each wire one connection each way: a rank with as many wires as NCCL's channels (2 here).
# When BUILD_DIR holds the plugin, a last line gives the depth-1 time through the plugin's own threaded
# wire (`megascale plugin-check --case steps_both_ways` in NRANKS processes, with the run's layout): two
# pairs a process, a rank's two channels each way over the rank's own wires, however many it has. With
# one wire a rank that line carries twice what the perf rows put on a wire; it is the one to read.
# scripts/check-nccl-plugin.sh's bench step runs it after its NCCL rounds.
#
# SECONDS_PER_RUN (default 5) per depth; OUT (default: a new temporary folder) keeps each process's output
# and JSON (plugin-check's stats files in OUT/plugin-stats). Exit status 2 when STATS_DIR has no
# plugin settings or connections or an argument is wrong, 1 when a run fails.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

die() { echo "wire-both-ways: $*" >&2; exit 2; }
(( $# >= 2 && $# <= 3 )) || die "usage: scripts/wire-both-ways.sh STATS_DIR NRANKS [BUILD_DIR]"
stats=$1 nranks=$2 build=${3:-build}
seconds=${SECONDS_PER_RUN:-5}
depths=${DEPTHS:-1 4}
[[ -d $stats ]] || die "no stats folder '$stats'"
[[ $nranks =~ ^[1-9][0-9]*$ ]] || die "NRANKS=$nranks: a number of ranks, 1 or more"
[[ $seconds =~ ^[1-9][0-9]*$ ]] || die "SECONDS_PER_RUN=$seconds: whole seconds, 1 or more"
[[ -n ${depths// } ]] || die "DEPTHS is empty: give the messages in flight a connection, e.g. '1 4'"
for d in $depths; do
  [[ $d =~ ^[1-9][0-9]?$ ]] || die "DEPTHS='$depths': each a number of messages in flight, 1..99"
done
megascale=$build/cli/megascale
[[ -x $megascale ]] || die "no $megascale (build the megascale CLI first)"

# The run's layout ("wires=2,io_threads=1,lanes=2,stripes=1,stripe_bytes=1048576 (...)"), controller
# ("hybrid -> builtin:hybrid": the first word) and segment, from the plugin's stats files.
stats_py() {  # stats.py's answer, or its message on standard error and exit status 2
  local said
  said=$(python3 scripts/nccl-plugin/stats.py "$@" 2>&1) || die "'$stats': ${said#stats.py: }"
  echo "$said"
}
layout=$(stats_py layout "$stats" | head -1) || exit 2
[[ $layout =~ ^wires=([0-9]+),io_threads=([0-9]+),lanes=([0-9]+), ]] || die "'$stats': unexpected layout '$layout'"
wires=${BASH_REMATCH[1]} io=${BASH_REMATCH[2]} lanes=${BASH_REMATCH[3]}
cc=$(stats_py setting "$stats" MEGASCALE_CC) || exit 2
cc=${cc%% *}
segment=$(stats_py segment "$stats") || exit 2
procs=$(( (nranks * wires + 1) / 2 ))
dir=${OUT:-$(mktemp -d /tmp/wire-both-ways.XXXXXX)}
mkdir -p "$dir"

# NCCL's pattern: 1 MiB messages (its chunk), DEPTH of them in flight per connection. NCCL's ring keeps
# one or two in flight (docs/PERFORMANCE.md): the depth-1 row is the one to read its bandwidth against.
run_depth() {
  local depth=$1 p pids=() failed=0
  for ((p = 0; p < procs; p++)); do
    "$megascale" perf --loopback --test bw -b -D "$seconds" -s 1048576 -t "$depth" --lanes "$lanes" \
      --segment "$segment" --cc "$cc" --io-threads "$io" --json "$dir/wire-t$depth-$p.json" \
      > "$dir/wire-t$depth-$p.log" 2>&1 &
    pids+=($!)
  done
  for ((p = 0; p < procs; p++)); do
    wait "${pids[p]}" ||
      { echo "!! wire-both-ways: -t $depth, process $p failed:"; tail -3 "$dir/wire-t$depth-$p.log"; failed=1; }
  done
  return $failed
}
for depth in $depths; do run_depth "$depth" || exit 1; done
# shellcheck disable=SC2086  # $depths: one argument per depth (numbers, checked above)
python3 - "$nranks" "$procs" "$wires" "$io" "$lanes" "$segment" "$cc" "$seconds" "$dir" $depths <<'EOF'
import json, sys
nranks, procs, wires, io = (int(a) for a in sys.argv[1:5])
lanes, segment, cc, seconds, folder = sys.argv[5:10]
print(f"wire both ways ({procs} process{'es' if procs > 1 else ''} x 2 wires x (1 + {io} I/O threads), as "
      f"{nranks} ranks x {wires} wire{'s' if wires > 1 else ''}; lanes {lanes}, segment {segment} B, cc {cc}; "
      f"megascale perf -b -s 1048576 -D {seconds}):")
for depth in map(int, sys.argv[10:]):
    total, awake, busy = 0.0, 0, 0
    for p in range(procs):
        with open(f"{folder}/wire-t{depth}-{p}.json") as f:
            row = json.load(f)["bw"][0]
        total += row["bw_average_gbps"]  # both directions of one pair
        awake += row["counters"].get("io_awake_ns", 0)
        busy += row["counters"].get("io_busy_ns", 0)
    per_rank = total / 8 / nranks
    # Each wire of a pair sends one connection: its rate, and by Little's law a message's time at this
    # depth (what scripts/megascale-message-times.py measures under NCCL).
    per_connection = total / 8 / (2 * procs)
    message_us = depth * 1048576 / (per_connection * 1e3) if per_connection > 0 else float("inf")
    # With I/O threads: the share of their awake (polling) time that moved something.
    share = f"; I/O threads busy {100 * busy / awake:.0f}% of their awake time" if awake else ""
    print(f"- {depth} message{'s' if depth > 1 else ''} of 1 MiB in flight a connection (-t {depth}): "
          f"{per_rank:.2f} GB/s each way per rank, {message_us:.0f} us a message; {total:.1f} Gb/s summed{share}")
EOF

# The plugin's own threaded wire at NCCL's depth, when BUILD_DIR has the plugin: `megascale plugin-check
# --case steps_both_ways` (one 1 MiB message at a time each way on two pairs, all four ends in one
# process: one rank's sends and receives) in NRANKS processes at once, with the run's layout.
plugin=$build/collectives/nccl/libnccl-net-megascale.so
[[ -r $plugin ]] || exit 0
pids=() failed=0
for ((r = 0; r < nranks; r++)); do
  env MEGASCALE_IFNAME=lo MEGASCALE_LAYOUT="wires=$wires,io_threads=$io,lanes=$lanes" \
    MEGASCALE_CC="$cc" MEGASCALE_SEGMENT_BYTES="$segment" MEGASCALE_STATS_DIR="$dir/plugin-stats" \
    "$megascale" plugin-check "$plugin" --case steps_both_ways -v > "$dir/plugin-$r.log" 2>&1 &
  pids+=($!)
done
for ((r = 0; r < nranks; r++)); do
  wait "${pids[r]}" || { echo "!! wire-both-ways: plugin-check $r failed:"; tail -3 "$dir/plugin-$r.log"; failed=1; }
done
(( failed == 0 )) || exit 1
python3 - "$dir" "$nranks" <<'EOF'
import re, statistics, sys
folder, nranks = sys.argv[1], int(sys.argv[2])
med, p90 = [], []
for r in range(nranks):
    m = re.search(r"PASS steps_both_ways .* ([0-9.]+) us median, ([0-9.]+) us p90", open(f"{folder}/plugin-{r}.log").read())
    if not m:
        sys.exit(f"!! wire-both-ways: no steps_both_ways result in {folder}/plugin-{r}.log")
    med.append(float(m[1]))
    p90.append(float(m[2]))
print(f"- the plugin's own threaded wire, 1 message of 1 MiB in flight each way (megascale plugin-check --case "
      f"steps_both_ways, {nranks} process{'es' if nranks > 1 else ''} as the ranks): "
      f"{statistics.median(med):.0f} us a message by median ({min(med):.0f}-{max(med):.0f} by process), "
      f"p90 {statistics.median(p90):.0f} us")
EOF
