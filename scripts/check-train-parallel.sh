#!/usr/bin/env bash
# Parallel training checked end to end against one rank, on this host's GPU(s): megascale-train in
# each layout tp x pp x dp with the same global batch, data and initial weights, its ranks forked by
# --nproc, every byte between them through the net (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1; ranks sharing
# a GPU get their own NCCL_HOSTID), through NCCL's Socket net, through the megascale plugin, and through
# the plugin with injected loss.
#
#   scripts/check-train-parallel.sh [BIN]   # BIN: the folder with megascale-train and
#                                           # libnccl-net-megascale.so (default: build's own folders)
#
# For each layout TxPxD[vV][+dpo][+tpo][+ppc] in LAYOUTS (default: the seven of 2 x 2 x 2 and one
# interleaved, 1x2x1v2; +dpo adds --dp-overlap, +tpo --tp-overlap),
# each net (socket, megascale, megascale-loss), CONFIG run with TINY_ARGS (default "--batch-size 8
# --grad-accum 4": 4 micro-batches for the pipeline, 32 sequences a step as CONFIG's own):
#   fp32, the first EXACT_STEPS (5) steps of CONFIG (configs/train/tiny-parity.yaml): every step's loss
#       and gradient norm within 1e-4 of the one-rank run's (only the reduction order differs);
#   bf16, STEPS (200) steps: the 10-step means of the loss within 1% of the one-rank run's. (At
#       tiny.yaml's learning rate of 1e-3 the loss spikes amplify rounding: one rank against two drifted
#       4% apart around step 120 while their fp32 steps agreed to 1e-7; tiny-parity.yaml is part 1's
#       parity config for the same reason.)
# Then, through Socket, the fp32 check with FEATURES (default: the parallel block and a 64-token sliding
# window) against one rank with the same, and with --optimizer lamb (its trust ratio over each whole
# tensor across the ranks' pieces). CONFIG2
# (configs/train/gpt2-124m.yaml; "" skips it) gets the fp32 check over one step for each layout of
# LAYOUTS2 (default "1x1x2 2x1x1 1x2x1"), through Socket and the plugin.
# Overlap: each layout of OVERLAP_LAYOUTS (default "1x1x2+dpo 2x1x1+tpo 2x2x2+dpo+tpo 1x2x2+ppc", +ppc
# the coupled pipeline baseline; the parallel
# block with +tpo too) gets the fp32 and bf16 checks through the plugin and the LAMB one through Socket.
# Validation: for each layout of EVAL_LAYOUTS (default "1x2x1 2x2x2 1x2x1v2"), through Socket, the fp32 val
# loss after EXACT_STEPS steps (--eval-every, the validation pass through the pipeline) within 1e-5 of
# one rank's.
# Resume: for each layout of RESUME_LAYOUTS (default "2x2x2 1x2x1v2"), through Socket, bf16, 20 steps
# uninterrupted against 10 steps, a checkpoint (a file per rank), and the last 10 resumed from it: the
# 20 losses and gradient norms bit-identical.
# Stopped peer: HANG_LAYOUT (default 1x1x2) through Socket with --step-timeout 15; once step 3 is
# printed one rank is stopped (SIGSTOP): the job must end by itself with an error within 60 s, a rank's
# watchdog saying its step ran past the deadline and the launcher naming the rank that was stopped.
# Timeline: TIMELINE_LAYOUT (default 2x2x2) through the plugin, bf16, with --timeline: every rank's
# trace written and merged into timeline.json (megascale-trace-merge.py), one process per rank.
# A plugin run must say "via NET/MegaScale" in NCCL's INFO log. train-loss-compare.py does the comparing;
# its JSON lines and every run's log go to OUT (default out/train-parallel). MPS=1 (default) starts an
# MPS daemon of the script's own when ranks share a GPU. Exit 0 when every check passes, 1 otherwise, 77
# when no GPU is visible.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

