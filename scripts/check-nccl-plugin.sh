#!/usr/bin/env bash
# Checks the MegaScale NCCL net plugin on a GPU host (one host: NET forced with P2P and SHM off), then
# compares its bandwidth with NCCL's own Socket net.
#
#   scripts/check-nccl-plugin.sh [BUILD_DIR]          # BUILD_DIR defaults to build/
#
# Steps (every log under $OUT, default out/nccl-plugin):
#   1. kill              a peer killed mid-collective: ranks run 64 MiB all-reduces, one at a time, through
#                        MegaScale and then through Socket (as it comes); once data flows the last rank is
#                        SIGKILLed. Every other rank must stop within KILL_DEADLINE_S (default 20) with NCCL's
#                        asynchronous error (nccl_check exits 3: it polls ncclCommGetAsyncError, prints the
#                        error and aborts the communicator), never hang. The seconds from SIGKILL to each
#                        survivor's exit are printed for both nets; only MegaScale's outcome fails the script.
#                        Runs first, before MPS starts: MPS does not isolate a client killed mid-kernel from
#                        the others on its GPU (the survivor then fails with "an illegal memory access" on
#                        the GPU, whatever the net; Wu et al., "Safe Process Quitting for GPU MPS", ICDCS 2020).
#                        Under an MPS daemon of your own, leave kill out of STEPS
#   2. megascale         all collectives, fp32 and bf16, 0 B .. MAX_BYTES, every element checked, through
#                        NCCL_NET_PLUGIN=<abs path>/libnccl-net-megascale.so NCCL_NET=MegaScale; every NCCL
#                        channel line must say "via NET/MegaScale"; stats in $OUT/stats
#   3. megascale-drop1   the same with MEGASCALE_FAULT_DROP=0.01 (1% of datagrams dropped on receive) up to
#                        FAULT_MAX_BYTES: loss recovery under NCCL
#   4. bandwidth         64 MiB .. MAX_BYTES (x2 steps, nccl-tests' exact sizes), fp32, BENCH_OPS (default
#                        every collective):
#                        MegaScale, Socket as it comes, Socket with NCCL_SOCKET_NTHREADS=4
#                        NCCL_NSOCKS_PERTHREAD=4, one after another (each round starting with the next
#                        net; an untimed warm-up run first), ROUNDS times (default 2); table in
#                        $OUT/bandwidth.md (scripts/nccl-bandwidth-table.py: medians, and MegaScale's
#                        ratios to each Socket net round by round, since on a shared host two calls can
#                        differ by more than the nets do), and MegaScale's timeouts and retransmissions
#                        per run (scripts/megascale-stats-summary.py over each run's MEGASCALE_STATS_DIR),
#                        then the wire alone both ways on the same CPUs with the plugin's thread layout
#                        (scripts/wire-both-ways.sh: GB/s each way per rank, comparable with busbw, and a
#                        message's time, with 1 and with 4 messages in flight a connection, and at depth 1
#                        through the plugin's own threaded wire: plugin-check --case steps_both_ways), and
#                        where each net's CPU goes: cores per rank by thread (MegaScale's wire and I/O
#                        threads, NCCL's proxy, Socket's helpers, the rest) and the host's busy,
#                        softirq and steal cores (steal: a hypervisor running other guests on the
#                        VM's CPUs), from NCCL's "Init COMPLETE" to the end of each timed run
#                        (scripts/thread-cpu.py)
#                        PROFILE=1 (needs perf on PATH) adds, for round 1 of each net, where the host's
#                        CPU went by kind of work: CRC, kernel copies, network stack, scheduling,
#                        memcpy, engine, wire, NCCL, CUDA (perf record -a; scripts/profile-table.py)
#   5. latency           LAT_MIN_BYTES (8) .. LAT_MAX_BYTES (1M), x4 steps, fp32, BENCH_OPS, LAT_ITERS (300)
#                        back-to-back collectives per size: microseconds per collective through the same
#                        three nets in the same interleaved rounds; table in $OUT/latency.md
#                        (nccl-bandwidth-table.py --metric time: medians, and MegaScale's time over each
#                        Socket net's round by round) and MegaScale's transport per run, with how many
#                        sends waited for the receiver's credit
#   6. torch             tests/gpu/torch_allreduce.py through the plugin, when PyTorch is installed
#   7. layouts           (only when STEPS names it) MegaScale alone under each thread layout in LAYOUTS
#                        (default "default 4x0 2x6 2x4 2x3"; "default" is the plugin's own choice, WxI sets
#                        MEGASCALE_NTHREADS=W MEGASCALE_IO_THREADS=I and, for I > 0, MEGASCALE_LANES=I;
#                        WxIsS adds MEGASCALE_STRIPES=S, e.g. 4x0s4: each comm cut over 4 wires, and
#                        WxIsSbK MEGASCALE_STRIPE_BYTES=K KiB; a suffix +gdr, e.g. default+gdr, adds GDR=1's
#                        settings to that layout alone, +gdrrx GDR=rx's),
#                        the bandwidth step's sizes, in ROUNDS interleaved rounds, each bandwidth run followed
#                        by the same layout's small collectives (the lat step's sizes and LAT_ITERS); tables
#                        in $OUT/layouts.md (nccl-bandwidth-table.py --variants: medians, and each layout's
#                        bandwidth, then time per collective, over the first's round by round), the layout
#                        "default" chose, and the transport per bandwidth run. An entry "socket-4x4" runs
#                        NCCL's Socket net tuned (NCCL_SOCKET_NTHREADS=4 NCCL_NSOCKS_PERTHREAD=4) in the same
#                        rounds; put first (LAYOUTS="socket-4x4 default 1x6"), every layout is paired with
#                        it round by round and the tables say how many pairs reach the issue's 1.5x.
#                        How many polling threads a host holds varies from host to host (with 4 ranks on
#                        4 x H200 hosts of one kind, 2 x (1 + 6) gave 0.9-1.0 GB/s on one and 3.6-10.5 on
#                        another: docs/PERFORMANCE.md, sixteenth session): this finds the one for yours
#   8. ceiling           (only when STEPS names it) NCCL's own ceiling over a host-memory net: the Null net
#                        (build/collectives/nccl/libnccl-net-null.so, NCCL_NET=Null: it moves no bytes,
#                        a send completes at once, up to 16 ahead of the peer's receives, a receive once
#                        its send is posted; results are wrong, so --no-check;
#                        NCCL_PROTO=Simple, since LL and LL128 wait for flags inside the data)
#                        beside Socket 4x4 and MegaScale, the bandwidth step's sizes, ROUNDS interleaved
#                        rounds; table in $OUT/ceiling.md (nccl-bandwidth-table.py --variants: each net
#                        over Socket 4x4 round by round, and per collective how many pairs reach
#                        1.5x: where the Null net's do not, no net reaches the goal). The Null net
#                        reports the MegaScale plugin's speed and no PCI path, so NCCL gives it the
#                        same channels: what it reaches is the most any host-memory net could at that
#                        channel count. NULL_RECV_US="100 200" adds the Null net with each receive done
#                        that many microseconds after its message starts (MEGASCALE_NULL_RECV_US; nets
#                        null-r100, null-r200): what NCCL reaches over a net whose message takes that long,
#                        to set beside MegaScale's own time per message, which the step measures from both
#                        ends' request timelines (MEGASCALE_TRACE_FILE; scripts/megascale-message-times.py:
#                        the mean and where it went), and the goal as a time per message on that curve.
#                        NULL_GDR=1 adds the Null net taking NCCL's GPU buffers (MEGASCALE_NULL_PTR_CUDA=1
#                        with NCCL_NET_GDR_LEVEL=SYS; channels via NET/Null/N/GDRDMA), untimed (null-gdr)
#                        and at each NULL_RECV_US (null-gdr-rN): NCCL's ceiling and curve over a net with
#                        GPUDirect, where its kernels no longer move the bytes through host memory;
#                        NULL_GDR=rx the same on GPU buffers for receives only (NCCL_NET_GDR_READ=0 too:
#                        null-gdrrx, null-gdrrx-rN), and NULL_GDR="1 rx" both
# STEPS picks steps by name: kill, check, fault, bench, lat, layouts, ceiling, torch (default all of them
# but layouts and ceiling); STEPS=bench measures bandwidth only, STEPS=lat small-message latency only.
#
# Ranks: NRANKS (default: the number of GPUs, at least 2). With fewer GPUs than ranks, ranks share GPUs
# and each gets its own NCCL_HOSTID, so NCCL sees separate hosts (no "Duplicate GPU") and uses the net.
# Ranks sharing a GPU time-slice it unless MPS runs: the checks pass either way, but without MPS every
# net's bandwidth stops near 1.8 GB/s. MPS=1 starts an MPS control daemon of the script's own for the run
# (pipe and log folders under $OUT) and stops it at the end.
# GDR=1: every MegaScale run takes NCCL's GPU buffers (MEGASCALE_GDR_COPY=1, moved through pinned host
# shadows by the GPU's copy engines) with NCCL_NET_GDR_LEVEL=SYS (lo has no PCI location), and every
# MegaScale channel line must say .../GDRDMA. GDR=rx: GPU buffers for receives only (NCCL_NET_GDR_READ=0
# as well: NCCL's sends stay in host memory, which its kernels write, and only a receive is copied);
# every MegaScale [receive] channel line must say .../GDRDMA. Socket takes host memory only, so its runs
# are as before.
# Other knobs: MAX_BYTES (1G), FAULT_MAX_BYTES (64M), BENCH_MIN_BYTES (64M), ITERS (5), TIMEOUT_S (1800 per
# run), MEGASCALE_IFNAME (lo: one host talks to itself over loopback). HANG_S (300): a rank whose wait, or
# whose main thread's CUDA or NCCL call, lasts that long prints every thread's stack in its .out file and
# exits 4 (nccl_check --timeout-s), so that a hang says where each thread was (frames in the plugin show
# as offsets: addr2line -f -C -e BUILD/collectives/nccl/libnccl-net-megascale.so OFFSET names them). Exit status 0 when the steps run
# pass (the Socket runs are the baseline and only reported).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

