# shellcheck shell=bash
# The shared part of scripts/check-train-parallel.sh, scripts/bench-train-parallel.sh,
# scripts/check-coll.sh and scripts/bench-coll-nccl-tests.sh: the built programs they run, the GPUs, a
# layout's megascale-train arguments, and an MPS daemon of the script's own when ranks share GPUs.

# built -x|-f BIN NAME DEFAULT LABEL: the absolute path of BIN/NAME when a folder BIN was given, else of
# DEFAULT (its place in the build tree); fails saying "no LABEL at PATH (build it first)" on standard error
# when it is not there, or with -x not executable (callers: `x=$(built ...) || exit 2`).
built() {
  local path=${2:+$2/$3}
  path=${path:-$4}
  test "$1" "$path" || { echo "no $5 at $path (build it first)" >&2; return 1; }
  readlink -f "$path"
}

# require_gpus: sets gpus to the GPUs nvidia-smi lists; with none visible says so and exits 77 (a skip).
require_gpus() {
  command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1 || { echo "no GPU visible: skipped"; exit 77; }
  gpus=$(nvidia-smi -L | wc -l)
}

# net_env NET: sets net_env to the variables that make NCCL use NET: socket (NCCL's Socket net) or
# megascale (the plugin at $plugin); empty for anything else (none: one rank, no net).
net_env() {
  case $1 in
    socket) net_env=(NCCL_NET=Socket) ;;
    megascale) net_env=(NCCL_NET=MegaScale NCCL_NET_PLUGIN="$plugin") ;;
    *) net_env=() ;;
  esac
}

# layout_args TxPxD[vV][+dpo][+tpo][+ppc] (the suffixes in this order): sets nproc and args (--tp T --pp P --dp D --vpp V, and
# --dp-overlap with +dpo, --tp-overlap with +tpo, --pp-coupled with +ppc), or fails on a malformed one.
layout_args() {
  [[ $1 =~ ^([0-9]+)x([0-9]+)x([0-9]+)(v([0-9]+))?(\+dpo)?(\+tpo)?(\+ppc)?$ ]] ||
    { echo "LAYOUTS: '$1' is not TxPxD[vV][+dpo][+tpo][+ppc] (e.g. 2x1x2, 2x2x2+dpo+tpo)"; exit 2; }
  nproc=$((BASH_REMATCH[1] * BASH_REMATCH[2] * BASH_REMATCH[3]))
  # shellcheck disable=SC2034  # read by the sourcing script
  args=(--tp "${BASH_REMATCH[1]}" --pp "${BASH_REMATCH[2]}" --dp "${BASH_REMATCH[3]}" --vpp "${BASH_REMATCH[5]:-1}")
  [[ -n ${BASH_REMATCH[6]} ]] && args+=(--dp-overlap)
  [[ -n ${BASH_REMATCH[7]} ]] && args+=(--tp-overlap)
  [[ -n ${BASH_REMATCH[8]} ]] && args+=(--pp-coupled)
  return 0
}

# start_mps OUT GPUS LAYOUT...: start_mps_for with the most ranks any of the layouts has.
start_mps() {
  local out=$1 gpus=$2 max_ranks=1 l
  shift 2
  for l in "$@"; do
    layout_args "$l"
    (( nproc > max_ranks )) && max_ranks=$nproc
  done
  start_mps_for "$out" "$gpus" "$max_ranks"
}

# start_mps_for OUT GPUS RANKS: with MPS=1 (the default) and more ranks than GPUs, starts an MPS daemon
# with its pipes and logs under OUT, stopped when the script exits.
start_mps_for() {
  local out=$1 gpus=$2 ranks=$3
  if [[ ${MPS:-1} == 1 ]] && (( ranks > gpus )) && command -v nvidia-cuda-mps-control > /dev/null; then
    export CUDA_MPS_PIPE_DIRECTORY=$out/mps-pipe CUDA_MPS_LOG_DIRECTORY=$out/mps-log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    nvidia-cuda-mps-control -d && trap 'echo quit | nvidia-cuda-mps-control' EXIT
    echo "MPS started ($CUDA_MPS_PIPE_DIRECTORY)"
  fi
}
