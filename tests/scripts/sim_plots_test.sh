#!/usr/bin/env bash
# `megascale sim` draws its own PNGs: a single run and a --compare run each leave fct_slowdown.png,
# throughput.png and queue_cdf.png (PNG signature checked) beside the result files and nothing else
# (no data or script files of gnuplot's); --no-plot draws none. Skips (exit 77) without gnuplot.
# Usage: sim_plots_test.sh MEGASCALE_BINARY SOURCE_DIR
set -uo pipefail
megascale=$1
src=$2
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
command -v gnuplot > /dev/null || { echo "SKIPPED: gnuplot is not installed (gnuplot-nox)"; exit 77; }

# check_folder DIR EXPECTED...: DIR holds exactly the EXPECTED files, and its PNGs are PNGs.
check_folder() {
  local folder=$1
  shift
  local want have
  want=$(printf '%s\n' "$@" | sort)
  have=$(ls -A "$folder" | sort)
  [[ $want == "$have" ]] || fail "$folder holds: $(echo "$have" | tr '\n' ' ') (expected: $(echo "$want" | tr '\n' ' '))"
  for f in "$folder"/*.png; do
    [[ -e $f ]] || continue  # no PNGs at all
    [[ -s $f ]] || fail "$f is empty"
    # The PNG signature: \x89 P N G.
    [[ $(head -c 4 "$f" | od -An -tx1 | tr -d ' \n') == 89504e47 ]] || fail "$f is not a PNG"
  done
}
pngs=(fct_slowdown.png throughput.png queue_cdf.png)
results() {  # results SUFFIX: one run's files
  echo "flows$1.csv fct_bins$1.csv throughput$1.csv throughput_hosts$1.csv queues$1.csv ports$1.csv summary$1.json"
}

"$megascale" sim "$src/configs/sim/incast-small.yaml" --quiet --out "$dir/single" > "$dir/log" 2>&1 ||
  fail "single run: $(cat "$dir/log")"
# shellcheck disable=SC2046
check_folder "$dir/single" $(results "") "${pngs[@]}"
grep -q "results in $dir/single/: .*fct_slowdown.png, throughput.png, queue_cdf.png" "$dir/log" ||
  fail "the closing line does not name the PNGs: $(cat "$dir/log")"

"$megascale" sim "$src/configs/sim/cc-compare-incast-pfc.yaml" --compare hybrid,swift --quiet --out "$dir/compare" \
  > "$dir/log" 2>&1 || fail "--compare: $(cat "$dir/log")"
# shellcheck disable=SC2046
check_folder "$dir/compare" $(results -hybrid) $(results -swift) "${pngs[@]}" compare.json

"$megascale" sim "$src/configs/sim/incast-small.yaml" --quiet --no-plot --out "$dir/none" > "$dir/log" 2>&1 ||
  fail "--no-plot: $(cat "$dir/log")"
# shellcheck disable=SC2046
check_folder "$dir/none" $(results "")
echo "sim plots: three PNGs for a single and a --compare run, nothing stray, none with --no-plot"
