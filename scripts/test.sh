#!/usr/bin/env bash
# Builds megascale with warnings as errors and runs the whole test suite. This is the README's test
# command, and exactly what CI runs (.ci/run). Tests that need a GPU, an RDMA NIC or root network
# namespaces skip with a one-line reason; ctest lists them as skipped, not passed.
#
# Five stages, each in its own build directory under build/; every stage runs even when an earlier
# one failed (one CI run reports everything), and the script fails at the end if any stage did. What
# each builds (ninja steps from a clean tree) and runs, and how long it took on a 2-core machine from a
# clean clone without ccache (the whole run: about 40 minutes; CI allows 45):
#   test  build/test   Release, every part (`all`, about 510 steps: the product must build as users
#                      build it, CUDA kernels included); ctest runs every test, then the 1-minute
#                      soak (scripts/soak.sh 1, label soak) alone, then the netns tests alone (they
#                      time a shared link) with their measured figures printed. About 16 minutes.
#   rxe   build/rxe-out  scripts/test-rxe.sh: verbs programs on Soft-RoCE in QEMU guests booted from
#                      Debian's stock kernel (one guest, then two joined by a socket netdev), at most
#                      9 minutes, usually 3-7; the kernel package is cached in build/rxe-cache
#                      (MEGASCALE_RXE_CACHE). It skips, and does not fail, when QEMU or the kernel
#                      package cannot be had.
#   asan  build/asan   AddressSanitizer + UndefinedBehaviorSanitizer: only the test executables of
#                      the labels it runs (tests-<label>, about 370 steps; not the CLI, the tools'
#                      mains, the benchmarks or CUDA): the congestion, engine, wire, verbs, nccl,
#                      topology, host, simnet and trainer unit tests and the fuzz corpus replays.
#                      About 10 minutes.
#   tsan  build/tsan   ThreadSanitizer: the wire, nccl and simnet unit tests only (tests-<label>,
#                      about 200 steps: the wire's progress and I/O threads, the plugin's callers on
#                      other threads, the simulator's partitions on threads), with the fixed-window
#                      controller (below). About 5 minutes: build 3, tests 2.
#   fuzz  build/fuzz   clang + libFuzzer: every fuzz target tests/fuzz defines (fuzz-targets, about
#                      120 steps: the engine's decoder and endpoints, the cc preset loader, the
#                      plugin's environment, the sim scenario and fabric loaders, the verbs handle
#                      decoder, the NCCL topology XML reader) runs MEGASCALE_FUZZ_SECONDS (default 30)
#                      from the committed seed corpus, one target per core at a time; a crash, a leak
#                      or a unit slower than 10 s leaves its input in build/fuzz/artifacts/ (add it to
#                      tests/fuzz/corpus/<target>/ once fixed, so every build replays it). About 6
#                      minutes: build 4, fuzzing 2 (7 targets x 30 s on 2 cores).
# Every stage compiles the test sources at -Og (MEGASCALE_TEST_OPT, cmake/MegascaleTestBuild.cmake:
# half the compile time of -O1, every access still instrumented); the libraries are built as users
# build them (-O3) in the test stage, and at -O1 -g1 in the sanitizer stages (the code under test, where
# the races and memory errors are). Without ccache every test executable reuses one precompiled
# <gtest/gtest.h> (MEGASCALE_TEST_PCH). Compile time is mostly the test sources: about 130 test
# executables, each parsing GoogleTest and expanding its macros.
# MEGASCALE_TEST_STAGES (default "test rxe asan tsan fuzz") picks stages, e.g. MEGASCALE_TEST_STAGES=test.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

jobs=$(nproc)
all_stages="test rxe asan tsan fuzz"  # in the order they run
stages=${MEGASCALE_TEST_STAGES:-$all_stages}
fuzz_seconds=${MEGASCALE_FUZZ_SECONDS:-30}
started=$SECONDS
failed=()

# The ctest -L pattern that matches exactly these labels: ^(a|b|c)$.
label_regex() {
  local IFS='|'
  echo "^($*)\$"
}

