#!/usr/bin/env bash
# scripts/megascale-stats-summary.py on hand-made stats directories: the close records of every *.jsonl
# are summed (periodic ones are not; credit waits against sends completed and failed), the wires' records
# give system calls per GiB and datagrams per call and their I/O threads' busy share (and are not
# connections), request phases give each role's medians (and 99th percentiles where
# the records have them), a directory without records
# says so, and a broken record, a counter that is not a whole number, a connection without one of its
# role's phases or a bad argument is refused with exit status 2 and a message naming it.
# Usage: megascale_stats_summary_test.sh SOURCE_DIR
set -uo pipefail
src=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
summary=$src/scripts/megascale-stats-summary.py

mkdir -p "$dir/run1" "$dir/empty"
record() {  # EVENT TIMEOUTS SPURIOUS RTO FAST DUPS RTT_MAX_NS TAIL_PROBES SENDS_DONE SENDS_FAILED WAITED
  printf '{"event":"%s","role":"send","engine":{"timeouts":%s,"timeouts_spurious":%s,"retransmits_rto":%s,"retransmits_fast":%s,"duplicates_dropped":%s,"rtt_max_ns":%s,"tail_probes":%s,"sends_completed":%s,"sends_failed":%s,"sends_waited_for_credit":%s}}\n' "$@"
}
{ record periodic 100 100 100 100 100 99000000 100 100 100 100; record close 3 1 7 2 0 4200000 4 30 0 6; } > "$dir/run1/a.jsonl"
# The plugin writes its metrics as doubles: 5.0 counts as 5.
{ record close 5.0 2 11 0 18 9200000 1 9 1 3; echo '{"event":"close","state":"released","nccl":{}}'; } > "$dir/run1/b.jsonl"
mkdir -p "$dir/run3"
cp "$dir/run1/a.jsonl" "$dir/run3/"
wire() {  # BYTES_SENT BYTES_RECEIVED SEND_SYSCALLS RECV_SYSCALLS DATAGRAMS_SENT DATAGRAMS_RECEIVED
  printf '{"event":"wire","wire":0,"udp":{"bytes_sent":%s,"bytes_received":%s,"send_syscalls":%s,"recv_syscalls":%s,"datagrams_sent":%s,"datagrams_received":%s}}\n' "$@"
}
# Two wires (and a third below): 2 GiB sent in 4,000 calls, 1 GiB received in 4,000; 32,000 datagrams each way.
{ wire 1073741824 536870912 1000 3000 20000 12000; wire 1073741824 536870912 3000 1000 12000 20000; } >> "$dir/run3/a.jsonl"
# A wire whose I/O threads stalled: the takeover counters, summed over wires, only where not all zero.
printf '{"event":"wire","wire":1,"udp":{"rx_stolen":1500,"tx_rerouted":20,"tx_stolen":7,"io_awake_ns":4000000000,"io_busy_ns":3000000000}}\n' >> "$dir/run3/a.jsonl"
# The I/O threads' awake and busy time, summed over wires: 3 of 5 s.
printf '{"event":"wire","wire":2,"udp":{"io_awake_ns":1000000000,"io_busy_ns":0}}\n' >> "$dir/run3/a.jsonl"
# A running wire's snapshot is not its total: left out.
wire 9 9 9 9 9 9 | sed 's/"event":"wire"/"event":"wire_periodic"/' >> "$dir/run3/a.jsonl"

out=$(python3 "$summary" r1="$dir/run1" r2="$dir/empty" r3="$dir/run3") || fail "exit $? on good input"
expected="- r1: 8 timeouts (3 undone as spurious), 18 RTO and 2 fast retransmissions, 5 tail probes, 18 duplicates received, 9 of 40 sends waited for a credit, RTT max 9.2 ms (2 connections)
- r2: no stats records in $dir/empty
- r3: 3 timeouts (1 undone as spurious), 7 RTO and 2 fast retransmissions, 4 tail probes, 0 duplicates received, 6 of 30 sends waited for a credit, RTT max 4.2 ms (1 connections); wires: 2,000 send and 4,000 receive system calls per GiB, 8.0 datagrams per send call and 8.0 per receive call (4 wires); I/O threads busy 60% of their 5.0 s awake; stalled I/O threads' work taken over: 1,500 messages received, 20 packets rerouted, 7 datagrams sent from their queues"
[[ $out == "$expected" ]] || fail "got: $out"

