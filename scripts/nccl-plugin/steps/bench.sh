# shellcheck shell=bash
# The bench step: bandwidth, 64 MiB .. MAX_BYTES (x2 steps, nccl-tests' exact sizes), fp32, BENCH_OPS
# (default every collective): MegaScale, Socket as it comes, Socket with NCCL_SOCKET_NTHREADS=4
# NCCL_NSOCKS_PERTHREAD=4, one after another (each round starting with the next net; an untimed warm-up
# run first), ROUNDS times (default 2); table in $OUT/bandwidth.md (scripts/nccl-bandwidth-table.py:
# medians, and MegaScale's ratios to each Socket net round by round, since on a shared host two calls
# can differ by more than the nets do), and MegaScale's timeouts and retransmissions per run
# (scripts/megascale-stats-summary.py over each run's MEGASCALE_STATS_DIR), then the wire alone both
# ways on the same CPUs with the plugin's thread layout (scripts/wire-both-ways.sh: GB/s each way per
# rank, comparable with busbw, and a message's time, with 1 and with 4 messages in flight a
# connection, and at depth 1 through the plugin's own threaded wire: plugin-check --case
# steps_both_ways), and where each net's CPU goes: cores per rank by thread (MegaScale's wire and I/O
# threads, NCCL's proxy, Socket's helpers, the rest) and the host's busy, softirq and steal cores
# (steal: a hypervisor running other guests on the VM's CPUs), from NCCL's "Init COMPLETE" to the end of
# each timed run (scripts/thread-cpu.py). PROFILE=1 (needs perf on PATH) adds, for round 1 of each net,
# where the host's CPU went by kind of work: CRC, kernel copies, network stack, scheduling, memcpy,
# engine, wire, NCCL, CUDA (perf record -a; scripts/profile-table.py).
step_bench() {
  rounds_of bench "${bench_args[@]}"
  if python3 scripts/nccl-bandwidth-table.py --ranks "$nranks" "${table_nets[@]}" > "$out/bandwidth.md"; then
    # MegaScale's transport per run: timeouts whose retransmissions all arrived as duplicates are a host
    # stalling ACKs, not loss (collectives/nccl/README.md, "Stats").
    { printf "\nMegaScale's transport in each run (its stats files):\n\n"
      python3 scripts/megascale-stats-summary.py "${ms_stats[@]}"; } >> "$out/bandwidth.md" ||
      { echo "!! bandwidth: no transport lines (see above)"; verdict=1; }
    # The transport alone on the same CPUs with the layout the plugin chose, for reading the table
    # against: scripts/wire-both-ways.sh (exit 2: it could not run here, e.g. no megascale CLI built).
    printf "\nThe wire alone, both directions at once on these CPUs (scripts/wire-both-ways.sh):\n\n" >> "$out/bandwidth.md"
    OUT="$out/wire" scripts/wire-both-ways.sh "$(stats_dir_of bench 1)" "$nranks" "$build" \
      >> "$out/bandwidth.md" 2>&1
    case $? in
      0) ;;
      2) echo "(not measured: see the line above)" >> "$out/bandwidth.md" ;;
      *) echo "!! bandwidth: the wire-alone run failed ($out/wire)"; verdict=1 ;;
    esac
    if [[ $profile_on == 1 ]]; then
      profiles=()
      for net in "${order[@]}"; do
        data=$out/bench-$net-r1.perf.data
        [[ -s $data.txt && -s $data.seconds ]] && profiles+=("$net=$data.txt:$(cat "$data.seconds")")
      done
      printf "\nWhere the host's CPU went, by kind of work (PROFILE=1: perf record -a -e cpu-clock -F %s from NCCL's Init COMPLETE, round 1 of each net; scripts/profile-table.py):\n\n" "$profile_hz" >> "$out/bandwidth.md"
      if (( ${#profiles[@]} > 0 )); then
        python3 scripts/profile-table.py --hz "$profile_hz" "${profiles[@]}" >> "$out/bandwidth.md" 2>&1 ||
          echo "(no profile table: see the line above)" >> "$out/bandwidth.md"
      else
        echo "(no profile was recorded: see $out/bench-*-r1.perf.data.*)" >> "$out/bandwidth.md"
      fi
    fi
    # Where each net's CPU goes, by thread (NCCL names its threads with NCCL_SET_THREAD_NAME=1, in
    # common_env): information only, so a net without every round's figures is left out, not failed.
    cpu_nets=()
    for net in "${order[@]}"; do
      files=()
      for ((k = 1; k <= rounds; k++)); do
        [[ -s $out/bench-$net-r$k.cpu.json ]] && files+=("$out/bench-$net-r$k.cpu.json")
      done
      (( ${#files[@]} == rounds )) && cpu_nets+=("$net=$(join "${files[@]}")")
    done
    if (( ${#cpu_nets[@]} > 0 )); then
      printf "\nWhere each rank's CPU goes, by thread (scripts/thread-cpu.py; cores from NCCL's Init COMPLETE to the run's end, medians of the rounds):\n\n" >> "$out/bandwidth.md"
      python3 scripts/thread-cpu.py table --ranks "$nranks" "${cpu_nets[@]}" >> "$out/bandwidth.md" 2>&1 ||
        echo "(no CPU table: see the line above)" >> "$out/bandwidth.md"
    fi
    echo "== bandwidth ($out/bandwidth.md)"
    cat "$out/bandwidth.md"
  else
    echo "!! bandwidth: no table (see above)"
    verdict=1
  fi
}
