#!/usr/bin/env bash
# A soak run of the transport on this host's loopback, for MINUTES: rounds of
#   1. `megascale perf` as a server and a client (two processes), bandwidth rows both ways at once (-b)
#      and latency rows, every byte of every message checked (--check);
#   2. `megascale perf --loopback`, bandwidth both ways, every byte checked, a message size that changes
#      from round to round (4 KiB .. 8 MiB);
#   3. the NCCL plugin's conformance cases (`megascale plugin-check`), when the plugin is built;
# with mixed faults injected on every datagram received (MEGASCALE_FAULT_*: drop, duplicate, reorder,
# corrupt; a new seed each round). Each tool writes JSON (--json) and the script reads only that. At the
# end it prints one summary (runs, bytes moved, faults injected, junk dropped, errors) and a last line
# `N passed, M failed`, and writes it as JSON.
#
#   scripts/soak.sh MINUTES [BUILD_DIR]     # BUILD_DIR defaults to build/
#
# A run fails when its tool exits non-zero, its JSON is missing or says so, a row verified fewer
# messages than it moved, or a plugin case failed. Exit status 1 when any run failed, 2 on bad arguments.
# Environment: OUT (default: a new temporary folder) keeps every run's output and JSON and the summary
# (OUT/soak.json); FAULTS (default "DROP=0.01 DUP=0.01 REORDER=0.02 CORRUPT=0.005") sets the
# MEGASCALE_FAULT_* knobs; PLUGIN_CASES (default: all) names the conformance cases to run, comma
# separated.
set -uo pipefail

