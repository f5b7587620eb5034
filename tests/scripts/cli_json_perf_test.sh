#!/usr/bin/env bash
# `megascale perf --json`: a small loopback run writes the document docs/CLI.md describes, to a file and
# (`--json -`) to standard output with the tables on standard error; perftest's letters are taken and
# the spellings they replace are refused naming them.
# usage: cli_json_perf_test.sh MEGASCALE SOURCE_DIR
set -uo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
megascale=$1
check="$2/tests/scripts/cli_json_check.py"

row_counters=(retransmits retransmits_fast retransmits_rto timeouts ecn_marks cnps repaths floor_stalls
  sends_posted sends_waited_for_credit rtt_samples rtt_p50_us rtt_p99_us kernel_counters_read
  kernel_rcvbuf_errors kernel_in_errors socket_drops rx_stolen tx_rerouted tx_stolen io_awake_ns io_busy_ns
  faults_injected fault_datagrams fault_dropped fault_duplicated fault_reordered fault_delayed
  fault_corrupted fault_ce_marked junk_dropped corrupt_dropped malformed_dropped endpoint_malformed
  unknown_connection segments_sent segments_received cpu_counted cpu_user_s cpu_sys_s cpu_s
  segments_per_cpu_s one_process same_host)
side_counters=(retransmits_fast retransmits_rto timeouts ecn_marks cnps_received repaths floor_stalls
  sends_posted sends_waited_for_credit payload_sent_bytes payload_received_bytes ce_received cnps_sent
  duplicates_dropped corrupt_dropped malformed_dropped endpoint_malformed unknown_connection rtt_buckets
  rtt_max_ns datagrams_sent datagrams_received udp_sent_bytes send_syscalls send_messages gso_messages
  recv_syscalls recv_messages gro_messages send_dropped_full progress_calls clock_reads wake_reads
  fault_offered fault_dropped
  fault_duplicated fault_reordered fault_delayed fault_corrupted fault_ce_marked rx_stolen tx_rerouted
  tx_stolen io_awake_ns io_busy_ns kernel_ok kernel_rcvbuf_errors kernel_in_errors socket_drops
  segments_sent segments_received cpu_ok cpu_user_ns cpu_sys_ns process_id)
fields=(command schema_version status
  config.mode config.test config.sizes config.iterations config.duration_s config.window config.check
  config.bidirectional config.payload_crc config.lanes config.server_lanes config.cc config.server_cc
  config.segment_bytes config.negotiated_segment_bytes config.tclass config.dscp config.device config.bind
  config.poll config.wire config.transport config.server_transport config.same_host config.faults config.source_ports
  config.host
  bw[].size_bytes bw[].iterations bw[].window bw[].bw_peak_gbps bw[].bw_average_gbps bw[].msg_rate_mpps
  bw[].duration_s bw[].bidirectional bw[].verified_messages
  lat[].size_bytes lat[].iterations lat[].t_min_us lat[].t_max_us lat[].t_typical_us lat[].t_avg_us
  lat[].t_stdev_us lat[].t_p50_us lat[].t_p99_us lat[].t_p999_us lat[].verified_messages)
for rows in bw lat; do
  for c in "${row_counters[@]}"; do fields+=("${rows}[].counters.$c"); done
  for side in client server; do
    for c in "${side_counters[@]}"; do fields+=("${rows}[].counters.$side.$c"); done
  done
done

# Small rows, both tests, two lanes, a traffic class: to a file, then to standard output.
run=(perf --loopback -d lo -q 2 -T 104 -s 4K --timeout 30s)
"$megascale" "${run[@]}" -n 100 --json "$dir/perf.json" > "$dir/table" 2>&1 || fail "perf --json FILE: $(cat "$dir/table")"
grep -q "BW average\[Gb/sec\]" "$dir/table" || fail "perf --json FILE: no table on standard output"
python3 "$check" "$dir/perf.json" perf "${fields[@]}" || fail "perf --json FILE: $(cat "$dir/perf.json")"
python3 - "$dir/perf.json" "$dir/table" <<'PY' || fail "perf --json FILE: values"
import json, sys
d = json.load(open(sys.argv[1]))
c = d["config"]
assert (d["status"], c["tclass"], c["dscp"], c["lanes"], c["device"], c["bind"], c["wire"]) == \
    ("ok", 104, 26, 2, "lo", "127.0.0.1", "udp"), (d["status"], c)
