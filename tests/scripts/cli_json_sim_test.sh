#!/usr/bin/env bash
# `megascale sim --json -`: the document parses and has every field docs/CLI.md documents ("## megascale
# sim"), for one run (with an override, so `overrides` is not empty) and for --compare (a run each).
# Usage: cli_json_sim_test.sh MEGASCALE_BINARY SOURCE_DIR
set -uo pipefail
megascale=$1
src=$2
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
run_fields=(controller hosts switches flows completed failed fct_p50_us fct_p95_us fct_p99_us fct_max_us
  slowdown_p50 slowdown_p99 rate_fraction_mean goodput_gbps rtt_p50_mean_us rtt_p99_max_us drops
  link_down_drops ecn_marks pfc_pauses pfc_paused_us pfc_paused_ports retransmits timeouts events
  simulated_us throughput_mean_gbps throughput_peak_gbps queue_p50_bytes queue_p99_bytes queue_max_bytes
  collective offered_load fct_by_size[].lo_bytes fct_by_size[].flows fct_by_size[].completed
  fct_by_size[].slowdown_p50 fct_by_size[].slowdown_p95 fct_by_size[].slowdown_p99 fct_by_size[].fct_p50_us
  fct_by_size[].fct_p95_us fct_by_size[].fct_p99_us timing.wall_s timing.events_per_s timing.peak_rss_bytes)
fields=(scenario scenario_file seed overrides[] out_dir files[] "${run_fields[@]/#/runs[].}")
check=$src/tests/scripts/cli_json_check.py

"$megascale" sim "$src/configs/sim/incast-small.yaml" --quiet --no-plot --set workload.bytes=200000 \
  --out "$dir/one" --json - > "$dir/one.json" 2> "$dir/err" || fail "one run: $(cat "$dir/err")"
python3 "$check" "$dir/one.json" sim "${fields[@]}" || fail "one run's document"
"$megascale" sim "$src/configs/sim/incast-small.yaml" --quiet --no-plot --compare hybrid,swift --seed 3 \
  --out "$dir/two" --json "$dir/two.json" > /dev/null 2> "$dir/err" || fail "--compare: $(cat "$dir/err")"
python3 "$check" "$dir/two.json" sim "${fields[@]}" || fail "--compare's document"
# compare.json in the folder: the same document without the timing (the folder holds what the seed
# decides, nothing measured).
python3 - "$dir/two.json" "$dir/two/compare.json" <<'PY' || fail "compare.json is not the --json document less timing"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
for r in a["runs"]:
    del r["timing"]
assert a == b and len(b["runs"]) == 2 and [r["controller"] for r in b["runs"]] == ["hybrid", "swift"], (a, b)
PY
echo "cli_json_sim: one run and --compare documents have the documented fields"
