#!/usr/bin/env bash
# What the transport alone moves both ways per rank on this host's CPUs, with the thread layout the NCCL
# plugin chose for a run: `megascale perf -b` (both directions at once, a ring's pattern) over loopback,
# no GPU and no NCCL in the way.
#
#   scripts/wire-both-ways.sh NCCL_LOG NRANKS [BUILD_DIR]     # BUILD_DIR defaults to build/
#
# NCCL_LOG is one rank's NCCL_DEBUG=INFO log of a run through the plugin: its echo of MEGASCALE_NTHREADS,
# MEGASCALE_IO_THREADS, MEGASCALE_LANES and MEGASCALE_CC, and the segment its device used. NRANKS is the
# number of ranks that run had on this host. The script starts NRANKS x wires / 2 processes at once, each
# a pair of wires with that layout sending to each other, so as many wires and threads run as the ranks
# had, and prints their summed rate divided by NRANKS: GB/s each way per rank. For a ring collective
# that is what busbw measures (each rank sends busbw bytes per second), so the two can be read together:
# a plugin far below this figure loses its time above the wire (NCCL, the GPU, the host's memory); one
# at it is held by the wire. scripts/check-nccl-plugin.sh's bench step runs it after its NCCL rounds.
#
# SECONDS_PER_RUN (default 5) per row; OUT (default: a new temporary folder) keeps each process's output
# and JSON. Exit status 2 when the log has no plugin echo or an argument is wrong, 1 when a run fails.
set -uo pipefail
cd "$(dirname "$0")/.."

die() { echo "wire-both-ways: $*" >&2; exit 2; }
(( $# >= 2 && $# <= 3 )) || die "usage: scripts/wire-both-ways.sh NCCL_LOG NRANKS [BUILD_DIR]"
log=$1 nranks=$2 build=${3:-build}
seconds=${SECONDS_PER_RUN:-5}
[[ -r $log ]] || die "cannot read the NCCL log '$log'"
[[ $nranks =~ ^[1-9][0-9]*$ ]] || die "NRANKS=$nranks: a number of ranks, 1 or more"
[[ $seconds =~ ^[1-9][0-9]*$ ]] || die "SECONDS_PER_RUN=$seconds: whole seconds, 1 or more"
megascale=$build/cli/megascale
[[ -x $megascale ]] || die "no $megascale (build the megascale CLI first)"

# The plugin's echo lines: "NET/MegaScale : MEGASCALE_IO_THREADS=4 (...)", and the device line
# "Using [0]lo:127.0.0.1<mtu 65536, -1 Mbps, segment 32768 B>".
echoed() { sed -nE "s/.*NET\/MegaScale : $1=([^ ]+).*/\1/p" "$log" | head -1; }
wires=$(echoed MEGASCALE_NTHREADS) io=$(echoed MEGASCALE_IO_THREADS) lanes=$(echoed MEGASCALE_LANES)
cc=$(echoed MEGASCALE_CC)
segment=$(sed -nE 's/.*NET\/MegaScale : Using .*segment ([0-9]+) B>.*/\1/p' "$log" | head -1)
for v in wires io lanes cc segment; do
  [[ -n ${!v} ]] || die "'$log' has no plugin echo of $v (a NCCL_DEBUG=INFO log of a run through MegaScale?)"
done
[[ $wires =~ ^[0-9]+$ && $io =~ ^[0-9]+$ && $lanes =~ ^[0-9]+$ ]] ||
  die "'$log': unexpected layout echo (wires '$wires', I/O threads '$io', lanes '$lanes')"
procs=$(( (nranks * wires + 1) / 2 ))
dir=${OUT:-$(mktemp -d /tmp/wire-both-ways.XXXXXX)}
mkdir -p "$dir"

# NCCL's pattern: 1 MiB messages (its chunk), a few in flight per connection.
pids=()
for ((p = 0; p < procs; p++)); do
  "$megascale" perf --loopback --test bw -b -D "$seconds" -s 1048576 -t 4 --lanes "$lanes" \
    --segment "$segment" --cc "$cc" --io-threads "$io" --json "$dir/wire-$p.json" > "$dir/wire-$p.log" 2>&1 &
  pids+=($!)
done
failed=0
for ((p = 0; p < procs; p++)); do
  wait "${pids[p]}" || { echo "!! wire-both-ways: process $p failed:"; tail -3 "$dir/wire-$p.log"; failed=1; }
done
(( failed == 0 )) || exit 1
python3 - "$nranks" "$procs" "$wires" "$io" "$lanes" "$segment" "$cc" "$seconds" "$dir" <<'EOF'
import json, sys
nranks, procs, wires, io = (int(a) for a in sys.argv[1:5])
lanes, segment, cc, seconds, folder = sys.argv[5:10]
total = 0.0
for p in range(procs):
    with open(f"{folder}/wire-{p}.json") as f:
        total += json.load(f)["bw"][0]["BW_average"]  # Gb/s, both directions of one pair
per_rank = total / 8 / nranks
print(f"wire both ways: {per_rank:.2f} GB/s each way per rank ({procs} process{'es' if procs > 1 else ''} "
      f"x 2 wires x (1 + {io} I/O threads), as {nranks} ranks x {wires} wire{'s' if wires > 1 else ''}; "
      f"lanes {lanes}, segment {segment} B, cc {cc}, megascale perf -b -s 1048576 -t 4 -D {seconds}; "
      f"{total:.1f} Gb/s summed)")
EOF
