#!/usr/bin/env bash
# `megascale sim`'s workflow: results go to out/sim/NAME/ by default and the closing line names that
# folder and files that exist; --out overrides; one seed writes identical files twice and another seed
# changes the flows; --set changes the key it names; an unknown key, a bad value, an old flag spelling
# and a fabric file given as a scenario are refused naming them.
# Usage: sim_workflow_test.sh MEGASCALE_BINARY SOURCE_DIR
set -uo pipefail
megascale=$1
src=$2
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
scenario=$src/configs/sim/permutation-small.yaml
sim() { "$megascale" sim "$@" --quiet --no-plot; }

# The default folder, named by the run; every file the closing line names exists there.
mkdir "$dir/cwd"
(cd "$dir/cwd" && sim "$scenario" > "$dir/log" 2>&1) || fail "default folder: $(cat "$dir/log")"
line=$(grep '^results in ' "$dir/log") || fail "no closing line: $(cat "$dir/log")"
[[ $line == "results in out/sim/permutation-small/: "* ]] || fail "closing line: $line"
IFS=', ' read -r -a named <<< "${line#results in out/sim/permutation-small/: }"
(( ${#named[@]} == 7 )) || fail "closing line names ${#named[@]} files: $line"
for f in "${named[@]}"; do
  [[ -s $dir/cwd/out/sim/permutation-small/$f ]] || fail "the closing line names $f, which is not there"
done

# One seed twice: identical files, byte for byte. Another seed: other partners, so other flows.
sim "$scenario" --seed 7 --out "$dir/a" > /dev/null 2>&1 || fail "seed 7"
sim "$scenario" --seed 7 --out "$dir/b" > /dev/null 2>&1 || fail "seed 7 again"
diff -r "$dir/a" "$dir/b" > "$dir/diff" || fail "seed 7 twice differs: $(head -5 "$dir/diff")"
sim "$scenario" --seed 8 --out "$dir/c" > /dev/null 2>&1 || fail "seed 8"
cmp -s "$dir/a/flows.csv" "$dir/c/flows.csv" && fail "seeds 7 and 8 wrote the same flows.csv"
grep -q '"seed": 8' <(sim "$scenario" --seed 8 --out "$dir/c" --json - 2> /dev/null) || fail "--json names seed 8"

# --set: every flow now carries the bytes set, and nothing else about the flows changed.
# (Flags before the scenario: a --set takes one KEY=VALUE, not the scenario's path.)
sim --seed 7 --set workload.bytes=123456 --out "$dir/d" "$scenario" > "$dir/log" 2>&1 || fail "--set: $(cat "$dir/log")"
grep -q "set          workload.bytes = 123456" "$dir/log" || fail "--set is not echoed: $(cat "$dir/log")"
[[ $(cut -d, -f4 "$dir/d/flows.csv" | tail -n +2 | sort -u) == 123456 ]] || fail "--set workload.bytes: $(head -3 "$dir/d/flows.csv")"
[[ $(cut -d, -f1-3 "$dir/d/flows.csv") == $(cut -d, -f1-3 "$dir/a/flows.csv") ]] || fail "--set changed the flows' ends"

expect_refused "unknown key" "--set workload.flows=16: flows: 16: unknown key" sim "$scenario" --set workload.flows=16
expect_refused "bad value" "--set workload.bytes=0: bytes: 0: must be in [1," sim "$scenario" --set workload.bytes=0
expect_refused "key under a name" "--set fabric.link_gbps=100: fabric is small-2tier" sim "$scenario" --set fabric.link_gbps=100
expect_refused "cc key" "--set cc.no_such_key=1: cc: no_such_key: not a key of the" sim "$scenario" --set cc.no_such_key=1
expect_refused "no value" "--set lanes: must be KEY=VALUE" sim "$scenario" --set lanes
expect_refused "old flag" "--controller was renamed: use --cc" sim "$scenario" --controller swift
expect_refused "fabric file" "this is a fabric file, not a scenario" sim "$src/configs/fabrics/small-2tier.yaml"
for f in "$src"/configs/sim/*.yaml; do
  grep -q '^workload:' "$f" || fail "$f has no workload: a fabric belongs in configs/fabrics/"
done
echo "sim workflow: default folder, identical files per seed, --set, refusals"