build=${1:-build}
plugin=$(readlink -f "$build/collectives/nccl/libnccl-net-megascale.so" || true)
null_net=$(readlink -f "$build/collectives/nccl/libnccl-net-null.so" || true)
check=$build/tests/gpu/nccl_check
out=${OUT:-out/nccl-plugin}
max=${MAX_BYTES:-1G}
fault_max=${FAULT_MAX_BYTES:-64M}
bench_min=${BENCH_MIN_BYTES:-64M}
iters=${ITERS:-5}
lat_min=${LAT_MIN_BYTES:-8}
lat_max=${LAT_MAX_BYTES:-1M}
lat_iters=${LAT_ITERS:-300}
ifname=${MEGASCALE_IFNAME:-lo}

die() { echo "check-nccl-plugin: $*" >&2; exit 2; }
[[ -n $plugin && -f $plugin ]] || die "no plugin at $build/collectives/nccl/libnccl-net-megascale.so (build it first)"
[[ -x $check ]] || die "no $check (configure with the CUDA toolkit and NCCL present, then build nccl_check)"
ngpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
(( ngpus >= 1 )) || die "no GPU visible (nvidia-smi -L)"
nranks=${NRANKS:-$(( ngpus >= 2 ? ngpus : 2 ))}
rounds=${ROUNDS:-2}
hang_s=${HANG_S:-300}
steps=" ${STEPS:-kill check fault bench lat torch} "
bench_ops=${BENCH_OPS:-}
# What a bandwidth run and a small-collective run ask of nccl_check, whichever step makes them.
bench_args=(--min-bytes "$bench_min" --max-bytes "$max" --factor 2 --types float --exact-sizes
            ${bench_ops:+--ops "$bench_ops"})
