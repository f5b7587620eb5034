# shellcheck shell=bash
# The shared part of scripts/check-nccl-plugin.sh: its settings (environment variables, checked by
# ms_init), the environments of each net, and the functions every step uses to start ranks, to check
# that a run went through the plugin (its stats files, stats.py) and to make tables. Each step is a
# function step_NAME in steps/NAME.sh; the driver sources this file and the steps, and runs them.

# The steps in the order they run, and what each does (the driver's --list).
ms_steps=(kill check fault bench lat layouts ceiling torch)
ms_default_steps="kill check fault bench lat torch"
declare -A ms_step_summary=(
  [kill]="a rank SIGKILLed mid all-reduce: the others must stop with NCCL's asynchronous error"
  [check]="every collective, fp32 and bf16, 0 B .. MAX_BYTES, checked element by element"
  [fault]="the same with 1% of datagrams dropped, up to FAULT_MAX_BYTES"
  [bench]="bandwidth beside NCCL's Socket, ROUNDS interleaved rounds (bandwidth.md)"
  [lat]="small collectives' time beside Socket (latency.md)"
  [layouts]="MegaScale under each thread layout of LAYOUTS (layouts.md); not in the default"
  [ceiling]="NCCL's own ceiling over the Null net beside Socket 4x4 and MegaScale (ceiling.md); not in the default"
  [torch]="tests/gpu/torch_allreduce.py through the plugin, when PyTorch is installed"
)
# The keys of a MEGASCALE_LAYOUT value that LAYOUTS may set (the plugin checks their ranges).
ms_layout_keys="wires io_threads lanes stripes stripe_bytes"

die() { echo "check-nccl-plugin: $*" >&2; exit 2; }
want() { [[ $steps == *" $1 "* ]]; }
join() { local IFS=,; echo "$*"; }

