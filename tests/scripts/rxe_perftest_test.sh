#!/usr/bin/env bash
# perftest's baseline on rxe without booting a guest: scripts/rxe/rxe-perftest's parser on perftest
# outputs captured in a guest (ib_write_bw, ib_send_bw -c UD, ib_write_lat: the PERFTEST-JSON line,
# and refusals of a table not in Gb/s, of another size, of no table, of zeros), its runs over
# stand-in perftest programs (the flags, the side that reports, failures), the commands files, and
# scripts/rxe/ratio.py on hand-made baseline and `megascale perf --json` documents (ratios per size, the
# UD baseline at the MTU, --sizes, --min-bw-ratio, --json, and a clear error for a size missing on
# either side, an ambiguous --guests, a failed run, no wire).
# Usage: rxe_perftest_test.sh SOURCE_DIR
set -uo pipefail
src=$1
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=../../scripts/rxe/lib.sh
source "$src/scripts/rxe/lib.sh"
data=$src/tests/scripts/data/rxe-perftest
perftest=$src/scripts/rxe/rxe-perftest
ratio=$src/scripts/rxe/ratio.py

# --- the guest's parser (POSIX sh and awk here; busybox's in the guest)
want='PERFTEST-JSON {"tool":"ib_write_bw","mode":"rc","test":"bw","guests":1,"size_bytes":4194304,"iterations":16,"bw_peak_gbps":0.103754,"bw_avg_gbps":0.071546,"msg_rate_mpps":0.000002}'
got=$(sh "$perftest" parse write_bw 4194304 <"$data/write-bw-4m.txt") || fail "write_bw: exit status $?: $got"
[ "$got" = "$want" ] || fail "write_bw: $got"
got=$(RXE_GUESTS=2 sh "$perftest" parse send_bw_ud 1024 <"$data/send-bw-ud.txt") || fail "send_bw_ud: $got"
want='PERFTEST-JSON {"tool":"ib_send_bw","mode":"ud","test":"bw","guests":2,"size_bytes":1024,"iterations":20000,"bw_peak_gbps":0.084256,"bw_avg_gbps":0.021388,"msg_rate_mpps":0.002611}'
[ "$got" = "$want" ] || fail "send_bw_ud: $got"
got=$(sh "$perftest" parse write_lat 8 <"$data/write-lat-8.txt") || fail "write_lat: $got"
want='PERFTEST-JSON {"tool":"ib_write_lat","mode":"rc","test":"lat","guests":1,"size_bytes":8,"iterations":2000,"t_min_us":23.28,"t_max_us":14406.96,"t_typical_us":40.62,"t_avg_us":979.92,"t_stdev_us":2229.72,"t_p99_us":8607.06,"t_p999_us":14246.26}'
[ "$got" = "$want" ] || fail "write_lat: $got"
# A standard deviation of -nan (its sum of squares overflowed on a run with long stalls) is null.
got=$(sed 's/2229\.72/-nan/' "$data/write-lat-8.txt" | sh "$perftest" parse write_lat 8) || fail "write_lat -nan: $got"
[ "$got" = "${want/2229.72/null}" ] || fail "write_lat -nan: $got"
# Every line parses as JSON with the fields ratio.py reads.
for f in write-bw-4m:write_bw:4194304 send-bw-ud:send_bw_ud:1024 write-lat-8:write_lat:8; do
  IFS=: read -r file test size <<<"$f"
  sh "$perftest" parse "$test" "$size" <"$data/$file.txt"
done >"$dir/parsed.jsonl"
python3 "$ratio" "$dir/parsed.jsonl" >"$dir/table" || fail "ratio.py refused the parser's lines: $(cat "$dir/table")"
grep -qE '^ib_write_lat +rc +1 +8 B +2000 +- +- +40\.62$' "$dir/table" || fail "baseline table: $(cat "$dir/table")"

