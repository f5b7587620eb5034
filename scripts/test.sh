#!/usr/bin/env bash
# Builds megascale with warnings as errors and runs the whole test suite. This is the README's test
# command, and exactly what CI runs (.ci/run). Tests that need a GPU, an RDMA NIC or root network
# namespaces skip with a one-line reason; ctest lists them as skipped, not passed.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

jobs=$(nproc)
build=build/test
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEGASCALE_WERROR=ON
cmake --build "$build" -j"$jobs"
ctest --test-dir "$build" --output-on-failure -j"$jobs"