assert [r["size_bytes"] for r in d["bw"] + d["lat"]] == [4096, 4096], d
assert all(r["bw_average_gbps"] > 0 for r in d["bw"]) and all(r["t_min_us"] > 0 for r in d["lat"]), d
# CPU per segment: client and server are one process (--loopback), so the row's CPU time is that
# process's, counted once (the larger side's reading), not the two sides added.
for r in d["bw"] + d["lat"]:
    k, cl, sv = r["counters"], r["counters"]["client"], r["counters"]["server"]
    assert k["cpu_counted"] and k["one_process"], k
    assert cl["process_id"] == sv["process_id"] > 0, k
    assert abs(k["cpu_user_s"] * 1e9 - max(cl["cpu_user_ns"], sv["cpu_user_ns"])) <= 1, k
    assert abs(k["cpu_sys_s"] * 1e9 - max(cl["cpu_sys_ns"], sv["cpu_sys_ns"])) <= 1, k
    assert k["cpu_s"] > 0 and abs(k["cpu_s"] - (k["cpu_user_s"] + k["cpu_sys_s"])) < 1e-9, k
    messages = r["iterations"] * (2 if "t_min_us" in r else 1)
    assert k["segments_sent"] >= messages and k["segments_received"] >= messages, (messages, k)
    assert k["segments_sent"] == k["client"]["segments_sent"] + k["server"]["segments_sent"], k
    # Every progress round reads the clock at least once.
    assert cl["clock_reads"] >= cl["progress_calls"] > 0, cl
    assert abs(k["segments_per_cpu_s"] - k["segments_sent"] / k["cpu_s"]) <= 1e-6 * k["segments_per_cpu_s"], k
table = open(sys.argv[2]).read()
assert table.count(" # cpu (one process, client and server): user ") == len(d["bw"]) + len(d["lat"]), table
PY

"$megascale" "${run[@]}" -D 200ms --test bw --json - > "$dir/stdout" 2> "$dir/stderr" \
  || fail "perf --json -: $(cat "$dir/stderr")"
grep -q "BW average\[Gb/sec\]" "$dir/stderr" || fail "perf --json -: the table is not on standard error"
bw_fields=()
for f in "${fields[@]}"; do [[ $f == lat* ]] || bw_fields+=("$f"); done
python3 "$check" - perf "${bw_fields[@]}" < "$dir/stdout" || fail "perf --json -: $(head -c 2000 "$dir/stdout")"

# perftest's letters: the spellings they replace are refused naming them; bad values name the problem.
expect_refused "--dscp" "use -T,--tclass" "$megascale" perf --loopback --dscp 26
expect_refused "-T with ECN bits" "-T 105: the low two bits of the TOS byte are ECN" \
  "$megascale" perf --loopback -T 105
expect_refused "-T over a byte" "-T 256" "$megascale" perf --loopback -T 256
expect_refused "unknown -d" "-d no-such-if0: no such interface (here: " "$megascale" perf --loopback -d no-such-if0
grep -q "lo" "$dir/err" || fail "unknown -d: the interfaces that exist are not listed: $(cat "$dir/err")"
expect_refused "-d with --bind" "-d and --bind" "$megascale" perf --loopback -d lo --bind 127.0.0.1
expect_refused "--wire unknown" "--wire verbs: must be udp, verbs-ud or verbs-rc" \
  "$megascale" perf --loopback --wire verbs
expect_refused "-x on udp" "-x: the RDMA port and GID apply to --wire verbs-ud and verbs-rc" \
  "$megascale" perf --loopback -x 1
# Without an RDMA device (this host, unless it has one): one line naming the problem, exit 2.
if [[ ! -d /sys/class/infiniband ]]; then
  for w in verbs-ud verbs-rc; do
    expect_refused "--wire $w without a device" "$w: no RDMA device (no /sys/class/infiniband)" \
      "$megascale" perf --loopback --wire "$w"
    (( $(wc -l < "$dir/err") == 1 )) || fail "--wire $w without a device: not one line: $(cat "$dir/err")"
  done
fi
expect_refused "-s unit" "unknown size unit" "$megascale" perf --loopback -s 4X
expect_refused "-D unit" "unknown time unit" "$megascale" perf --loopback -D 2parsecs
echo "PASS"