stage_test() {
  local build=build/test
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEGASCALE_WERROR=ON -DMEGASCALE_TEST_OPT=-Og
  cmake --build "$build" -j"$jobs"
  local status=0
  ctest --test-dir "$build" --output-on-failure -j"$jobs" -LE '^(netns|soak)$' || status=1
  # The 1-minute soak (scripts/soak.sh 1) alone: it loads both cores for its whole run.
  ctest --test-dir "$build" --output-on-failure -L '^soak$' || status=1
  # The netns tests alone, after the rest; their figures (queueing delay, goodput, flap recovery) are
  # shown here, not only on failure.
  if ! ctest --test-dir "$build" --output-on-failure -L '^netns$' -V >"$build/netns.log" 2>&1; then
    status=1
    grep -E '^[0-9]+: .*(Failure|Expected|actual|Which is|Value of)' "$build/netns.log" | head -40 || true
    echo "netns tests failed; full log: $build/netns.log"
  fi
  grep -E '^[0-9]+: \[ [a-z]|Test +#[0-9]+: |tests passed|Skipped' "$build/netns.log" | sed 's/^[0-9]*: //' || true
  return $status
}

stage_rxe() {
  local status=0
  # The test stage's build: megascale's perf and topo runs, the plugin's plugin-check over verbs-ud and
  # the verbs wire's device tests join the guests' own checks.
  MEGASCALE_RXE_MEGASCALE=build/test/cli/megascale \
    MEGASCALE_RXE_PLUGIN=build/test/collectives/nccl/libnccl-net-megascale.so \
    MEGASCALE_RXE_TESTS=build/test/tests \
    scripts/test-rxe.sh --out build/rxe-out --timeout 540 || status=$?
  if [ $status -eq 77 ]; then
    echo "rxe stage skipped (the reason is above)"
    return 0
  fi
  return $status
}

# The sanitizer builds compile at -O1 with line tables only (-g1), not RelWithDebInfo's -O2 -g: it
# halves their compile time, and sanitizer reports still name the file and line of every frame.
san_flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
  "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG")

stage_asan() {
  local build=build/asan
  cmake -S . -B "$build" -G Ninja "${san_flags[@]}" -DMEGASCALE_WERROR=ON \
    -DMEGASCALE_SANITIZE=ON -DMEGASCALE_BUILD_BENCH=OFF -DMEGASCALE_ENABLE_CUDA=OFF -DMEGASCALE_TEST_OPT=-Og
  local labels=(common congestion engine wire verbs nccl fuzz topology host simnet trainer coll) targets=() l help
  # (Read the list once: `cmake ... | grep -q` under pipefail fails when grep exits before cmake.)
  help=$(cmake --build "$build" --target help)
  for l in "${labels[@]}"; do
    if grep -q "^tests-$l:" <<<"$help"; then targets+=("tests-$l"); fi
  done
  echo "sanitizer build of: ${targets[*]}"
  cmake --build "$build" -j"$jobs" --target "${targets[@]}"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir "$build" --output-on-failure -j"$jobs" -L "$(label_regex "${labels[@]}")"
}

stage_tsan() {
  local build=build/tsan
  cmake -S . -B "$build" -G Ninja "${san_flags[@]}" -DMEGASCALE_WERROR=ON \
    -DMEGASCALE_TSAN=ON -DMEGASCALE_BUILD_BENCH=OFF -DMEGASCALE_ENABLE_CUDA=OFF -DMEGASCALE_TEST_OPT=-Og
  local labels=(wire nccl simnet) targets=() l
  for l in "${labels[@]}"; do targets+=("tests-$l"); done
  cmake --build "$build" -j"$jobs" --target "${targets[@]}"
  # MEGASCALE_CC=fixed: ThreadSanitizer makes user code 5-15x slower, and the plugin's default
  # delay-based controller reads a slow host's own time as fabric delay: its window fell to the floor
  # (33 bytes a lane, 0.3 Mb/s) and an 8 MiB message did not finish in 60 s. The threads, rings and
  # locks under test are the same whatever the controller.
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 MEGASCALE_CC=fixed \
    ctest --test-dir "$build" --output-on-failure -j"$jobs" -L "$(label_regex "${labels[@]}")"
}

