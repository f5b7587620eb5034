#!/usr/bin/env bash
# Checks `megascale topo` on a GPU host and that NCCL loads the topology file it writes.
#
#   scripts/check-topo-gpu.sh [BUILD_DIR]          # BUILD_DIR defaults to build/
#
# Steps (every file under $OUT, default out/topo-gpu):
#   1. megascale topo              the host table, GPU x NIC paths, rail map, warnings  -> topo.txt
#                                  and the same as JSON                                 -> topo.json
#   2. megascale topo --xml        the NCCL topology file                               -> nccl-topo.xml
#      lstopo --of xml             this host's hwloc export, for the record and as a future test fixture
#                                                                                       -> hwloc.xml
#   3. NCCL job                    tests/gpu/nccl_check, one rank per GPU (2 ranks on one GPU when there is
#                                  only one, each with its own NCCL_HOSTID), allreduce + allgather up to
#                                  8 MiB, with NCCL_TOPO_FILE=nccl-topo.xml, NCCL_TOPO_DUMP_FILE=nccl-dump.xml,
#                                  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,GRAPH      -> nccl.rank*.log
#   4. verdict                     PASS when every rank exits 0 with every element right, rank 0's log
#                                  says "NCCL_TOPO_FILE set by environment to <our file>", no NCCL WARN
#                                  line mentions the topology or XML, and NCCL's dump lists every GPU bus
#                                  id of ours; NCCL's dump is then read back with `megascale topo
#                                  --nccl-xml` (our reader on a real NCCL file)          -> nccl-dump.txt
#
# Knobs: NRANKS (default: the number of GPUs, at least 2), MAX_BYTES (8M), TIMEOUT_S (300 per rank).
# Exit status 0 on PASS, 1 on FAIL, 2 when something needed is missing.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

build=${1:-build}
megascale=$build/cli/megascale
check=$build/tests/gpu/nccl_check
out=${OUT:-out/topo-gpu}
max=${MAX_BYTES:-8M}

die() { echo "check-topo-gpu: $*" >&2; exit 2; }
[[ -x $megascale ]] || die "no $megascale (build the megascale target first)"
[[ -x $check ]] || die "no $check (configure with the CUDA toolkit and NCCL present, then build nccl_check)"
ngpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
(( ngpus >= 1 )) || die "no GPU visible (nvidia-smi -L)"
nranks=${NRANKS:-$(( ngpus >= 2 ? ngpus : 2 ))}
mkdir -p "$out"
out=$(readlink -f "$out")
topo_file=$out/nccl-topo.xml
dump_file=$out/nccl-dump.xml
verdict=0
fail() { echo "!! $*"; verdict=1; }

echo "== 1. megascale topo ($ngpus GPU(s))"
"$megascale" topo | tee "$out/topo.txt" || fail "megascale topo exited $?"
"$megascale" topo --json "$out/topo.json" > /dev/null || fail "megascale topo --json exited $?"

echo "== 2. megascale topo --xml $topo_file"
rm -f "$topo_file" "$dump_file"
"$megascale" topo --xml "$topo_file" > /dev/null || fail "megascale topo --xml exited $?"
[[ -s $topo_file ]] || die "no $topo_file written"
cat "$topo_file"
if command -v lstopo-no-graphics > /dev/null; then
  lstopo-no-graphics --of xml "$out/hwloc.xml" 2> /dev/null && echo "(hwloc export in $out/hwloc.xml)"
fi

echo "== 3. NCCL job with NCCL_TOPO_FILE ($nranks ranks)"
idfile=$out/nccl.id
rm -f "$idfile" "$out"/nccl.rank*.log "$out"/nccl.rank*.out
pids=()
for ((r = 0; r < nranks; r++)); do
  hostid=()
  (( ngpus < nranks )) && hostid=(NCCL_HOSTID="megascale-topo-rank$r")
  env NCCL_TOPO_FILE="$topo_file" NCCL_TOPO_DUMP_FILE="$dump_file" NCCL_DEBUG=INFO \
    NCCL_DEBUG_SUBSYS=INIT,ENV,GRAPH NCCL_DEBUG_FILE="$out/nccl.rank$r.log" "${hostid[@]}" \
    timeout "${TIMEOUT_S:-300}" "$check" --rank "$r" --nranks "$nranks" --id-file "$idfile" \
    --gpu $((r % ngpus)) --ops allreduce,allgather --types float --max-bytes "$max" --iters 2 \
    > "$out/nccl.rank$r.out" 2>&1 &
  pids+=($!)
done
for ((r = 0; r < nranks; r++)); do
  wait "${pids[$r]}" || fail "rank $r exited $? (see $out/nccl.rank$r.out)"
done
cat "$out/nccl.rank0.out"

echo "== 4. verdict"
if grep -q "NCCL_TOPO_FILE set by environment to $topo_file" "$out/nccl.rank0.log" 2> /dev/null; then
  echo "ok NCCL read NCCL_TOPO_FILE=$topo_file"
else
  fail "rank 0's log does not say NCCL_TOPO_FILE was set to $topo_file"
fi
warns=$(cat "$out"/nccl.rank*.log 2> /dev/null | grep -E ' WARN ' | grep -iE 'topo|xml|pci|busid|attribute' || true)
if [[ -n $warns ]]; then
  fail "NCCL warned about the topology:"
  head -10 <<< "$warns"
else
  echo "ok no NCCL WARN about the topology or XML"
fi
if [[ -s $dump_file ]]; then
  missing=0
  gpu_buses=$(python3 -c 'import json,sys; print(" ".join(g["pci"]["bus_id"] for g in json.load(open(sys.argv[1]))["gpus"]))' \
    "$out/topo.json" 2> /dev/null || true)
  for bus in $gpu_buses; do
    grep -qi "busid=\"$bus\"" "$dump_file" || { fail "NCCL's dump has no GPU $bus"; missing=1; }
  done
  (( missing == 0 )) && echo "ok NCCL's dump ($dump_file) lists our GPUs: ${gpu_buses:-?}"
  if "$megascale" topo --nccl-xml "$dump_file" > "$out/nccl-dump.txt" 2>&1; then
    echo "ok megascale reads NCCL's own dump back ($out/nccl-dump.txt):"
    sed -n '/^GPU /,/^$/p' "$out/nccl-dump.txt"
  else
    fail "megascale topo --nccl-xml could not read NCCL's dump: $(cat "$out/nccl-dump.txt")"
  fi
else
  fail "NCCL wrote no topology dump to $dump_file"
fi

echo "check-topo-gpu: $([[ $verdict == 0 ]] && echo PASS || echo FAIL)"
exit $verdict
