#!/usr/bin/env bash
# `megascale plugin-check --json` on the built MegaScale plugin, a few fast cases: the document has every
# field docs/CLI.md documents, each case's measurements are numbers under names that carry their units,
# the cases ran on lo (the default device), and `--json -` puts the document alone on standard output.
# Usage: cli_json_plugin_check_test.sh MEGASCALE_BINARY PLUGIN_SO SOURCE_DIR
set -uo pipefail
megascale=$1 plugin=$2 src=$3
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
check=$src/tests/scripts/cli_json_check.py
[[ -r $plugin ]] || { echo "no plugin at $plugin"; exit 77; }

fields=(plugin name abi_version device_count device_index device_name load_error passed passed_cases
        failed_cases skipped_cases elapsed_s 'cases[].name' 'cases[].verdict' 'cases[].passed'
        'cases[].skipped' 'cases[].elapsed_s' 'cases[].detail' 'cases[].warnings' 'cases[].measurements')
"$megascale" plugin-check "$plugin" --case load --case connect_accept_one_thread --case latency \
  --case throughput --json "$dir/all.json" > "$dir/all.out" 2>&1 || fail "plugin-check: $(cat "$dir/all.out")"
python3 "$check" "$dir/all.json" plugin-check "${fields[@]}" || fail "fields of $(cat "$dir/all.json")"
python3 - "$dir/all.json" <<'PY' || fail "measurements of $(cat "$dir/all.json")"
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["device_name"] == "lo", f"cases ran on {doc['device_name']!r}, not lo"
assert doc["passed"] and doc["passed_cases"] == 4 and doc["failed_cases"] == 0, doc
want = {
    "load": ["device_count"],
    "connect_accept_one_thread": ["first_connect_ms"],
    "latency": ["latency_us", "messages", "message_bytes"],
    "throughput": ["bandwidth_gbps", "bandwidth_GBps", "messages", "message_bytes", "inflight"],
}
cases = {c["name"]: c for c in doc["cases"]}
assert sorted(cases) == sorted(want), sorted(cases)
for name, fields in want.items():
    m = cases[name]["measurements"]
    for f in fields:
        v = m.get(f)
        assert isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0, f"{name}.{f} = {v!r}"
t = cases["throughput"]["measurements"]
assert abs(t["bandwidth_gbps"] - 8 * t["bandwidth_GBps"]) < 1e-6 * t["bandwidth_gbps"], t
assert cases["latency"]["measurements"]["message_bytes"] == 8
PY

# '-': the document alone on standard output, the case lines on standard error.
"$megascale" plugin-check "$plugin" --case throughput --json - > "$dir/stdout.json" 2> "$dir/stderr" ||
  fail "plugin-check --json -: $(cat "$dir/stderr")"
python3 "$check" "$dir/stdout.json" plugin-check "${fields[@]}" 'cases[].measurements.bandwidth_gbps' \
  'cases[].measurements.message_bytes' || fail "--json - wrote: $(head -5 "$dir/stdout.json")"
grep -q "PASS throughput" "$dir/stderr" || fail "no case line on standard error: $(cat "$dir/stderr")"
echo "plugin-check --json: every documented field, measurements as numbers, on lo"
