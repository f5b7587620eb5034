#!/usr/bin/env bash
# Checks the MegaScale NCCL net plugin on a GPU host (one host: NET forced with P2P and SHM off), then
# compares its bandwidth with NCCL's own Socket net.
#
#   scripts/check-nccl-plugin.sh [BUILD_DIR]          # BUILD_DIR defaults to build/
#   STEPS="bench lat" scripts/check-nccl-plugin.sh     # the steps named, in their order
#   scripts/check-nccl-plugin.sh --list                # the steps and what each does
#   scripts/check-nccl-plugin.sh --help                # this text
#
# Each step is a file of its own, scripts/nccl-plugin/steps/NAME.sh (a function step_NAME, its full
# description at its top), over scripts/nccl-plugin/lib.sh (settings, starting ranks, checks, tables).
# Steps, in the order they run (every log under $OUT, default out/nccl-plugin):
#   kill      a rank SIGKILLed mid all-reduce (MegaScale, then Socket): the others must stop within
#             KILL_DEADLINE_S (20) with NCCL's asynchronous error (nccl_check exit 3), never hang; runs
#             before MPS starts. Under an MPS daemon of your own, leave kill out of STEPS
#   check     all collectives, fp32 and bf16, 0 B .. MAX_BYTES, every element checked, through the plugin
#   fault     the same with MEGASCALE_FAULT_DROP=0.01 up to FAULT_MAX_BYTES: loss recovery under NCCL
#   bench     bandwidth beside Socket and tuned Socket (4x4) in ROUNDS interleaved rounds: bandwidth.md,
#             with MegaScale's transport per run, the wire alone both ways and each net's CPU by thread
#             (PROFILE=1: by kind of work too)
#   lat       small collectives (LAT_MIN_BYTES 8 .. LAT_MAX_BYTES 1M, LAT_ITERS 300): latency.md
#   layouts   (only when STEPS names it) MegaScale under each layout in LAYOUTS: layouts.md
#   ceiling   (only when STEPS names it) NCCL's own ceiling over the Null net beside Socket 4x4 and
#             MegaScale (NULL_RECV_US, NULL_GDR): ceiling.md
#   torch     tests/gpu/torch_allreduce.py through the plugin, when PyTorch is installed
# STEPS picks steps by name (default: all but layouts and ceiling); STEPS=bench measures bandwidth only.
#
# LAYOUTS (the layouts step): entries separated by ';' (a MEGASCALE_LAYOUT value has commas), two or
# more, each once: "auto" (the plugin's own layout), "socket-4x4" (NCCL's Socket tuned, as the
# baseline when first) or a MEGASCALE_LAYOUT value KEY=NUMBER,... with KEY wires, io_threads, stripes
# or stripe_bytes; MegaScale's may end in +gdr or +gdrrx (GDR=1's or GDR=rx's settings for that one).
#   LAYOUTS="socket-4x4;auto;wires=2,io_threads=3;wires=4,io_threads=0,stripes=4+gdr"
# Default: "auto;wires=4,io_threads=0;wires=2,io_threads=6;wires=2,io_threads=4;wires=2,io_threads=3".
#
# That a run went through the plugin is read from the plugin's stats files (MEGASCALE_STATS_DIR, one
# folder a run under $OUT, scripts/nccl-plugin/stats.py): every rank's file must show its connections,
# and a layouts run's layout in force must be the one asked for. NCCL's logs (NCCL_DEBUG=INFO) are kept
# beside them for people to read; only what NCCL alone knows is read from them: the channels of its own
# nets (Socket) and of the Null net, whether a channel took GPU buffers (GDR), and when its init is
# complete (the start of the CPU and profile windows, and of the kill step's wait).
#
# Ranks: NRANKS (default: the number of GPUs, at least 2). With fewer GPUs than ranks, ranks share GPUs
# and each gets its own NCCL_HOSTID, so NCCL sees separate hosts (no "Duplicate GPU") and uses the net.
# Ranks sharing a GPU time-slice it unless MPS runs: the checks pass either way, but without MPS every
# net's bandwidth stops near 1.8 GB/s. MPS=1 starts an MPS control daemon of the script's own for the run
# (pipe and log folders under $OUT) and stops it at the end.
# GDR=1: every MegaScale run takes NCCL's GPU buffers (MEGASCALE_GDR_COPY=1, moved through pinned host
# shadows by the GPU's copy engines) with NCCL_NET_GDR_LEVEL=SYS (lo has no PCI location), and every
# MegaScale channel line must say .../GDRDMA. GDR=rx: GPU buffers for receives only (NCCL_NET_GDR_READ=0
# as well); every MegaScale [receive] channel line must say .../GDRDMA. Socket takes host memory only.
# Other knobs: MAX_BYTES (1G), FAULT_MAX_BYTES (64M), BENCH_MIN_BYTES (64M), BENCH_OPS (every
# collective), ROUNDS (2), ITERS (5), TIMEOUT_S (1800 per run), MEGASCALE_IFNAME (lo: one host talks to
# itself over loopback). HANG_S (300): a rank whose wait, or whose main thread's CUDA or NCCL call, lasts
# that long prints every thread's stack in its .out file and exits 4 (nccl_check --timeout); frames in
# the plugin show as offsets: addr2line -f -C -e BUILD/collectives/nccl/libnccl-net-megascale.so OFFSET.
# Exit status: 0 when the steps run pass (the Socket runs are the baseline and only reported), 1 when
# one fails, 2 on a bad setting or a missing build, 77 (skipped) when no GPU is visible.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
# shellcheck source=nccl-plugin/lib.sh
source scripts/nccl-plugin/lib.sh
# shellcheck source=nccl-plugin/steps/kill.sh
source scripts/nccl-plugin/steps/kill.sh
# shellcheck source=nccl-plugin/steps/check.sh
source scripts/nccl-plugin/steps/check.sh
# shellcheck source=nccl-plugin/steps/fault.sh
source scripts/nccl-plugin/steps/fault.sh
# shellcheck source=nccl-plugin/steps/bench.sh
source scripts/nccl-plugin/steps/bench.sh
# shellcheck source=nccl-plugin/steps/lat.sh
source scripts/nccl-plugin/steps/lat.sh
# shellcheck source=nccl-plugin/steps/layouts.sh
source scripts/nccl-plugin/steps/layouts.sh
# shellcheck source=nccl-plugin/steps/ceiling.sh
source scripts/nccl-plugin/steps/ceiling.sh
# shellcheck source=nccl-plugin/steps/torch.sh
source scripts/nccl-plugin/steps/torch.sh

case ${1:-} in
  -h | --help) sed -n '2,/^set -uo/{/^set -uo/d; s/^# \{0,1\}//; p}' "$0"; exit 0 ;;
  --list)
    for s in "${ms_steps[@]}"; do printf '%-8s  %s\n' "$s" "${ms_step_summary[$s]}"; done
    exit 0 ;;
  -*) die "unknown option '$1' (--help, --list, or a build folder)" ;;
esac
(( $# <= 1 )) || die "one build folder at most (--help)"

ms_init "${1:-build}"
want kill && step_kill
mps_start
want check && step_check
want fault && step_fault
if want bench || want lat || want layouts || want ceiling; then warmup; fi
want bench && step_bench
want lat && step_lat
want layouts && step_layouts
want ceiling && step_ceiling
want torch && step_torch
echo "check-nccl-plugin: $([[ $verdict == 0 ]] && echo PASS || echo FAIL)"
exit "$verdict"
