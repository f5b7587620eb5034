#!/usr/bin/env bash
# The plugin's default (delay-based) controller on a host whose every CPU is busy: one spinning process
# per CPU beside `megascale plugin-check --case throughput` (one connection, 8 x 4 MiB in flight, the
# default MEGASCALE_CC). The case must pass within its limit, with no lane counted as stuck at its floor
# (floor_stalls in MEGASCALE_STATS_DIR) and no floor WARN: a controller that reads this host's
# scheduling as fabric delay sat at 246 B of window for 15-20 s here and missed the 30 s limit.
# Usage: floor_under_load_test.sh MEGASCALE_BINARY PLUGIN_SO [RUNS]
set -uo pipefail
megascale=$1 plugin=$2 runs=${3:-3}
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
hogs=()
stop_hogs() { local p; for p in "${hogs[@]}"; do kill "$p" 2> /dev/null; done; rm -rf "$dir"; }
trap stop_hogs EXIT
for _ in $(seq "$(nproc)"); do
  timeout 600 sh -c 'while :; do :; done' &
  hogs+=($!)
done
for run in $(seq "$runs"); do
  stats=$dir/stats$run
  mkdir -p "$stats"
  start=$(date +%s.%N)
  MEGASCALE_STATS_DIR=$stats MEGASCALE_STATS_INTERVAL_S=1 \
    "$megascale" plugin-check "$plugin" --case throughput --timeout 30s > "$dir/out$run" 2>&1 ||
    fail "run $run: $(cat "$dir/out$run")"
  secs=$(echo "$(date +%s.%N) - $start" | bc)
  grep -q "floor" "$dir/out$run" && fail "run $run warned of a floor: $(grep floor "$dir/out$run")"
  # From the close records of the JSON lines: the textfile goes with its process.
  stalls=$(python3 -c '
import glob, json, sys
print(sum(int(json.loads(l).get("engine", {}).get("floor_stalls", 0)) for p in glob.glob(sys.argv[1] + "/*.jsonl")
          for l in open(p) if "\"event\":\"close\"" in l))' "$stats") || fail "run $run: unreadable stats in $stats"
  grep -qs '"event":"close"' "$stats"/*.jsonl || fail "run $run: no close record in $stats"
  [[ $stalls == 0 ]] || fail "run $run: floor_stalls $stalls"
  echo "run $run: $(grep -o '[0-9.]* GB/s' "$dir/out$run" | head -1) in ${secs} s beside $(nproc) hogs, floor_stalls 0"
done