# parse_refused TEST SIZE MESSAGE: the parser exits 1 and says MESSAGE on the input in $dir/in.
parse_refused() {
  local got
  got=$(sh "$perftest" parse "$1" "$2" <"$dir/in")
  (($? == 1)) || fail "parse $1 $2: not refused: $got"
  grep -qF -- "$3" <<<"$got" || fail "parse $1 $2: message: $got"
}
sed 's/BW peak\[Gb\/sec\]/BW peak[MB\/sec]/' "$data/write-bw-4m.txt" >"$dir/in"
parse_refused write_bw 4194304 "the bandwidth is not in Gb/s (no --report_gbits?)"
cp "$data/write-bw-4m.txt" "$dir/in"
parse_refused write_bw 65536 "a row for 4194304 bytes, not 65536"
sed 's/t_typical/t_median/' "$data/write-lat-8.txt" >"$dir/in"
parse_refused write_lat 8 "no t_typical column"
# perftest's UD sender prints zeros at times: no figure.
sed 's/0\.084256            0\.021388            0\.002611/0.000000 0.000000 0.000000/' "$data/send-bw-ud.txt" >"$dir/in"
parse_refused send_bw_ud 1024 "an average bandwidth of 0"
grep -v '^ 4194304' "$data/write-bw-4m.txt" >"$dir/in"
parse_refused write_bw 4194304 "no result row under a #bytes header"
expect_refused "unknown test" "unknown test 'read_bw'" sh "$perftest" parse read_bw 8
expect_refused "bad role" "unknown role 'both2'" sh "$perftest" write_bw 8 10 18601 both2
expect_refused "bad size" "SIZE must be a whole number of bytes or mtu, not '64K'" \
  env RXE_DEV=rxe0 sh "$perftest" write_bw 64K 10 18601 both

# --- rxe-perftest's runs on the host with stand-in perftest programs (each prints a side's canned
# table and records its arguments): which side reports, the flags perftest gets, `mtu`, failures.
mkdir -p "$dir/bin"
cp "$src/scripts/rxe/rxe-retry" "$dir/bin/"
cat >"$dir/bin/fake-perftest" <<'SH'
#!/bin/sh
# The client is the side given the peer's address (the last argument).
for a; do last=$a; done
case $last in 10.*) side=client ;; *) side=server ;; esac
tool=$(basename "$0")
echo "$tool $side $*" >>"$FAKE_DIR/calls"
[ "${FAKE_FAIL:-}" = "$side" ] && { echo "$tool: failed to modify QP to RTR"; exit 1; }
# clock-fails N: the client's next N runs fail to measure the CPU clock and print zeros.
n=$(cat "$FAKE_DIR/clock-fails" 2>/dev/null || echo 0)
if [ "$side" = client ] && [ "$n" -gt 0 ]; then
  echo $((n - 1)) >"$FAKE_DIR/clock-fails"
  echo "Correlation coefficient r^2: 0.00277497 < 0.9"
  exec cat "$FAKE_DIR/$tool-zeros.txt"
fi
cat "$FAKE_DIR/$tool-$side.txt"
SH
chmod +x "$dir/bin/fake-perftest"
for t in ib_write_bw ib_send_bw ib_write_lat; do ln -s fake-perftest "$dir/bin/$t"; done
printf '#!/bin/sh\nprintf "\\t\\t\\tactive_mtu:\\t\\t1024 (3)\\n"\n' >"$dir/bin/ibv_devinfo"
chmod +x "$dir/bin/ibv_devinfo"
sed 's/0\.103754            0\.071546            0\.000002/0.000000 0.000000 0.000000/' "$data/write-bw-4m.txt" \
  >"$dir/ib_write_bw-zeros.txt"
for side in client server; do
  cp "$data/write-bw-4m.txt" "$dir/ib_write_bw-$side.txt"
  cp "$data/write-lat-8.txt" "$dir/ib_write_lat-$side.txt"
done
# perftest's UD sender prints zeros at times; the receiver's figures are what arrived.
sed 's/0\.084256            0\.021388            0\.002611/0.000000 0.000000 0.000000/' "$data/send-bw-ud.txt" \
  >"$dir/ib_send_bw-client.txt"