# shellcheck source=train-parallel/lib.sh
source scripts/train-parallel/lib.sh
train=$(built -x "${1:-}" megascale-train build/trainer/cuda/megascale-train megascale-train) || exit 2
plugin=$(built -f "${1:-}" libnccl-net-megascale.so build/collectives/nccl/libnccl-net-megascale.so plugin) || exit 2
out=${OUT:-out/train-parallel}
layouts=${LAYOUTS:-2x1x1 1x2x1 1x1x2 2x2x1 2x1x2 1x2x2 2x2x2 1x2x1v2}
layouts2=${LAYOUTS2:-1x1x2 2x1x1 1x2x1}
resume_layouts=${RESUME_LAYOUTS-2x2x2 1x2x1v2}
timeline_layout=${TIMELINE_LAYOUT-2x2x2}
hang_layout=${HANG_LAYOUT-1x1x2}
eval_layouts=${EVAL_LAYOUTS-1x2x1 2x2x2 1x2x1v2}
overlap_layouts=${OVERLAP_LAYOUTS-1x1x2+dpo 2x1x1+tpo 2x2x2+dpo+tpo 1x2x2+ppc}
read -r -a features <<< "${FEATURES---parallel-block --attention-window 64}"
read -r -a tiny_args <<< "${TINY_ARGS---batch-size 8 --grad-accum 4}"
steps=${STEPS:-200}
exact_steps=${EXACT_STEPS:-5}
config=${CONFIG:-configs/train/tiny-parity.yaml}
config2=${CONFIG2-configs/train/gpt2-124m.yaml}
run_timeout=${RUN_TIMEOUT_S:-300}

require_gpus
mkdir -p "$out"
out=$(readlink -f "$out")
export NCCL_NVLS_ENABLE=0 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET
export MEGASCALE_IFNAME=${MEGASCALE_IFNAME:-lo} NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
# shellcheck disable=SC2086  # the layouts are words
start_mps "$out" "$gpus" $layouts $layouts2 $resume_layouts $timeline_layout $overlap_layouts $hang_layout $eval_layouts

verdict=0
results=$out/results.jsonl
: > "$results"

# run NAME NET NPROC ARGS...: one training run; its log in $out/NAME.log, its losses in $out/NAME.loss.
run() {
  local name=$1 net=$2 nproc=$3
  shift 3
  net_env "${net%-loss}"  # megascale-loss: the plugin, with its stats and 1% of datagrams dropped
  [[ $net == megascale* ]] && net_env+=(MEGASCALE_STATS_DIR="$out/$name.stats")
  [[ $net == megascale-loss ]] && net_env+=(MEGASCALE_FAULT_DROP=0.01)
  local t0=$SECONDS
  local -a no_eval=(--eval-every 0)
  [[ " $* " == *" --eval-every "* ]] && no_eval=()
  env "${net_env[@]}" timeout "$run_timeout" "$train" --nproc "$nproc" --loss-log "$out/$name.loss" \
    "${no_eval[@]}" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  printf '%-28s rc %d, %d s\n' "$name" "$rc" $((SECONDS - t0))
  if (( rc != 0 )); then
    echo "FAIL $name: exit $rc; the end of its log:"
    tail -5 "$out/$name.log" | sed 's/^/    /'
    verdict=1
    return 1
  fi
  if [[ $net == megascale* ]] && ! grep -q "via NET/MegaScale" "$out/$name.log"; then
    echo "FAIL $name: NCCL's log never says 'via NET/MegaScale'"
    verdict=1
    return 1
  fi
  # The plugin's own record of the run: every rank's connections, and with injected loss, recoveries.
  if [[ $net == megascale* ]]; then
    python3 scripts/nccl-plugin/stats.py connections "$out/$name.stats" "$nproc" | sed "s/^/    $name: /" ||
      { echo "FAIL $name: the plugin's stats"; verdict=1; return 1; }
  fi
  if [[ $net == megascale-loss ]]; then
    python3 scripts/nccl-plugin/stats.py retransmits "$out/$name.stats" --at-least 1 | sed "s/^/    $name: /" ||
      { echo "FAIL $name: injected loss but nothing retransmitted"; verdict=1; return 1; }
  fi
  return 0
}

# compare BASE RUN ARGS...: train-loss-compare.py's verdict, its JSON kept in results.jsonl.
compare() {
  local base=$1 name=$2
  shift 2
  local json
  json=$(python3 scripts/train-loss-compare.py "$out/$base.loss" "$out/$name.loss" "$@")
  local rc=$?
  echo "$json" >> "$results"
  if (( rc == 0 )); then echo "PASS $name against $base: $json"; else echo "FAIL $name against $base: $json"; verdict=1; fi
}