# layout_name LAYOUT: the layout as a name for files and table columns ("wires=2,io_threads=3+gdr" ->
# "wires2-io_threads3+gdr"; the tables take NAME=CSV,... and so no "=" or "," in a name).
layout_name() {
  local n=${1//=/}
  echo "${n//,/-}"
}

# check_layout ENTRY: dies unless ENTRY is auto, socket-4x4 or KEY=NUMBER[,KEY=NUMBER...] (each key of
# ms_layout_keys once), MegaScale's optionally ending in +gdr or +gdrrx.
check_layout() {
  local l=$1 b=${1%+gdr*} part key
  local -A keys=()
  local form="each is auto, socket-4x4 or a MEGASCALE_LAYOUT value (KEY=NUMBER,... with KEY one of ${ms_layout_keys// /, }, e.g. wires=2,io_threads=3), MegaScale's optionally ending in +gdr or +gdrrx; separate them with ';'"
  [[ $l == *+gdr* && $l != *+gdr && $l != *+gdrrx ]] && die "LAYOUTS has '$l': the suffixes are +gdr and +gdrrx"
  [[ $l == socket-4x4+gdr* ]] && die "LAYOUTS has '$l': +gdr and +gdrrx are for MegaScale's layouts"
  [[ $b == auto || $b == socket-4x4 ]] && return 0
  [[ -n $b ]] || die "LAYOUTS has '$l': $form"
  IFS=, read -ra parts <<< "$b"
  [[ $b == *, || $b == ,* || $b == *,,* ]] && die "LAYOUTS has '$l': $form"
  for part in "${parts[@]}"; do
    key=${part%%=*}
    [[ $part =~ ^[a-z_]+=[0-9]+$ && " $ms_layout_keys " == *" $key "* ]] || die "LAYOUTS has '$l': $form"
    [[ -z ${keys[$key]:-} ]] || die "LAYOUTS has '$l': $key twice"
    keys[$key]=1
  done
}

# ms_init BUILD_DIR: reads and checks every setting (a bad one exits 2 naming it), then the build and the
# GPUs (none visible: a skip, exit 77), and sets the globals the steps use.
ms_init() {
  build=$1
  out=${OUT:-out/nccl-plugin}
  max=${MAX_BYTES:-1G}
  fault_max=${FAULT_MAX_BYTES:-64M}
  bench_min=${BENCH_MIN_BYTES:-64M}
  iters=${ITERS:-5}
  lat_min=${LAT_MIN_BYTES:-8}
  lat_max=${LAT_MAX_BYTES:-1M}
  lat_iters=${LAT_ITERS:-300}
  ifname=${MEGASCALE_IFNAME:-lo}
  rounds=${ROUNDS:-2}
  hang_s=${HANG_S:-300}
  steps=" ${STEPS:-$ms_default_steps} "
  bench_ops=${BENCH_OPS:-}
  profile_on=${PROFILE:-0}
  profile_hz=499
  [[ $rounds =~ ^[1-9][0-9]*$ ]] || die "ROUNDS=$rounds: a number of rounds, 1 or more"
  [[ $hang_s =~ ^[1-9][0-9]{0,4}$ ]] || die "HANG_S=$hang_s: seconds, 1 .. 86400"
  (( hang_s <= 86400 )) || die "HANG_S=$hang_s: seconds, 1 .. 86400"
  [[ $profile_on == 0 || $profile_on == 1 ]] || die "PROFILE=$profile_on: 0 or 1"
  local s l u
  for s in $steps; do
    [[ " ${ms_steps[*]} " == *" $s "* ]] ||
      die "STEPS has '$s': the steps are kill, check, fault, bench, lat, layouts, ceiling and torch"
  done
  # LAYOUTS for the layouts step: two or more, each once, separated by ';'.
  layouts=()
  local -a entries
  IFS=';' read -ra entries <<< "${LAYOUTS:-auto;wires=4,io_threads=0;wires=2,io_threads=6;wires=2,io_threads=4;wires=2,io_threads=3}"
  if want layouts; then
    local -A seen_layout=()
    for l in "${entries[@]}"; do
      l=${l#"${l%%[! ]*}"} l=${l%"${l##*[! ]}"}  # spaces around an entry are not part of it
      check_layout "$l"
      [[ -z ${seen_layout[$l]:-} ]] || die "LAYOUTS has '$l' twice"
      seen_layout[$l]=1
      layouts+=("$l")
    done
    (( ${#layouts[@]} >= 2 )) || die "LAYOUTS='${LAYOUTS:-}': two or more layouts to compare, separated by ';'"
  fi
  # NULL_RECV_US for the ceiling step: receive times of the Null net's timing model, each once.
  read -ra null_recv_us <<< "${NULL_RECV_US:-}"
  local -A seen_recv_us=()
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
  [[ ${GDR:-0} == 0 || ${GDR:-0} == 1 || ${GDR:-0} == rx ]] || die "GDR='${GDR}': 0, 1 or rx"

  plugin=$(readlink -f "$build/collectives/nccl/libnccl-net-megascale.so" || true)
  null_net=$(readlink -f "$build/collectives/nccl/libnccl-net-null.so" || true)
  check=$build/tests/gpu/nccl_check
  [[ -n $plugin && -f $plugin ]] || die "no plugin at $build/collectives/nccl/libnccl-net-megascale.so (build it first)"
  [[ -x $check ]] || die "no $check (configure with the CUDA toolkit and NCCL present, then build nccl_check)"
  if want ceiling; then
    [[ -n $null_net && -f $null_net ]] || die "STEPS has ceiling but there is no $build/collectives/nccl/libnccl-net-null.so"
  fi
  ngpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  if (( ngpus < 1 )); then
    echo "check-nccl-plugin: skipped: no GPU visible (nvidia-smi -L); the steps need one"
    exit 77
  fi
  nranks=${NRANKS:-$(( ngpus >= 2 ? ngpus : 2 ))}
  if [[ $profile_on == 1 ]] && ! command -v perf > /dev/null; then
    echo "check-nccl-plugin: PROFILE=1 but no perf on PATH: no profile (install linux-tools / linux-perf)"
    profile_on=0
  fi
  # What a bandwidth run and a small-collective run ask of nccl_check, whichever step makes them.
  bench_args=(--min-bytes "$bench_min" --max-bytes "$max" --factor 2 --types float --exact-sizes
              ${bench_ops:+--ops "$bench_ops"})
  lat_args=(--min-bytes "$lat_min" --max-bytes "$lat_max" --factor 4 --types float --iters "$lat_iters"
            ${bench_ops:+--ops "$bench_ops"})
  ms_envs
  mkdir -p "$out"
  echo "check-nccl-plugin: $nranks ranks on $ngpus GPU(s), plugin $plugin, steps:${steps% }, logs in $out"
  verdict=0
}

# ms_envs: the environment of each net.
# LOCAL_WORLD_SIZE as torchrun sets it: every rank runs on this host, so the plugin sizes its threads
# by the CPUs each rank gets (MEGASCALE_LOCAL_RANKS in collectives/nccl/README.md).
# NCCL_SET_THREAD_NAME=1: NCCL names its threads ("NCCL Progress", "NCCL SockS ..."), for the bandwidth
# step's CPU table and for profilers. NCCL's logs (NCCL_DEBUG=INFO) are kept for people to read.
# GDR=1: NCCL's GPU buffers through the plugin's host shadows (MEGASCALE_GDR_COPY=1), where NCCL allows
# GPUDirect for the device: lo has no PCI location, so it hangs off the CPU, beyond NCCL's default
# NCCL_NET_GDR_LEVEL (PXB). Every MegaScale channel must then say .../GDRDMA.
# GDR=rx adds NCCL_NET_GDR_READ=0: NCCL then registers GPU buffers for its receives only, and its send
# channels stay on host memory (channel lines: [send] via NET/MegaScale/0, [receive] via .../GDRDMA).
# megascale_via, and the *_via of each mode: what each channel line must say, the [receive] lines' after
# a space when they differ (every_channel_via); "MegaScale" alone needs no channel lines, since the
# plugin's stats files show that NCCL used it (plugin_used).
ms_envs() {
  # shellcheck disable=SC2054  # NCCL_DEBUG_SUBSYS takes a comma-separated list: one element
  common_env=(NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NVLS_ENABLE=0 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,ENV
    LOCAL_WORLD_SIZE="$nranks" NCCL_SET_THREAD_NAME=1)
  megascale_env=(NCCL_NET_PLUGIN="$plugin" NCCL_NET=MegaScale MEGASCALE_IFNAME="$ifname")
  gdr_env=(MEGASCALE_GDR_COPY=1 NCCL_NET_GDR_LEVEL=SYS)
  gdr_rx_env=("${gdr_env[@]}" NCCL_NET_GDR_READ=0)
  megascale_via=MegaScale gdr_via='MegaScale/[0-9]+/GDRDMA' gdr_rx_via='MegaScale MegaScale/[0-9]+/GDRDMA'
  case ${GDR:-0} in
    1) megascale_env+=("${gdr_env[@]}") megascale_via=$gdr_via ;;
    rx) megascale_env+=("${gdr_rx_env[@]}") megascale_via=$gdr_rx_via ;;
  esac
  socket_env=(NCCL_NET_PLUGIN=none NCCL_NET=Socket)
  socket_4x4_env=("${socket_env[@]}" NCCL_SOCKET_NTHREADS=4 NCCL_NSOCKS_PERTHREAD=4)  # the tuned baseline
}

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
      --timeout "$hang_s" "$@" > "$out/$label.rank$r.out" 2>&1 &
    pids+=($!)
  done
}

# run LABEL [VAR=VALUE ...] -- NCCL_CHECK_ARGS...: starts one nccl_check per rank and waits for all.
# A MEGASCALE_STATS_DIR among the VAR=VALUEs is emptied first, so that its files are this run's.
run() {
  local label=$1
  shift
  local envs=() e
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  for e in "${envs[@]}"; do [[ $e == MEGASCALE_STATS_DIR=* ]] && rm -rf "${e#*=}"; done
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

# every_channel_via LABEL "NET [RECV_NET]": each "Channel ... via" line of the run's NCCL logs names
# NET/<NET> (an ERE); with RECV_NET, each "[receive]" line names NET/<RECV_NET> instead. For NCCL's own
# nets (Socket), the Null net, and the GPU-buffer modes (whether a channel takes GPUDirect is NCCL's
# choice, which only its log states).
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
  return 0
}

# plugin_used LABEL STATS_DIR: the plugin's stats files of every rank show its connections, sends and
# receives (stats.py connections): NCCL ran the collectives over it.
plugin_used() {
  local label=$1 dir=$2 said
  said=$(python3 scripts/nccl-plugin/stats.py connections "$dir" "$nranks" 2>&1)
  case $? in
    0) echo "ok $label: $said" ;;
    *) echo "!! $label: not through the plugin: $said"; return 1 ;;
  esac
}