cp "$data/send-bw-ud.txt" "$dir/ib_send_bw-server.txt"
# guest_run ARGS...: rxe-perftest ARGS as a guest runs it (one guest: RXE_PEER is RXE_SELF).
guest_run() {
  : >"$dir/calls"
  env PATH="$dir/bin:$PATH" FAKE_DIR="$dir" RXE_DEV=rxe0 RXE_GID=1 RXE_SELF=10.58.0.1 \
    RXE_PEER="${PEER:-10.58.0.1}" sh "$perftest" "$@" >"$dir/run.out" 2>&1
}
guest_run write_bw 4194304 16 18604 both || fail "write_bw both: exit $?: $(cat "$dir/run.out")"
grep -qx 'PERFTEST-JSON {"tool":"ib_write_bw",.*"guests":1,"size_bytes":4194304,"iterations":16,.*}' "$dir/run.out" ||
  fail "write_bw both: $(cat "$dir/run.out")"
grep -qx 'ib_write_bw server -d rxe0 -x 1 -s 4194304 -n 16 -p 18604 -F --report_gbits' "$dir/calls" ||
  fail "write_bw server's flags: $(cat "$dir/calls")"
grep -qx 'ib_write_bw client -d rxe0 -x 1 -s 4194304 -n 16 -p 18604 -F --report_gbits 10.58.0.1' "$dir/calls" ||
  fail "write_bw client's flags: $(cat "$dir/calls")"
grep -q '^server:  #bytes' "$dir/run.out" || fail "write_bw both: the server's output is not shown"
guest_run send_bw_ud mtu 20000 18605 both || fail "send_bw_ud both (the receiver's figures): $(cat "$dir/run.out")"
grep -qF '"tool":"ib_send_bw","mode":"ud","test":"bw","guests":1,"size_bytes":1024,"iterations":20000,"bw_peak_gbps":0.084256' \
  "$dir/run.out" || fail "send_bw_ud both: $(cat "$dir/run.out")"
grep -qx 'ib_send_bw client -c UD -d rxe0 -x 1 -s 1024 -n 20000 -p 18605 -F --report_gbits 10.58.0.1' "$dir/calls" ||
  fail "send_bw_ud client's flags: $(cat "$dir/calls")"
# Two guests: the UD server (guest 1) reports, its client does not; RDMA writes the other way round.
PEER=10.58.0.2 guest_run send_bw_ud mtu 20000 18605 server || fail "send_bw_ud server: $(cat "$dir/run.out")"
grep -q '^PERFTEST-JSON .*"guests":2,.*"bw_avg_gbps":0.021388' "$dir/run.out" || fail "send_bw_ud server: $(cat "$dir/run.out")"
PEER=10.58.0.1 guest_run send_bw_ud mtu 20000 18605 client || fail "send_bw_ud client: $(cat "$dir/run.out")"
grep -q PERFTEST-JSON "$dir/run.out" && fail "send_bw_ud client printed figures: $(cat "$dir/run.out")"
PEER=10.58.0.2 guest_run write_lat 8 2000 18606 server || fail "write_lat server: $(cat "$dir/run.out")"
grep -q PERFTEST-JSON "$dir/run.out" && fail "write_lat server printed figures"
grep -qx 'ib_write_lat server -d rxe0 -x 1 -s 8 -n 2000 -p 18606 -F' "$dir/calls" || fail "write_lat flags: $(cat "$dir/calls")"
PEER=10.58.0.1 guest_run write_lat 8 2000 18606 client || fail "write_lat client: $(cat "$dir/run.out")"
grep -q '^PERFTEST-JSON .*"t_typical_us":40.62' "$dir/run.out" || fail "write_lat client: $(cat "$dir/run.out")"
# perftest's failed clock measurement (zeros): tried again with both sides in the guest, up to 3 times.
echo 1 >"$dir/clock-fails"
guest_run write_bw 4194304 16 18604 both || fail "one clock failure: $(cat "$dir/run.out")"
grep -qx 'rxe-perftest: perftest could not measure the CPU clock (attempt 1 of 3): running again' "$dir/run.out" ||
  fail "one clock failure: $(cat "$dir/run.out")"
grep -q '^PERFTEST-JSON .*"bw_avg_gbps":0.071546' "$dir/run.out" || fail "one clock failure: no figures"
(($(grep -c '^ib_write_bw client' "$dir/calls") == 2)) || fail "one clock failure: $(cat "$dir/calls")"
echo 5 >"$dir/clock-fails"
guest_run write_bw 4194304 16 18604 both
(($? == 1)) || fail "clock failures: exit status"
grep -qx 'rxe-perftest: perftest could not measure the CPU clock (the host is too loaded): no figure' "$dir/run.out" ||
  fail "clock failures: $(cat "$dir/run.out")"
