#!/usr/bin/env bash
# scripts/check-nccl-plugin.sh without a GPU: a stand-in nvidia-smi (one GPU) and nccl_check (writes the
# CSV and the NCCL channel lines a real run would, at fixed bandwidths per net) drive its bandwidth step.
# Checks the untimed warm-up, the order of the nets in each round (each round starts with the next net),
# that the timed runs ask for nccl-tests' exact sizes (--exact-sizes), that MegaScale's runs (only they)
# write stats whose timeouts and retransmissions the table lists per run (a broken record fails the run),
# the table and verdict, the latency step's table (microseconds, MegaScale's time over Socket's), the CPU
# table by thread (each net's named threads in its own column), PROFILE=1's
# table by kind of work (a stand-in perf), that a
# MegaScale run whose stats files show no connections (NCCL did not use the plugin) fails the script,
# that a layouts run whose layout in force (its stats) is not the one asked for fails it, and that a
# bad STEPS, ROUNDS or LAYOUTS is refused with a message naming it. --list, --help, the skip without a
# GPU, and scripts/nccl-plugin/stats.py on the fixture files of tests/scripts/data/nccl-plugin-stats. Then the kill step: the last rank
# is SIGKILLed; a survivor that stops with exit 3 passes, one that hangs past KILL_DEADLINE_S or exits
# otherwise fails the script when it runs MegaScale, and is only reported when it runs Socket.
# Usage: check_nccl_plugin_test.sh SOURCE_DIR
set -uo pipefail
src=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

mkdir -p "$dir/bin" "$dir/build/collectives/nccl" "$dir/build/tests/gpu"
: > "$dir/build/collectives/nccl/libnccl-net-megascale.so"
printf '#!/bin/sh\necho "GPU 0: stand-in (UUID: GPU-0)"\n' > "$dir/bin/nvidia-smi"
cat > "$dir/build/tests/gpu/nccl_check" <<'FAKE'
#!/usr/bin/env bash
# Stand-in for tests/gpu/nccl_check: --rank R --csv FILE --ops OPS ...; NCCL_NET picks the bandwidth.
rank=0 nranks=2 csv= ops=allreduce exact= kill_mode= all_args="$*"
while (( $# )); do
  case $1 in
    --rank) rank=$2; shift ;;
    --nranks) nranks=$2; shift ;;
    --gap-us) kill_mode=1; shift ;;  # the kill step's long all-reduce loop
    --csv) csv=$2; shift ;;
    --ops) ops=$2; shift ;;
    --exact-sizes) exact=1; shift; continue ;;
  esac
  shift
done
if [[ -n $kill_mode ]]; then
  echo "host:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/$NCCL_NET/0" > "$NCCL_DEBUG_FILE"
  pidfile=$KILL_DIR/victim.$NCCL_NET.pid
  if (( rank == nranks - 1 )); then echo $$ > "$pidfile"; exec -a "$KILL_DIR/stand-in-rank" sleep 1000; fi  # the rank to be killed
  while [[ ! -s $pidfile ]]; do sleep 0.05; done
  while kill -0 "$(cat "$pidfile")" 2> /dev/null; do sleep 0.05; done
  if [[ $NCCL_NET == "${FAKE_KILL_NET:-MegaScale}" ]]; then
    [[ ${FAKE_KILL:-} == hang ]] && exec -a "$KILL_DIR/stand-in-rank" sleep 1000
    [[ ${FAKE_KILL:-} == exit2 ]] && { echo "nccl_check: rank $rank: the stream failed: stand-in" >&2; exit 2; }
  fi
  echo "nccl_check: rank $rank: NCCL reported an asynchronous error after 0.1 s of waiting: stand-in" >&2
  exit 3
