#!/usr/bin/env bash
# scripts/megascale-trace-merge.py on hand-made request timelines: two ranks of one host merge into one
# trace that keeps every event and each rank's pid; files from two hosts are refused unless asked for;
# a trainer timeline merges with the plugin's of the same process; a file that is not JSON, not a trace,
# or not a MegaScale timeline is refused with exit status 2 and a message naming it.
# Usage: megascale_trace_merge_test.sh SOURCE_DIR
set -uo pipefail
src=$1
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
merge=$src/scripts/megascale-trace-merge.py

rank() {  # FILE HOST PID TS
  printf '{"displayTimeUnit":"ns","otherData":{"clock":"CLOCK_MONOTONIC","host":"%s","requests":1,"requests_not_kept":0},"traceEvents":[{"name":"process_name","ph":"M","pid":%s,"args":{"name":"r"}},{"name":"send","cat":"request","ph":"X","pid":%s,"tid":100,"ts":%s,"dur":5.5,"args":{"bytes":8}},{"name":"wait","cat":"phase","ph":"X","pid":%s,"tid":100,"ts":%s,"dur":1.0}]}\n' "$2" "$3" "$3" "$4" "$3" "$4" > "$1"
}
rank "$dir/a.json" h1 11 100.5
rank "$dir/b.json" h1 12 101.25
out=$(python3 "$merge" "$dir/m.json" "$dir/a.json" "$dir/b.json") || fail "exit $? on good input: $out"
[[ $out == *"$dir/a.json: host h1, pid 11, 1 requests"* && $out == *"$dir/m.json: 6 events from 2 files"* ]] ||
  fail "got: $out"
python3 - "$dir/m.json" <<'PY' || fail "merged file"
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
assert len(ev) == 6, len(ev)
assert sorted({e["pid"] for e in ev}) == [11, 12]
assert d["otherData"]["requests"] == 2 and d["otherData"]["clock"] == "CLOCK_MONOTONIC"
assert [e["ts"] for e in ev if e["name"] == "send"] == [100.5, 101.25]
PY

# A trainer timeline (megascale-train --timeline: lanes are threads 0, 1, ...; no requests) merges with
# the plugin's file of the same process: one process track holding both.
printf '{"displayTimeUnit":"ms","otherData":{"clock":"CLOCK_MONOTONIC","host":"h1","requests":0,"requests_not_kept":0},"traceEvents":[{"name":"process_name","ph":"M","pid":11,"args":{"name":"rank 0 (tp 0, dp 0, pp 0)"}},{"name":"tp all-gather","cat":"communication","ph":"X","ts":100.0,"dur":3.5,"pid":11,"tid":0},{"name":"pp send","cat":"communication","ph":"X","ts":101.0,"dur":2.0,"pid":11,"tid":1}]}\n' > "$dir/t.json"
out=$(python3 "$merge" "$dir/mt.json" "$dir/t.json" "$dir/a.json") || fail "trainer + plugin: exit $?: $out"
python3 - "$dir/mt.json" <<'PY' || fail "trainer + plugin merged file"
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
assert {e["pid"] for e in ev} == {11}, ev
assert {(e["name"], e.get("tid")) for e in ev if e["ph"] == "X"} == {
    ("tp all-gather", 0), ("pp send", 1), ("send", 100), ("wait", 100)}, ev
PY

rank "$dir/c.json" h2 13 5
expect_refused "two hosts" "2 hosts (h1, h2)" python3 "$merge" "$dir/m2.json" "$dir/a.json" "$dir/c.json"
[[ ! -e $dir/m2.json ]] || fail "two hosts: an output was written"
python3 "$merge" --hosts-may-differ "$dir/m2.json" "$dir/a.json" "$dir/c.json" > /dev/null || fail "--hosts-may-differ"

echo 'not json' > "$dir/bad.json"
expect_refused "not JSON" "bad.json: not JSON" python3 "$merge" "$dir/m3.json" "$dir/bad.json"
echo '{"traceEvents":[]}' > "$dir/other.json"
expect_refused "foreign trace" "other.json: not a MegaScale request timeline" \
  python3 "$merge" "$dir/m3.json" "$dir/other.json"
echo '[1]' > "$dir/list.json"
expect_refused "list" "list.json: not a Chrome trace" python3 "$merge" "$dir/m3.json" "$dir/list.json"
expect_refused "missing" "missing.json: cannot read" python3 "$merge" "$dir/m3.json" "$dir/missing.json"
echo "megascale_trace_merge_test: ok"