# Request phases: the median over the connections of each one's median, per role (two sends, one receive).
# These records have no 99th percentiles (older plugins): no tail is printed.
mkdir -p "$dir/run5"
phased() {  # ROLE REQUEST_P50_NS PHASES_JSON
  printf '{"event":"close","role":"%s","engine":{"sends_completed":1},"nccl":{"request_latency_p50_ns":%s,"phases":%s}}\n' "$@"
}
{ phased send 262000 '{"wait":{"p50_ns":10000},"transfer":{"p50_ns":120000},"ack":{"p50_ns":100000},"report":{"p50_ns":4000}}'
  phased send 300000 '{"wait":{"p50_ns":30000},"transfer":{"p50_ns":140000},"ack":{"p50_ns":110000},"report":{"p50_ns":6000}}'
  phased recv 917000 '{"wait":{"p50_ns":800000},"transfer":{"p50_ns":110000},"report":{"p50_ns":7000}}'
} > "$dir/run5/a.jsonl"
out=$(python3 "$summary" r5="$dir/run5") || fail "exit $? on phases"
expected="- r5: 0 timeouts (0 undone as spurious), 0 RTO and 0 fast retransmissions, 0 tail probes, 0 duplicates received, 0 of 3 sends waited for a credit, RTT max 0.0 ms (3 connections); a request's time, median of the connections' medians: send 281 us (wait 20, transfer 130, ack 105, report 5); receive 917 us (wait 800, transfer 110, report 7)"
[[ $out == "$expected" ]] || fail "phases: got: $out"
# With 99th percentiles: their median over the connections, whole and of the transfer phase.
mkdir -p "$dir/run6"
tailed() {  # ROLE REQUEST_P50_NS REQUEST_P99_NS TRANSFER_P99_NS
  local ack=""
  [[ $1 == send ]] && ack='"ack":{"p50_ns":1000,"p99_ns":2000},'
  printf '{"event":"close","role":"%s","engine":{"sends_completed":1},"nccl":{"request_latency_p50_ns":%s,"request_latency_p99_ns":%s,"phases":{"wait":{"p50_ns":1000,"p99_ns":2000},"transfer":{"p50_ns":100000,"p99_ns":%s},%s"report":{"p50_ns":1000,"p99_ns":2000}}}}\n' "$1" "$2" "$3" "$4" "$ack"
}
{ tailed send 200000 900000 400000; tailed send 200000 1100000 600000; tailed recv 300000 2500000 1800000; } > "$dir/run6/a.jsonl"
out=$(python3 "$summary" r6="$dir/run6") || fail "exit $? on tails"
[[ $out == *"; its 99th percentile, median of the connections': send 1,000 us (transfer 500), receive 2,500 us (transfer 1,800)" ]] ||
  fail "tails: got: $out"
phased send 1000 '{"wait":{"p50_ns":1},"transfer":{"p50_ns":1},"report":{"p50_ns":1}}' > "$dir/run5/b.jsonl"
python3 "$summary" r5="$dir/run5" > /dev/null 2> "$dir/err"
(( $? == 2 )) || fail "a send without its ack phase: exit status"
grep -qF "b.jsonl:1: phases has no 'ack' for a send connection" "$dir/err" || fail "missing phase message: $(cat "$dir/err")"

mkdir -p "$dir/run4"
echo '{"event":"close","engine":{"timeouts":2.5,"sends_completed":1}}' > "$dir/run4/a.jsonl"
python3 "$summary" r4="$dir/run4" > /dev/null 2> "$dir/err"
(( $? == 2 )) || fail "a fractional counter: exit status"
grep -qF 'a.jsonl:1: timeouts is 2.5, not a whole number' "$dir/err" || fail "fractional counter message: $(cat "$dir/err")"
echo '{"event":"close","engine":{"timeouts":2,"sends_completed":"x"}}' > "$dir/run4/a.jsonl"
python3 "$summary" r4="$dir/run4" > /dev/null 2> "$dir/err"
(( $? == 2 )) || fail "a counter that is not a number: exit status"
grep -qF 'a.jsonl:1: sends_completed is "x", not a whole number' "$dir/err" || fail "bad counter message: $(cat "$dir/err")"

echo '{"event":"close",' >> "$dir/run1/b.jsonl"
python3 "$summary" r1="$dir/run1" > /dev/null 2> "$dir/err"
(( $? == 2 )) || fail "a broken record: exit status"
grep -q "b.jsonl:3: not JSON" "$dir/err" || fail "broken record message: $(cat "$dir/err")"
python3 "$summary" "$dir/run1" > /dev/null 2> "$dir/err"
(( $? == 2 )) || fail "no LABEL=: exit status"
grep -q "is not LABEL=DIR" "$dir/err" || fail "bad argument message: $(cat "$dir/err")"
echo PASS