fi
[[ -n ${ARGS_LOG:-} ]] && echo "$all_args" >> "$ARGS_LOG"
net=$NCCL_NET
[[ $net == Socket && ${NCCL_SOCKET_NTHREADS:-} == 4 ]] && net=Socket4x4
# The layout the stand-in plugin runs: MEGASCALE_LAYOUT's values over its own default's.
declare -A layout=([wires]=2 [io_threads]=6 [lanes]=6 [stripes]=1 [stripe_bytes]=1048576)
layout_source="auto: stand-in share: 2 wires x (1 + 6 I/O threads)" io=
if [[ -n ${MEGASCALE_LAYOUT:-} && -z ${FAKE_IGNORE_LAYOUT:-} ]]; then
  IFS=, read -ra parts <<< "$MEGASCALE_LAYOUT"
  for p in "${parts[@]}"; do layout[${p%%=*}]=${p#*=}; done
  layout[lanes]=${layout[io_threads]}
  layout_source=environment io=${layout[io_threads]}
fi
[[ $net == Null && ( $all_args != *--no-check* || $NCCL_NET_PLUGIN != /* || ${NCCL_PROTO:-} != Simple ) ]] && echo "Null checked or relative" >> "$ORDER_LOG"
[[ $rank == 0 ]] && echo "$net${csv:+ timed}${exact:+ exact}${io:+ io$io}${MEGASCALE_NULL_RECV_US:+ r$MEGASCALE_NULL_RECV_US}${MEGASCALE_NULL_PTR_CUDA:+ gdr$MEGASCALE_NULL_PTR_CUDA:${NCCL_NET_GDR_LEVEL:-}}${MEGASCALE_GDR_COPY:+ gdr$MEGASCALE_GDR_COPY}${NCCL_NET_GDR_READ:+ read$NCCL_NET_GDR_READ}" >> "$ORDER_LOG"
via=$NCCL_NET gdr=
[[ $NCCL_NET == MegaScale && -n ${FAKE_WRONG_NET:-} ]] && via=Socket
# NCCL takes the GPU-buffer path where the net offers it and NCCL_NET_GDR_LEVEL reaches the device, for
# sends only unless NCCL_NET_GDR_READ=0.
[[ $NCCL_NET == MegaScale && ${MEGASCALE_GDR_COPY:-} == 1 && ${NCCL_NET_GDR_LEVEL:-} == SYS && -z ${FAKE_NO_GDR:-} ]] &&
  gdr=/GDRDMA
[[ $NCCL_NET == Null && ${MEGASCALE_NULL_PTR_CUDA:-} == 1 && ${NCCL_NET_GDR_LEVEL:-} == SYS ]] && gdr=/GDRDMA
send_gdr=$gdr
[[ ${NCCL_NET_GDR_READ:-} == 0 ]] && send_gdr=
{ echo "host:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/$via/0$send_gdr"
  echo "host:1:2 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/$via/0$gdr"; } > "$NCCL_DEBUG_FILE"
case $net in MegaScale) bw=6.00 us=60 ;; Socket) bw=3.00 us=20 ;; Socket4x4) bw=4.00 us=15 ;; Null) bw=12.00 us=5 ;; esac
[[ $net == MegaScale && $io == 3 ]] && bw=7.50 us=90  # the layouts step
[[ $net == Null && -n ${MEGASCALE_NULL_RECV_US:-} ]] && bw=$(( 12 - MEGASCALE_NULL_RECV_US / 50 )).00  # the timing model
[[ $net == Null && ${MEGASCALE_NULL_PTR_CUDA:-} == 1 ]] && bw=$(( ${bw%.00} * 3 )).00  # GPU buffers
if [[ -n $csv && $rank == 0 ]]; then
  echo "op,type,size_bytes,count,time_us,algbw_gbps,busbw_gbps,wrong" > "$csv"
  [[ $ops == *allreduce* ]] && echo "AllReduce,float,67108864,16777216,$us,1,$bw,0" >> "$csv"
  [[ $ops == *allgather* ]] && echo "AllGather,float,67108864,16777216,$us,1,$bw,0" >> "$csv"
fi
if [[ -n ${MEGASCALE_TRACE_FILE:-} ]]; then  # a request timeline: 10 sends, and 10 receives done 200 us after
  [[ $NCCL_NET == MegaScale && $MEGASCALE_TRACE_FILE == *%p* ]] || echo "trace file for $NCCL_NET: $MEGASCALE_TRACE_FILE" >> "$ORDER_LOG"
  # Connection ids as the plugin writes them: rank r's send (1r, 2p) is rank p's receive (2p, 1r).
  { printf '{"otherData":{"clock":"CLOCK_MONOTONIC","host":"stand-in"},"traceEvents":[{"name":"thread_name","ph":"M","pid":%s,"tid":100,"args":{"name":"send","conn":"1%s","peer_conn":"2%s"}}' $$ "$rank" $((1 - rank))
    printf ',{"name":"thread_name","ph":"M","pid":%s,"tid":200,"args":{"name":"recv","conn":"2%s","peer_conn":"1%s"}}' $$ "$rank" $((1 - rank))
    for k in 0 1 2 3 4 5 6 7 8 9; do
      printf ',{"name":"send","cat":"request","ph":"X","pid":%s,"tid":100,"ts":%s,"dur":10,"args":{"bytes":1048576}}' $$ $((1000 * k))
      printf ',{"name":"recv","cat":"request","ph":"X","pid":%s,"tid":200,"ts":%s,"dur":250,"args":{"bytes":1048576}}' $$ $((1000 * k - 50))
    done
    echo ']}'; } > "${MEGASCALE_TRACE_FILE//%p/$$}"
fi
# The plugin's stats file of this rank's process: its settings record, a send and a receive connection
# (none with FAKE_WRONG_NET: NCCL did not use the plugin), and on rank 0 the transport's counters.
if [[ -n ${MEGASCALE_STATS_DIR:-} ]]; then
  [[ $NCCL_NET == MegaScale ]] || echo "stats dir set for $NCCL_NET" >> "$ORDER_LOG"
  mkdir -p "$MEGASCALE_STATS_DIR"
  stats=$MEGASCALE_STATS_DIR/megascale-nccl-stand-in-rank$rank.jsonl
  printf '{"event":"settings","host":"stand-in","pid":%s,"settings":{"MEGASCALE_CC":{"value":"hybrid","source":"default"}},"layout":{"wires":%s,"io_threads":%s,"lanes":%s,"stripes":%s,"stripe_bytes":%s,"source":"%s"}}\n' \
    $$ "${layout[wires]}" "${layout[io_threads]}" "${layout[lanes]}" "${layout[stripes]}" "${layout[stripe_bytes]}" "$layout_source" > "$stats"
  if [[ -z ${FAKE_WRONG_NET:-} ]]; then
    echo '{"event":"periodic","conn":"0x1","role":"send","segment_bytes":61440}' >> "$stats"
    echo '{"event":"periodic","conn":"0x2","role":"recv","segment_bytes":61440}' >> "$stats"
  fi
  [[ $rank == 0 ]] && echo '{"event":"close","engine":{"timeouts":4,"timeouts_spurious":1,"retransmits_rto":9,"retransmits_fast":0,"duplicates_dropped":9,"rtt_max_ns":6000000}}' >> "$stats"
  [[ -n ${FAKE_BAD_STATS:-} && $rank == 0 ]] && echo '{"event":' >> "$stats"
fi
# A thread named as the net's own would be, busy for a while (bash's own loop, in a renamed subshell),
# for the bandwidth step's CPU table (FAKE_BUSY=1). The loop runs for wall time, not a count of turns,
# and starts only once thread-cpu.py's watcher of rank 0's log exists: on a loaded host Python alone
# took 1-1.7 s to start, and the watcher, late, missed runs that were already over; at a load of 8 on
# 2 cores a 3-second loop still ended before its first sample: it runs 6 s.
if [[ -n $exact ]]; then
  case $NCCL_NET in MegaScale) thread=msio0 ;; *) thread="NCCL SockS 0 0 0" ;; esac
  for ((i = 0; ${FAKE_BUSY:-0} == 1 && rank == 0 && i < 400; i++)); do
    pgrep -f "thread-cpu.py watch --start-after $NCCL_DEBUG_FILE" > /dev/null && break
    sleep 0.05
  done
  echo "host:1:2 [0] NCCL INFO ncclCommInitRank comm 0x1 rank $rank nranks $nranks - Init COMPLETE" >> "$NCCL_DEBUG_FILE"
  if [[ ${FAKE_BUSY:-0} == 1 ]]; then
    ( printf '%s' "$thread" > /proc/self/comm; end=$(( ${EPOCHREALTIME/./} + 6000000 ))
      while (( ${EPOCHREALTIME/./} < end )); do :; done )
  fi
fi
echo "# stand-in nccl_check rank $rank via $via"
FAKE
cat > "$dir/bin/perf" <<'FAKE'
#!/usr/bin/env bash
# Stand-in perf: `record ... -o FILE` runs until SIGINT, then writes FILE; `report -i FILE` prints
# `-n -t '|'` sample lines: CRC work for MegaScale's recording, kernel copies for Socket's, idle for both.
case $1 in
  record)
    while (( $# )); do [[ $1 == -o ]] && data=$2; shift; done
    trap 'echo recorded > "$data"; exit 0' INT
    while :; do sleep 0.05; done ;;
  report)
    while (( $# )); do [[ $1 == -i ]] && data=$2; shift; done
    case $data in
      *megascale*) echo " 60.00% | 998        |msio0          |megascale        |[.] megascale::engine::(anonymous namespace)::sse42_register" ;;
      *) echo " 60.00% | 998        |NCCL SockS 0 0 |[kernel.kallsyms]|[k] _copy_to_iter" ;;
    esac
    echo " 40.00% | 5000       |swapper        |[kernel.kallsyms]|[k] pv_native_safe_halt" ;;
esac
FAKE
chmod +x "$dir/bin/nvidia-smi" "$dir/build/tests/gpu/nccl_check" "$dir/bin/perf"
export PATH=$dir/bin:$PATH ORDER_LOG=$dir/order.log KILL_DIR=$dir

check() {  # runs the script; its output in $dir/out.log
  env OUT="$dir/out" NRANKS=2 MAX_BYTES=64M BENCH_MIN_BYTES=64M "$@" \
    "$src/scripts/check-nccl-plugin.sh" "$dir/build" > "$dir/out.log" 2>&1
}
expect_order() {  # WHAT EXPECTED: the runs the stand-ins logged since ORDER_LOG was last removed
  [[ $(cat "$ORDER_LOG") == "$2" ]] || fail "$1 runs in this order: $(tr '\n' ' ' < "$ORDER_LOG")"
}

# scripts/nccl-plugin/stats.py on fixture files as the plugin writes them: two ranks' processes, each
# with its settings record and connections; a rank whose file has no connection; a broken record.
stats_py=$src/scripts/nccl-plugin/stats.py
data=$src/tests/scripts/data/nccl-plugin-stats
# stats_says WANT_STATUS WANT_LINE ARGS...: stats.py ARGS exits WANT_STATUS and prints WANT_LINE.
stats_says() {
  local want=$1 line=$2 got
  shift 2
  got=$(python3 "$stats_py" "$@" 2>&1)
  local status=$?
  (( status == want )) || fail "stats.py $*: exit $status, want $want: $got"
  grep -qxF -- "$line" <<< "$got" || fail "stats.py $*: printed '$got', want the line '$line'"
}
stats_says 0 "the plugin's stats files of all 2 ranks show its connections (2 send, 2 receive)" \
  connections "$data/two-ranks" 2
stats_says 1 "the plugin's stats in $data/two-ranks: 2 processes wrote the plugin's settings, not 3 (one per rank)" \
  connections "$data/two-ranks" 3
stats_says 1 "the plugin's stats in $data/one-idle: megascale-nccl-h-202.jsonl shows 0 send and 0 receive connections" \
  connections "$data/one-idle" 2
auto_layout="wires=4,io_threads=0,lanes=4,stripes=2,stripe_bytes=524288 (auto: 6 usable CPUs / 1 local rank = 6 each, 2 left to NCCL: 4 wires x (1 + 0 I/O threads), each comm over 2 of them)"
stats_says 0 "$auto_layout" layout "$data/two-ranks"
stats_says 0 "$auto_layout" layout "$data/two-ranks" --expect auto
stats_says 0 "$auto_layout" layout "$data/two-ranks" --expect wires=4,stripes=2
stats_says 1 "the layout in force is not wires=2: megascale-nccl-h-101.jsonl: wires=4; megascale-nccl-h-102.jsonl: wires=4" \
  layout "$data/two-ranks" --expect wires=2
stats_says 2 "stats.py: --expect lanes=x: each part is KEY=NUMBER, KEY one of wires, io_threads, lanes, stripes, stripe_bytes" \
  layout "$data/two-ranks" --expect lanes=x
stats_says 0 "hybrid" setting "$data/two-ranks" MEGASCALE_CC
# Retransmissions: each connection's last record counts (the close after the periodic one).
stats_says 0 "10 segments retransmitted over 2 connections" retransmits "$data/lossy" --at-least 10
stats_says 1 "10 segments retransmitted over 2 connections" retransmits "$data/lossy" --at-least 11
stats_says 0 "0 segments retransmitted over 4 connections" retransmits "$data/two-ranks"
# A rank's file is a log that each of its processes appends to: each settings record starts a process.
stats_says 1 "the plugin's stats in $data/one-file-two-runs: megascale-nccl-h-rank0.jsonl, pid 302 shows 0 send and 0 receive connections" \
  connections "$data/one-file-two-runs" 2
stats_says 1 "the layout in force is not wires=2: megascale-nccl-h-rank0.jsonl, pid 301: wires=4; megascale-nccl-h-rank0.jsonl, pid 302: wires=4" \
  layout "$data/one-file-two-runs" --expect wires=2
python3 "$stats_py" connections "$data/broken" 1 > "$dir/err" 2>&1
(( $? == 2 )) && grep -qF "$data/broken/megascale-nccl-h-101.jsonl:2: not a JSON record" "$dir/err" ||
  fail "stats.py on a broken record: $(cat "$dir/err")"
stats_says 2 "stats.py: no stats files (*.jsonl) in $dir/none" connections "$dir/none" 1

# The driver without running a step: --list names every step in order, --help shows the header (the
# LAYOUTS form among it), a bad option or argument is refused, and with no GPU visible it skips (77).
"$src/scripts/check-nccl-plugin.sh" --list > "$dir/list" || fail "--list: exit $?"
[[ $(cut -d' ' -f1 "$dir/list" | tr '\n' ' ') == "kill check fault bench lat layouts ceiling torch " ]] ||
  fail "--list: $(cat "$dir/list")"
"$src/scripts/check-nccl-plugin.sh" --help > "$dir/help" || fail "--help: exit $?"
grep -qF "LAYOUTS (the layouts step): entries separated by ';'" "$dir/help" || fail "--help: $(cat "$dir/help")"
grep -q '^#' "$dir/help" && fail "--help keeps the comment marks: $(head -3 "$dir/help")"
"$src/scripts/check-nccl-plugin.sh" --bogus > /dev/null 2> "$dir/err"
(( $? == 2 )) && grep -qF "unknown option '--bogus'" "$dir/err" || fail "--bogus: $(cat "$dir/err")"
"$src/scripts/check-nccl-plugin.sh" "$dir/build" extra > /dev/null 2> "$dir/err"
(( $? == 2 )) && grep -qF "one build folder at most" "$dir/err" || fail "two arguments: $(cat "$dir/err")"
mkdir -p "$dir/nogpu"
printf '#!/bin/sh\nexit 9\n' > "$dir/nogpu/nvidia-smi"
chmod +x "$dir/nogpu/nvidia-smi"
PATH=$dir/nogpu:$PATH OUT="$dir/out" "$src/scripts/check-nccl-plugin.sh" "$dir/build" > "$dir/out.log" 2>&1
(( $? == 77 )) && grep -qF "check-nccl-plugin: skipped: no GPU visible (nvidia-smi -L)" "$dir/out.log" ||
  fail "no GPU: $(cat "$dir/out.log")"
# A bad setting is refused before the GPU is looked for.
PATH=$dir/nogpu:$PATH STEPS=tune "$src/scripts/check-nccl-plugin.sh" "$dir/build" > "$dir/out.log" 2>&1
(( $? == 2 )) || fail "STEPS=tune without a GPU: $(cat "$dir/out.log")"

check STEPS=bench ROUNDS=2 BENCH_OPS=allreduce,allgather FAKE_BUSY=1 || { cat "$dir/out.log"; fail "exit $? on a good run"; }
expected=$'Socket\nMegaScale timed exact\nSocket timed exact\nSocket4x4 timed exact\nSocket timed exact\nSocket4x4 timed exact\nMegaScale timed exact'
expect_order bench "$expected"
table=$dir/out/bandwidth.md
grep -qF '| AllReduce | 67108864 | 6.00 | 3.00 | 4.00 | 2.00 (2.00-2.00) | 1.50 (1.50-1.50) |' "$table" ||
  fail "table: $(cat "$table")"
grep -qF -- '- AllGather: 1.50-1.50x (median 1.50); reaches 1.5x in all 2 pairs' "$table" || fail "verdict"
grep -q '^check-nccl-plugin: PASS' "$dir/out.log" || fail "no PASS line"
# The CPU table: MegaScale's I/O thread only in its column, Socket's helpers only in theirs.
# table_row ROW WANT: the markdown row's three figures (megascale socket socket-4x4), each 0 or busy.
table_row() {
  local got
  got=$(awk -F' *[|] *' -v row="$1" '$2 == row { for (i = 3; i <= 5; i++) printf "%s%s", ($i + 0 > 0 ? "busy" : "0"), (i < 5 ? " " : "") }' "$table")
  [[ $got == "$2" ]] || fail "table row $1: '$got', want '$2': $(cat "$table")"
}
table_row "MegaScale I/O threads" "busy 0 0"
table_row "Socket helper threads" "0 busy busy"
grep -q "Start-up included" "$table" && fail "CPU table: a window was the whole run: $(cat "$table")"
for k in 1 2; do
  grep -qF -- "- bench-megascale-r$k: 4 timeouts (1 undone as spurious), 9 RTO and 0 fast retransmissions" \
    "$table" || fail "round $k's transport line: $(cat "$table")"
done

# PROFILE=1: round 1 of each net recorded from Init COMPLETE to its end, each net's work in its column.
rm -f "$ORDER_LOG"
check STEPS=bench ROUNDS=1 PROFILE=1 FAKE_BUSY=1 || { cat "$dir/out.log"; fail "PROFILE=1: exit $?"; }
grep -q "Where the host's CPU went, by kind of work" "$table" || fail "PROFILE=1: no profile heading: $(cat "$table")"
table_row "payload CRC32C" "busy 0 0"
table_row "kernel: copies" "0 busy busy"
ls "$dir/out/"*.perf.data 2> /dev/null && fail "PROFILE=1 left perf.data files"
check STEPS=bench PROFILE=yes
(( $? == 2 )) || fail "PROFILE=yes: exit status"
grep -qF "PROFILE=yes: 0 or 1" "$dir/out.log" || fail "PROFILE message: $(cat "$dir/out.log")"

rm -f "$ORDER_LOG"
check STEPS=bench ROUNDS=1 FAKE_BAD_STATS=1 && fail "exit 0 with a broken stats record"
grep -q '!! bandwidth: no transport lines' "$dir/out.log" || fail "no message for the broken stats record"
grep -qF '| AllReduce | 67108864 |' "$dir/out.log" || fail "the table is not printed beside it"

rm -f "$ORDER_LOG"
check STEPS=bench ROUNDS=1 FAKE_WRONG_NET=1 && fail "exit 0 with MegaScale's channels on NET/Socket"
grep -qE '^!! bench-megascale-r1: not through the plugin: .*megascale-nccl-stand-in-rank[0-9]+.jsonl shows 0 send and 0 receive connections' "$dir/out.log" ||
  fail "no message for the wrong net: $(cat "$dir/out.log")"
grep -q '^check-nccl-plugin: FAIL' "$dir/out.log" || fail "no FAIL line"

# The latency step: the same interleaved rounds (no exact sizes), microseconds and time ratios, and
# MegaScale's transport lines from its own stats folders.
rm -f "$ORDER_LOG"
check STEPS=lat ROUNDS=2 BENCH_OPS=allreduce || { cat "$dir/out.log"; fail "STEPS=lat: exit $?"; }
expected=$'Socket\nMegaScale timed\nSocket timed\nSocket4x4 timed\nSocket timed\nSocket4x4 timed\nMegaScale timed'
expect_order latency "$expected"
latency=$dir/out/latency.md
grep -qF '| AllReduce | 67108864 | 60.00 | 20.00 | 15.00 | 3.00 (3.00-3.00) | 4.00 (4.00-4.00) |' "$latency" ||
  fail "latency table: $(cat "$latency")"
grep -qF -- '- AllReduce: 4.00-4.00x (median 4.00)' "$latency" || fail "latency summary: $(cat "$latency")"
grep -qF -- '- lat-megascale-r2: 4 timeouts' "$latency" || fail "latency transport line: $(cat "$latency")"
grep -q '^check-nccl-plugin: PASS' "$dir/out.log" || fail "STEPS=lat: no PASS line"

# The layouts step: MegaScale alone under each layout, rounds interleaved (each round starts with the next
# layout), each bandwidth run followed by the same layout's small collectives, each layout's bandwidth
# and time over the first's, the layout "auto" chose (from its stats), and the transport per bandwidth run.
rm -f "$ORDER_LOG"
check STEPS=layouts ROUNDS=2 LAYOUTS="auto; wires=2,io_threads=3" BENCH_OPS=allreduce ||
  { cat "$dir/out.log"; fail "STEPS=layouts: exit $?"; }
expected=$'Socket\nMegaScale timed exact\nMegaScale timed\nMegaScale timed exact io3\nMegaScale timed io3'
expected+=$'\nMegaScale timed exact io3\nMegaScale timed io3\nMegaScale timed exact\nMegaScale timed'
expect_order layout "$expected"
layouts=$dir/out/layouts.md
grep -qF '| AllReduce | 67108864 | 6.00 | 7.50 | 1.25 (1.25-1.25) |' "$layouts" || fail "layouts table: $(cat "$layouts")"
grep -qF -- '- wires2-io_threads3: 1.25-1.25x (median 1.25)' "$layouts" || fail "layouts summary: $(cat "$layouts")"
grep -qF 'Small collectives under each layout' "$layouts" || fail "layouts: no small-collective part: $(cat "$layouts")"
grep -qF '| AllReduce | 67108864 | 60.00 | 90.00 | 1.50 (1.50-1.50) |' "$layouts" ||
  fail "layouts time table: $(cat "$layouts")"
grep -qF '"auto" was the plugin'"'"'s own layout: wires=2,io_threads=6,lanes=6,stripes=1,stripe_bytes=1048576 (auto: stand-in share: 2 wires x (1 + 6 I/O threads))' \
  "$layouts" || fail "the default layout's echo: $(cat "$layouts")"
grep -qF -- '- layouts-wires2-io_threads3-r2: 4 timeouts' "$layouts" || fail "layouts transport line: $(cat "$layouts")"
grep -qF 'ok layouts-wires2-io_threads3-r1: the plugin'"'"'s stats files of all 2 ranks show its connections (2 send, 2 receive)' \
  "$dir/out.log" || fail "layouts: the plugin's connections: $(cat "$dir/out.log")"
grep -q '^check-nccl-plugin: PASS' "$dir/out.log" || fail "STEPS=layouts: no PASS line"
# Tuned Socket as a layout, put first: every layout paired with it round by round and counted against
# the goal; Socket's runs keep no stats and have their own channel check.
rm -f "$ORDER_LOG"
check STEPS=layouts ROUNDS=2 LAYOUTS="socket-4x4;auto;wires=2,io_threads=3" BENCH_OPS=allreduce ||
  { cat "$dir/out.log"; fail "STEPS=layouts with socket-4x4: exit $?"; }
grep -q 'stats dir set' "$ORDER_LOG" && fail "layouts: a stats dir for Socket: $(cat "$ORDER_LOG")"
[[ $(grep -c '^Socket4x4 timed' "$ORDER_LOG") == 4 ]] || fail "layouts: tuned Socket's runs: $(tr '\n' ' ' < "$ORDER_LOG")"
grep -qF '| AllReduce | 67108864 | 4.00 | 6.00 | 7.50 | 1.50 (1.50-1.50) | 1.88 (1.88-1.88) |' "$layouts" ||
  fail "layouts table against Socket 4x4: $(cat "$layouts")"
grep -qF -- '  - AllReduce: 1.50-1.50x (median 1.50); reaches 1.5x in all 2 pairs' "$layouts" ||
  fail "layouts goal line: $(cat "$layouts")"
grep -qF 'ok layouts-socket-4x4-r1: all 4 channel lines say via NET/Socket' "$dir/out.log" ||
  fail "layouts: Socket's channel check: $(cat "$dir/out.log")"
grep -qF -- '- layouts-socket-4x4' "$layouts" && fail "layouts: a transport line for Socket: $(cat "$layouts")"
grep -q '^check-nccl-plugin: PASS' "$dir/out.log" || fail "STEPS=layouts with socket-4x4: no PASS line"
# A layout ending in +gdr runs MegaScale with NCCL's GPU buffers (and only that layout); its channels must
# say GDRDMA, and a run where NCCL kept host buffers fails the step.
rm -f "$ORDER_LOG"
check STEPS=layouts ROUNDS=1 LAYOUTS="auto;wires=2,io_threads=3+gdr" BENCH_OPS=allreduce ||
  { cat "$dir/out.log"; fail "STEPS=layouts with +gdr: exit $?"; }
expected=$'Socket\nMegaScale timed exact\nMegaScale timed\nMegaScale timed exact io3 gdr1\nMegaScale timed io3 gdr1'
expect_order "layouts with +gdr" "$expected"
grep -qF 'ok layouts-wires2-io_threads3+gdr-r1: all 4 channel lines say via NET/MegaScale/[0-9]+/GDRDMA' "$dir/out.log" ||
  fail "layouts +gdr: channel check: $(cat "$dir/out.log")"
check FAKE_NO_GDR=1 STEPS=layouts ROUNDS=1 LAYOUTS="auto;auto+gdr" BENCH_OPS=allreduce
(( $? == 1 )) || fail "layouts +gdr without GDRDMA channels: exit status"
grep -qF '!! layouts-auto+gdr-r1: channels not on NET/MegaScale/[0-9]+/GDRDMA' "$dir/out.log" ||
  fail "layouts +gdr without GDRDMA: message: $(cat "$dir/out.log")"
# Every rank gets --timeout HANG_S (default 300): a hang prints every thread's stack and exits.
check STEPS=bench ROUNDS=1 BENCH_OPS=allreduce ARGS_LOG="$dir/args.log" || { cat "$dir/out.log"; fail "ARGS_LOG run: exit $?"; }
[[ $(grep -c -- '--timeout 300 ' "$dir/args.log") == $(grep -c . "$dir/args.log") ]] ||
  fail "--timeout 300 not on every run: $(cat "$dir/args.log")"
rm -f "$dir/args.log"
check STEPS=bench ROUNDS=1 BENCH_OPS=allreduce HANG_S=42 ARGS_LOG="$dir/args.log" || fail "HANG_S=42: exit $?"
[[ $(grep -c -- '--timeout 42 ' "$dir/args.log") == $(grep -c . "$dir/args.log") ]] ||
  fail "HANG_S=42 not passed on: $(cat "$dir/args.log")"
for bad in 0 -5 1.5 90000 soon; do
  check STEPS=bench HANG_S="$bad"
  (( $? == 2 )) && grep -qF "HANG_S=$bad: seconds, 1 .. 86400" "$dir/out.log" || fail "HANG_S=$bad: $(cat "$dir/out.log")"
done
# +gdrrx: GPU buffers for receives only (NCCL_NET_GDR_READ=0); the [receive] lines must say GDRDMA, the
# [send] lines may not.
rm -f "$ORDER_LOG"
check STEPS=layouts ROUNDS=1 LAYOUTS="auto;auto+gdrrx" BENCH_OPS=allreduce ||
  { cat "$dir/out.log"; fail "STEPS=layouts with +gdrrx: exit $?"; }
expected=$'Socket\nMegaScale timed exact\nMegaScale timed\nMegaScale timed exact gdr1 read0\nMegaScale timed gdr1 read0'
expect_order "layouts with +gdrrx" "$expected"
grep -qF 'ok layouts-auto+gdrrx-r1: all 4 channel lines say via NET/MegaScale, the [receive] lines NET/MegaScale/[0-9]+/GDRDMA' "$dir/out.log" ||
  fail "layouts +gdrrx: channel check: $(cat "$dir/out.log")"
check FAKE_NO_GDR=1 STEPS=layouts ROUNDS=1 LAYOUTS="auto;auto+gdrrx" BENCH_OPS=allreduce
(( $? == 1 )) || fail "layouts +gdrrx without GDRDMA receives: exit status"
grep -qF '!! layouts-auto+gdrrx-r1: channels not on NET/MegaScale, the [receive] lines NET/MegaScale/[0-9]+/GDRDMA' "$dir/out.log" ||
  fail "layouts +gdrrx without GDRDMA: message: $(cat "$dir/out.log")"
grep -qF '[receive] via NET/MegaScale/0' "$dir/out.log" || fail "layouts +gdrrx: the bad line not shown: $(cat "$dir/out.log")"
# GDR=1: every MegaScale run of every step; Socket's runs as before.
rm -f "$ORDER_LOG"
check GDR=1 STEPS=bench ROUNDS=1 BENCH_OPS=allreduce || { cat "$dir/out.log"; fail "GDR=1 STEPS=bench: exit $?"; }
[[ $(grep -c 'gdr1' "$ORDER_LOG") == 1 && $(grep -c '^MegaScale' "$ORDER_LOG") == 1 ]] ||
  fail "GDR=1: MegaScale's runs: $(tr '\n' ' ' < "$ORDER_LOG")"
rm -f "$ORDER_LOG"
check GDR=rx STEPS=bench ROUNDS=1 BENCH_OPS=allreduce || { cat "$dir/out.log"; fail "GDR=rx STEPS=bench: exit $?"; }
[[ $(grep -c 'gdr1 read0' "$ORDER_LOG") == 1 && $(grep -c '^MegaScale' "$ORDER_LOG") == 1 ]] ||
  fail "GDR=rx: MegaScale's runs: $(tr '\n' ' ' < "$ORDER_LOG")"
check GDR=2 STEPS=bench
(( $? == 2 )) && grep -qF "GDR='2': 0, 1 or rx" "$dir/out.log" || fail "GDR=2: $(cat "$dir/out.log")"
for bad in "default;2x3" "auto 2x3" "auto;wires=2 io_threads=3" "auto;wires=2,,io_threads=3" "auto;wires=2," "auto;lane=3" "auto;wires=x" "auto;wires=-1" "auto;wires=2,wires=3" "auto;" "auto" "auto;auto" "socket;auto" "socket-4x4+gdr;auto" "socket-4x4+gdrrx;auto" "auto;auto+gd" "auto;auto+gdrx" "wires=2+gdr;wires=2+gdr"; do
  check STEPS=layouts LAYOUTS="$bad"
  (( $? == 2 )) || fail "LAYOUTS=$bad: exit status"
  grep -qE "LAYOUTS(=| has )" "$dir/out.log" || fail "LAYOUTS=$bad: message: $(cat "$dir/out.log")"
done
check STEPS=layouts LAYOUTS="auto;2x3"
grep -qF "LAYOUTS has '2x3': each is auto, socket-4x4 or a MEGASCALE_LAYOUT value" "$dir/out.log" ||
  fail "the old layout form's message: $(cat "$dir/out.log")"
# A run whose layout in force (its stats) is not the one asked for fails the step.
check FAKE_IGNORE_LAYOUT=1 STEPS=layouts ROUNDS=1 LAYOUTS="auto;wires=2,io_threads=3" BENCH_OPS=allreduce
(( $? == 1 )) || fail "a layout not in force: exit status"
grep -qF '!! layouts-wires2-io_threads3-r1: the layout in force is not wires=2,io_threads=3: megascale-nccl-stand-in-' \
  "$dir/out.log" || fail "a layout not in force: message: $(cat "$dir/out.log")"

# The ceiling step: the Null net (no bytes moved, so --no-check) beside Socket 4x4 and MegaScale in
# interleaved rounds, each over Socket 4x4; its channels must be on NET/Null; MegaScale's runs (only
# they) write request timelines, whose time per message the table lists per run; without the library
# the step is refused up front.
rm -f "$ORDER_LOG"
: > "$dir/build/collectives/nccl/libnccl-net-null.so"
check STEPS=ceiling ROUNDS=2 BENCH_OPS=allreduce || { cat "$dir/out.log"; fail "STEPS=ceiling: exit $?"; }
expected=$'Socket\nSocket4x4 timed exact\nMegaScale timed exact\nNull timed exact\nMegaScale timed exact\nNull timed exact\nSocket4x4 timed exact'
expect_order ceiling "$expected"
ceiling=$dir/out/ceiling.md
grep -qF '| AllReduce | 67108864 | 4.00 | 6.00 | 12.00 | 1.50 (1.50-1.50) | 3.00 (3.00-3.00) |' "$ceiling" ||
  fail "ceiling table: $(cat "$ceiling")"
grep -qF -- '  - AllReduce: 3.00-3.00x (median 3.00); reaches 1.5x in all' "$ceiling" ||
  fail "ceiling: the Null net's goal line: $(cat "$ceiling")"
grep -qF 'ok ceiling-null-r1: all 4 channel lines say via NET/Null' "$dir/out.log" ||
  { cat "$dir/out.log"; fail "Null's channels not checked"; }
grep -qF -- '- ceiling-megascale-r1: 4 timeouts' "$ceiling" || fail "ceiling transport line: $(cat "$ceiling")"
grep -qF -- '- ceiling-megascale-r2: 2 connections (paired by connection id), 20 messages: median 200 us, mean 200, p90 200, p99 200, max 200;' \
  "$ceiling" || fail "ceiling: MegaScale's message times: $(cat "$ceiling")"
grep -q '^check-nccl-plugin: PASS' "$dir/out.log" || fail "STEPS=ceiling: no PASS line"
# NULL_RECV_US adds the timed Null net (null-rN, MEGASCALE_NULL_RECV_US=N) to the same rounds.
rm -f "$ORDER_LOG"
check STEPS=ceiling ROUNDS=1 BENCH_OPS=allreduce NULL_RECV_US="100 200" ||
  { cat "$dir/out.log"; fail "NULL_RECV_US: exit $?"; }
expected=$'Socket\nSocket4x4 timed exact\nMegaScale timed exact\nNull timed exact\nNull timed exact r100\nNull timed exact r200'
expect_order "ceiling with NULL_RECV_US" "$expected"
grep -qF '| AllReduce | 67108864 | 4.00 | 6.00 | 12.00 | 10.00 | 8.00 | 1.50 | 3.00 | 2.50 | 2.00 |' \
  "$ceiling" || fail "ceiling table with NULL_RECV_US: $(cat "$ceiling")"
grep -qF '"null-rN" is the Null net with each receive done N microseconds after' "$ceiling" ||
  fail "ceiling: no null-rN note: $(cat "$ceiling")"
for bad in "0" "100 100" "1ms" "12345678"; do
  check STEPS=ceiling NULL_RECV_US="$bad"
  (( $? == 2 )) || fail "NULL_RECV_US=$bad: exit status"
  grep -qF "NULL_RECV_US has" "$dir/out.log" || fail "NULL_RECV_US=$bad: message: $(cat "$dir/out.log")"
done
# NULL_GDR=1 adds the Null net on GPU buffers, untimed and at each NULL_RECV_US, with GPUDirect allowed;
# its channels must say GDRDMA.
rm -f "$ORDER_LOG"
check STEPS=ceiling ROUNDS=1 BENCH_OPS=allreduce NULL_RECV_US=100 NULL_GDR=1 ||
  { cat "$dir/out.log"; fail "NULL_GDR=1: exit $?"; }
expected=$'Socket\nSocket4x4 timed exact\nMegaScale timed exact\nNull timed exact\nNull timed exact r100\nNull timed exact gdr1:SYS\nNull timed exact r100 gdr1:SYS'
expect_order "ceiling with NULL_GDR=1" "$expected"
grep -qF '| AllReduce | 67108864 | 4.00 | 6.00 | 12.00 | 10.00 | 36.00 | 30.00 | 1.50 | 3.00 | 2.50 | 9.00 | 7.50 |' \
  "$ceiling" || fail "ceiling table with NULL_GDR=1: $(cat "$ceiling")"
grep -qF 'ok ceiling-null-gdr-r100-r1: all 4 channel lines say via NET/Null/[0-9]+/GDRDMA' "$dir/out.log" ||
  { cat "$dir/out.log"; fail "NULL_GDR=1: GDRDMA channels not checked"; }
grep -qF '"null-gdr" and "null-gdr-rN" are the same on NCCL'"'"'s GPU buffers' "$ceiling" ||
  fail "ceiling: no null-gdr note: $(cat "$ceiling")"
grep -qF 'on the Null net'"'"'s curve with GPU buffers (null-gdr, null-gdr-r100:' "$ceiling" ||
  fail "ceiling: no goal on the GPU-buffer curve: $(cat "$ceiling")"
# NULL_GDR="1 rx" adds both; rx's Null net takes GPU buffers for receives only (NCCL_NET_GDR_READ=0).
rm -f "$ORDER_LOG"
check STEPS=ceiling ROUNDS=1 BENCH_OPS=allreduce NULL_RECV_US=100 NULL_GDR="1 rx" ||
  { cat "$dir/out.log"; fail "NULL_GDR='1 rx': exit $?"; }
expected=$'Socket\nSocket4x4 timed exact\nMegaScale timed exact\nNull timed exact\nNull timed exact r100\nNull timed exact gdr1:SYS\nNull timed exact r100 gdr1:SYS\nNull timed exact gdr1:SYS read0\nNull timed exact r100 gdr1:SYS read0'
expect_order "ceiling with NULL_GDR='1 rx'" "$expected"
grep -qF 'ok ceiling-null-gdrrx-r100-r1: all 4 channel lines say via NET/Null, the [receive] lines NET/Null/[0-9]+/GDRDMA' "$dir/out.log" ||
  { cat "$dir/out.log"; fail "NULL_GDR=rx: GDRDMA receive channels not checked"; }
grep -qF '"null-gdrrx" and "null-gdrrx-rN" are the same on GPU buffers for receives only' "$ceiling" ||
  fail "ceiling: no null-gdrrx note: $(cat "$ceiling")"
grep -qF 'on the Null net'"'"'s curve with GPU buffers for receives only (null-gdrrx, null-gdrrx-r100:' "$ceiling" ||
  fail "ceiling: no goal on the receive-only GPU-buffer curve: $(cat "$ceiling")"
for bad in yes 2 "rx 1" "1 1"; do
  check STEPS=ceiling NULL_GDR="$bad"
  (( $? == 2 )) || fail "NULL_GDR=$bad: exit status"
  grep -qF "NULL_GDR='$bad': 0, 1, rx or \"1 rx\"" "$dir/out.log" || fail "NULL_GDR=$bad: message: $(cat "$dir/out.log")"
done
rm "$dir/build/collectives/nccl/libnccl-net-null.so"
check STEPS=ceiling
(( $? == 2 )) || fail "STEPS=ceiling without the Null net: exit status"
grep -qF "STEPS has ceiling but there is no" "$dir/out.log" || fail "no-Null-net message: $(cat "$dir/out.log")"

check STEPS="bench tune"
(( $? == 2 )) || fail "STEPS=bench tune: exit status"
grep -qF "STEPS has 'tune': the steps are kill, check, fault, bench, lat, layouts, ceiling and torch" "$dir/out.log" ||
  fail "STEPS message: $(cat "$dir/out.log")"
check ROUNDS=0
(( $? == 2 )) || fail "ROUNDS=0: exit status"
grep -qF "ROUNDS=0" "$dir/out.log" || fail "ROUNDS message"

# kill_check [VAR=VALUE ...]: the kill step alone, fresh victim pid files.
kill_check() {
  rm -f "$dir"/victim.*.pid
  check STEPS=kill "$@"
}
kill_check || { cat "$dir/out.log"; fail "kill step: exit $? on a good run"; }
for net in megascale socket; do
  grep -q "^   kill-$net: rank 1 (SIGKILLed) gone after " "$dir/out.log" || fail "kill-$net: victim line"
  grep -q "^ok kill-$net: rank 0 stopped .* s after rank 1 was SIGKILLed: rank 0: NCCL reported" "$dir/out.log" ||
    fail "kill-$net: survivor line: $(cat "$dir/out.log")"
done
kill_check NRANKS=3 || { cat "$dir/out.log"; fail "kill step, 3 ranks: exit $?"; }
(( $(grep -c "^ok kill-megascale: rank [01] stopped .* after rank 2 was SIGKILLed" "$dir/out.log") == 2 )) ||
  fail "kill step, 3 ranks: $(cat "$dir/out.log")"
kill_check KILL_DEADLINE_S=1 FAKE_KILL=hang && fail "exit 0 with a MegaScale survivor that hangs"
grep -q '^!! kill-megascale: rank 0 still running 1 s after rank 1 was SIGKILLed' "$dir/out.log" ||
  fail "no message for the hang: $(cat "$dir/out.log")"
grep -q '^check-nccl-plugin: FAIL' "$dir/out.log" || fail "no FAIL line after the hang"
kill_check FAKE_KILL=exit2 && fail "exit 0 with a MegaScale survivor that exits 2"
grep -q '^!! kill-megascale: rank 0 exited 2 (want 3' "$dir/out.log" || fail "no message for exit 2"
kill_check KILL_DEADLINE_S=1 FAKE_KILL=hang FAKE_KILL_NET=Socket || fail "Socket's hang failed the script"
grep -q '^!! kill-socket: rank 0 still running' "$dir/out.log" || fail "Socket's hang not reported"
# A stand-in rank that waits does so as "$dir/stand-in-rank" (exec -a): none may outlive the script.
pgrep -f "$dir/stand-in-rank" > /dev/null && fail "stand-in ranks left running: $(pgrep -fa "$dir/stand-in-rank")"
echo PASS