die() { echo "soak: $*" >&2; exit 2; }
(( $# >= 1 && $# <= 2 )) || die "usage: scripts/soak.sh MINUTES [BUILD_DIR]"
minutes=$1 build=${2:-build}
[[ $minutes =~ ^[1-9][0-9]*$ ]] || die "MINUTES=$minutes: whole minutes, 1 or more"
megascale=$build/cli/megascale
plugin=$build/collectives/nccl/libnccl-net-megascale.so
[[ -x $megascale ]] || die "no $megascale: build the megascale target first"
command -v python3 >/dev/null || die "python3 is needed to read the tools' JSON"
out=${OUT:-$(mktemp -d -t megascale-soak.XXXXXX)}
mkdir -p "$out" || die "cannot create $out"
faults=${FAULTS:-DROP=0.01 DUP=0.01 REORDER=0.02 CORRUPT=0.005}
fault_env=()
for f in $faults; do
  [[ $f =~ ^[A-Z_]+=[0-9.]+$ ]] || die "FAULTS: '$f' is not KNOB=VALUE (e.g. DROP=0.01)"
  fault_env+=("MEGASCALE_FAULT_$f")
done
case_flags=()
if [[ -n ${PLUGIN_CASES:-} ]]; then
  IFS=, read -r -a cases <<<"$PLUGIN_CASES"
  for c in "${cases[@]}"; do case_flags+=(--case "$c"); done
fi
[[ -f $plugin ]] || echo "soak: no $plugin: the plugin's conformance runs are left out"

# A UDP port with `lanes` free ports above it, for the server (it binds one per lane).
free_port() {
  python3 - "$1" <<'EOF'
import socket, sys
lanes = int(sys.argv[1])
for _ in range(200):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    if port + lanes > 65535:
        continue
    try:
        held = []
        for p in range(port, port + lanes):
            t = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            t.bind(("127.0.0.1", p))
            held.append(t)
        print(port)
        sys.exit(0)
    except OSError:
        pass
    finally:
        for t in held:
            t.close()
sys.exit(1)
EOF
}

# One perf JSON -> "bytes faults junk problem" (problem "-" when the rows are whole).
read_perf() {
  python3 - "$1" <<'EOF'
import json, sys
try:
    doc = json.load(open(sys.argv[1]))
except (OSError, ValueError) as e:
    print(0, 0, 0, "no JSON (%s)" % e.__class__.__name__)
    sys.exit(0)
moved = faults = junk = 0
problem = "-"
if doc.get("status") != "ok":
    problem = "status %s: %s" % (doc.get("status"), doc.get("error", "")[:200].replace("\n", " "))
rows = [("bw", r) for r in doc.get("bw", [])] + [("lat", r) for r in doc.get("lat", [])]
if not rows and problem == "-":
    problem = "no rows"
for kind, r in rows:
    ways = 2 if kind == "lat" or r.get("bidirectional") else 1
    messages = ways * r["iterations"]
    moved += r["size_bytes"] * messages
    c = r.get("counters", {})
    faults += c.get("faults_injected", 0)
    junk += c.get("junk_dropped", 0)
    # A latency row also checks its warm-up round trips; never fewer than it timed.
    if r.get("verified_messages", 0) < messages and problem == "-":
        problem = "%s row of %d B: %d of %d messages verified" % (
            kind, r["size_bytes"], r.get("verified_messages", 0), messages)
print(moved, faults, junk, problem.replace(" ", "_") if problem != "-" else "-")
EOF
}

# One plugin-check JSON -> "passed failed problem".
read_plugin() {
  python3 - "$1" <<'EOF'
import json, sys
try:
    doc = json.load(open(sys.argv[1]))
except (OSError, ValueError) as e:
    print(0, 0, "no_JSON")
    sys.exit(0)
cases = doc.get("cases", [])
bad = [c["name"] for c in cases if not c.get("passed") and not c.get("skipped")]
good = [c for c in cases if c.get("passed")]
print(len(good), len(bad), ",".join(bad) if bad else "-")
EOF
}

runs=0 passed=0 failed=0 bytes=0 faults_total=0 junk_total=0 cases_passed=0 cases_failed=0
failures=()
record() {  # NAME OK(0/1) DETAIL
  runs=$((runs + 1))
  if [[ $2 == 0 ]]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    failures+=("$1: $3")
    echo "soak: FAIL $1: $3 (output: $out/$1.*)"
  fi
}

sizes=(4096 65536 1048576 8388608)
started=$SECONDS
deadline=$((SECONDS + minutes * 60))
round=0
echo "soak: $minutes min on loopback, faults: $faults; output in $out"
while (( SECONDS < deadline )); do
  round=$((round + 1))
  seed=$((1000 + round))
  env_round=("${fault_env[@]}" "MEGASCALE_FAULT_SEED=$seed")

  # 1. Server and client processes.
  name=r$round-server-client
  lanes=2
  port=$(free_port $lanes) || { record "$name" 1 "no free UDP port"; continue; }
  env "${env_round[@]}" "$megascale" perf -p "$port" --lanes $lanes --timeout 60 --json "$out/$name.server.json" \
    >"$out/$name.server.log" 2>&1 &
  server_pid=$!
  client_rc=1
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    env "${env_round[@]}" "$megascale" perf -p "$port" 127.0.0.1 --lanes $lanes --timeout 60 -b --check \
      -s 262144 -n 200 --json "$out/$name.client.json" >"$out/$name.client.log" 2>&1
    client_rc=$?
    # Before the server binds, the connection attempt fails: try again shortly.
    if (( client_rc == 0 )) || ! grep -q "connect to" "$out/$name.client.log"; then break; fi
    sleep 0.3
  done
  wait "$server_pid"
  server_rc=$?
  read -r moved f j problem <<<"$(read_perf "$out/$name.client.json")"
  read -r _ _ _ sproblem <<<"$(read_perf "$out/$name.server.json")"
  bytes=$((bytes + moved)) faults_total=$((faults_total + f)) junk_total=$((junk_total + j))
  if (( client_rc != 0 || server_rc != 0 )); then
    record "$name" 1 "exit status client $client_rc, server $server_rc ($problem)"
  elif [[ $problem != - ]]; then
    record "$name" 1 "client: ${problem//_/ }"
  elif [[ $sproblem != - ]]; then
    record "$name" 1 "server: ${sproblem//_/ }"
  else
    record "$name" 0 ""
  fi

  # 2. Both sides in one process, a size that changes each round.
  size=${sizes[$(( (round - 1) % ${#sizes[@]} ))]}
  iters=$(( (256 << 20) / size ))
  (( iters > 2000 )) && iters=2000
  name=r$round-loopback-$size
  env "${env_round[@]}" "$megascale" perf --loopback --test bw -b --check -s "$size" -n "$iters" --timeout 60 \
    --json "$out/$name.json" >"$out/$name.log" 2>&1
  rc=$?
  read -r moved f j problem <<<"$(read_perf "$out/$name.json")"
  bytes=$((bytes + moved)) faults_total=$((faults_total + f)) junk_total=$((junk_total + j))
  if (( rc != 0 )); then
    record "$name" 1 "exit status $rc (${problem//_/ })"
  elif [[ $problem != - ]]; then
    record "$name" 1 "${problem//_/ }"
  else
    record "$name" 0 ""
  fi

  # 3. The plugin's conformance cases (no faults: its own cases inject what they test).
  if [[ -f $plugin ]] && (( SECONDS < deadline )); then
    name=r$round-plugin-check
    "$megascale" plugin-check "$plugin" "${case_flags[@]}" --json "$out/$name.json" >"$out/$name.log" 2>&1
    rc=$?
    read -r good bad which <<<"$(read_plugin "$out/$name.json")"
    cases_passed=$((cases_passed + good)) cases_failed=$((cases_failed + bad))
    if (( rc != 0 )); then
      record "$name" 1 "exit status $rc (failed cases: $which)"
    elif [[ $which != - ]]; then
      record "$name" 1 "failed cases: $which"
    else
      record "$name" 0 ""
    fi
  fi
  echo "soak: round $round done at $((SECONDS - started)) s: $runs runs, $failed failed, $((bytes >> 20)) MiB moved"
done

elapsed=$((SECONDS - started))
python3 - "$out/soak.json" "$minutes" "$elapsed" "$runs" "$passed" "$failed" "$bytes" "$faults_total" \
  "$junk_total" "$cases_passed" "$cases_failed" "$faults" "${failures[@]}" <<'EOF'
import json, sys
a = sys.argv
keys = ["minutes", "seconds", "runs", "passed", "failed", "bytes_moved", "faults_injected", "junk_dropped",
        "plugin_cases_passed", "plugin_cases_failed"]
doc = {k: int(v) for k, v in zip(keys, a[2:12])}
doc["faults"] = a[12]
doc["failures"] = a[13:]
with open(a[1], "w") as f:
    json.dump(doc, f, indent=2)
    f.write("\n")
EOF
echo "=== soak summary ($elapsed s, faults $faults)"
echo "runs                 $runs ($round rounds)"
echo "bytes moved          $bytes ($((bytes >> 20)) MiB, every byte checked by its receiver)"
echo "faults injected      $faults_total (junk datagrams dropped: $junk_total)"
echo "plugin cases         $cases_passed passed, $cases_failed failed"
echo "errors               $failed"
for f in "${failures[@]}"; do echo "  $f"; done
echo "summary JSON         $out/soak.json"
echo "$passed passed, $failed failed"
(( failed == 0 && runs > 0 ))
