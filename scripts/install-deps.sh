#!/usr/bin/env bash
# Installs every Debian package megascale needs to build, test and plot.
# Idempotent: safe to run again. Needs root (or sudo) and Debian 12 package sources.
set -euo pipefail

packages=(
  # toolchain and build
  build-essential cmake ninja-build pkg-config git clang clang-format
  # libraries the core needs
  libyaml-cpp-dev libcli11-dev libfmt-dev nlohmann-json3-dev
  # optional parts: topology discovery and NCCL topology XML, verbs wire, UCX
  libhwloc-dev hwloc libtinyxml2-dev libibverbs-dev rdma-core ibverbs-providers libucx-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # fuzzing (scripts/test.sh): clang's libFuzzer and sanitizer runtimes (only a Recommends of clang)
  libclang-rt-dev
  # plots (PNG: gnuplot, for the CLI) and the loopback baseline for `megascale perf`
  gnuplot-nox iperf3 jq
  # network-namespace tests: ip, tc, iptables
  iproute2 iptables
  # the shell scripts' lint test (tests/scripts/shellcheck_test.sh)
  shellcheck
  # Soft-RoCE guests (scripts/test-rxe.sh): QEMU, the guest's busybox and verbs programs, the
  # initramfs packer (objcopy, from binutils, reads the kernel modules' dependencies)
  qemu-system-x86 busybox-static ibverbs-utils perftest cpio binutils
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-deps: done"
