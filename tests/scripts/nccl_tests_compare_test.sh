#!/usr/bin/env bash
# scripts/nccl-tests/compare.py on hand-made -J documents: nccl-tests' nested form and megascale coll's
# flat one, medians over the rounds, the ratios (coll / nccl-tests), each tool's own spread, a size only
# one tool has, the verdict line's counts, and a document that is not JSON refused with exit 2.
# Usage: nccl_tests_compare_test.sh SOURCE_DIR
set -uo pipefail
src=$1
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
tool=$src/scripts/nccl-tests/compare.py

python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
def doc(nested, rows):
    results = [{"size": s, "out_of_place": {"time": t, "bus_bw": b}} for s, t, b in rows]
    return {"run": {"results": results}} if nested else {"results": results}
# 1 KiB: nccl-tests 10 / 10.2 us (2.00 / 2.00 GB/s), coll 10.1 / 10.1 us (2.01 GB/s both rounds): within 2%,
# each tool steady. 1 MiB: nccl-tests 100 / 120 us, busbw 5 / 4: spread 1.25; coll 100 us, 4.5 GB/s.
# 8 B: only nccl-tests.
nt = [[(8, 5.0, 0.0), (1024, 10.0, 2.0), (1048576, 100.0, 5.0)],
      [(8, 5.0, 0.0), (1024, 10.2, 2.0), (1048576, 120.0, 4.0)]]
co = [[(1024, 10.1, 2.01), (1048576, 100.0, 4.5)], [(1024, 10.1, 2.01), (1048576, 100.0, 4.5)]]
for k in range(2):
    json.dump(doc(True, nt[k]), open(f"{d}/2-socket-all_reduce-{k + 1}.nccl-tests.json", "w"))
    json.dump(doc(False, co[k]), open(f"{d}/2-socket-all_reduce-{k + 1}.coll.json", "w"))
PY
python3 "$tool" rows "$dir" 2 socket all_reduce 2 > "$dir/results.jsonl" || fail "rows: exit $?"
python3 - "$dir/results.jsonl" <<'PY' || fail "rows: $(cat "$dir/results.jsonl")"
import json, sys
rows = {r["size"]: r for r in map(json.loads, open(sys.argv[1]))}
assert sorted(rows) == [8, 1024, 1048576], rows
assert rows[8]["coll_time_us"] is None and rows[8]["time_ratio"] is None, rows[8]
k = rows[1024]
assert abs(k["nccl_tests_time_us"] - 10.1) < 1e-9 and abs(k["time_ratio"] - 1.0) < 1e-9, k
assert abs(k["busbw_ratio"] - 1.005) < 1e-9 and k["nccl_tests_busbw_spread"] == 1.0, k
m = rows[1048576]
assert m["nccl_tests_time_us"] == 110.0 and abs(m["time_ratio"] - 100 / 110) < 1e-9, m
assert m["nccl_tests_busbw"] == 4.5 and m["busbw_ratio"] == 1.0 and m["nccl_tests_busbw_spread"] == 1.25, m
PY
out=$(python3 "$tool" table "$dir/results.jsonl") || fail "table: exit $?"
grep -qF "1 of 3 sizes within 2% on both time and busbw; 1 sizes where each tool's own busbw moved 2% or less" \
  <<< "$out" || fail "verdict: $out"
grep -qF "| 2 | socket | all_reduce | 1048576 | 110.00 | 100.00 | 0.909 | 4.50 | 4.50 | 1.000 | 1.250; 1.000 |" \
  <<< "$out" || fail "table row: $out"

echo 'nope' > "$dir/2-socket-all_gather-1.coll.json"
expect_refused "not JSON" "2-socket-all_gather-1.coll.json: not JSON" \
  python3 "$tool" rows "$dir" 2 socket all_gather 1
echo "nccl_tests_compare_test: ok"
