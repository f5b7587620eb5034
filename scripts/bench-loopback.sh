#!/usr/bin/env bash
# Loopback baseline for `megascale perf`: in one run on this machine, the transport's bandwidth with 1
# and 4 lanes (64 MiB messages) next to iperf3's single TCP stream over 127.0.0.1, and the 8-byte
# latency; one table (goodput, ratio to iperf3, kernel drops, p50 latency) and JSON under out/bench/.
#
#   scripts/bench-loopback.sh                       # perf --loopback's defaults (loopback preset; 60000-byte segments on 1 lane, 16 KiB on 4)
#   CC=hybrid SEGMENT=4096 scripts/bench-loopback.sh
#   SECONDS_PER_RUN=5 MEGASCALE=build/cli/megascale scripts/bench-loopback.sh
#   IO_THREADS=4 scripts/bench-loopback.sh          # adds bw rows with the wire's I/O threads
#
# Environment: MEGASCALE (binary; default build/cli/megascale, built if missing), CC (--cc preset),
# SEGMENT (--segment), POLL (--poll), IO_THREADS (adds bw rows with --io-threads N), SECONDS_PER_RUN (iperf3 -t and perf -D; default 10), OUT
# (directory; default out/bench). Needs iperf3 and jq. Targets (issue 3): goodput >= 2x iperf3's single
# stream, 8-byte RTT p50 < 25 us (the table prints one-way = RTT/2 as perftest does, and the RTT).
set -euo pipefail
cd "$(dirname "$0")/.."

megascale=${MEGASCALE:-build/cli/megascale}
cc=${CC:-}            # empty: perf --loopback's own default (each run's JSON names what it used)
segment=${SEGMENT:-}
poll=${POLL:-adaptive}
secs=${SECONDS_PER_RUN:-10}
out=${OUT:-out/bench}

for tool in iperf3 jq; do
  command -v "$tool" >/dev/null || { echo "bench-loopback: $tool not found (apt-get install $tool)" >&2; exit 2; }
done
if [ ! -x "$megascale" ]; then
  echo "bench-loopback: building $megascale" >&2
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build --target megascale -j"$(nproc)" >/dev/null
fi
mkdir -p "$out"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
run_dir="$out/loopback-$stamp"
mkdir -p "$run_dir"
run_dir=$(cd "$run_dir" && pwd)  # absolute: iperf3 -D changes to / before it opens its log

# A free TCP port for iperf3 (the kernel picks one; iperf3 binds it right after).
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null ||
  shuf -i 20000-60000 -n 1)

echo "bench-loopback: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), $(uname -r)" >&2
echo "bench-loopback: iperf3 TCP single stream, ${secs} s" >&2
iperf3 -s -D -1 -B 127.0.0.1 -p "$port" --logfile "$run_dir/iperf3-server.log"
for _ in $(seq 50); do  # until the daemon listens (at most 5 s)
  grep -q "Server listening" "$run_dir/iperf3-server.log" 2>/dev/null && break
  sleep 0.1
done
iperf3 -c 127.0.0.1 -p "$port" -t "$secs" -J >"$run_dir/iperf3.json"
if ! iperf_gbps=$(jq -e '.end.sum_received.bits_per_second / 1e9' "$run_dir/iperf3.json" 2>/dev/null); then
  echo "bench-loopback: iperf3 failed: $(jq -r '.error // "no result"' "$run_dir/iperf3.json")" >&2
  exit 1
fi
iperf_retx=$(jq '.end.sum_sent.retransmits // 0' "$run_dir/iperf3.json")

perf_common=(--loopback --poll "$poll")
[ -n "$cc" ] && perf_common+=(--cc "$cc")
[ -n "$segment" ] && perf_common+=(--segment "$segment")
status=0
run_perf() {  # name, extra flags...
  local name=$1
  shift
  echo "bench-loopback: megascale perf $name" >&2
  if ! "$megascale" perf "${perf_common[@]}" "$@" --json "$run_dir/$name.json" >"$run_dir/$name.txt"; then
    echo "bench-loopback: megascale perf $name failed (see $run_dir/$name.txt)" >&2
    status=1
  fi
}
run_perf bw-1lane --test bw -s 67108864 -D "$secs" -q 1
run_perf bw-4lanes --test bw -s 67108864 -D "$secs" -q 4
io_threads=${IO_THREADS:-0}
if [ "$io_threads" -gt 0 ]; then
  run_perf bw-1lane-io "--io-threads=$io_threads" --test bw -s 67108864 -D "$secs" -q 1
  run_perf bw-4lanes-io "--io-threads=$io_threads" --test bw -s 67108864 -D "$secs" -q 4
