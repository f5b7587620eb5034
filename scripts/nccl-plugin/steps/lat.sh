# shellcheck shell=bash
# The lat step: LAT_MIN_BYTES (8) .. LAT_MAX_BYTES (1M), x4 steps, fp32, BENCH_OPS, LAT_ITERS (300)
# back-to-back collectives per size: microseconds per collective through MegaScale, Socket and Socket
# 4x4 in interleaved rounds; table in $OUT/latency.md (nccl-bandwidth-table.py --metric time: medians,
# and MegaScale's time over each Socket net's round by round) and MegaScale's transport per run, with
# how many sends waited for the receiver's credit.
step_lat() {
  rounds_of lat "${lat_args[@]}"
  if python3 scripts/nccl-bandwidth-table.py --metric time --ranks "$nranks" "${table_nets[@]}" > "$out/latency.md"; then
    report_table latency "$out/latency.md" "${ms_stats[@]}"
  else
    echo "!! latency: no table (see above)"
    verdict=1
  fi
}