(($(grep -c '^ib_write_bw client' "$dir/calls") == 3)) || fail "clock failures: $(cat "$dir/calls")"
# Across guests the server has ended: no second try.
echo 1 >"$dir/clock-fails"
PEER=10.58.0.1 guest_run write_bw 4194304 16 18604 client
(($? == 1)) && grep -qF 'no figure' "$dir/run.out" || fail "a client's clock failure: $(cat "$dir/run.out")"
(($(grep -c '^ib_write_bw client' "$dir/calls") == 1)) || fail "a client's clock failure: tried again"
rm -f "$dir/clock-fails"
# A side that fails fails the run, named; the other side's zeros fail it too.
FAKE_FAIL=server guest_run write_bw 4194304 16 18604 both
(($? == 1)) || fail "a failed server: exit status"
grep -qx 'rxe-perftest: the ib_write_bw server exited with status 1' "$dir/run.out" || fail "a failed server: $(cat "$dir/run.out")"
cp "$dir/ib_send_bw-client.txt" "$dir/ib_send_bw-server.txt"
guest_run send_bw_ud mtu 20000 18605 both
(($? == 1)) && grep -qF 'an average bandwidth of 0' "$dir/run.out" || fail "UD zeros: $(cat "$dir/run.out")"

# --- the perftest commands files: one run per size and tool, a client and a server per run on two guests
for m in 1 2; do
  mkdir -p "$dir/cmds-$m"
  f=$src/scripts/rxe/perftest-one-guest.cmds
  [ "$m" = 2 ] && f=$src/scripts/rxe/perftest-two-guests.cmds
  rxe_parse_commands "$f" "$m" "$dir/cmds-$m" || fail "$f refused"
  runs=$(cat "$dir/cmds-$m"/commands-* | cut -f3 | grep -c ' both$\| client$')
  ((runs == 6)) || fail "$f: $runs client runs, want 6"
  for s in 'write_bw 65536' 'write_bw 262144' 'write_bw 1048576' 'write_bw 4194304' 'send_bw_ud mtu' 'write_lat 8'; do
    grep -q "rxe-perftest $s " "$dir/cmds-$m/commands-$m" || fail "$f: no client run of $s on guest $m"
  done
done
cut -f3 "$dir/cmds-2/commands-1" | grep -qv ' server$' && fail "two guests: guest 1 runs more than servers"
# test-rxe.sh --perftest (or MEGASCALE_RXE_PERFTEST=1) appends them; without it, none.
list=$("$src/scripts/test-rxe.sh" --perftest --list) || fail "--perftest --list: exit status"
grep -qx '  perf-write-bw-4m: rxe-perftest write_bw 4194304 16 18604 both' <<<"$list" || fail "--perftest --list: $list"
grep -qx '  perf-write-lat-8: rxe-perftest write_lat 8 200 18606 client' <<<"$list" || fail "--perftest --list: guest 2"
list=$(MEGASCALE_RXE_PERFTEST=1 "$src/scripts/test-rxe.sh" --guests 1 --list) || fail "MEGASCALE_RXE_PERFTEST=1 --list"
grep -q 'rxe-perftest' <<<"$list" || fail "MEGASCALE_RXE_PERFTEST=1: no perftest runs"
list=$("$src/scripts/test-rxe.sh" --list) || fail "--list"
grep -q 'rxe-perftest' <<<"$list" && fail "perftest runs without --perftest"
expect_refused "MEGASCALE_RXE_PERFTEST=yes" "MEGASCALE_RXE_PERFTEST must be 0 or 1, not 'yes'" \
  env MEGASCALE_RXE_PERFTEST=yes "$src/scripts/test-rxe.sh" --list

