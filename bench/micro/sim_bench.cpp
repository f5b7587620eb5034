// The packet-level simulator's speed: events per second of the kernel on a loaded fabric, with the
// transport's own engine in every host (sim/net, issue 6).
//
//   build/bench/megascale_micro_bench --benchmark_filter=Sim --benchmark_repetitions=3
//
// Each iteration builds a 64-host 2-tier leaf-spine (8 leaves x 8 spines x 8 hosts, 100 Gbit/s
// everywhere, 1 us links, 1 MB per switch port, RED 100/400 KB at 20%), runs a random permutation
// (every host sends 2 MB to a partner, Swift, 4 lanes) to completion and reports events/s and the
// ratio of simulated to wall time. Setup (building the fabric, the handshakes) is inside the timing.
// A second case, a 64-to-1 incast on a star, loads one port with deep queues and many timers.
#include <benchmark/benchmark.h>

#include <cstdint>

#include "megascale/congestion/config.h"
#include "megascale/sim/fabric.h"
#include "megascale/sim/workload.h"

namespace megascale::sim {
namespace {

FabricConfig bench_config(uint32_t lanes) {
  FabricConfig fc;
  fc.engine.cc = *cc::builtin_cc_config("swift");
  fc.engine.lanes = lanes;
  fc.switch_buffer_bytes = 1'000'000;
  fc.red = RedConfig{.enabled = true, .kmin_bytes = 100'000, .kmax_bytes = 400'000, .pmax = 0.2};
  fc.seed = 11;
  return fc;
}

void report(benchmark::State& state, uint64_t events, TimePs simulated_ps, uint64_t flows_done) {
  state.counters["events_per_s"] =
      benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
  state.counters["sim_us"] = us_from_ps(simulated_ps) / static_cast<double>(state.iterations());
  state.counters["flows_done"] = static_cast<double>(flows_done) / static_cast<double>(state.iterations());
}

void BM_SimLeafSpinePermutation64(benchmark::State& state) {
  uint64_t events = 0, done = 0;
  TimePs simulated = 0;
  for (auto _ : state) {
    auto fabric = build_leaf_spine(bench_config(4), LeafSpineShape{8, 8, 8});
    Rng rng(5);
    auto r = run_flows(**fabric, permutation_flows(64, 2'000'000, rng), 100'000 * kPsPerUs);
    events += r->events;
    simulated += r->simulated_ps;
    done += r->completed;
  }
  report(state, events, simulated, done);
}
BENCHMARK(BM_SimLeafSpinePermutation64)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_SimStarIncast64(benchmark::State& state) {
  uint64_t events = 0, done = 0;
  TimePs simulated = 0;
  for (auto _ : state) {
    auto fabric = build_star(bench_config(1), 65);
    auto r = run_flows(**fabric, incast_flows(64, 64, 500'000), 100'000 * kPsPerUs);
    events += r->events;
    simulated += r->simulated_ps;
    done += r->completed;
  }
  report(state, events, simulated, done);
}
BENCHMARK(BM_SimStarIncast64)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace megascale::sim
