# shellcheck shell=bash
# The check step: all collectives, fp32 and bf16, 0 B .. MAX_BYTES, every element checked, through
# NCCL_NET_PLUGIN=<abs path>/libnccl-net-megascale.so NCCL_NET=MegaScale; the plugin's stats files
# ($OUT/stats) must show every rank's connections.
step_check() {
  run megascale "${megascale_env[@]}" MEGASCALE_STATS_DIR="$out/stats" -- --max-bytes "$max" \
    --csv "$out/megascale.csv" || verdict=1
  through_net megascale "$megascale_via" "$out/stats" || verdict=1
}
