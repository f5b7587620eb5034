#!/usr/bin/env bash
# scripts/train-parallel/lib.sh's layout_args: TxPxD[vV][+dpo][+tpo][+ppc] gives the rank count and
# megascale-train's layout arguments (--dp-overlap with +dpo, --tp-overlap with +tpo, --pp-coupled with
# +ppc); a malformed layout exits 2 naming it. `built` finds a program in a given folder or the build
# tree, refusing a missing or non-executable one by name. `net_env` gives the variables of each net.
# Usage: train_parallel_lib_test.sh SOURCE_DIR
set -uo pipefail
src=$1
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=../../scripts/train-parallel/lib.sh
source "$src/scripts/train-parallel/lib.sh"

layout_args 2x2x2
[[ $nproc == 8 && "${args[*]}" == "--tp 2 --pp 2 --dp 2 --vpp 1" ]] || fail "2x2x2: $nproc ${args[*]}"
layout_args 1x2x1v2
[[ $nproc == 2 && "${args[*]}" == "--tp 1 --pp 2 --dp 1 --vpp 2" ]] || fail "1x2x1v2: $nproc ${args[*]}"
layout_args 2x1x4+dpo
[[ $nproc == 8 && "${args[*]}" == "--tp 2 --pp 1 --dp 4 --vpp 1 --dp-overlap" ]] || fail "2x1x4+dpo: $nproc ${args[*]}"
layout_args 1x2x2v2+dpo
[[ $nproc == 4 && "${args[*]}" == "--tp 1 --pp 2 --dp 2 --vpp 2 --dp-overlap" ]] || fail "1x2x2v2+dpo: ${args[*]}"
layout_args 2x1x1+tpo
[[ $nproc == 2 && "${args[*]}" == "--tp 2 --pp 1 --dp 1 --vpp 1 --tp-overlap" ]] || fail "2x1x1+tpo: ${args[*]}"
layout_args 2x2x2+dpo+tpo
[[ "${args[*]}" == "--tp 2 --pp 2 --dp 2 --vpp 1 --dp-overlap --tp-overlap" ]] || fail "2x2x2+dpo+tpo: ${args[*]}"
layout_args 2x2x2+tpo+ppc
[[ "${args[*]}" == "--tp 2 --pp 2 --dp 2 --vpp 1 --tp-overlap --pp-coupled" ]] || fail "2x2x2+tpo+ppc: ${args[*]}"
for bad in 2x2 2x2x2+tpo+dpo 2x2x2+ppc+tpo 2x2x2+xpo x1x1 2x2x2v; do
  out=$( (layout_args "$bad") 2>&1)
  (( $? == 2 )) || fail "$bad: accepted"
  [[ $out == *"'$bad' is not TxPxD[vV][+dpo][+tpo][+ppc]"* ]] || fail "$bad: message: $out"
done
# built: BIN/NAME when a folder is given, else the default, as an absolute path; missing or (with -x)
# not executable fails naming it.
mkdir -p "$dir/bin"
touch "$dir/bin/prog" "$dir/default"
[[ $(cd "$dir" && built -f "" prog default thing) == "$dir/default" ]] || fail "built: the default"
[[ $(built -f "$dir/bin" prog unused thing) == "$dir/bin/prog" ]] || fail "built: BIN/NAME"
out=$(built -x "$dir/bin" prog unused thing 2>&1) && fail "built -x: a file that is not executable accepted"
[[ $out == "no thing at $dir/bin/prog (build it first)" ]] || fail "built -x: message: $out"
chmod +x "$dir/bin/prog"
built -x "$dir/bin" prog unused thing > /dev/null || fail "built -x: an executable refused"
# net_env: Socket, the plugin at $plugin, nothing for "none".
plugin=/p/libnccl-net-megascale.so
net_env socket
[[ "${net_env[*]}" == "NCCL_NET=Socket" ]] || fail "net_env socket: ${net_env[*]}"
net_env megascale
[[ "${net_env[*]}" == "NCCL_NET=MegaScale NCCL_NET_PLUGIN=/p/libnccl-net-megascale.so" ]] ||
  fail "net_env megascale: ${net_env[*]}"
net_env none
(( ${#net_env[@]} == 0 )) || fail "net_env none: ${net_env[*]}"
echo "train_parallel_lib_test: ok"
