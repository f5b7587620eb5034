#!/usr/bin/env bash
# `megascale coll` beside nccl-tests on the same ranks, GPU(s) and nets in one call, rounds interleaved:
# does the tool add anything? For each rank count of RANKS (default "2 8"), each net of NETS (socket,
# megascale: NCCL's Socket net and the megascale plugin) and each collective of COLLS (default
# "all_reduce all_gather"), ROUNDS rounds (default 3) each run nccl-tests' <coll>_perf under the carried
# Open MPI (one process a rank, NCCL_TESTS_DEVICE=0 and a distinct NCCL_HOSTID each when ranks share a
# GPU) and then `megascale-coll <coll> --nproc N` with the same SIZES (default "-b 8 -e 128M -f 4"),
# ITERS (-n, default 20) and WARMUP (-w, default 5), no data check (-c 0: only the timing is compared).
# Both write nccl-tests' -J JSON; per size the median over the rounds of each tool's out-of-place busbw
# and time, their ratios (megascale coll / nccl-tests) and each tool's own spread over the rounds go to
# OUT/results.jsonl and a markdown table (nccl-tests/compare.py). The goal: busbw within 2% and time
# within 2% at every size, which a size's spread above 2% leaves unjudged.
#
#   scripts/nccl-tests/build.sh NCCL_TESTS_SOURCE build-nccl-tests   # once, on the build host
#   scripts/bench-coll-nccl-tests.sh [BIN] [NCCL_TESTS]   # BIN: megascale-coll and the plugin (default
#                                                         # build's folders); NCCL_TESTS: build.sh's OUT
#
# Exit 0 when every run finished (the ratios are reported, not judged), 1 when one failed, 77 without a
# GPU, 2 without the builds.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
# shellcheck source=train-parallel/lib.sh
source scripts/train-parallel/lib.sh
coll=$(built -x "${1:-}" megascale-coll build/cli/coll/megascale-coll megascale-coll) || exit 2
plugin=$(built -f "${1:-}" libnccl-net-megascale.so build/collectives/nccl/libnccl-net-megascale.so plugin) || exit 2
nt=${2:-build-nccl-tests}
out=${OUT:-out/bench-coll-nccl-tests}
ranks=${RANKS:-2 8}
nets=${NETS:-socket megascale}
colls=${COLLS:-all_reduce all_gather}
rounds=${ROUNDS:-3}
read -r -a sizes <<< "${SIZES:--b 8 -e 128M -f 4}"
iters=${ITERS:-20}
warmup=${WARMUP:-5}
[[ -f $nt/env.sh ]] || { echo "no nccl-tests build at $nt (scripts/nccl-tests/build.sh)"; exit 2; }
require_gpus
mkdir -p "$out"
out=$(readlink -f "$out")
export NCCL_NVLS_ENABLE=0 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1
export MEGASCALE_IFNAME=${MEGASCALE_IFNAME:-lo} NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
max=1
for n in $ranks; do (( n > max )) && max=$n; done
start_mps_for "$out" "$gpus" "$max"
# shellcheck source=/dev/null
source "$nt/env.sh"

verdict=0
results=$out/results.jsonl
: > "$results"
for n in $ranks; do
  for net in $nets; do
    net_env "$net"
    for c in $colls; do
      args=("${sizes[@]}" -n "$iters" -w "$warmup" -c 0)
      for round in $(seq "$rounds"); do
        tag=$n-$net-$c-$round
        # Ranks sharing a GPU: each its own NCCL_HOSTID, so that NCCL goes through the net.
        if ! env "${net_env[@]}" NCCL_TESTS_DEVICE=0 timeout 300 mpirun -np "$n" --oversubscribe --bind-to none \
          sh -c 'NCCL_HOSTID=nccl-tests-$OMPI_COMM_WORLD_RANK exec "$0" "$@"' "${c}_perf" "${args[@]}" \
          -J "$out/$tag.nccl-tests.json" > "$out/$tag.nccl-tests.log" 2>&1; then
          echo "FAIL nccl-tests $tag: $(tail -2 "$out/$tag.nccl-tests.log")"
          verdict=1
        fi
        if ! env "${net_env[@]}" timeout 300 "$coll" "$c" "${args[@]}" --nproc "$n" -J "$out/$tag.coll.json" \
          > "$out/$tag.coll.log" 2>&1; then
          echo "FAIL megascale coll $tag: $(tail -2 "$out/$tag.coll.log")"
          verdict=1
        fi
      done
      python3 scripts/nccl-tests/compare.py rows "$out" "$n" "$net" "$c" "$rounds" >> "$results" || verdict=1
    done
  done
done
python3 scripts/nccl-tests/compare.py table "$results" || verdict=1
echo "bench-coll-nccl-tests: $([[ $verdict == 0 ]] && echo "every run finished" || echo "a run FAILED")"
exit "$verdict"
