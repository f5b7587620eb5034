# shellcheck shell=bash
# The torch step: tests/gpu/torch_allreduce.py through the plugin, when PyTorch is installed; the
# plugin's stats files ($OUT/stats-torch) must show every rank's connections.
step_torch() {
  if ! python3 -c "import torch, torch.distributed" 2>/dev/null; then
    echo "== torch: skipped (no PyTorch in python3)"
    return 0
  fi
  echo "== torch"
  rm -rf "$out/stats-torch"
  env NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NVLS_ENABLE=0 "${megascale_env[@]}" NCCL_DEBUG=INFO \
    NCCL_DEBUG_FILE="$out/torch.nccl.%p.log" MEGASCALE_STATS_DIR="$out/stats-torch" WORLD_SIZE="$nranks" \
    timeout "${TIMEOUT_S:-1800}" python3 tests/gpu/torch_allreduce.py || verdict=1
  plugin_used torch "$out/stats-torch" || verdict=1
}
