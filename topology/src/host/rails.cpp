// Rail mapping: GPU -> NIC pairing and its warnings (see rails.h).
#include "megascale/topology/rails.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <initializer_list>
#include <numeric>
#include <tuple>

namespace megascale::topo::host {
namespace {

// Switches between two devices below the switch they share (0 when the nearest switch of both is the
// same; a large number when they share none), to prefer the nearer of two PXB NICs.
int switch_hops(const PciDevice& a, const PciDevice& b) {
  for (size_t i = 0; i < a.switches.size(); ++i) {
    auto it = std::find(b.switches.begin(), b.switches.end(), a.switches[i]);
    if (it != b.switches.end()) return static_cast<int>(i + static_cast<size_t>(it - b.switches.begin()));
  }
  return 1000;
}

std::vector<int> cpus_for(const HostTopology& host, int numa_node) {
  if (const NumaNode* n = host.find_numa(numa_node)) return n->cpus;
  std::vector<int> all;  // locality unknown: any core will do
  for (const NumaNode& n : host.numa_nodes) all.insert(all.end(), n.cpus.begin(), n.cpus.end());
  std::sort(all.begin(), all.end());
  return all;
}

std::string gpu_label(const HostTopology& host, int g) {
  return fmt::format("GPU{} ({})", host.gpus[static_cast<size_t>(g)].cuda_index,
                     host.gpus[static_cast<size_t>(g)].pci.bus_id);
}

}  // namespace

RailMap map_rails(const HostTopology& host) {
  RailMap map;
  for (size_t n = 0; n < host.nics.size(); ++n) {
    if (!host.nics[n].rdma_device.empty()) map.candidate_nics.push_back(static_cast<int>(n));
  }
  if (map.candidate_nics.empty()) {
    map.candidate_nics.resize(host.nics.size());
    std::iota(map.candidate_nics.begin(), map.candidate_nics.end(), 0);
  }
  if (host.gpus.empty()) {
    map.warnings.push_back({RailWarning::Kind::kNoGpu, "no GPU found: there are no rails to map"});
    return map;
  }

  // Each GPU's best NICs: those of the best (path type, switch hops).
  const size_t gpus = host.gpus.size();
  std::vector<std::vector<int>> best(gpus);
  std::vector<PathType> best_path(gpus, PathType::kSys);
  for (size_t g = 0; g < gpus; ++g) {
    std::tuple<PathType, int> best_key{PathType::kSys, 1 << 30};
    for (int n : map.candidate_nics) {
      const PciDevice& nic = host.nics[static_cast<size_t>(n)].pci;
      std::tuple<PathType, int> key{path_between(host, host.gpus[g].pci, nic),
                                    switch_hops(host.gpus[g].pci, nic)};
      if (best[g].empty() || key < best_key) {
        best_key = key;
        best[g] = {n};
      } else if (key == best_key) {
        best[g].push_back(n);
      }
    }
    best_path[g] = std::get<0>(best_key);
  }

  // GPUs with fewer choices first; then each takes its least-loaded tied NIC, lowest bus id first (the
  // candidates are in bus-id order already).
  std::vector<size_t> order(gpus);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return best[a].size() < best[b].size(); });
  std::vector<int> load(host.nics.size(), 0);
  map.rails.resize(gpus);
  for (size_t g : order) {
    Rail& rail = map.rails[g];
    rail.gpu = static_cast<int>(g);
    if (best[g].empty()) continue;
    int chosen = best[g].front();
    for (int n : best[g]) {
      if (load[static_cast<size_t>(n)] < load[static_cast<size_t>(chosen)]) chosen = n;
    }
    ++load[static_cast<size_t>(chosen)];
    rail.nic = chosen;
    rail.path = best_path[g];
  }
  for (Rail& rail : map.rails) {
    if (rail.nic < 0) continue;
    rail.numa_node = host.nics[static_cast<size_t>(rail.nic)].pci.numa_node;
    rail.cpus = cpus_for(host, rail.numa_node);
    rail.cpu_list = format_cpu_list(rail.cpus);
  }

  // Warnings, in GPU order then NIC order, so the text is stable.
  for (const Rail& rail : map.rails) {
    if (rail.nic < 0) {
      map.warnings.push_back({RailWarning::Kind::kNoNic,
                              fmt::format("{} has no NIC: the host has none", gpu_label(host, rail.gpu))});
    } else if (rail.path == PathType::kSys) {
      const Nic& nic = host.nics[static_cast<size_t>(rail.nic)];
      map.warnings.push_back(
          {RailWarning::Kind::kCrossSocket,
           fmt::format(
               "{} on NUMA node {} reaches its best NIC {} (NUMA node {}) only across the inter-socket "
               "link (SYS): GPUDirect RDMA traffic crosses the CPUs",
               gpu_label(host, rail.gpu), host.gpus[static_cast<size_t>(rail.gpu)].pci.numa_node, nic.name(),
               nic.pci.numa_node)});
    }
  }
  for (size_t n = 0; n < host.nics.size(); ++n) {
    if (load[n] < 2) continue;
    std::vector<std::string> users;
    for (const Rail& rail : map.rails) {
      if (rail.nic == static_cast<int>(n)) users.push_back(gpu_label(host, rail.gpu));
    }
    map.warnings.push_back(
        {RailWarning::Kind::kSharedNic, fmt::format("NIC {} is shared by {} GPUs: {}", host.nics[n].name(),
                                                    load[n], fmt::join(users, ", "))});
  }

  map.rail_optimized = std::all_of(map.rails.begin(), map.rails.end(), [&](const Rail& r) {
    return r.nic >= 0 && load[static_cast<size_t>(r.nic)] == 1 &&
           (r.path == PathType::kPix || r.path == PathType::kPxb);
  });
  return map;
}

