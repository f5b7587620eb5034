# shellcheck shell=bash
# The fault step: the check step's run with MEGASCALE_FAULT_DROP=0.01 (1% of datagrams dropped on
# receive) up to FAULT_MAX_BYTES: loss recovery under NCCL. Stats in $OUT/stats-megascale-drop1.
step_fault() {
  run megascale-drop1 "${megascale_env[@]}" MEGASCALE_FAULT_DROP=0.01 MEGASCALE_STATS_DIR="$out/stats-megascale-drop1" \
    -- --max-bytes "$fault_max" --csv "$out/megascale-drop1.csv" || verdict=1
  through_net megascale-drop1 "$megascale_via" "$out/stats-megascale-drop1" || verdict=1
}