# --- ratio.py
out=$(python3 "$ratio" "$data/baseline.jsonl" "$data/perf-rc.json" --guests 1 --json "$dir/rc.json")
rc=$?
echo "$out"
((rc == 0)) || fail "ratio.py rc: exit $rc"
grep -qE '^ +64 KiB +0\.099 +0\.110 +0\.90 ' <<<"$out" || fail "the 64 KiB row"
grep -qE '^ +1 MiB +0\.120 +0\.160 +0\.75 ' <<<"$out" || fail "the 1 MiB row"
grep -qE '^ +4 MiB +0\.100 +0\.080 +1\.25 ' <<<"$out" || fail "the 4 MiB row"
grep -qE '^ +8 B +60\.00 +40\.00 +1\.50$' <<<"$out" || fail "the latency row"
python3 - "$dir/rc.json" <<'PY' || fail "rc.json"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["wire"] == "verbs-rc" and d["guests"] == 1 and d["bw_tool"] == "ib_write_bw", d
assert [r["size_bytes"] for r in d["bw"]] == [65536, 262144, 1048576, 4194304], d["bw"]
assert [r["ratio"] for r in d["bw"]] == [0.9, 1.0, 0.75, 1.25], d["bw"]
assert d["bw"][1]["peak_ratio"] == 1.25, d["bw"][1]
assert d["lat"] == [{"size_bytes": 8, "megascale_t_typical_us": 60, "baseline_t_typical_us": 40, "ratio": 1.5}], d["lat"]
PY
# --min-bw-ratio: exit 1 naming the sizes below it; --json - puts the table on standard error.
python3 "$ratio" "$data/baseline.jsonl" "$data/perf-rc.json" --guests 1 --min-bw-ratio 0.8 --json - \
  >"$dir/stdout" 2>"$dir/stderr"
(($? == 1)) || fail "--min-bw-ratio 0.8: exit status"
grep -qF 'bandwidth ratio below 0.8 at 1 MiB' "$dir/stderr" || fail "--min-bw-ratio: $(cat "$dir/stderr")"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["below_min_bw_ratio"]==[1048576], d' \
  "$dir/stdout" || fail "--json -: $(cat "$dir/stdout")"
# verbs-ud (named in config.transport): every size against the one UD row at the MTU.
out=$(python3 "$ratio" "$data/baseline.jsonl" "$data/perf-ud.json") || fail "ratio.py ud: $out"
echo "$out"
grep -qF 'verbs-ud against ib_send_bw, 1 guest(s) (perftest at 1024 B, the largest UD message)' <<<"$out" ||
  fail "the UD heading"
grep -qE '^ +64 KiB +0\.030 +0\.020 +1\.50 ' <<<"$out" || fail "the UD 64 KiB row"
grep -qE '^ +256 KiB +0\.010 +0\.020 +0\.50 ' <<<"$out" || fail "the UD 256 KiB row"
# A UD baseline row without a peak (perftest's receiver prints 0): no peak ratio, the average's stands.
sed 's/"bw_peak_gbps":0.08,/"bw_peak_gbps":0,/' "$data/baseline.jsonl" >"$dir/nopeak.jsonl"
out=$(python3 "$ratio" "$dir/nopeak.jsonl" "$data/perf-ud.json" --json "$dir/ud.json") || fail "no UD peak: $out"
grep -qE '^ +64 KiB +0\.030 +0\.020 +1\.50 +0\.190 +0\.000 +-$' <<<"$out" || fail "no UD peak: $out"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["bw"][0]["peak_ratio"] is None, d' "$dir/ud.json" ||
  fail "no UD peak: peak_ratio"
# Several documents (a run per size) read as one; one wire at a time.
python3 - "$data/perf-rc.json" "$dir" <<'PY' || fail "splitting perf-rc.json"
import json, sys
d = json.load(open(sys.argv[1]))
for i, row in enumerate(d["bw"]):
    json.dump(dict(d, bw=[row], lat=d["lat"] if i == 0 else []), open(f"{sys.argv[2]}/one-{i}.json", "w"))
PY
out=$(python3 "$ratio" "$data/baseline.jsonl" "$dir"/one-{0,1,2,3}.json --guests 1) || fail "four documents: $out"
grep -qE '^ +4 MiB +0\.100 +0\.080 +1\.25 ' <<<"$out" && grep -qE '^ +8 B +60\.00' <<<"$out" || fail "four documents: $out"
expect_refused "documents missing a size" \
  "size 256 KiB (262144 B): in the baseline's ib_write_bw rows but not in the megascale documents' bw[] rows" \
  python3 "$ratio" "$data/baseline.jsonl" "$dir"/one-{0,2,3}.json --guests 1
