#!/usr/bin/env bash
# `megascale ceiling --json`: short rows write the document docs/CLI.md describes, to a file and
# (`--json -`) to standard output with the table on standard error.
# usage: cli_json_ceiling_test.sh MEGASCALE SOURCE_DIR
set -uo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
megascale=$1
check="$2/tests/scripts/cli_json_check.py"

fields=(command schema_version status errors config.pairs config.duration_s config.udp_size_bytes
  config.tcp_size_bytes config.window config.batch config.ipv6)
for f in row proto copy crc size_bytes duration_s goodput_gbps goodput_GBps payload_received_bytes \
  messages_sent messages_received host_cores sender_cores receiver_cores host_cpu_s sender_cpu_s \
  receiver_cpu_s payload_GBps_per_cpu cpu_per_kib_ns added_over added_cpu_per_kib_ns lost out_of_order \
  crc_errors rcvbuf_bytes; do
  fields+=("rows[].$f")
done

"$megascale" ceiling --rows tcp,udp,udp+copy+crc --pairs 1 -D 200ms -s 16K --tcp-size 32K \
  --json "$dir/ceiling.json" > "$dir/table" 2>&1 || fail "ceiling --json FILE: $(cat "$dir/table")"
grep -q "^udp+copy+crc " "$dir/table" || fail "ceiling --json FILE: no table on standard output"
python3 "$check" "$dir/ceiling.json" ceiling "${fields[@]}" || fail "ceiling --json FILE: $(cat "$dir/ceiling.json")"
python3 - "$dir/ceiling.json" <<'PY' || fail "ceiling --json FILE: values"
import json, sys
d = json.load(open(sys.argv[1]))
rows = d["rows"]
assert [r["row"] for r in rows] == ["tcp", "udp", "udp+copy+crc"], rows
assert [r["size_bytes"] for r in rows] == [32768, 16384, 16384], rows
assert d["config"]["duration_s"] == 0.2, d["config"]
assert [r["added_over"] for r in rows] == ["", "", "udp"], rows
assert all(r["goodput_gbps"] > 0 and r["payload_received_bytes"] > 0 for r in rows), rows
assert rows[2]["crc_errors"] == 0 and d["status"] == "ok" and d["errors"] == [], d
PY

"$megascale" ceiling --rows udp --pairs 1 -D 200ms --json - > "$dir/stdout" 2> "$dir/stderr" \
  || fail "ceiling --json -: $(cat "$dir/stderr")"
grep -q "^udp " "$dir/stderr" || fail "ceiling --json -: the table is not on standard error"
python3 "$check" - ceiling "${fields[@]}" < "$dir/stdout" || fail "ceiling --json -: $(cat "$dir/stdout")"

expect_refused "-D unit" "unknown time unit" "$megascale" ceiling -D 3parsecs
expect_refused "-s unit" "unknown size unit" "$megascale" ceiling -s 32X
echo "PASS"