std::string nccl_ib_hca(const HostTopology& host, const RailMap& rails) {
  std::vector<std::string> entries;
  for (int index : rail_nics(rails)) {
    const Nic& nic = host.nics[static_cast<size_t>(index)];
    if (!nic.rdma_device.empty()) entries.push_back(fmt::format("{}:{}", nic.rdma_device, nic.port));
  }
  return entries.empty() ? "" : fmt::format("={}", fmt::join(entries, ","));
}

std::vector<int> rail_nics(const RailMap& rails) {
  std::vector<int> order;
  for (const Rail& rail : rails.rails) {
    if (rail.nic >= 0 && std::find(order.begin(), order.end(), rail.nic) == order.end()) {
      order.push_back(rail.nic);
    }
  }
  return order;
}

RailAssignment rail_of(const HostTopology& host, const RailMap& rails, const NicKey& key) {
  // The bus id is the last component of the sysfs path that reads as one (a virtual device has none).
  std::string bus_id;
  for (size_t end = key.pci_path.size(); end > 0 && bus_id.empty();) {
    const size_t slash = key.pci_path.rfind('/', end - 1);
    const size_t begin = slash == std::string::npos ? 0 : slash + 1;
    const std::string_view part = std::string_view(key.pci_path).substr(begin, end - begin);
    if (part.size() == 12 && part[4] == ':' && part[7] == ':' && part[10] == '.') {
      if (auto normal = normalize_bus_id(part)) bus_id = *normal;
    }
    if (slash == std::string::npos) break;
    end = slash;
  }
  const auto find = [&](auto&& same) -> int {
    for (size_t i = 0; i < host.nics.size(); ++i) {
      if (same(host.nics[i])) return static_cast<int>(i);
    }
    return -1;
  };
  RailAssignment out;
  if (!key.rdma_device.empty())
    out.nic = find([&](const Nic& n) { return n.rdma_device == key.rdma_device; });
  if (out.nic < 0 && !key.netdev.empty())
    out.nic = find([&](const Nic& n) { return n.netdev == key.netdev; });
  if (out.nic < 0 && !bus_id.empty()) out.nic = find([&](const Nic& n) { return n.pci.bus_id == bus_id; });

  std::vector<std::string> names;
  for (const std::string* s :
       std::initializer_list<const std::string*>{&key.rdma_device, &key.netdev, &bus_id}) {
    if (!s->empty()) names.push_back(*s);
  }
  const std::string what =
      names.empty() ? std::string("a device with no name") : fmt::format("{}", fmt::join(names, "/"));
  if (out.nic < 0) {
    out.reason = fmt::format("{} is none of the host's {} NIC(s)", what, host.nics.size());
    return out;
  }
  const std::vector<int> order = rail_nics(rails);
  const auto it = std::find(order.begin(), order.end(), out.nic);
  if (it != order.end()) {
    out.rail_id = static_cast<int>(it - order.begin());
  } else if (rails.rails.empty()) {
    out.reason = fmt::format("{} is NIC {}, but the host has no GPU, so no rails", what,
                             host.nics[static_cast<size_t>(out.nic)].name());
  } else {
    out.reason = fmt::format("{} is NIC {}, which no GPU's rail uses", what,
                             host.nics[static_cast<size_t>(out.nic)].name());
  }
  return out;
}

}  // namespace megascale::topo::host