stage_fuzz() {
  local build=build/fuzz
  # -O1, libFuzzer's usual level, and -g1 (line tables): a crash's stack still names file and line;
  # -O2 and full -g only cost compile time.
  CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
    -DMEGASCALE_WERROR=ON -DMEGASCALE_FUZZ=ON -DMEGASCALE_BUILD_BENCH=OFF -DMEGASCALE_ENABLE_CUDA=OFF
  cmake --build "$build" -j"$jobs" --target fuzz-targets
  # Every libFuzzer target the build defines (tests/fuzz/CMakeLists.txt writes the list).
  local targets=() crashed=() t running=0
  mapfile -t targets <"$build/tests/fuzz/fuzz_targets.txt"
  [ ${#targets[@]} -gt 0 ] || { echo "no fuzz targets in $build/tests/fuzz/fuzz_targets.txt"; return 1; }
  mkdir -p "$build/artifacts"
  # libFuzzer runs one process on one core: $jobs targets at a time, each for its full time.
  echo "fuzzing ${targets[*]}: ${fuzz_seconds} s each, $jobs at a time"
  for t in "${targets[@]}"; do
    if [ $running -ge "$jobs" ]; then
      wait -n || true
      running=$((running - 1))
    fi
    fuzz_one "$build" "$t" &
    running=$((running + 1))
  done
  wait
  for t in "${targets[@]}"; do
    echo "--- $t: ${fuzz_seconds} s from tests/fuzz/corpus/$t"
    if [ "$(cat "$build/$t.rc")" != 0 ]; then
      grep -A30 -E "^==[0-9]+==ERROR|^fuzz_[a-z_]+: |^SUMMARY" "$build/$t.log" | head -60 || true
      crashed+=("$t")
    fi
    grep -E "^stat::(number_of_executed_units|average_exec_per_sec|new_units_added)|^Done" "$build/$t.log" || true
  done
  if [ ${#crashed[@]} -gt 0 ]; then
    echo "${crashed[*]} crashed; inputs in $build/artifacts/, logs in $build/<target>.log"
    return 1
  fi
}

# fuzz_one BUILD TARGET: one libFuzzer run; its output goes to BUILD/TARGET.log, its exit status to
# BUILD/TARGET.rc.
fuzz_one() {
  local build=$1 t=$2 dict=() rc=0
  # New inputs go to a scratch corpus; the committed seeds are only read.
  mkdir -p "$build/corpus/$t"
  # The text targets' keys and syntax (tests/fuzz/<target>.dict), where there is one.
  if [ -f "tests/fuzz/$t.dict" ]; then dict=(-dict="tests/fuzz/$t.dict"); fi
  # -timeout: a unit slower than 10 s (a hang, or a cost super-linear in the input) is a failure with
  # its input kept, as a crash is. The text targets skip inputs above 64 KiB themselves.
  "$build/tests/fuzz/$t" -max_total_time="$fuzz_seconds" -print_final_stats=1 -timeout=10 \
    -rss_limit_mb=2048 "${dict[@]}" -artifact_prefix="$build/artifacts/$t-" "$build/corpus/$t" \
    "tests/fuzz/corpus/$t" >"$build/$t.log" 2>&1 || rc=$?
  echo $rc >"$build/$t.rc"
}

for s in $all_stages; do
  [[ " $stages " == *" $s "* ]] || continue
  echo
  echo "=== test.sh: stage $s ($((SECONDS - started)) s so far)"
  # A subshell with -e: the first failing command ends the stage, not the script. (Not inside `if`:
  # bash ignores -e in a condition, even in a subshell.)
  set +e
  (set -e; "stage_$s")
  status=$?
  set -e
  if [ $status -ne 0 ]; then
    failed+=("$s")
    echo "=== test.sh: stage $s FAILED"
  fi
done

echo
if [ ${#failed[@]} -gt 0 ]; then
  echo "=== test.sh: FAILED stages: ${failed[*]} ($((SECONDS - started)) s)" >&2
  exit 1
fi
echo "=== test.sh: all stages passed ($((SECONDS - started)) s)"