lat_args=(--min-bytes "$lat_min" --max-bytes "$lat_max" --factor 4 --types float --iters "$lat_iters"
          ${bench_ops:+--ops "$bench_ops"})
profile_on=${PROFILE:-0}
profile_hz=499
[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "ROUNDS=$rounds: a number of rounds, 1 or more"
[[ $hang_s =~ ^[1-9][0-9]{0,4}$ ]] || die "HANG_S=$hang_s: seconds, 1 .. 86400"
(( hang_s <= 86400 )) || die "HANG_S=$hang_s: seconds, 1 .. 86400"
[[ $profile_on == 0 || $profile_on == 1 ]] || die "PROFILE=$profile_on: 0 or 1"
if [[ $profile_on == 1 ]] && ! command -v perf > /dev/null; then
  echo "check-nccl-plugin: PROFILE=1 but no perf on PATH: no profile (install linux-tools / linux-perf)"
  profile_on=0
fi
for s in $steps; do
  [[ $s == kill || $s == check || $s == fault || $s == bench || $s == lat || $s == layouts || $s == ceiling ||
     $s == torch ]] || die "STEPS has '$s': the steps are kill, check, fault, bench, lat, layouts, ceiling and torch"
done
want() { [[ $steps == *" $1 "* ]]; }
# LAYOUTS for the layouts step: "default", WIRESxIO_THREADS[sSTRIPES[bKIB]] or "socket-4x4", two or
# more, each once.
layout_re='^([1-9][0-9]?)x(0|[1-9][0-9]?)(s([1-8])(b([1-9][0-9]{0,5}))?)?$'
read -ra layouts <<< "${LAYOUTS:-default 4x0 2x6 2x4 2x3}"
if want layouts; then
  declare -A seen_layout=()
  for l in "${layouts[@]}"; do
    b=${l%+gdr*}
    [[ $l == *+gdr* && $l != *+gdr && $l != *+gdrrx ]] && die "LAYOUTS has '$l': the suffixes are +gdr and +gdrrx"
    [[ $l == socket-4x4+gdr* ]] && die "LAYOUTS has '$l': +gdr and +gdrrx are for MegaScale's layouts"
    if [[ $b != default && $b != socket-4x4 ]]; then
      if ! [[ $b =~ $layout_re ]] || (( BASH_REMATCH[1] > 16 || BASH_REMATCH[2] > 64 || ${BASH_REMATCH[6]:-4} < 4 )); then
        die "LAYOUTS has '$l': each is default, socket-4x4 or WIRESxIO_THREADS[sSTRIPES[bKIB]] with 1..16 wires, 0..64 I/O threads, 1..8 stripes and stripes of 4 KiB or more, e.g. 2x3, 4x0s4 or 6x0s6b256, and MegaScale's may end in +gdr or +gdrrx"
      fi
    fi
    [[ -z ${seen_layout[$l]:-} ]] || die "LAYOUTS has '$l' twice"
    seen_layout[$l]=1
  done
  (( ${#layouts[@]} >= 2 )) || die "LAYOUTS='${LAYOUTS:-}': two or more layouts to compare"
fi
if want ceiling; then
  [[ -n $null_net && -f $null_net ]] || die "STEPS has ceiling but there is no $build/collectives/nccl/libnccl-net-null.so"
fi
# NULL_RECV_US for the ceiling step: receive times of the Null net's timing model, each once.
read -ra null_recv_us <<< "${NULL_RECV_US:-}"
declare -A seen_recv_us=()
for u in "${null_recv_us[@]}"; do
  [[ $u =~ ^[1-9][0-9]{0,6}$ ]] || die "NULL_RECV_US has '$u': each is a time in microseconds, 1 .. 9999999"
  [[ -z ${seen_recv_us[$u]:-} ]] || die "NULL_RECV_US has '$u' twice"
  seen_recv_us[$u]=1
done
# NULL_GDR=1: the ceiling step adds the Null net on NCCL's GPU buffers (null-gdr, null-gdr-rN); rx: on
# GPU buffers for receives only (null-gdrrx, null-gdrrx-rN); "1 rx": both.
read -ra null_gdr <<< "${NULL_GDR:-0}"
[[ ${null_gdr[*]} == 0 || ${null_gdr[*]} == 1 || ${null_gdr[*]} == rx || ${null_gdr[*]} == "1 rx" ]] ||
  die "NULL_GDR='${NULL_GDR:-}': 0, 1, rx or \"1 rx\""
mkdir -p "$out"
echo "check-nccl-plugin: $nranks ranks on $ngpus GPU(s), plugin $plugin, steps:${steps% }, logs in $out"


# LOCAL_WORLD_SIZE as torchrun sets it: every rank runs on this host, so the plugin sizes its threads
# by the CPUs each rank gets (MEGASCALE_LOCAL_RANKS in collectives/nccl/README.md).
# NCCL_SET_THREAD_NAME=1: NCCL names its threads ("NCCL Progress", "NCCL SockS ..."), for the bandwidth
# step's CPU table and for profilers.
# shellcheck disable=SC2054  # NCCL_DEBUG_SUBSYS takes a comma-separated list: one element
common_env=(NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NVLS_ENABLE=0 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,ENV
  LOCAL_WORLD_SIZE="$nranks" NCCL_SET_THREAD_NAME=1)
megascale_env=(NCCL_NET_PLUGIN="$plugin" NCCL_NET=MegaScale MEGASCALE_IFNAME="$ifname")
# GDR=1: NCCL's GPU buffers through the plugin's host shadows (MEGASCALE_GDR_COPY=1), where NCCL allows
# GPUDirect for the device: lo has no PCI location, so it hangs off the CPU, beyond NCCL's default
# NCCL_NET_GDR_LEVEL (PXB). Every MegaScale channel must then say .../GDRDMA.
# GDR=rx adds NCCL_NET_GDR_READ=0: NCCL then registers GPU buffers for its receives only, and its send
# channels stay on host memory (channel lines: [send] via NET/MegaScale/0, [receive] via .../GDRDMA).
# megascale_via, and the *_via of each mode: what each channel line must say, the [receive] lines' after
# a space when they differ (every_channel_via).
gdr_env=(MEGASCALE_GDR_COPY=1 NCCL_NET_GDR_LEVEL=SYS)
gdr_rx_env=("${gdr_env[@]}" NCCL_NET_GDR_READ=0)
megascale_via=MegaScale gdr_via='MegaScale/[0-9]+/GDRDMA' gdr_rx_via='MegaScale MegaScale/[0-9]+/GDRDMA'
case ${GDR:-0} in
  0) ;;
  1) megascale_env+=("${gdr_env[@]}") megascale_via=$gdr_via ;;
  rx) megascale_env+=("${gdr_rx_env[@]}") megascale_via=$gdr_rx_via ;;
  *) die "GDR='${GDR}': 0, 1 or rx" ;;