# through_net LABEL VIA [STATS_DIR]: the run went over the net it was meant to: MegaScale's by its stats
# files (and, in a GPU-buffer mode, NCCL's channel lines for GDRDMA), the others by NCCL's channel lines.
through_net() {
  local label=$1 via=$2 stats=${3:-} ok=0
  if [[ -n $stats ]]; then
    plugin_used "$label" "$stats" || ok=1
    [[ $via == MegaScale ]] && return $ok
  fi
  every_channel_via "$label" "$via" || ok=1
  return $ok
}

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
      local label=$step-$net-r$k envs=("${socket_env[@]}") via=Socket failed=0 profile="" watch="" extra=() stats=""
      case $net in
        megascale) stats=$(stats_dir_of "$step" "$k")
          envs=("${megascale_env[@]}" MEGASCALE_STATS_DIR="$stats") via=$megascale_via
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
      through_net "$label" "$via" "$stats" || failed=1
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

# mps_start: MPS=1 starts an MPS control daemon of the script's own (pipe and log folders under $out),
# stopped when the script exits.
mps_start() {
  [[ ${MPS:-0} == 1 ]] || return 0
  command -v nvidia-cuda-mps-control > /dev/null || die "MPS=1 but no nvidia-cuda-mps-control on PATH"
  CUDA_MPS_PIPE_DIRECTORY=$(readlink -f "$out")/mps-pipe
  CUDA_MPS_LOG_DIRECTORY=$(readlink -f "$out")/mps-log
  export CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d || die "MPS=1: nvidia-cuda-mps-control -d failed (see $CUDA_MPS_LOG_DIRECTORY)"
  trap 'echo quit | nvidia-cuda-mps-control' EXIT
  echo "check-nccl-plugin: MPS started (pipe $CUDA_MPS_PIPE_DIRECTORY)"
}

# warmup: the first NCCL run on a host (or after MPS starts) is often slow whatever the net: one untimed
# run before the first timed step.
warmup() {
  run warmup "${socket_env[@]}" -- --min-bytes 64M --max-bytes 64M --types float --iters 2 \
    --ops allreduce --no-check > /dev/null || true
}
