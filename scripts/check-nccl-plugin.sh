#!/usr/bin/env bash
# Checks the MegaScale NCCL net plugin on a GPU host (one host: NET forced with P2P and SHM off), then
# compares its bandwidth with NCCL's own Socket net.
#
#   scripts/check-nccl-plugin.sh [BUILD_DIR]          # BUILD_DIR defaults to build/
#
# Steps (every log under $OUT, default out/nccl-plugin):
#   1. megascale         all collectives, fp32 and bf16, 0 B .. MAX_BYTES, every element checked, through
#                        NCCL_NET_PLUGIN=<abs path>/libnccl-net-megascale.so NCCL_NET=MegaScale; every NCCL
#                        channel line must say "via NET/MegaScale"; stats in $OUT/stats
#   2. megascale-drop1   the same with MEGASCALE_FAULT_DROP=0.01 (1% of datagrams dropped on receive) up to
#                        FAULT_MAX_BYTES: loss recovery under NCCL
#   3. bandwidth         64 MiB .. MAX_BYTES (x2 steps), fp32: MegaScale, Socket as it comes, Socket with
#                        NCCL_SOCKET_NTHREADS=4 NCCL_NSOCKS_PERTHREAD=4; table in $OUT/bandwidth.md
#   4. torch             tests/gpu/torch_allreduce.py through the plugin, when PyTorch is installed
#
# Ranks: NRANKS (default: the number of GPUs, at least 2). With fewer GPUs than ranks, ranks share GPUs
# and each gets its own NCCL_HOSTID, so NCCL sees separate hosts (no "Duplicate GPU") and uses the net.
# Ranks sharing a GPU time-slice it unless MPS runs (nvidia-cuda-mps-control -d): the checks pass either
# way, but without MPS every net's bandwidth stops near 1.8 GB/s.
# Other knobs: MAX_BYTES (1G), FAULT_MAX_BYTES (64M), BENCH_MIN_BYTES (64M), ITERS (5), TIMEOUT_S (1800 per
# run), MEGASCALE_IFNAME (lo: one host talks to itself over loopback). Exit status 0 when steps 1, 2 and 4
# pass (the Socket runs are the baseline and only reported).
set -uo pipefail
cd "$(dirname "$0")/.."

build=${1:-build}
plugin=$(readlink -f "$build/collectives/nccl/libnccl-net-megascale.so" || true)
check=$build/tests/gpu/nccl_check
out=${OUT:-out/nccl-plugin}
max=${MAX_BYTES:-1G}
fault_max=${FAULT_MAX_BYTES:-64M}
bench_min=${BENCH_MIN_BYTES:-64M}
iters=${ITERS:-5}
ifname=${MEGASCALE_IFNAME:-lo}

die() { echo "check-nccl-plugin: $*" >&2; exit 2; }
[[ -n $plugin && -f $plugin ]] || die "no plugin at $build/collectives/nccl/libnccl-net-megascale.so (build it first)"
[[ -x $check ]] || die "no $check (configure with the CUDA toolkit and NCCL present, then build nccl_check)"
ngpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
(( ngpus >= 1 )) || die "no GPU visible (nvidia-smi -L)"
nranks=${NRANKS:-$(( ngpus >= 2 ? ngpus : 2 ))}
mkdir -p "$out"
echo "check-nccl-plugin: $nranks ranks on $ngpus GPU(s), plugin $plugin, logs in $out"

# LOCAL_WORLD_SIZE as torchrun sets it: every rank runs on this host, so the plugin sizes its threads
# by the CPUs each rank gets (MEGASCALE_LOCAL_RANKS in collectives/nccl/README.md).
common_env=(NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NVLS_ENABLE=0 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,ENV
  LOCAL_WORLD_SIZE="$nranks")
megascale_env=(NCCL_NET_PLUGIN="$plugin" NCCL_NET=MegaScale MEGASCALE_IFNAME="$ifname")
socket_env=(NCCL_NET_PLUGIN=none NCCL_NET=Socket)

