#!/usr/bin/env bash
# scripts/check-nccl-plugin.sh without a GPU: a stand-in nvidia-smi (one GPU) and nccl_check (writes the
# CSV and the NCCL channel lines a real run would, at fixed bandwidths per net) drive its bandwidth step.
# Checks the untimed warm-up, the order of the nets in each round (each round starts with the next net),
# that the timed runs ask for nccl-tests' exact sizes (--exact-sizes), that MegaScale's runs (only they)
# write stats whose timeouts and retransmissions the table lists per run (a broken record fails the run),
# the table and verdict, that a MegaScale run whose channels are not on NET/MegaScale fails the script,
# and that a bad STEPS or ROUNDS is refused with a message naming it.
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
rank=0 csv= ops=allreduce exact=
while (( $# )); do
  case $1 in
    --rank) rank=$2; shift ;;
    --csv) csv=$2; shift ;;
    --ops) ops=$2; shift ;;
    --exact-sizes) exact=1; shift; continue ;;
  esac
  shift
done
net=$NCCL_NET
[[ $net == Socket && ${NCCL_SOCKET_NTHREADS:-} == 4 ]] && net=Socket4x4
[[ $rank == 0 ]] && echo "$net${csv:+ timed}${exact:+ exact}" >> "$ORDER_LOG"
via=$NCCL_NET
[[ $NCCL_NET == MegaScale && -n ${FAKE_WRONG_NET:-} ]] && via=Socket
echo "host:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/$via/0" > "$NCCL_DEBUG_FILE"
case $net in MegaScale) bw=6.00 ;; Socket) bw=3.00 ;; Socket4x4) bw=4.00 ;; esac
if [[ -n $csv && $rank == 0 ]]; then
  echo "op,type,size_bytes,count,time_us,algbw_gbps,busbw_gbps,wrong" > "$csv"
  [[ $ops == *allreduce* ]] && echo "AllReduce,float,67108864,16777216,1,1,$bw,0" >> "$csv"
  [[ $ops == *allgather* ]] && echo "AllGather,float,67108864,16777216,1,1,$bw,0" >> "$csv"
fi
if [[ -n ${MEGASCALE_STATS_DIR:-} && $rank == 0 ]]; then
  [[ $NCCL_NET == MegaScale ]] || echo "stats dir set for $NCCL_NET" >> "$ORDER_LOG"
  mkdir -p "$MEGASCALE_STATS_DIR"
  echo '{"event":"close","engine":{"timeouts":4,"timeouts_spurious":1,"retransmits_rto":9,"retransmits_fast":0,"duplicates_dropped":9,"rtt_max_ns":6000000}}' \
    > "$MEGASCALE_STATS_DIR/stand-in.jsonl"
  [[ -n ${FAKE_BAD_STATS:-} ]] && echo '{"event":' >> "$MEGASCALE_STATS_DIR/stand-in.jsonl"
fi
echo "# stand-in nccl_check rank $rank via $via"
FAKE
chmod +x "$dir/bin/nvidia-smi" "$dir/build/tests/gpu/nccl_check"
export PATH=$dir/bin:$PATH ORDER_LOG=$dir/order.log

check() {  # runs the script; its output in $dir/out.log
  env OUT="$dir/out" NRANKS=2 MAX_BYTES=64M BENCH_MIN_BYTES=64M "$@" \
    "$src/scripts/check-nccl-plugin.sh" "$dir/build" > "$dir/out.log" 2>&1
}

check STEPS=bench ROUNDS=2 BENCH_OPS=allreduce,allgather || { cat "$dir/out.log"; fail "exit $? on a good run"; }
expected=$'Socket\nMegaScale timed exact\nSocket timed exact\nSocket4x4 timed exact\nSocket timed exact\nSocket4x4 timed exact\nMegaScale timed exact'
[[ $(cat "$ORDER_LOG") == "$expected" ]] || fail "runs in this order: $(tr '\n' ' ' < "$ORDER_LOG")"
table=$dir/out/bandwidth.md
grep -qF '| AllReduce | 67108864 | 6.00 | 3.00 | 4.00 | 2.00 (2.00-2.00) | 1.50 (1.50-1.50) |' "$table" ||
  fail "table: $(cat "$table")"
grep -qF -- '- AllGather: 1.50-1.50x (median 1.50); reaches 1.5x in all 2 pairs' "$table" || fail "verdict"
grep -q '^check-nccl-plugin: PASS' "$dir/out.log" || fail "no PASS line"
for k in 1 2; do
  grep -qF -- "- bench-megascale-r$k: 4 timeouts (1 undone as spurious), 9 RTO and 0 fast retransmissions" \
    "$table" || fail "round $k's transport line: $(cat "$table")"
done

rm -f "$ORDER_LOG"
check STEPS=bench ROUNDS=1 FAKE_BAD_STATS=1 && fail "exit 0 with a broken stats record"
grep -q '!! bandwidth: no transport lines' "$dir/out.log" || fail "no message for the broken stats record"
grep -qF '| AllReduce | 67108864 |' "$dir/out.log" || fail "the table is not printed beside it"

rm -f "$ORDER_LOG"
check STEPS=bench ROUNDS=1 FAKE_WRONG_NET=1 && fail "exit 0 with MegaScale's channels on NET/Socket"
grep -q '!! bench-megascale-r1: channels not on NET/MegaScale' "$dir/out.log" || fail "no message for the wrong net"
grep -q '^check-nccl-plugin: FAIL' "$dir/out.log" || fail "no FAIL line"

check STEPS="bench tune"
(( $? == 2 )) || fail "STEPS=bench tune: exit status"
grep -qF "STEPS has 'tune'" "$dir/out.log" || fail "STEPS message: $(cat "$dir/out.log")"
check ROUNDS=0
(( $? == 2 )) || fail "ROUNDS=0: exit status"
grep -qF "ROUNDS=0" "$dir/out.log" || fail "ROUNDS message"
echo PASS