expect_refused "two wires" "$data/perf-ud.json ran verbs-ud, $dir/one-0.json verbs-rc: one wire at a time" \
  python3 "$ratio" "$data/baseline.jsonl" "$dir/one-0.json" "$data/perf-ud.json" --guests 1
# --sizes picks sizes; a size missing on either side is an error naming it.
python3 "$ratio" "$data/baseline.jsonl" "$data/perf-rc-no-4m.json" --guests 1 --sizes 64K,256KiB,1M >/dev/null ||
  fail "--sizes 64K,256KiB,1M"
expect_refused "4 MiB missing in megascale's rows" \
  "size 4 MiB (4194304 B): in the baseline's ib_write_bw rows but not in $data/perf-rc-no-4m.json's bw[] rows" \
  python3 "$ratio" "$data/baseline.jsonl" "$data/perf-rc-no-4m.json" --guests 1
expect_refused "256 KiB missing in the baseline" \
  "size 256 KiB (262144 B): in $data/perf-rc.json's bw[] rows but not in the baseline's ib_write_bw rows" \
  python3 "$ratio" "$data/baseline.jsonl" "$data/perf-rc.json" --guests 2
expect_refused "a size on neither side" "size 2 MiB (2097152 B): in neither" \
  python3 "$ratio" "$data/baseline.jsonl" "$data/perf-rc.json" --guests 1 --sizes 2M
expect_refused "guests ambiguous" "has ib_write_bw rows of 1, 2 guests: pick one with --guests" \
  python3 "$ratio" "$data/baseline.jsonl" "$data/perf-rc.json"
expect_refused "wire contradicted" "--wire verbs-ud, but $data/perf-rc.json ran verbs-rc" \
  python3 "$ratio" "$data/baseline.jsonl" "$data/perf-rc.json" --wire verbs-ud
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d["config"]={"transport": "udp"}; json.dump(d, open(sys.argv[2], "w"))' \
  "$data/perf-rc.json" "$dir/udp.json"
expect_refused "no wire" "names no verbs wire in config.wire or config.transport: give --wire" \
  python3 "$ratio" "$data/baseline.jsonl" "$dir/udp.json" --guests 1
python3 "$ratio" "$data/baseline.jsonl" "$dir/udp.json" --guests 1 --wire verbs-rc >/dev/null || fail "--wire verbs-rc"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d["status"]="failed"; d["error"]="lane 2: QP error"; json.dump(d, open(sys.argv[2], "w"))' \
  "$data/perf-rc.json" "$dir/failed.json"
expect_refused "a failed run" "the run failed: lane 2: QP error" \
  python3 "$ratio" "$data/baseline.jsonl" "$dir/failed.json" --guests 1
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d["bw"].append(d["bw"][0]); json.dump(d, open(sys.argv[2], "w"))' \
  "$data/perf-rc.json" "$dir/twice.json"
expect_refused "two rows of a size" "bw[]: two rows of 64 KiB" \
  python3 "$ratio" "$data/baseline.jsonl" "$dir/twice.json" --guests 1
printf '%s\n' '{"tool":"ib_write_bw","mode":"rc","guests":1,"size_bytes":65536}' >"$dir/nobw.jsonl"
expect_refused "a baseline row without its figure" "nobw.jsonl:1: no number 'bw_avg_gbps'" \
  python3 "$ratio" "$dir/nobw.jsonl"
printf 'not json\n' >"$dir/junk.jsonl"
expect_refused "a baseline line that is not JSON" "junk.jsonl:1: not a JSON object" python3 "$ratio" "$dir/junk.jsonl"
: >"$dir/empty.jsonl"
expect_refused "an empty baseline" "no perftest rows" python3 "$ratio" "$dir/empty.jsonl"
expect_refused "no UD rows" "has no ib_send_bw (UD) rows" python3 "$ratio" "$dir/parsed.jsonl" "$data/perf-ud.json" --guests 2
expect_refused "a bad --sizes" "--sizes: 'big' is not a size" \
  python3 "$ratio" "$data/baseline.jsonl" "$data/perf-rc.json" --guests 1 --sizes big
echo "rxe perftest: all checks passed"