fi
run_perf lat-8B --test lat -s 8 -n 10000 -q 1

# One row per run: goodput, ratio to iperf3, kernel drops, p50 latency.
row() {  # name, kind
  local f="$run_dir/$1.json"
  if [ ! -s "$f" ]; then
    printf '%s\tfailed\t-\t-\t-\n' "$1"
    return
  fi
  if [ "$2" = bw ]; then
    jq -r --arg name "$1" --argjson base "$iperf_gbps" '.bw[0] as $r |
      [$name, ($r.bw_average_gbps * 100 | round / 100 | tostring), (($r.bw_average_gbps / $base * 100 | round) / 100 | tostring) + "x",
       ($r.counters.kernel_rcvbuf_errors|tostring) + "/" + ($r.counters.socket_drops|tostring),
       "rtt " + ($r.counters.rtt_p50_us * 10 | round / 10 | tostring)] | @tsv' "$f"
  else
    jq -r --arg name "$1" '.lat[0] as $r |
      [$name, "-", "-", ($r.counters.kernel_rcvbuf_errors|tostring) + "/" + ($r.counters.socket_drops|tostring),
       ($r.t_p50_us * 100 | round / 100 | tostring) + " (rtt " + ($r.t_p50_us * 200 | round / 100 | tostring) + ")"] | @tsv' "$f"
  fi
}
{
  printf 'run\tgoodput[Gb/s]\tvs iperf3\tkernel drops (RcvbufErrors/our sockets)\tp50[us]\n'
  printf 'iperf3-tcp-1stream\t%.2f\t1x\t- (tcp retx %s)\t-\n' "$iperf_gbps" "$iperf_retx"
  row bw-1lane bw
  row bw-4lanes bw
  if [ "$io_threads" -gt 0 ]; then
    row bw-1lane-io bw
    row bw-4lanes-io bw
  fi
  row lat-8B lat
} | { if command -v column >/dev/null; then column -t -s $'\t'; else cat; fi; } | tee "$run_dir/summary.txt"

jq -n --arg stamp "$stamp" --arg kernel "$(uname -r)" --arg cpu "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)" \
  --argjson cores "$(nproc)" --arg load "$(cut -d' ' -f1-3 /proc/loadavg)" --arg cc "${cc:-perf --loopback default}" --arg segment "${segment:-perf --loopback default}" \
  --arg poll "$poll" --argjson secs "$secs" --slurpfile iperf "$run_dir/iperf3.json" \
  --slurpfile bw1 <(cat "$run_dir/bw-1lane.json" 2>/dev/null || echo null) \
  --slurpfile bw4 <(cat "$run_dir/bw-4lanes.json" 2>/dev/null || echo null) \
  --slurpfile lat <(cat "$run_dir/lat-8B.json" 2>/dev/null || echo null) \
  --slurpfile bw1io <(cat "$run_dir/bw-1lane-io.json" 2>/dev/null || echo null) \
  --slurpfile bw4io <(cat "$run_dir/bw-4lanes-io.json" 2>/dev/null || echo null) --argjson io "$io_threads" \
  '{stamp: $stamp, machine: {kernel: $kernel, cpu: $cpu, cores: $cores, load_average_at_end: $load},
    settings: {cc: $cc, segment_bytes: $segment, poll: $poll, seconds_per_run: $secs, io_threads: $io},
    iperf3_gbps: ($iperf[0].end.sum_received.bits_per_second / 1e9),
    perf: {bw_1lane: $bw1[0], bw_4lanes: $bw4[0], bw_1lane_io: $bw1io[0], bw_4lanes_io: $bw4io[0], lat_8B: $lat[0]}}' >"$out/loopback-$stamp.json"
echo "bench-loopback: wrote $out/loopback-$stamp.json and $run_dir/" >&2
exit $status
