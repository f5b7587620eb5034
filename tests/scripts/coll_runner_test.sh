#!/usr/bin/env bash
# megascale-coll. `flags`: its refusals, which need no GPU: an unknown collective, a bad size, a flag
# refused together (-G with -I), each exit 2 naming the problem, and without a GPU a run ends with exit 2 saying so.
# `gpu`: two ranks forked by --nproc run all_reduce and all_gather from 8 B to 1 MiB, every element
# checked; skipped (77) without a GPU.
# `megascale coll` (MEGASCALE, optional) runs the same program with the same arguments.
# usage: coll_runner_test.sh MEGASCALE_COLL flags|gpu [MEGASCALE]
set -uo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
coll=$1
mode=$2
have_gpu() { command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1; }

if [[ $mode == gpu ]]; then
  have_gpu || { echo "skipped: no GPU"; exit 77; }
  out=$(NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 "$coll" all_reduce all_gather -b 8 -e 1M -f 4 -n 5 --nproc 2 2>&1) ||
    fail "two ranks: $out"
  grep -q "Out of bounds values : 0 OK" <<< "$out" || fail "a check failed: $out"
  (( $(grep -c "Collective test concluded" <<< "$out") == 2 )) || fail "two collectives: $out"
  echo "coll_runner_test gpu: ok"
  exit 0
fi

expect_refused "unknown collective" "collective 'gather': expected all_reduce" "$coll" gather
expect_refused "bad size" "-b: size '1X'" "$coll" all_reduce -b 1X
expect_refused "-a" "-a 7: expected 0 (rank 0)" "$coll" all_reduce -a 7
expect_refused "-G with -I" "-I with -G" "$coll" all_reduce -G 2 -I 1
expect_refused "--split" "--split 'rack'" "$coll" all_reduce --split rack
expect_refused "--compare" "--compare setting '1X=2': '1X' is not a variable name" "$coll" all_reduce --compare Socket 1X=2
have_gpu || expect_refused "no GPU" "no CUDA device" "$coll" all_reduce -b 8 -e 8
if [[ -n ${3:-} ]]; then
  expect_refused "megascale coll" "collective 'gather': expected all_reduce" "$3" coll gather
  "$3" coll --help | grep -q "nccl-tests' flags" || fail "megascale coll --help is not megascale-coll's"
fi
echo "coll_runner_test flags: ok"
