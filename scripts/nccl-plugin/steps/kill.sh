# shellcheck shell=bash
# The kill step: a peer killed mid-collective. Ranks run 64 MiB all-reduces, one at a time, through
# MegaScale and then through Socket (as it comes); once data flows the last rank is SIGKILLed. Every
# other rank must stop within KILL_DEADLINE_S (default 20) with NCCL's asynchronous error (nccl_check
# exits 3: it polls ncclCommGetAsyncError, prints the error and aborts the communicator), never hang.
# The seconds from SIGKILL to each survivor's exit are printed for both nets; only MegaScale's outcome
# fails the script. Runs first, before MPS starts: MPS does not isolate a client killed mid-kernel from
# the others on its GPU (the survivor then fails with "an illegal memory access" on the GPU, whatever
# the net; Wu et al., "Safe Process Quitting for GPU MPS", ICDCS 2020).

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
  # NCCL's channel setup (its log) marks when the collectives start, for either net.
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

step_kill() {
  deadline=${KILL_DEADLINE_S:-20}
  echo "== kill (rank $((nranks - 1)) SIGKILLed mid all-reduce; survivors must stop within ${deadline} s)"
  # stderr aside: bash's own "Killed" notice for the victim says nothing the lines above do not
  kill_run kill-megascale "${megascale_env[@]}" -- 2> /dev/null || verdict=1
  kill_run kill-socket "${socket_env[@]}" -- 2> /dev/null || true  # the baseline: reported only
}
