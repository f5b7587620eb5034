#!/usr/bin/env bash
# scripts/ab-check.sh's sim part, one build against itself on two small scenarios: identical outputs
# pass; then, on the same outputs (--no-run), changed timing fields still pass and a changed value, a
# missing file and a different exit status each fail, naming the scenario, the file and the line.
# Usage: ab_check_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src=$1
build=$2
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
ab=$src/scripts/ab-check.sh
scenarios=incast-small,permutation-small

"$ab" --only sim --scenarios "$scenarios" --jobs 2 --out "$dir/ab" "$build" "$build" > "$dir/log" 2>&1 ||
  fail "one build against itself: $(cat "$dir/log")"
grep -q "sim: 2 same, 0 different" "$dir/log" || fail "one build against itself: $(cat "$dir/log")"
python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); assert r["sim"]["same"] == ["incast-small", "permutation-small"], r' \
  "$dir/ab/ab-check.json" || fail "ab-check.json"

# recheck EXPECTED_STATUS: the comparison of the outputs as they are now, into $dir/log.
recheck() {
  "$ab" --only sim --scenarios "$scenarios" --no-run --out "$dir/ab" "$build" "$build" > "$dir/log" 2>&1
  local status=$?
  ((status == $1)) || fail "exit status $status, not $1: $(cat "$dir/log")"
}
new=$dir/ab/sim/new/incast-small
summary=$new/results/summary.json

# Timing fields: summary.json has none (a run's files are what its seed decides); an older build's, the
# printed wall line and the warning on memory available now are left out of the comparison.
grep -q '"wall_s"' "$summary" && fail "summary.json holds wall_s"
sed -i -E 's/^\{$/{\n  "wall_s": 123456.5,\n  "peak_rss_mib": 9999,/' "$summary"
grep -q '"wall_s": 123456.5' "$summary" || fail "could not add timing fields to summary.json"
grep -q "^wall " "$new/stdout.txt" || fail "no wall line in the printed summary"
sed -i -E 's/^wall .*/wall         99.00 s   0.01 M events\/s   peak RSS 9999 MiB/' "$new/stdout.txt"
echo "megascale sim: warning: memory: about 9.0 GiB estimated, more than the 1.0 GiB available now (MemAvailable): the run may swap or be killed" >> "$new/stderr.txt"
recheck 0
grep -q "sim: 2 same, 0 different" "$dir/log" || fail "timing fields: $(cat "$dir/log")"
cp "$dir/ab/sim/old/incast-small/stderr.txt" "$new/stderr.txt"

# A changed value: the third flow's FCT.
cp "$new/results/flows.csv" "$dir/flows.csv"
sed -i -E '4s/^([^,]*,[^,]*,[^,]*,[^,]*,[^,]*,[^,]*,)[0-9.]+/\1999999.000/' "$new/results/flows.csv"
recheck 1
grep -q "sim: incast-small: DIFFERENT in results/flows.csv line 4:" "$dir/log" || fail "changed value: $(cat "$dir/log")"
grep -q "new: 2,.*,999999.000," "$dir/log" || fail "changed value, the new line: $(cat "$dir/log")"
grep -q "sim: permutation-small: same" "$dir/log" || fail "changed value, the other scenario: $(cat "$dir/log")"
grep -q "ab-check: FAILED" "$dir/log" || fail "changed value, the verdict: $(cat "$dir/log")"
cp "$dir/flows.csv" "$new/results/flows.csv"

# A summary value (not a timing field) that differs.
sed -i -E 's/("drops": )[0-9]+/\1987654/' "$summary"
recheck 1
grep -q 'DIFFERENT in results/summary.json line [0-9]*:' "$dir/log" || fail "summary value: $(cat "$dir/log")"
grep -q '"drops": 987654' "$dir/log" || fail "summary value, the new line: $(cat "$dir/log")"

# A file only one build wrote, and a different exit status.
cp "$dir/ab/sim/old/incast-small/results/summary.json" "$summary"
rm "$new/results/queues.csv"
recheck 1
grep -q "DIFFERENT in results/queues.csv: only the old build wrote it" "$dir/log" || fail "missing file: $(cat "$dir/log")"
cp "$dir/ab/sim/old/incast-small/results/queues.csv" "$new/results/"
echo 1 > "$new/exit_status.txt"
recheck 1
grep -q "DIFFERENT in exit_status.txt line 1:" "$dir/log" || fail "exit status: $(cat "$dir/log")"

# Bad usage is refused with the reason.
expect_refused "--only" "--only: sim or bench" "$ab" --only nothing "$build" "$build"
expect_refused "--no-run" "--no-run needs --out" "$ab" --no-run "$build" "$build"
expect_refused "unknown scenario" "no scenario configs/sim/nope.yaml" "$ab" --only sim --scenarios nope "$build" "$build"
echo "ab-check: identical outputs pass, timing fields are ignored, a changed value is named"
