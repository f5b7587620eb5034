#!/usr/bin/env bash
# `megascale perf --loopback --baseline ucx`: a bw row over megascale's transport and again over UCX in
# one table with both columns and their ratio, and the same in the JSON document (baseline.rows, each
# rate above 0 and the ratio their quotient); --baseline without --loopback, or other than ucx, is
# refused (exit 2). Skipped (77) when the build has no UCX.
# usage: perf_ucx_baseline_test.sh MEGASCALE
set -uo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
megascale=$1

out=$("$megascale" perf --loopback --test bw -s 256K -n 400 --baseline ucx --json "$dir/perf.json" 2> "$dir/err")
rc=$?
if (( rc == 2 )) && grep -q "this build has no UCX" "$dir/err"; then
  echo "skipped: this build has no UCX"
  exit 77
fi
(( rc == 0 )) || fail "exit $rc: $(cat "$dir/err")"
grep -q "baseline: UCX [0-9.]* (UCP tag messages over [a-z0-9_/,]*)" <<< "$out" || fail "no baseline banner: $out"
grep -qE "^ #bytes +#iterations +megascale\[Gb/sec\] +ucx\[Gb/sec\] +megascale/ucx" <<< "$out" ||
  fail "no baseline header: $out"
grep -qE "^ 262144 +400 +[0-9.]+ +[0-9.]+ +[0-9.]+" <<< "$out" || fail "no baseline row: $out"
python3 - "$dir/perf.json" <<'PY' || fail "JSON: $(cat "$dir/perf.json")"
import json, sys
doc = json.load(open(sys.argv[1]))
b = doc["baseline"]
assert b["name"] == "ucx" and b["version"] and b["transports"], b
(row,) = b["rows"]
assert row["size_bytes"] == 262144 and row["iterations"] == 400, row
assert row["megascale_bw_average_gbps"] > 0 and row["ucx_bw_average_gbps"] > 0, row
assert abs(row["ratio"] - row["megascale_bw_average_gbps"] / row["ucx_bw_average_gbps"]) < 1e-9, row
assert doc["bw"][0]["bw_average_gbps"] == row["megascale_bw_average_gbps"], doc["bw"][0]
PY
expect_refused "--baseline without --loopback" "it needs --loopback" "$megascale" perf --test bw --baseline ucx
expect_refused "--baseline other" "--baseline 'iperf': the baseline is ucx" "$megascale" perf --loopback --baseline iperf
echo "perf_ucx_baseline_test: ok"