esac
socket_env=(NCCL_NET_PLUGIN=none NCCL_NET=Socket)
socket_4x4_env=("${socket_env[@]}" NCCL_SOCKET_NTHREADS=4 NCCL_NSOCKS_PERTHREAD=4)  # the tuned baseline

# start_ranks LABEL [timeout] -- NCCL_CHECK_ARGS...: starts one nccl_check per rank in the background
# with common_env, the caller's envs (VAR=VALUE ...) and, when ranks share GPUs, an NCCL_HOSTID each; the
# pids go to the caller's pids. "timeout" puts timeout(1) in front; without it env execs nccl_check, so
# each pid is the rank's own process (one a signal can reach).
start_ranks() {
  local label=$1 wrap=() r
  [[ $2 == timeout ]] && wrap=(timeout "${TIMEOUT_S:-1800}")
  while [[ $1 != -- ]]; do shift; done
  shift
  rm -f "$out/$label.id" "$out/$label".*.log "$out/$label".*.out
  for ((r = 0; r < nranks; r++)); do
    local hostid=()
    (( ngpus < nranks )) && hostid=(NCCL_HOSTID="megascale-check-rank$r")
    env "${common_env[@]}" "${envs[@]}" "${hostid[@]}" NCCL_DEBUG_FILE="$out/$label.nccl.rank$r.log" \
      "${wrap[@]}" "$check" --rank "$r" --nranks "$nranks" --id-file "$out/$label.id" --gpu $((r % ngpus)) \
      --timeout-s "$hang_s" "$@" > "$out/$label.rank$r.out" 2>&1 &
    pids+=($!)
  done
}

# run LABEL [VAR=VALUE ...] -- NCCL_CHECK_ARGS...: starts one nccl_check per rank and waits for all.
run() {
  local label=$1
  shift
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  local pids=() status=0 r p watcher="" profiler=""
  start_ranks "$label" timeout -- --iters "$iters" "$@"
  # PROFILE_DATA=FILE: perf record -a from rank 0's "Init COMPLETE" until the ranks exit (PROFILE=1).
  if [[ -n ${PROFILE_DATA:-} ]]; then
    ( for ((i = 0; i < 6000; i++)); do grep -q "Init COMPLETE" "$out/$label.nccl.rank0.log" 2> /dev/null && break; sleep 0.1; done
      echo "$EPOCHREALTIME" > "$PROFILE_DATA.start"
      exec perf record -a -e cpu-clock -F "$profile_hz" -q -o "$PROFILE_DATA" -- sleep 86400 ) > /dev/null 2>&1 &
    profiler=$!
  fi
  # CPU_WATCH=FILE: each thread's CPU time from rank 0's "Init COMPLETE" to the end (thread-cpu.py).
  if [[ -n ${CPU_WATCH:-} ]]; then
    python3 scripts/thread-cpu.py watch --start-after "$out/$label.nccl.rank0.log" "Init COMPLETE" \
      "$CPU_WATCH" "${pids[@]}" &
    watcher=$!
  fi
  for p in "${pids[@]}"; do wait "$p" || status=1; done
  [[ -n $watcher ]] && { wait "$watcher" || echo "!! $label: scripts/thread-cpu.py watch failed (no CPU figures)"; }
  [[ -n $profiler ]] && profile_stop "$profiler" "$PROFILE_DATA"
  echo "== $label (exit $status)"
  cat "$out/$label.rank0.out"
  for ((r = 1; r < nranks; r++)); do
    [[ -s $out/$label.rank$r.out ]] && { echo "-- rank $r:"; cat "$out/$label.rank$r.out"; }
  done
  return $status
}

# profile_stop PID DATA: stops run's perf record and leaves DATA's report as DATA.txt and the seconds
# it covered as DATA.seconds (both absent when the recording never started).
profile_stop() {
  local pid=$1 data=$2 end=$EPOCHREALTIME i
  # perf stops on SIGINT and writes its file; a subshell still waiting for the log line (no .start yet)
  # ignores SIGINT as a script's background job does, and gets SIGTERM.
  if [[ -e $data.start ]]; then
    kill -INT "$pid" 2> /dev/null
    for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
  fi
  kill -TERM "$pid" 2> /dev/null
  wait "$pid" 2> /dev/null
  if [[ -s $data && -s $data.start ]]; then
    awk -v a="$(cat "$data.start")" -v b="$end" 'BEGIN { printf "%.3f\n", b - a }' > "$data.seconds"
    perf report -i "$data" -n -t '|' --stdio --no-children --sort comm,dso,sym > "$data.txt" 2> /dev/null
  fi
  rm -f "$data" "$data.old" "$data.start"
}

