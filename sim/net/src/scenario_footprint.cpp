// A scenario's size before it runs (scenario.h, ScenarioFootprint): element counts from the fabric's
// model, the partitions that get elements, and a memory estimate, so that the CLI can warn about
// idle threads and refuse a fabric that cannot fit before it allocates anything.
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "megascale/sim/partition.h"
#include "megascale/sim/scenario.h"
#include "megascale/topology/fabric.h"

namespace megascale::sim {
namespace {

// The memory model: peak RSS of `megascale sim` fitted over star and Clos scenarios of 32 to 12,288
// hosts (sim/README.md, "Memory"). A host is an engine endpoint with its timers; a connection end
// starts with rings of 16 entries (grow_connection_state); a link is two output queues; every switch
// holds a next-hop group index per destination host.
constexpr uint64_t kBaseBytes = 24ULL << 20;
constexpr uint64_t kBytesPerHost = 48ULL << 10;
constexpr uint64_t kBytesPerConnectionEnd = 40ULL << 10;
constexpr uint64_t kBytesPerLink = 4ULL << 10;
constexpr uint64_t kBytesPerRoute = 4;  // per switch and destination host
constexpr uint64_t kBytesPerFlow = 1ULL << 10;

uint32_t busy_of(const PartitionMap& m) {
  std::set<uint32_t> used(m.switch_partition.begin(), m.switch_partition.end());
  used.insert(m.host_partition.begin(), m.host_partition.end());
  return static_cast<uint32_t>(std::max<size_t>(used.size(), 1));
}

}  // namespace

Result<ScenarioFootprint> scenario_footprint(const SimScenario& s) {
  ScenarioFootprint f;
  f.partitions = std::max<uint32_t>(s.threads, 1);
  uint64_t host_rate_bps = s.host_rate_bps;
  if (s.fabric == "star") {
    f.hosts = s.star_hosts;
    f.switches = 1;
    f.links = s.star_hosts;
    if (f.partitions > 1) f.busy_partitions = busy_of(block_partition_map(1, s.star_hosts, f.partitions));
  } else {
    auto model = topo::load_fabric(s.fabric);
    if (!model) return make_error(fmt::format("{}: fabric: {}", s.source, model.error().message));
    const topo::FabricShape& shape = model->shape();
    f.hosts = shape.nics;
    f.switches = model->nodes().size() - shape.nics;
    f.links = model->links().size();
    host_rate_bps = static_cast<uint64_t>(shape.server_link_bps);
    if (f.partitions > 1) f.busy_partitions = busy_of(clos_partition_map(*model, f.partitions));
  }
  auto flows = scenario_flows(s, static_cast<uint32_t>(f.hosts), host_rate_bps);
  if (!flows) return flows.error();
  f.flows = flows->size();
  // A pair opens a connection per flow up to connections_per_pair; further flows share them.
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> flows_of_pair;
  for (const FlowSpec& fl : *flows) ++flows_of_pair[{fl.src, fl.dst}];
  const uint64_t per_pair = std::max<uint64_t>(s.connections_per_pair, 1);
  for (const auto& [pair, n] : flows_of_pair) f.connections += std::min(n, per_pair);
  f.estimated_bytes = kBaseBytes + f.hosts * kBytesPerHost + 2 * f.connections * kBytesPerConnectionEnd +
                      f.links * kBytesPerLink + f.switches * f.hosts * kBytesPerRoute +
                      f.flows * kBytesPerFlow;
  return f;
}

MemInfo parse_meminfo(std::string_view text) {
  MemInfo m;
  std::istringstream in{std::string(text)};
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string name, unit;
    uint64_t value = 0;
    if (!(fields >> name >> value)) continue;
    fields >> unit;
    const uint64_t bytes = unit == "kB" ? value << 10 : value;
    if (name == "MemTotal:") m.total_bytes = bytes;
    if (name == "MemAvailable:") m.available_bytes = bytes;
  }
  return m;
}

MemInfo read_meminfo() {
  std::ifstream f("/proc/meminfo");
  std::ostringstream text;
  text << f.rdbuf();
  return parse_meminfo(text.str());
}

Result<std::vector<std::string>> check_footprint(const ScenarioFootprint& f, const MemInfo& memory) {
  constexpr double kGiB = 1024.0 * 1024 * 1024;
  const std::string size = fmt::format(
      "about {:.1f} GiB estimated for {} hosts, {} switches, {} links and {} connections (2 ends each)",
      static_cast<double>(f.estimated_bytes) / kGiB, f.hosts, f.switches, f.links, f.connections);
  if (memory.total_bytes > 0 && f.estimated_bytes > memory.total_bytes) {
    return make_error(
        fmt::format("the fabric will not fit in memory: {}, more than this machine's {:.1f} GiB "
                    "(MemTotal); run a smaller fabric or workload",
                    size, static_cast<double>(memory.total_bytes) / kGiB));
  }
  std::vector<std::string> warnings;
  if (f.partitions > f.busy_partitions) {
    warnings.push_back(fmt::format(
        "threads {}: the fabric splits into {} partition{} with elements ({} hosts, {} switches), so {} "
        "thread{} will do work and {} will only wait at the barriers",
        f.partitions, f.busy_partitions, f.busy_partitions == 1 ? "" : "s", f.hosts, f.switches,
        f.busy_partitions, f.busy_partitions == 1 ? "" : "s", f.partitions - f.busy_partitions));
  }
  if (memory.available_bytes > 0 && f.estimated_bytes > memory.available_bytes) {
    warnings.push_back(
        fmt::format("memory: {}, more than the {:.1f} GiB available now (MemAvailable): the "
                    "run may swap or be killed",
                    size, static_cast<double>(memory.available_bytes) / kGiB));
  }
  return warnings;
}

}  // namespace megascale::sim
