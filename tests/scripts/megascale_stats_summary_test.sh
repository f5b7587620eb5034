#!/usr/bin/env bash
# scripts/megascale-stats-summary.py on hand-made stats directories: the close records of every *.jsonl
# are summed (periodic ones are not), a directory without records says so, and a broken record or a
# bad argument is refused with exit status 2 and a message naming it.
# Usage: megascale_stats_summary_test.sh SOURCE_DIR
set -uo pipefail
src=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
summary=$src/scripts/megascale-stats-summary.py

mkdir -p "$dir/run1" "$dir/empty"
record() {  # EVENT TIMEOUTS SPURIOUS RTO FAST DUPS RTT_MAX_NS TAIL_PROBES
  printf '{"event":"%s","role":"send","engine":{"timeouts":%s,"timeouts_spurious":%s,"retransmits_rto":%s,"retransmits_fast":%s,"duplicates_dropped":%s,"rtt_max_ns":%s,"tail_probes":%s}}\n' "$@"
}
{ record periodic 100 100 100 100 100 99000000 100; record close 3 1 7 2 0 4200000 4; } > "$dir/run1/a.jsonl"
{ record close 5 2 11 0 18 9200000 1; echo '{"event":"close","state":"released","nccl":{}}'; } > "$dir/run1/b.jsonl"

out=$(python3 "$summary" r1="$dir/run1" r2="$dir/empty") || fail "exit $? on good input"
expected="- r1: 8 timeouts (3 undone as spurious), 18 RTO and 2 fast retransmissions, 5 tail probes, 18 duplicates received, RTT max 9.2 ms (2 connections)
- r2: no stats records in $dir/empty"
[[ $out == "$expected" ]] || fail "got: $out"

echo '{"event":"close",' >> "$dir/run1/b.jsonl"
python3 "$summary" r1="$dir/run1" > /dev/null 2> "$dir/err"
(( $? == 2 )) || fail "a broken record: exit status"
grep -q "b.jsonl:3: not JSON" "$dir/err" || fail "broken record message: $(cat "$dir/err")"
python3 "$summary" "$dir/run1" > /dev/null 2> "$dir/err"
(( $? == 2 )) || fail "no LABEL=: exit status"
grep -q "is not LABEL=DIR" "$dir/err" || fail "bad argument message: $(cat "$dir/err")"
echo PASS