tiny=(--config "$config" "${tiny_args[@]}")
run one-fp32 none 1 "${tiny[@]}" --dtype fp32 --stop-after "$exact_steps"
run one-bf16 none 1 "${tiny[@]}" --dtype bf16 --steps "$steps"
if (( ${#features[@]} )); then run one-fp32-features none 1 "${tiny[@]}" --dtype fp32 --stop-after "$exact_steps" "${features[@]}"; fi
run one-fp32-lamb none 1 "${tiny[@]}" --dtype fp32 --stop-after "$exact_steps" --optimizer lamb
if [[ -n $config2 ]]; then run one-124m-fp32 none 1 --config "$config2" --dtype fp32 --stop-after 1; fi
for l in $layouts; do
  layout_args "$l"
  for net in socket megascale megascale-loss; do
    if run "$l-$net-fp32" "$net" "$nproc" "${args[@]}" "${tiny[@]}" --dtype fp32 --stop-after "$exact_steps"; then
      compare one-fp32 "$l-$net-fp32" --exact-steps "$exact_steps" --rtol 1e-4
    fi
    if run "$l-$net-bf16" "$net" "$nproc" "${args[@]}" "${tiny[@]}" --dtype bf16 --steps "$steps"; then
      compare one-bf16 "$l-$net-bf16" --window 10 --window-rtol 0.01
      grep -m1 "average over" "$out/$l-$net-bf16.log" | sed "s/^/    $l-$net-bf16: /"
    fi
  done
  if (( ${#features[@]} )) &&
    run "$l-socket-fp32-features" socket "$nproc" "${args[@]}" "${tiny[@]}" --dtype fp32 \
      --stop-after "$exact_steps" "${features[@]}"; then
    compare one-fp32-features "$l-socket-fp32-features" --exact-steps "$exact_steps" --rtol 1e-4
  fi
  if run "$l-socket-fp32-lamb" socket "$nproc" "${args[@]}" "${tiny[@]}" --dtype fp32 --stop-after "$exact_steps" \
    --optimizer lamb; then
    compare one-fp32-lamb "$l-socket-fp32-lamb" --exact-steps "$exact_steps" --rtol 1e-4
  fi
done
for l in $overlap_layouts; do
  layout_args "$l"
  if run "$l-megascale-fp32" megascale "$nproc" "${args[@]}" "${tiny[@]}" --dtype fp32 --stop-after "$exact_steps"; then
    compare one-fp32 "$l-megascale-fp32" --exact-steps "$exact_steps" --rtol 1e-4
  fi
  if run "$l-megascale-bf16" megascale "$nproc" "${args[@]}" "${tiny[@]}" --dtype bf16 --steps "$steps"; then
    compare one-bf16 "$l-megascale-bf16" --window 10 --window-rtol 0.01
  fi
  if run "$l-socket-fp32-lamb" socket "$nproc" "${args[@]}" "${tiny[@]}" --dtype fp32 --stop-after "$exact_steps" \
    --optimizer lamb; then
    compare one-fp32-lamb "$l-socket-fp32-lamb" --exact-steps "$exact_steps" --rtol 1e-4
  fi
  if [[ $l == *+tpo* ]] && (( ${#features[@]} )) &&
    run "$l-megascale-fp32-features" megascale "$nproc" "${args[@]}" "${tiny[@]}" --dtype fp32 \
      --stop-after "$exact_steps" "${features[@]}"; then
    compare one-fp32-features "$l-megascale-fp32-features" --exact-steps "$exact_steps" --rtol 1e-4
  fi
done
# Validation through the pipeline: the fp32 val loss after EXACT_STEPS steps, against one rank's.
if [[ -n $eval_layouts ]]; then
  run one-fp32-eval none 1 "${tiny[@]}" --dtype fp32 --stop-after "$exact_steps" --eval-every "$exact_steps"
  for l in $eval_layouts; do
    layout_args "$l"
    run "$l-socket-fp32-eval" socket "$nproc" "${args[@]}" "${tiny[@]}" --dtype fp32 --stop-after "$exact_steps" \
      --eval-every "$exact_steps" || continue
    if verdict_line=$(python3 - "$out/one-fp32-eval.log" "$out/$l-socket-fp32-eval.log" <<'PY'
import re, sys
val = [float(m.group(1)) for f in sys.argv[1:3] for m in [re.search(r"^val loss ([0-9.]+)", open(f).read(), re.M)] if m]
if len(val) != 2:
    print(f"no val loss line in {'both' if not val else 'one'} of the logs")
    sys.exit(1)
rel = abs(val[1] - val[0]) / val[0]
print(f"val loss {val[1]:.6f} against one rank's {val[0]:.6f}: {rel:.2e} apart (bound 1e-5)")
sys.exit(0 if rel <= 1e-5 else 1)
PY
    ); then
      echo "PASS $l-socket-fp32-eval: $verdict_line"
    else
      echo "FAIL $l-socket-fp32-eval: $verdict_line"
      verdict=1
    fi
  done
fi
for l in $resume_layouts; do
  layout_args "$l"
  rm -rf "$out/$l-ckpt"
  if run "$l-whole" socket "$nproc" "${args[@]}" "${tiny[@]}" --dtype bf16 --steps 20 &&
    run "$l-first-half" socket "$nproc" "${args[@]}" "${tiny[@]}" --dtype bf16 --steps 20 --stop-after 10 \
      --checkpoint-dir "$out/$l-ckpt" --checkpoint-every 10 &&
    run "$l-second-half" socket "$nproc" "${args[@]}" "${tiny[@]}" --dtype bf16 --steps 20 \
      --resume "$out/$l-ckpt/ckpt_00000010"; then
    cat "$out/$l-first-half.loss" "$out/$l-second-half.loss" > "$out/$l-resumed.loss"
    compare "$l-whole" "$l-resumed" --exact-steps 20 --rtol 0
  fi
done
if [[ -n $timeline_layout ]]; then
  layout_args "$timeline_layout"
  rm -rf "$out/timeline"
  if run "$timeline_layout-timeline" megascale "$nproc" "${args[@]}" "${tiny[@]}" --dtype bf16 --stop-after 6 \
    --timeline "$out/timeline"; then
    if python3 scripts/megascale-trace-merge.py "$out/timeline.json" "$out"/timeline/rank_*.trace.json \
      > "$out/timeline-merge.txt" &&
      python3 - "$out/timeline.json" "$nproc" <<'PY'; then
import json, sys
doc = json.load(open(sys.argv[1]))
pids = {e["pid"] for e in doc["traceEvents"] if e.get("ph") == "X"}
comm = [e for e in doc["traceEvents"] if e.get("cat") == "communication"]
assert len(pids) == int(sys.argv[2]), f"{len(pids)} ranks in the merged timeline"
assert comm, "no communication in the merged timeline"
print(f"    timeline: {len(pids)} ranks, {len(doc['traceEvents'])} events, {len(comm)} collectives and sends")
PY
      echo "PASS timeline: $out/timeline.json"
    else
      echo "FAIL timeline: $(tail -3 "$out/timeline-merge.txt")"
      verdict=1
    fi
    grep -m3 "comm exposed" "$out/$timeline_layout-timeline.log" | sed 's/^/    /'
  fi
fi
if [[ -n $config2 ]]; then
  for l in $layouts2; do
    layout_args "$l"
    for net in socket megascale; do
      if run "$l-$net-124m-fp32" "$net" "$nproc" "${args[@]}" --config "$config2" --dtype fp32 --stop-after 1; then
        compare one-124m-fp32 "$l-$net-124m-fp32" --exact-steps 1 --rtol 1e-4
      fi
    done
  done
fi
# Last: the stopped peer's job is killed, and under MPS that can upset a job started beside it.
if [[ -n $hang_layout ]]; then
  layout_args "$hang_layout"
  log=$out/$hang_layout-stopped-peer.log
  NCCL_NET=Socket "$train" --nproc "$nproc" "${args[@]}" "${tiny[@]}" --dtype bf16 --steps 100000 \
    --eval-every 0 --step-timeout 15 > "$log" 2>&1 &
  launcher=$!
  for _ in $(seq 600); do grep -q "^step *3/" "$log" && break; sleep 0.1; done
  victim=$(pgrep -P "$launcher" | tail -1)
  t0=$SECONDS
  if [[ -n $victim ]] && kill -STOP "$victim"; then
    for _ in $(seq 600); do kill -0 "$launcher" 2> /dev/null || break; sleep 0.1; done
    hung=0
    kill -0 "$launcher" 2> /dev/null && { hung=1; kill -KILL "$launcher"; kill -KILL "$victim"; }
    wait "$launcher"
    rc=$?
    if (( hung )); then
      echo "FAIL stopped peer: the job still ran 60 s after a rank was stopped (killed); the end of its log:"
      tail -5 "$log" | sed 's/^/    /'
      verdict=1
    elif (( rc != 0 )) && grep -q "past --step-timeout 15 s" "$log" && grep -q "it was stopped (SIGSTOP" "$log"; then
      echo "PASS stopped peer: the job ended in $((SECONDS - t0)) s, exit $rc: $(grep -m1 "past --step-timeout" "$log")"
    else
      echo "FAIL stopped peer: exit $rc after $((SECONDS - t0)) s; the end of its log:"
      tail -5 "$log" | sed 's/^/    /'
      verdict=1
    fi
  else
    echo "FAIL stopped peer: no rank to stop (the job did not reach step 3): $(tail -2 "$log")"
    kill -KILL "$launcher" 2> /dev/null
    verdict=1
  fi
fi
grep -m1 "average over" "$out/one-bf16.log" | sed 's/^/    one-bf16: /'
echo "check-train-parallel: $([[ $verdict == 0 ]] && echo PASS || echo FAIL)"
exit "$verdict"
