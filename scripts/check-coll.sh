#!/usr/bin/env bash
# megascale-coll checked on this host's GPU(s): every collective at each rank count of RANKS (default
# "2 4 8"), ranks forked by --nproc and sharing the GPUs (MPS, a distinct NCCL_HOSTID each), NCCL's
# P2P and SHM off so that every byte crosses the net, through NCCL's Socket net and through the
# megascale plugin, SIZES (default -b 8 -e 16M -f 8), every element of every row checked; then a rank
# stopped with SIGSTOP in the middle of a long run must end the job with -T's error naming the stopped
# rank, not hang; -I (with -K) through the plugin with 1% injected loss gives the per-iteration columns
# and a transport line per row whose retransmissions are counted; -G replays rows checked correct; and
# --pairs over 6 ranks, the last of them pinned to one CPU beside a CPU hog pinned there too, must name
# that rank as the suspect.
#
#   scripts/check-coll.sh [BIN]     # BIN: the folder with megascale-coll and libnccl-net-megascale.so
#
# Logs in OUT (default out/check-coll). Exit 0 when every check passes, 1 otherwise, 77 without a GPU.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
# shellcheck source=train-parallel/lib.sh
source scripts/train-parallel/lib.sh
coll=$(built -x "${1:-}" megascale-coll build/cli/coll/megascale-coll megascale-coll) || exit 2
plugin=$(built -f "${1:-}" libnccl-net-megascale.so build/collectives/nccl/libnccl-net-megascale.so plugin) || exit 2
out=${OUT:-out/check-coll}
ranks=${RANKS:-2 4 8}
read -r -a sizes <<< "${SIZES:--b 8 -e 16M -f 8}"
require_gpus
mkdir -p "$out"
out=$(readlink -f "$out")
export NCCL_NVLS_ENABLE=0 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET
export MEGASCALE_IFNAME=${MEGASCALE_IFNAME:-lo} NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
max=1
for n in $ranks; do (( n > max )) && max=$n; done
(( max < 6 )) && max=6  # the --pairs check's ranks
start_mps_for "$out" "$gpus" "$max"
verdict=0
for n in $ranks; do
  for net in socket megascale; do
    net_env "$net"
    log=$out/$net-$n.log
    t0=$SECONDS
    env "${net_env[@]}" timeout 300 "$coll" all "${sizes[@]}" -n 5 -w 1 -T 60 --nproc "$n" \
      --json-lines "$out/$net-$n.jsonl" > "$log" 2>&1
    rc=$?
    bad=$(grep -c "Out of bounds values : [1-9]" "$log")
    done_=$(grep -c "Collective test concluded" "$log")
    if (( rc == 0 && bad == 0 && done_ == 7 )) &&
      { [[ $net != megascale ]] || grep -q "via NET/MegaScale" "$log"; }; then
      echo "PASS $net, $n ranks: 7 collectives checked in $((SECONDS - t0)) s"
    else
      echo "FAIL $net, $n ranks: exit $rc, $done_ of 7 collectives, $bad with wrong elements; the end of its log:"
      tail -5 "$log" | sed 's/^/    /'
      verdict=1
    fi
  done
done
# -I and -G, and the transport's line per row through the plugin with injected loss.
log=$out/per-iter.log
NCCL_NET=MegaScale NCCL_NET_PLUGIN="$plugin" MEGASCALE_FAULT_DROP=0.01 timeout 300 "$coll" all_reduce -b 1M -e 4M \
  -f 4 -n 20 -I 1 -K 2 --nproc 2 --json-lines "$out/per-iter.jsonl" > "$log" 2>&1
rc=$?
rows=$(grep -c "^ *[0-9].* float " "$log")
lost=$(python3 -c 'import json,sys; print(sum(json.loads(l)["transport"]["retransmits"] for l in open(sys.argv[1])))' \
  "$out/per-iter.jsonl" 2> /dev/null)
if (( rc == 0 && rows == 2 )) && grep -q "i_cv%" "$log" && (( $(grep -c "^#   transport: " "$log") == 2 )) &&
  (( ${lost:-0} > 0 )); then
  echo "PASS -I with the transport's counters: $(grep -m1 "^#   transport: " "$log")"
else
  echo "FAIL -I with the transport's counters: exit $rc, $rows rows, retransmissions ${lost:-none}; $(tail -3 "$log")"
  verdict=1
fi
log=$out/graph.log
NCCL_NET=Socket timeout 300 "$coll" all_gather -b 8 -e 1M -f 32 -n 10 -G 5 --nproc 2 > "$log" 2>&1
rc=$?
if (( rc == 0 )) && grep -q "graph: 5" "$log" && grep -q "Out of bounds values : 0 OK" "$log"; then
  echo "PASS -G 5: every row checked"
else
  echo "FAIL -G 5: exit $rc; $(tail -3 "$log")"
  verdict=1
fi
# --pairs with a rank made slow on purpose.
log=$out/pairs.log
NCCL_NET=MegaScale NCCL_NET_PLUGIN="$plugin" "$coll" all_reduce -b 8M -e 8M -n 50 --pairs --nproc 6 \
  > "$log" 2>&1 &
launcher=$!
sleep 3
slow=$(pgrep -P "$launcher" | tail -1)
if [[ -n $slow ]]; then
  taskset -a -p -c 0 "$slow" > /dev/null
  taskset -c 0 sh -c 'while :; do :; done' &
  hog=$!
fi
wait "$launcher"
rc=$?
[[ -n ${hog:-} ]] && kill "$hog"
if (( rc == 0 )) && grep -q "suspect rank 5 " "$log"; then
  echo "PASS pairs: rank 5, slowed on purpose, named: $(grep -m1 "pairs: median" "$log")"
else
  echo "FAIL pairs: exit $rc; $(grep -m1 "pairs: median" "$log" || tail -3 "$log")"
  verdict=1
fi
# Last, a stopped rank: -T must end the job with an error. (Its ranks are killed, and under MPS a job
# started while they go away can fail to get the GPU.)
log=$out/stopped.log
NCCL_NET=Socket "$coll" all_reduce -b 1M -e 1M -n 200 -N 0 -T 15 --nproc 2 > "$log" 2>&1 &
launcher=$!
sleep 8
victim=$(pgrep -P "$launcher" | tail -1)
t0=$SECONDS
[[ -n $victim ]] && kill -STOP "$victim"
for _ in $(seq 600); do kill -0 "$launcher" 2> /dev/null || break; sleep 0.1; done
if kill -0 "$launcher" 2> /dev/null; then
  kill -KILL "$launcher" "$victim" 2> /dev/null
  echo "FAIL stopped rank: the job was still running 60 s after the stop"
  verdict=1
elif grep -q "did not finish within -T 15 s" "$log" && grep -q "it was stopped (SIGSTOP" "$log"; then
  echo "PASS stopped rank: ended $((SECONDS - t0)) s after the stop: $(grep -m1 "did not finish" "$log"); $(grep -m1 "it was stopped" "$log")"
else
  echo "FAIL stopped rank: $(tail -3 "$log")"
  verdict=1
fi
echo "check-coll: $([[ $verdict == 0 ]] && echo PASS || echo FAIL)"
exit "$verdict"