# run LABEL [VAR=VALUE ...] -- NCCL_CHECK_ARGS...: starts one nccl_check per rank and waits for all.
run() {
  local label=$1
  shift
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  local idfile=$out/$label.id pids=() status=0 r
  rm -f "$idfile" "$out/$label".*.log "$out/$label".*.out
  for ((r = 0; r < nranks; r++)); do
    local hostid=()
    (( ngpus < nranks )) && hostid=(NCCL_HOSTID="megascale-check-rank$r")
    env "${common_env[@]}" "${envs[@]}" "${hostid[@]}" NCCL_DEBUG_FILE="$out/$label.nccl.rank$r.log" \
      timeout "${TIMEOUT_S:-1800}" "$check" --rank "$r" --nranks "$nranks" --id-file "$idfile" \
      --gpu $((r % ngpus)) --iters "$iters" "$@" > "$out/$label.rank$r.out" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || status=1; done
  echo "== $label (exit $status)"
  cat "$out/$label.rank0.out"
  for ((r = 1; r < nranks; r++)); do
    [[ -s $out/$label.rank$r.out ]] && { echo "-- rank $r:"; cat "$out/$label.rank$r.out"; }
  done
  return $status
}

# every_channel_via LABEL NET: each "Channel ... via" line of the run names NET/<NET>.
every_channel_via() {
  local label=$1 net=$2 lines bad
  lines=$(cat "$out/$label".nccl.rank*.log 2>/dev/null | grep -E 'Channel [0-9]+/[0-9]+ .* via ' || true)
  if [[ -z $lines ]]; then
    echo "!! $label: no NCCL channel lines in $out/$label.nccl.rank*.log"
    return 1
  fi
  bad=$(grep -v "via NET/$net" <<< "$lines" || true)
  if [[ -n $bad ]]; then
    echo "!! $label: channels not on NET/$net:"
    head -5 <<< "$bad"
    return 1
  fi
  echo "ok $label: all $(wc -l <<< "$lines") channel lines say via NET/$net"
  grep -hE "NET/Plugin|Assigned NET plugin|Using network" "$out/$label".nccl.rank0.log | head -3
}

verdict=0
run megascale "${megascale_env[@]}" MEGASCALE_STATS_DIR="$out/stats" -- --max-bytes "$max" \
  --csv "$out/megascale.csv" || verdict=1
every_channel_via megascale MegaScale || verdict=1

run megascale-drop1 "${megascale_env[@]}" MEGASCALE_FAULT_DROP=0.01 -- --max-bytes "$fault_max" \
  --csv "$out/megascale-drop1.csv" || verdict=1
every_channel_via megascale-drop1 MegaScale || verdict=1

bench=(--min-bytes "$bench_min" --max-bytes "$max" --factor 2 --types float)
run bench-megascale "${megascale_env[@]}" -- "${bench[@]}" --csv "$out/bench-megascale.csv" || verdict=1
run bench-socket "${socket_env[@]}" -- "${bench[@]}" --csv "$out/bench-socket.csv" || true
every_channel_via bench-socket Socket || true
run bench-socket-4x4 "${socket_env[@]}" NCCL_SOCKET_NTHREADS=4 NCCL_NSOCKS_PERTHREAD=4 -- "${bench[@]}" \
  --csv "$out/bench-socket-4x4.csv" || true

# Bandwidth table: busbw per (collective, size) for the three nets.
awk -F, -v ranks="$nranks" '
  FNR == 1 { file++; next }
  { key = $1 "," $3; if (!(key in seen)) { seen[key] = 1; order[n++] = key } bw[file, key] = $7 }
  END {
    print "# Bus bandwidth (GB/s), " ranks " ranks, fp32, one host over the net (P2P/SHM off)"
    print ""
    print "| collective | size (B) | MegaScale | Socket | Socket 4x4 | MegaScale / best Socket |"
    print "|---|---:|---:|---:|---:|---:|"
    for (i = 0; i < n; i++) {
      split(order[i], k, ",")
      m = bw[1, order[i]]; s = bw[2, order[i]]; s4 = bw[3, order[i]]
      best = (s4 + 0 > s + 0) ? s4 : s
      ratio = (best + 0 > 0) ? sprintf("%.2f", m / best) : "-"
      printf "| %s | %s | %s | %s | %s | %s |\n", k[1], k[2], m == "" ? "-" : m, s == "" ? "-" : s, s4 == "" ? "-" : s4, ratio
    }
  }' "$out/bench-megascale.csv" "$out/bench-socket.csv" "$out/bench-socket-4x4.csv" > "$out/bandwidth.md" 2>/dev/null
echo "== bandwidth ($out/bandwidth.md)"
cat "$out/bandwidth.md"

if python3 -c "import torch, torch.distributed" 2>/dev/null; then
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
