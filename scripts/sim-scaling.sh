#!/usr/bin/env bash
# Thread scaling of the packet-level simulator on issue 6's speed target: the 12,288-NIC MegaScale
# permutation (configs/sim/megascale-permutation.yaml), run as 1, 2, 4, 8 and 16 partitions on as many
# threads (sim/README.md "Parallel runs"). Prints one row per thread count: wall seconds (the simulator's
# own, and the process's from /usr/bin/time -v), peak RSS, events, events/s, flows completed, and a
# digest of the printed results (timing lines left out): every count from 2 up gives the same run, so
# those rows' digests must agree (1 thread is the one-simulation order, another valid run).
#
#   scripts/sim-scaling.sh build                      # 1 2 4 8 16 threads
#   THREADS="1 6 12" scripts/sim-scaling.sh build     # other counts
#   SCENARIO=configs/sim/htsim-permutation-1024.yaml scripts/sim-scaling.sh build
#
# Each run's full output is kept in $OUT (default: a temporary folder, printed at the end). Run it on
# an otherwise idle machine with at least as many cores as the largest thread count; the row header
# records the load average it started at.
set -euo pipefail

build=${1:?usage: scripts/sim-scaling.sh BUILD_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$build/cli/megascale"
[[ -x "$bin" ]] || { echo "no $bin (cmake --build $build --target megascale)" >&2; exit 2; }
timer=${TIME_BIN:-/usr/bin/time}  # GNU time, for -v
[[ -x "$timer" ]] || { echo "needs GNU time at $timer (or TIME_BIN=...)" >&2; exit 2; }
scenario=${SCENARIO:-$root/configs/sim/megascale-permutation.yaml}
threads=${THREADS:-1 2 4 8 16}
out=${OUT:-$(mktemp -d /tmp/sim-scaling.XXXXXX)}
mkdir -p "$out"

echo "scenario $scenario"
echo "host $(hostname), $(nproc) CPUs, load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-8s %10s %10s %12s %14s %10s %12s  %s\n' threads "wall s" "process s" "peak RSS MiB" events "M ev/s" flows \
  "results digest"
for n in $threads; do
  log="$out/threads-$n.txt"
  "$timer" -v "$bin" sim "$scenario" --quiet --no-plot --threads "$n" --out "$out/results-$n" >"$log" 2>&1 || true
  wall=$(awk '/^wall /{print $2}' "$log")
  events=$(awk '/^events /{print $2}' "$log")
  flows=$(awk '/^flows /{sub(",", "", $5); print $2 "/" $5}' "$log")
  rss_kib=$(awk -F': ' '/Maximum resident set size/{print $2}' "$log")
  elapsed=$(awk -F': ' '/Elapsed \(wall clock\)/{print $2}' "$log")
  # h:mm:ss or m:ss.cc -> seconds
  process_s=$(echo "$elapsed" | awk -F: '{s=0; for (i=1;i<=NF;i++) s=s*60+$i; printf "%.1f", s}')
  digest=$(grep -E '^(flows|FCT|slowdown|goodput|drops|retransmits|events|delivered) ' "$log" | md5sum | cut -c1-12)
  rate=$(awk -v e="${events:-0}" -v w="${wall:-0}" 'BEGIN{ if (w > 0) printf "%.2f", e / w / 1e6; else print "-" }')
  printf '%-8s %10s %10s %12s %14s %10s %12s  %s\n' "$n" "${wall:--}" "${process_s:--}" \
    "$(awk -v k="${rss_kib:-0}" 'BEGIN{printf "%.0f", k / 1024}')" "${events:--}" "$rate" "${flows:--}" "$digest"
done
echo "outputs: $out"
