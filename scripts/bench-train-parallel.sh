#!/usr/bin/env bash
# Training throughput of parallel layouts against one rank on the same GPU(s), in one call: megascale-train
# on CONFIG (configs/train/gpt2-124m.yaml) in bf16 with ARGS (default "--batch-size 8 --grad-accum 2":
# 16 sequences of 1024 tokens a step, 2 micro-batches for the pipeline), STEPS steps (default 5) with
# --timeline on the last 3, one rank first, then each layout TxPxD[vV][+dpo][+tpo][+ppc] of LAYOUTS
# (+dpo: with --dp-overlap, +tpo: with --tp-overlap, +ppc: with --pp-coupled; the default holds the
# overlap ablation for 2x2x2: coupled baseline, + TP overlap, + PP decoupling, + DP overlap and prefetch)
# through each net of NETS (socket, megascale). NCCL's P2P and SHM are off; ranks sharing a GPU run under MPS with their own
# NCCL_HOSTID, so every byte between ranks crosses the net.
#
#   scripts/bench-train-parallel.sh [BIN]     # BIN: the folder with megascale-train and the plugin
#
# Per run: the job's GPU step span (its slowest rank's mean over the traced steps), tok/s from it, the
# communication its compute stream waited in, by group (train-timeline-summary.py), and the bytes a rank
# sends per step in each group (megascale-train --comm-volume) with the bandwidth they imply over the
# exposed time. Then the net's own bandwidth in the same shapes (megascale-coll's all_gather and
# reduce_scatter on groups of the layouts' sizes, as many groups at once) gives the time each group's
# bytes need, beside its exposed time (train-parallel/bench-table.py says how). JSON lines in
# OUT/results.jsonl and OUT/net-bandwidth.jsonl (default OUT out/bench-train-parallel), then a markdown
# table. RESULTS_FROM=FILE takes the runs from an earlier results.jsonl and measures only the bandwidth.
# Exit 0 when every run finished, 1 otherwise, 77 when no GPU is visible.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

# shellcheck source=train-parallel/lib.sh
source scripts/train-parallel/lib.sh
train=$(built -x "${1:-}" megascale-train build/trainer/cuda/megascale-train megascale-train) || exit 2
plugin=$(built -f "${1:-}" libnccl-net-megascale.so build/collectives/nccl/libnccl-net-megascale.so plugin) || exit 2
coll=$(built -x "${1:-}" megascale-coll build/cli/coll/megascale-coll megascale-coll) || exit 2
out=${OUT:-out/bench-train-parallel}
layouts=${LAYOUTS:-1x1x2 1x1x2+dpo 2x1x1 2x1x1+tpo 1x2x1+ppc 1x2x1 2x2x2+ppc 2x2x2+tpo+ppc 2x2x2+tpo 2x2x2+dpo+tpo}
nets=${NETS:-socket megascale}
config=${CONFIG:-configs/train/gpt2-124m.yaml}
steps=${STEPS:-5}
read -r -a extra <<< "${ARGS---batch-size 8 --grad-accum 2}"
run_timeout=${RUN_TIMEOUT_S:-240}

require_gpus
mkdir -p "$out"
out=$(readlink -f "$out")
# The configs warm the learning rate up over more steps than a bench runs; the rate does not change the
# time a step takes, so the warm-up is shortened to the bench's steps.
sed -E "s/^(\s*warmup_steps:).*/\1 $steps/" "$config" > "$out/config.yaml"
config=$out/config.yaml
export NCCL_NVLS_ENABLE=0 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1
export MEGASCALE_IFNAME=${MEGASCALE_IFNAME:-lo} NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}

# shellcheck disable=SC2086  # the layouts are words
start_mps "$out" "$gpus" $layouts

verdict=0
results=$out/results.jsonl
: > "$results"
# bench NAME LAYOUT NET NPROC ARGS...
bench() {
  local name=$1 layout=$2 net=$3 nproc=$4
  shift 4
  net_env "$net"
  rm -rf "$out/$name.timeline"
  env "${net_env[@]}" timeout "$run_timeout" "$train" --nproc "$nproc" --config "$config" --dtype bf16 \
    --steps "$steps" --eval-every 0 "${extra[@]}" --timeline "$out/$name.timeline" --timeline-steps 3 "$@" \
    > "$out/$name.log" 2>&1
  local rc=$?
  if (( rc != 0 )); then
    echo "FAIL $name: exit $rc; the end of its log:"
    tail -5 "$out/$name.log" | sed 's/^/    /'
    verdict=1
    return
  fi
  python3 scripts/train-timeline-summary.py "$out/$name.timeline"/rank_*.trace.json > "$out/$name.summary" ||
    { echo "FAIL $name: no timeline summary"; verdict=1; return; }
  local volume='{}'
  if [[ $net != none ]]; then
    volume=$("$train" --config "$config" --dtype bf16 "${extra[@]}" --nproc "$nproc" "$@" --comm-volume) ||
      volume='{}'
  fi
  tail -1 "$out/$name.summary" | python3 -c '
import json, sys
job = json.loads(sys.stdin.read())
name, layout, net, tokens, volume = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), json.loads(sys.argv[5])
row = {"name": name, "layout": layout, "net": net, "ranks": job["ranks"], "span_ms": job["span_ms"],
       "tok_s": round(tokens / (job["span_ms"] / 1e3)), "exposed_comm_ms": job["exposed_comm_ms"],
       "exposed_comm_total_ms": job["exposed_comm_total_ms"], "slowest_rank": job["slowest_rank"],
       "peer_wait_ms": job.get("peer_wait_ms", {})}
