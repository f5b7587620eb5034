#!/usr/bin/env bash
# scripts/plot-sim.py on a real `megascale sim --out` folder: a single run and a --compare run each give
# the three PNGs. Skips (exit 77) where no interpreter has matplotlib (scripts/install-deps.sh installs it).
# Usage: plot_sim_test.sh MEGASCALE_BINARY SOURCE_DIR
set -euo pipefail
megascale=$1
src=$2
if ! python3 -c 'import matplotlib' 2>/dev/null && ! /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  echo "SKIPPED: matplotlib is not installed (python3-matplotlib; scripts/install-deps.sh installs it)"
  exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

check_pngs() {
  local folder=$1
  for name in fct_slowdown throughput queue_cdf; do
    local f=$folder/$name.png
    [[ -s $f ]] || { echo "FAIL: $f was not written"; exit 1; }
    # The PNG signature: \x89 P N G.
    [[ $(head -c 4 "$f" | od -An -tx1 | tr -d ' \n') == 89504e47 ]] || { echo "FAIL: $f is not a PNG"; exit 1; }
  done
}

"$megascale" sim "$src/configs/sim/incast-small.yaml" --quiet --out "$dir/single" >/dev/null
python3 "$src/scripts/plot-sim.py" "$dir/single"
check_pngs "$dir/single"

"$megascale" sim "$src/configs/sim/cc-compare-incast-pfc.yaml" --compare hybrid,swift --quiet --out "$dir/compare" >/dev/null
python3 "$src/scripts/plot-sim.py" "$dir/compare"
check_pngs "$dir/compare"

# A folder without results is an error that names the folder, not a traceback.
mkdir "$dir/empty"
if out=$(python3 "$src/scripts/plot-sim.py" "$dir/empty" 2>&1); then echo "FAIL: an empty folder passed"; exit 1; fi
grep -q "no fct_bins" <<<"$out" || { echo "FAIL: unexpected message: $out"; exit 1; }
echo "plot-sim: PNGs for a single and a --compare run"
