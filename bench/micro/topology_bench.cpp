// Micro-benchmarks of the fabric model on the 12,288-GPU MegaScale preset: source-port mapping for 64 lanes
// (issue 5's target: under 10 ms), path enumeration for every pair of NICs on one rail, decoding every path
// of one cross-pod pair, one ECMP hash, and building the fabric from its YAML.
//
//   build/bench/megascale_micro_bench --benchmark_filter='Topo' --benchmark_repetitions=3
//
// Port mapping rotates over 64 cross-pod pairs (host i*23, rail i%8 -> a host 5 pods away), so a run does
// not time one lucky pair. "decorrelated" gives each tier its own hash bits (offsets 0/5/10, per-switch
// seeds): the search stops early. "polarised" uses the same bits at every tier: only 32 of 8,192 paths are
// reachable, so the whole 16,384-port range is hashed before lanes are doubled up (the worst case).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "megascale/topology/ecmp.h"
#include "megascale/topology/fabric.h"
#include "megascale/topology/paths.h"
#include "megascale/topology/ports.h"

namespace megascale::topo {
namespace {

const Fabric& megascale_fabric() {
  static const Fabric fabric = *load_fabric("megascale");
  return fabric;
}

EcmpModel decorrelated() {
  EcmpModel m;
  for (uint32_t t = 0; t < 3; ++t) m.tier[t] = HashModel{HashFunction::crc16_bisync, 0x5EED, 5 * t, true};
  return m;
}

std::vector<std::pair<NodeId, NodeId>> cross_pod_pairs(const Fabric& f) {
  std::vector<std::pair<NodeId, NodeId>> pairs;
  for (uint32_t i = 0; i < 64; ++i) {
    uint32_t host = (i * 23) % f.spec().servers;
    uint32_t other = (host + 5 * 256) % f.spec().servers;  // 256 servers per pod: 5 pods away
    pairs.emplace_back(f.nic_node(host, i % 8), f.nic_node(other, i % 8));
  }
  return pairs;
}

void run_port_mapping(benchmark::State& state, std::optional<EcmpModel> model) {
  const Fabric& f = megascale_fabric();
  auto pairs = cross_pod_pairs(f);
  size_t i = 0;
  uint64_t hashed = 0;
  uint64_t distinct = 0;
  for (auto _ : state) {
    PortMappingRequest req;
    req.src_nic = pairs[i % pairs.size()].first;
    req.dst_nic = pairs[i % pairs.size()].second;
    req.lanes = static_cast<uint32_t>(state.range(0));
    req.ecmp = model;
    Result<PortMapping> m = map_source_ports(f, req);
    if (!m) {
      state.SkipWithError(m.error().message.c_str());
      return;
    }
    hashed += m->ports_hashed;
    distinct += m->distinct_paths;
    benchmark::DoNotOptimize(m->lanes.data());
    ++i;
  }
  state.counters["ports_hashed"] =
      benchmark::Counter(static_cast<double>(hashed), benchmark::Counter::kAvgIterations);
  state.counters["distinct_paths"] =
      benchmark::Counter(static_cast<double>(distinct), benchmark::Counter::kAvgIterations);
}

void BM_TopoPortMapping_Decorrelated(benchmark::State& state) {
  run_port_mapping(state, decorrelated());
}
BENCHMARK(BM_TopoPortMapping_Decorrelated)->Arg(8)->Arg(64)->Arg(1024)->Unit(benchmark::kMillisecond);

void BM_TopoPortMapping_Polarised(benchmark::State& state) {
  run_port_mapping(state, EcmpModel::uniform(HashModel{HashFunction::crc16_bisync, 0, 0, false}));
}
BENCHMARK(BM_TopoPortMapping_Polarised)->Arg(64)->Unit(benchmark::kMillisecond);

void BM_TopoPortMapping_NoModel(benchmark::State& state) {
  run_port_mapping(state, std::nullopt);
}
BENCHMARK(BM_TopoPortMapping_NoModel)->Arg(64)->Unit(benchmark::kMicrosecond);

// Every ordered pair of distinct NICs on rail 0 (1,536 x 1,535 = 2,357,760 pairs): the path set and its
// count; with Arg(1) also the first path decoded (links and switches), as a simulator's router would.
void BM_TopoPathsAllPairsOneRail(benchmark::State& state) {
  const Fabric& f = megascale_fabric();
  const bool decode = state.range(0) != 0;
  const uint32_t hosts = f.spec().servers;
  uint64_t pairs = 0;
  uint64_t paths = 0;
  for (auto _ : state) {
    for (uint32_t a = 0; a < hosts; ++a) {
      for (uint32_t b = 0; b < hosts; ++b) {
        if (a == b) continue;
        Result<PathSet> ps = shortest_paths(f, f.nic_node(a, 0), f.nic_node(b, 0));
        paths += ps->count();
        if (decode) benchmark::DoNotOptimize(ps->at(0).links.data());
        ++pairs;
      }
    }
  }
  state.counters["pairs"] =
      benchmark::Counter(static_cast<double>(pairs), benchmark::Counter::kAvgIterations);
  state.counters["paths"] =
      benchmark::Counter(static_cast<double>(paths), benchmark::Counter::kAvgIterations);
  state.counters["ns_per_pair"] = benchmark::Counter(
      static_cast<double>(pairs), benchmark::Counter::kIsRate | benchmark::Counter::kInvert,
      benchmark::Counter::kIs1000);
}
BENCHMARK(BM_TopoPathsAllPairsOneRail)
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1)
    ->Repetitions(3);

// Every one of the 8,192 paths between two pods decoded into links and switches.
void BM_TopoEnumerateCrossPod(benchmark::State& state) {
  const Fabric& f = megascale_fabric();
  Result<PathSet> ps = shortest_paths(f, f.nic_node(0, 0), f.nic_node(300, 0));
  for (auto _ : state) {
    std::vector<Path> all = ps->enumerate(ps->count());
    benchmark::DoNotOptimize(all.data());
  }
  state.counters["paths"] = static_cast<double>(ps->count());
}
BENCHMARK(BM_TopoEnumerateCrossPod)->Unit(benchmark::kMicrosecond);

void BM_TopoEcmpHash(benchmark::State& state) {
  const auto fn = static_cast<HashFunction>(state.range(0));
  HashModel m{fn, 0x1234, 3, true};
  FiveTuple t{0x0A000001, 0x0A010002, 0xC000};
  uint32_t sum = 0;
  for (auto _ : state) {
    sum += ecmp_select(m, 7, t, 32);
    ++t.src_port;
  }
  benchmark::DoNotOptimize(sum);
  state.SetLabel(std::string(hash_function_name(fn)));
}
BENCHMARK(BM_TopoEcmpHash)
    ->Arg(static_cast<int>(HashFunction::crc16_bisync))
    ->Arg(static_cast<int>(HashFunction::crc16_ccitt))
    ->Arg(static_cast<int>(HashFunction::crc32_hi))
    ->Arg(static_cast<int>(HashFunction::xor16));

void BM_TopoBuildMegaScale(benchmark::State& state) {
  for (auto _ : state) {
    Result<Fabric> f = load_fabric("megascale");
    benchmark::DoNotOptimize(f->links().data());
  }
}
BENCHMARK(BM_TopoBuildMegaScale)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace megascale::topo
