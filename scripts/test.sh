#!/usr/bin/env bash
# Builds megascale with warnings as errors and runs the whole test suite. This is the README's test
# command, and exactly what CI runs (.ci/run). Tests that need a GPU, an RDMA NIC or root network
# namespaces skip with a one-line reason; ctest lists them as skipped, not passed.
#
# Three stages, each in its own build directory under build/:
#   1. build/test   Release, every part; ctest runs every test (netns tests alone, RUN_SERIAL).
#   2. build/asan   RelWithDebInfo with AddressSanitizer + UndefinedBehaviorSanitizer: the congestion,
#                   engine and wire unit tests and the fuzz corpus replays (ctest labels).
#   3. build/fuzz   clang + libFuzzer: each fuzz target runs MEGASCALE_FUZZ_SECONDS (default 60) from
#                   the committed seed corpus; a crash fails the run and leaves its input in
#                   build/fuzz/artifacts/ (add it to tests/fuzz/corpus/<target>/ once fixed).
# MEGASCALE_TEST_STAGES (default "test asan fuzz") picks stages, e.g. MEGASCALE_TEST_STAGES=test.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

jobs=$(nproc)
stages=${MEGASCALE_TEST_STAGES:-test asan fuzz}
fuzz_seconds=${MEGASCALE_FUZZ_SECONDS:-60}
started=$SECONDS

stage() { echo; echo "=== test.sh: $1 ($((SECONDS - started)) s so far)"; }
has_stage() { [[ " $stages " == *" $1 "* ]]; }

if has_stage test; then
  stage "release build and every test"
  build=build/test
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEGASCALE_WERROR=ON
  cmake --build "$build" -j"$jobs"
  ctest --test-dir "$build" --output-on-failure -j"$jobs" -LE '^netns$'
  # The netns tests time a shared 1 Gbit/s bottleneck: alone, after the rest, and with their measured
  # figures (queueing delay, goodput, flap recovery) shown here, not only on failure.
  ctest --test-dir "$build" --output-on-failure -L '^netns$' -V >"$build/netns.log" 2>&1 || netns_failed=1
  grep -E '^[0-9]+: \[ [a-z]|Test +#[0-9]+: |tests passed|Skipped' "$build/netns.log" | sed 's/^[0-9]*: //' || true
  if [ "${netns_failed:-0}" = 1 ]; then
    tail -80 "$build/netns.log"
    echo "test.sh: netns tests failed (full log: $build/netns.log)" >&2
    exit 1
  fi
fi

if has_stage asan; then
  stage "AddressSanitizer + UndefinedBehaviorSanitizer: congestion, engine, wire unit tests, fuzz replays"
  build=build/asan
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEGASCALE_WERROR=ON \
    -DMEGASCALE_SANITIZE=ON -DMEGASCALE_BUILD_BENCH=OFF -DMEGASCALE_ENABLE_CUDA=OFF
  labels=(congestion engine wire fuzz)
  targets=()
  for l in "${labels[@]}"; do
    if cmake --build "$build" --target help | grep -q "^tests-$l:"; then targets+=("tests-$l"); fi
  done
  cmake --build "$build" -j"$jobs" --target "${targets[@]}"
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  ctest --test-dir "$build" --output-on-failure -j"$jobs" -L "^($(IFS='|'; echo "${labels[*]}"))\$"
  unset ASAN_OPTIONS UBSAN_OPTIONS
fi

if has_stage fuzz; then
  stage "libFuzzer: ${fuzz_seconds} s per target"
  build=build/fuzz
  CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEGASCALE_WERROR=ON \
    -DMEGASCALE_FUZZ=ON -DMEGASCALE_BUILD_BENCH=OFF -DMEGASCALE_ENABLE_CUDA=OFF
  fuzz_targets=(fuzz_packet fuzz_handshake)
  cmake --build "$build" -j"$jobs" --target "${fuzz_targets[@]}"
  mkdir -p "$build/artifacts"
  crashed=()
  for t in "${fuzz_targets[@]}"; do
    # New inputs go to a scratch corpus; the committed seeds are only read.
    work="$build/corpus/$t"
    mkdir -p "$work"
    echo "--- $t: ${fuzz_seconds} s from tests/fuzz/corpus/$t"
    if ! "$build/tests/fuzz/$t" -max_total_time="$fuzz_seconds" -print_final_stats=1 -timeout=10 \
      -rss_limit_mb=2048 -artifact_prefix="$build/artifacts/$t-" "$work" "tests/fuzz/corpus/$t" \
      >"$build/$t.log" 2>&1; then
      grep -A30 -E "^==[0-9]+==ERROR|fuzz_[a-z]+: |^SUMMARY" "$build/$t.log" | head -60
      crashed+=("$t")
    fi
    grep -E "^stat::(number_of_executed_units|average_exec_per_sec|new_units_added)|^Done" "$build/$t.log" || true
  done
  if [ ${#crashed[@]} -gt 0 ]; then
    echo "test.sh: ${crashed[*]} crashed; inputs in $build/artifacts/, logs in $build/<target>.log" >&2
    exit 1
  fi
fi

stage "all stages passed"