for g in ("tp", "dp", "pp"):
    b = volume.get(f"{g}_bytes", 0)
    row[f"{g}_bytes"] = b
    ms = job["exposed_comm_ms"].get(g, 0)
    row[f"{g}_implied_gbytes_s"] = round(b / 1e9 / (ms / 1e3), 3) if b and ms else None
print(json.dumps(row))
' "$name" "$layout" "$net" "$tokens" "$volume" >> "$results"
  tail -1 "$results"
}

# Tokens per step: the config's seq_len times the sequences a step (batch x grad-accum).
tokens=$(python3 - "$config" "${extra[@]}" <<'PY'
import re, sys
cfg = open(sys.argv[1]).read()
seq = int(re.search(r"^\s*seq_len:\s*(\d+)", cfg, re.M).group(1))
batch = int(re.search(r"^\s*batch_size:\s*(\d+)", cfg, re.M).group(1))
accum = int(re.search(r"^\s*grad_accum_steps:\s*(\d+)", cfg, re.M).group(1))
args = sys.argv[2:]
for i, a in enumerate(args[:-1]):
    if a == "--batch-size": batch = int(args[i + 1])
    if a == "--grad-accum": accum = int(args[i + 1])
    if a == "--seq-len": seq = int(args[i + 1])
print(seq * batch * accum)
PY
)
if [[ -n ${RESULTS_FROM:-} ]]; then  # the runs of an earlier call: only the net's bandwidth is measured
  cp "$RESULTS_FROM" "$results" || exit 2
else
  bench one 1x1x1 none 1
  for l in $layouts; do
    layout_args "$l"
    for net in $nets; do bench "$l-$net" "$l" "$net" "$nproc" "${args[@]}"; done
  done
fi

# The net's own bandwidth in each shape the runs had: megascale-coll's all_gather and reduce_scatter
# (the collectives of TP with sequence parallelism and of ZeRO-2's DP) on groups of G ranks, NPROC/G
# groups at once (--split mod:N), as the layouts' groups run side by side; busbw is the bytes a rank
# sends over the time, so a group's bytes over it is the time the transfers need.
bandwidth=$out/net-bandwidth.jsonl
: > "$bandwidth"
shapes=$(for l in $layouts; do
  [[ $l =~ ^([0-9]+)x([0-9]+)x([0-9]+) ]] || continue
  n=$((BASH_REMATCH[1] * BASH_REMATCH[2] * BASH_REMATCH[3]))
  for g in "${BASH_REMATCH[1]}" "${BASH_REMATCH[3]}"; do (( g > 1 )) && echo "$n $g"; done
done | sort -u)
while read -r n g; do
  [[ -n $n ]] || continue
  for net in $nets; do
    net_env "$net"
    split=()
    (( n > g )) && split=(--split "mod:$((n / g))")
    env "${net_env[@]}" timeout "$run_timeout" "$coll" all_gather reduce_scatter -b 1M -e 64M -f 2 -n 10 -w 3 -c 0 \
      --nproc "$n" "${split[@]}" --json-lines "$out/bw-$net-$n-$g.jsonl" > "$out/bw-$net-$n-$g.log" 2>&1 ||
      { echo "FAIL bandwidth $net, $n ranks in groups of $g: $(tail -1 "$out/bw-$net-$n-$g.log")"; verdict=1; continue; }
    python3 -c '
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(json.dumps({"net": sys.argv[2], "nproc": int(sys.argv[3]), "group": int(sys.argv[4]),
                      "collective": r["collective"], "size": r["size"],
                      "busbw_gbs": r["out_of_place"]["busbw_gbs"]}))
' "$out/bw-$net-$n-$g.jsonl" "$net" "$n" "$g" >> "$bandwidth"
  done
done <<< "$shapes"
python3 scripts/train-parallel/bench-table.py "$results" "$bandwidth" "$config" "${extra[@]}"
exit "$verdict"