# every_channel_via LABEL "NET [RECV_NET]": each "Channel ... via" line of the run names NET/<NET> (an
# ERE); with RECV_NET, each "[receive]" line names NET/<RECV_NET> instead.
every_channel_via() {
  local label=$1 net=${2% *} recv_net=${2#* } lines bad
  lines=$(cat "$out/$label".nccl.rank*.log 2>/dev/null | grep -E 'Channel [0-9]+/[0-9]+ .* via ' || true)
  if [[ -z $lines ]]; then
    echo "!! $label: no NCCL channel lines in $out/$label.nccl.rank*.log"
    return 1
  fi
  local what="NET/$net"
  bad=$(grep -vE "via NET/$net" <<< "$lines" || true)
  if [[ $recv_net != "$net" ]]; then
    what+=", the [receive] lines NET/$recv_net"
    bad+=$(grep -F '[receive]' <<< "$lines" | grep -vE "via NET/$recv_net" || true)
  fi
  if [[ -n $bad ]]; then
    echo "!! $label: channels not on $what:"
    head -5 <<< "$bad"
    return 1
  fi
  echo "ok $label: all $(wc -l <<< "$lines") channel lines say via $what"
  grep -hE "NET/Plugin|Assigned NET plugin|Using network" "$out/$label".nccl.rank0.log | head -3
  return 0  # those lines are information: their absence is not a failure
}

verdict=0
if want kill; then
  deadline=${KILL_DEADLINE_S:-20}
  # kill_run LABEL [VAR=VALUE ...] --: prints one line per survivor; returns 1 unless each exited 3 in time.
  kill_run() {
    local label=$1
    shift
    local envs=()
    while [[ $1 != -- ]]; do envs+=("$1"); shift; done
    local pids=() r victim=$((nranks - 1)) ok=0
    # No timeout(1) in front, so the victim's pid is nccl_check's own. --gap-us waits for each all-reduce
    # before the next is launched, so no rank is ever blocked in a launch.
    start_ranks "$label" -- --ops allreduce --types float --min-bytes 64M --max-bytes 64M --warmup 0 \
      --iters 1000000 --gap-us 1 --no-check
    for ((r = 0; r < 1200; r++)); do grep -q ' via NET/' "$out/$label.nccl.rank0.log" 2>/dev/null && break; sleep 0.1; done
    sleep 3  # data flowing
    if ! kill -0 "${pids[victim]}" 2> /dev/null; then
      echo "!! $label: rank $victim was gone before the kill (see $out/$label.rank$victim.out)"
      kill -9 "${pids[@]}" 2> /dev/null; wait 2> /dev/null
      return 1
    fi
    # Every rank's exit is timed from the kill, the victim's too: a CUDA process can take a while to
    # die (its GPU work is torn down first), and its sockets stay open until it has.
    local t0=$EPOCHREALTIME left=$nranks
    local -A took=() status=()
    kill -9 "${pids[victim]}"
    while :; do
      for ((r = 0; r < nranks; r++)); do
        [[ -n ${took[$r]:-} ]] && continue
        kill -0 "${pids[r]}" 2> /dev/null && continue
        took[$r]=$(awk -v t0="$t0" -v now="$EPOCHREALTIME" 'BEGIN { printf "%.2f", now - t0 }')
        wait "${pids[r]}" 2> /dev/null
        status[$r]=$?
        left=$((left - 1))
      done
      (( left == 0 )) && break
      awk -v t0="$t0" -v now="$EPOCHREALTIME" -v d="$deadline" 'BEGIN { exit !(now - t0 > d) }' && break
      sleep 0.02
    done
    echo "   $label: rank $victim (SIGKILLed) gone after ${took[$victim]:-more than $deadline} s"
    for ((r = 0; r < victim; r++)); do
      local why
      why=$(grep -m1 'nccl_check: rank' "$out/$label.rank$r.out" || true)
      if [[ -z ${took[$r]:-} ]]; then
        echo "!! $label: rank $r still running ${deadline} s after rank $victim was SIGKILLed (killed now)"
        ok=1
      elif [[ ${status[$r]} == 3 ]]; then
        echo "ok $label: rank $r stopped ${took[$r]} s after rank $victim was SIGKILLed: ${why#nccl_check: }"
      else
        echo "!! $label: rank $r exited ${status[$r]} (want 3, NCCL's asynchronous error) ${took[$r]} s after the kill: $why"
        ok=1
      fi
    done
    kill -9 "${pids[@]}" 2> /dev/null
    wait 2> /dev/null
    return $ok
  }
  echo "== kill (rank $((nranks - 1)) SIGKILLed mid all-reduce; survivors must stop within ${deadline} s)"
  # stderr aside: bash's own "Killed" notice for the victim says nothing the lines above do not
  kill_run kill-megascale "${megascale_env[@]}" -- 2> /dev/null || verdict=1
  kill_run kill-socket "${socket_env[@]}" -- 2> /dev/null || true  # the baseline: reported only
fi

if [[ ${MPS:-0} == 1 ]]; then
  command -v nvidia-cuda-mps-control > /dev/null || die "MPS=1 but no nvidia-cuda-mps-control on PATH"
  CUDA_MPS_PIPE_DIRECTORY=$(readlink -f "$out")/mps-pipe
  CUDA_MPS_LOG_DIRECTORY=$(readlink -f "$out")/mps-log
  export CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d || die "MPS=1: nvidia-cuda-mps-control -d failed (see $CUDA_MPS_LOG_DIRECTORY)"
  trap 'echo quit | nvidia-cuda-mps-control' EXIT
  echo "check-nccl-plugin: MPS started (pipe $CUDA_MPS_PIPE_DIRECTORY)"
fi

if want check; then
  run megascale "${megascale_env[@]}" MEGASCALE_STATS_DIR="$out/stats" -- --max-bytes "$max" \
    --csv "$out/megascale.csv" || verdict=1
  every_channel_via megascale "$megascale_via" || verdict=1
fi

if want fault; then
  run megascale-drop1 "${megascale_env[@]}" MEGASCALE_FAULT_DROP=0.01 -- --max-bytes "$fault_max" \
    --csv "$out/megascale-drop1.csv" || verdict=1
  every_channel_via megascale-drop1 "$megascale_via" || verdict=1
fi

# rounds_of STEP ARGS...: ROUNDS interleaved rounds of MegaScale, Socket as it comes and Socket 4x4 (or the
# nets named in NETS, e.g. NETS="socket-4x4 megascale null" for the ceiling step), each a run of
# nccl_check ARGS labelled STEP-NET-rK (each round starts with the next net, so none always runs first).
# The Null net runs with --no-check and NCCL_PROTO=Simple (its results are wrong; LL and LL128 wait for
# flags inside the data it never moves). Only MegaScale's and the Null net's failures fail the script:
# the Socket runs are the baseline. Leaves each net's CSVs, in round order, in round_csvs[NET]; the
# CSV lists NET=CSV,... for nccl-bandwidth-table.py in table_nets (a Socket net only when every round
# has its CSV, since pairs are taken round by round) and MegaScale's stats folders in ms_stats. The
# bench step also watches each run's threads (CPU_WATCH) and, with PROFILE=1, records round 1 of each net.
order=(megascale socket socket-4x4)
stats_dir_of() { echo "$out/stats-$1-megascale-r$2"; }  # STEP ROUND: MegaScale's stats of that run
join() { local IFS=,; echo "$*"; }
declare -A round_csvs=()
rounds_of() {
  local step=$1 k j net
  shift
  local -a these
  read -ra these <<< "${NETS:-${order[*]}}"
  local n=${#these[@]}
  round_csvs=()
  ms_stats=()
  for ((k = 1; k <= rounds; k++)); do
    for ((j = 0; j < n; j++)); do
      net=${these[(k - 1 + j) % n]}
      local label=$step-$net-r$k envs=("${socket_env[@]}") via=Socket failed=0 profile="" watch="" extra=()
      case $net in
        megascale) envs=("${megascale_env[@]}" MEGASCALE_STATS_DIR="$(stats_dir_of "$step" "$k")") via=$megascale_via
          # The ceiling step times MegaScale's messages from both ends, to read against the Null net's.
          [[ $step == ceiling ]] && envs+=(MEGASCALE_TRACE_FILE="$out/$label.trace-%p.json") ;;
        socket-4x4) envs=("${socket_4x4_env[@]}") ;;
        null | null-r* | null-gdr | null-gdr-r* | null-gdrrx | null-gdrrx-r*)
          envs=(NCCL_NET_PLUGIN="$null_net" NCCL_NET=Null NCCL_PROTO=Simple) via=Null extra=(--no-check)
          # GPU buffers: lo has no PCI path, so GPUDirect only at NCCL_NET_GDR_LEVEL=SYS; for receives
          # only with NCCL_NET_GDR_READ=0.
          [[ $net == null-gdr* ]] && envs+=(MEGASCALE_NULL_PTR_CUDA=1 NCCL_NET_GDR_LEVEL=SYS) via='Null/[0-9]+/GDRDMA'
          [[ $net == null-gdrrx* ]] && envs+=(NCCL_NET_GDR_READ=0) via='Null Null/[0-9]+/GDRDMA'
          [[ $net =~ -r([0-9]+)$ ]] && envs+=(MEGASCALE_NULL_RECV_US="${BASH_REMATCH[1]}") ;;
      esac
      if [[ $step == bench ]]; then
        watch="$out/$label.cpu.json"
        [[ $profile_on == 1 && $k == 1 ]] && profile="$out/$label.perf.data"
      fi
      CPU_WATCH="$watch" PROFILE_DATA="$profile" run "$label" "${envs[@]}" -- "$@" "${extra[@]}" \
        --csv "$out/$label.csv" || failed=1
      every_channel_via "$label" "$via" || failed=1
      [[ $net != socket* && $failed == 1 ]] && verdict=1
      [[ -s $out/$label.csv ]] && round_csvs[$net]+="${round_csvs[$net]:+,}$out/$label.csv"
    done
    ms_stats+=("$step-megascale-r$k=$(stats_dir_of "$step" "$k")")
  done
  table_nets=("megascale=${round_csvs[megascale]:-}")
  for net in socket socket-4x4; do
    local list=${round_csvs[$net]:-} commas
    commas=${list//[^,]/}
    [[ -n $list ]] && (( ${#commas} + 1 == rounds )) && table_nets+=("$net=$list")
  done
}

# report_table NAME FILE STATS...: after FILE (a table from nccl-bandwidth-table.py) was written, appends
# MegaScale's transport per run from the STATS folders (megascale-stats-summary.py: RUN=FOLDER ...) and
# prints it; a broken stats record fails the script.
report_table() {
  local name=$1 file=$2
  shift 2
  { printf "\nMegaScale's transport in each run (its stats files):\n\n"
    python3 scripts/megascale-stats-summary.py "$@"; } >> "$file" ||
    { echo "!! $name: no transport lines (see above)"; verdict=1; }
  echo "== $name ($file)"
  cat "$file"
}

# The first NCCL run on a host (or after MPS starts) is often slow whatever the net: one untimed run
# before the first timed step.
if want bench || want lat || want layouts || want ceiling; then
  run warmup "${socket_env[@]}" -- --min-bytes 64M --max-bytes 64M --types float --iters 2 \
    --ops allreduce --no-check > /dev/null || true
fi

if want bench; then
  rounds_of bench "${bench_args[@]}"
  if python3 scripts/nccl-bandwidth-table.py --ranks "$nranks" "${table_nets[@]}" > "$out/bandwidth.md"; then
    # MegaScale's transport per run: timeouts whose retransmissions all arrived as duplicates are a host
    # stalling ACKs, not loss (collectives/nccl/README.md, "Stats").
    { printf "\nMegaScale's transport in each run (its stats files):\n\n"
      python3 scripts/megascale-stats-summary.py "${ms_stats[@]}"; } >> "$out/bandwidth.md" ||
      { echo "!! bandwidth: no transport lines (see above)"; verdict=1; }
    # The transport alone on the same CPUs with the layout the plugin chose, for reading the table
    # against: scripts/wire-both-ways.sh (exit 2: it could not run here, e.g. no megascale CLI built).
    printf "\nThe wire alone, both directions at once on these CPUs (scripts/wire-both-ways.sh):\n\n" >> "$out/bandwidth.md"
    OUT="$out/wire" scripts/wire-both-ways.sh "$out/bench-megascale-r1.nccl.rank0.log" "$nranks" "$build" \
      >> "$out/bandwidth.md" 2>&1
    case $? in
      0) ;;
      2) echo "(not measured: see the line above)" >> "$out/bandwidth.md" ;;
      *) echo "!! bandwidth: the wire-alone run failed ($out/wire)"; verdict=1 ;;
    esac
    if [[ $profile_on == 1 ]]; then
      profiles=()
      for net in "${order[@]}"; do
        data=$out/bench-$net-r1.perf.data
        [[ -s $data.txt && -s $data.seconds ]] && profiles+=("$net=$data.txt:$(cat "$data.seconds")")
      done
      printf "\nWhere the host's CPU went, by kind of work (PROFILE=1: perf record -a -e cpu-clock -F %s from NCCL's Init COMPLETE, round 1 of each net; scripts/profile-table.py):\n\n" "$profile_hz" >> "$out/bandwidth.md"
      if (( ${#profiles[@]} > 0 )); then
        python3 scripts/profile-table.py --hz "$profile_hz" "${profiles[@]}" >> "$out/bandwidth.md" 2>&1 ||
          echo "(no profile table: see the line above)" >> "$out/bandwidth.md"
      else
        echo "(no profile was recorded: see $out/bench-*-r1.perf.data.*)" >> "$out/bandwidth.md"
      fi
    fi
    # Where each net's CPU goes, by thread (NCCL names its threads with NCCL_SET_THREAD_NAME=1, in
    # common_env): information only, so a net without every round's figures is left out, not failed.
    cpu_nets=()
    for net in "${order[@]}"; do
      files=()
      for ((k = 1; k <= rounds; k++)); do
        [[ -s $out/bench-$net-r$k.cpu.json ]] && files+=("$out/bench-$net-r$k.cpu.json")
      done
      (( ${#files[@]} == rounds )) && cpu_nets+=("$net=$(join "${files[@]}")")
    done
    if (( ${#cpu_nets[@]} > 0 )); then
      printf "\nWhere each rank's CPU goes, by thread (scripts/thread-cpu.py; cores from NCCL's Init COMPLETE to the run's end, medians of the rounds):\n\n" >> "$out/bandwidth.md"
      python3 scripts/thread-cpu.py table --ranks "$nranks" "${cpu_nets[@]}" >> "$out/bandwidth.md" 2>&1 ||
        echo "(no CPU table: see the line above)" >> "$out/bandwidth.md"
    fi
    echo "== bandwidth ($out/bandwidth.md)"
    cat "$out/bandwidth.md"
  else
    echo "!! bandwidth: no table (see above)"
    verdict=1
  fi
fi

if want lat; then
  rounds_of lat "${lat_args[@]}"
  if python3 scripts/nccl-bandwidth-table.py --metric time --ranks "$nranks" "${table_nets[@]}" > "$out/latency.md"; then
    report_table latency "$out/latency.md" "${ms_stats[@]}"
  else
    echo "!! latency: no table (see above)"
    verdict=1
  fi
fi

if want layouts; then
  n=${#layouts[@]}
  declare -A layout_csvs=() layout_lat_csvs=()
  layout_stats=()
  for ((k = 1; k <= rounds; k++)); do
    for ((j = 0; j < n; j++)); do
      l=${layouts[(k - 1 + j) % n]}
      label=layouts-$l-r$k
      # MegaScale's runs keep their stats; tuned Socket is the baseline, and its failures are reported,
      # not the script's.
      envs=("${megascale_env[@]}") via=$megascale_via
      stats=(MEGASCALE_STATS_DIR="$out/stats-$label") lat_stats=(MEGASCALE_STATS_DIR="$out/stats-$label-lat")
      b=${l%+gdr*}
      if [[ $l == socket-4x4 ]]; then
        envs=("${socket_4x4_env[@]}") via=Socket stats=() lat_stats=()
      elif [[ $b != default && $b =~ $layout_re ]]; then
        envs+=(MEGASCALE_NTHREADS="${BASH_REMATCH[1]}" MEGASCALE_IO_THREADS="${BASH_REMATCH[2]}")
        (( BASH_REMATCH[2] > 0 )) && envs+=(MEGASCALE_LANES="${BASH_REMATCH[2]}")
        [[ -n ${BASH_REMATCH[4]} ]] && envs+=(MEGASCALE_STRIPES="${BASH_REMATCH[4]}")
        [[ -n ${BASH_REMATCH[6]} ]] && envs+=(MEGASCALE_STRIPE_BYTES="$((BASH_REMATCH[6] * 1024))")
      fi
      [[ $l == *+gdr ]] && envs+=("${gdr_env[@]}") via=$gdr_via
      [[ $l == *+gdrrx ]] && envs+=("${gdr_rx_env[@]}") via=$gdr_rx_via
      failed=0
      run "$label" "${envs[@]}" "${stats[@]}" -- "${bench_args[@]}" --csv "$out/$label.csv" || failed=1
      every_channel_via "$label" "$via" || failed=1
      [[ -s $out/$label.csv ]] && layout_csvs[$l]+="${layout_csvs[$l]:+,}$out/$label.csv"
      (( ${#stats[@]} )) && layout_stats+=("$label=$out/stats-$label")
      # The same layout's small collectives (the lat step's sizes), right after: a layout that spins
      # more threads can win bandwidth and lose every collective under 1 MiB (docs/PERFORMANCE.md,
      # twentieth session), so the choice needs both.
      run "$label-lat" "${envs[@]}" "${lat_stats[@]}" -- "${lat_args[@]}" --csv "$out/$label-lat.csv" || failed=1
      every_channel_via "$label-lat" "$via" || failed=1
      [[ $via == MegaScale* && $failed == 1 ]] && verdict=1
      [[ -s $out/$label-lat.csv ]] && layout_lat_csvs[$l]+="${layout_lat_csvs[$l]:+,}$out/$label-lat.csv"
    done
  done
  variants=() lat_variants=()
  for l in "${layouts[@]}"; do
    variants+=("$l=${layout_csvs[$l]:-}")
    lat_variants+=("$l=${layout_lat_csvs[$l]:-}")
  done
  # Against tuned Socket (put first), each layout's pairs are counted against the issue's goal.
  goal=()
  [[ ${layouts[0]} == socket-4x4 ]] && goal=(--goal 1.5)
  if python3 scripts/nccl-bandwidth-table.py --variants "${goal[@]}" --ranks "$nranks" "${variants[@]}" \
    > "$out/layouts.md" &&
    { printf '\nSmall collectives under each layout (run after each bandwidth run, %s .. %s, %s iterations):\n\n' \
        "$lat_min" "$lat_max" "$lat_iters"
      python3 scripts/nccl-bandwidth-table.py --variants --metric time --ranks "$nranks" "${lat_variants[@]}"; } \
      >> "$out/layouts.md"; then
    chose=$(grep -ohE 'MEGASCALE_IO_THREADS=[0-9]+ \(.*\) \(default\)' "$out"/layouts-default-r1.nccl.rank0.log 2> /dev/null | head -1)
    [[ -n $chose ]] && printf '\n"default" was the plugin'"'"'s own layout: %s\n' "$chose" >> "$out/layouts.md"
    report_table layouts "$out/layouts.md" "${layout_stats[@]}"
  else
    echo "!! layouts: no table (see above)"
    verdict=1
  fi
fi

if want ceiling; then
  ceiling_nets="socket-4x4 megascale null"  # the first is what the others are compared with
  for u in "${null_recv_us[@]}"; do ceiling_nets+=" null-r$u"; done
  for g in "${null_gdr[@]}"; do
    [[ $g == 0 ]] && continue
    base=null-gdr
    [[ $g == rx ]] && base=null-gdrrx
    ceiling_nets+=" $base"
    for u in "${null_recv_us[@]}"; do ceiling_nets+=" $base-r$u"; done
  done
  NETS="$ceiling_nets" rounds_of ceiling "${bench_args[@]}"
  variants=()
  for net in $ceiling_nets; do variants+=("$net=${round_csvs[$net]:-}"); done
  if python3 scripts/nccl-bandwidth-table.py --variants --goal 1.5 --ranks "$nranks" "${variants[@]}" \
    > "$out/ceiling.md"; then
    printf '\n"null" is the Null net: no bytes moved, a send done at once (up to 16 ahead of the receives), a receive once its send is posted (its results are not checked). Where its pairs fall below 1.5x socket-4x4, no net that takes host buffers and that NCCL gives the same channels reaches the goal there.\n' >> "$out/ceiling.md"
    if [[ " ${null_gdr[*]} " == *" 1 "* ]]; then printf '"null-gdr" and "null-gdr-rN" are the same on NCCL'"'"'s GPU buffers (MEGASCALE_NULL_PTR_CUDA=1, NCCL_NET_GDR_LEVEL=SYS): NCCL'"'"'s ceiling and curve over a net with GPUDirect, whose kernels leave the bytes in GPU memory.\n' >> "$out/ceiling.md"; fi
    if [[ " ${null_gdr[*]} " == *" rx "* ]]; then printf '"null-gdrrx" and "null-gdrrx-rN" are the same on GPU buffers for receives only (NCCL_NET_GDR_READ=0 too): NCCL'"'"'s kernels write their sends to pinned host memory and read their receives from GPU memory.\n' >> "$out/ceiling.md"; fi
    if (( ${#null_recv_us[@]} )); then printf '"null-rN" is the Null net with each receive done N microseconds after its message starts (both its send and its receive posted): what NCCL reaches over a net whose message takes that long. Compare N with MegaScale'"'"'s request times in the transport lines below.\n' >> "$out/ceiling.md"; fi
    { printf "\nMegaScale's time per message in each run (scripts/megascale-message-times.py: both ends' request timelines, from the later of a message's two posts to the receive's test()-done, the start the null-rN nets use):\n\n"
      for ((k = 1; k <= rounds; k++)); do
        # The line for all pairs and, under it, where their time went.
        times=$(python3 scripts/megascale-message-times.py "$out/ceiling-megascale-r$k".trace-*.json 2>&1 |
                  sed -n '1p; 2{/^where it went/s/^/  /p}')
        echo "- ceiling-megascale-r$k: $times"
      done; } >> "$out/ceiling.md"
    report_table ceiling "$out/ceiling.md" "${ms_stats[@]}"
  else
    echo "!! ceiling: no table (see above)"
    verdict=1
  fi
fi

if ! want torch; then
  :
elif python3 -c "import torch, torch.distributed" 2>/dev/null; then
  echo "== torch"
  env NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NVLS_ENABLE=0 "${megascale_env[@]}" NCCL_DEBUG=INFO \
    NCCL_DEBUG_FILE="$out/torch.nccl.%p.log" WORLD_SIZE="$nranks" \
    timeout "${TIMEOUT_S:-1800}" python3 tests/gpu/torch_allreduce.py || verdict=1
  grep -hE 'Channel [0-9]+/[0-9]+ .* via ' "$out"/torch.nccl.*.log | grep -v "via NET/MegaScale" | head -3 | \
    grep -q . && { echo "!! torch: channels not on NET/MegaScale"; verdict=1; }
else
  echo "== torch: skipped (no PyTorch in python3)"
fi

echo "check-nccl-plugin: $([[ $verdict == 0 ]] && echo PASS || echo FAIL)"
exit $verdict
