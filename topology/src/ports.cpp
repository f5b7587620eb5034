// Source-port mapping (ports.h): lazily hash the port range, take ports whose paths are new and level at
// every hop, relax the rule only when the range has nothing better.
#include "megascale/topology/ports.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <unordered_map>
#include <unordered_set>

namespace megascale::topo {
namespace {

size_t tier_slot(Tier tier) {
  return tier == Tier::tor ? 0 : (tier == Tier::aggregation ? 1 : 2);
}

constexpr size_t kMaxHops = 4;

class Mapper {
 public:
  Mapper(const Fabric& fabric, const PathSet& paths, const EcmpModel& ecmp, FiveTuple base,
         uint16_t sport_min, uint32_t range)
      : fabric_(fabric),
        paths_(paths),
        ecmp_(ecmp),
        base_(base),
        sport_min_(sport_min),
        path_of_port_(range),
        used_(range, 0),
        load_(fabric.links().size(), 0) {}

  // Lane ports in assignment order.
  std::vector<LanePort> run(uint32_t lanes) {
    std::vector<LanePort> out;
    out.reserve(lanes);
    uint32_t allowed_excess = 0;
    uint32_t allowed_reuse = 0;  // a path may take a lane while it has at most this many
    const uint32_t range = static_cast<uint32_t>(path_of_port_.size());
    while (out.size() < lanes) {
      // No path has room at this reuse level (e.g. every path already has a lane): scanning the range for
      // one would only hash ports in vain.
      if (!path_with_at_most(allowed_reuse)) {
        ++allowed_reuse;
        allowed_excess = 0;
        continue;
      }
      bool progress = false;
      uint32_t least_excess = std::numeric_limits<uint32_t>::max();
      for (uint32_t i = 0; i < range && out.size() < lanes; ++i) {
        if (i == hashed_) hash_next();
        if (used_[i]) continue;
        uint64_t path = path_of_port_[i];
        auto on = lanes_on_path_.find(path);
        if (on != lanes_on_path_.end() && on->second > allowed_reuse) continue;
        uint32_t excess = excess_of(path);
        if (excess > allowed_excess) {
          least_excess = std::min(least_excess, excess);
          continue;
        }
        take(i, path);
        out.push_back({static_cast<uint16_t>(sport_min_ + i), path});
        progress = true;
        if (!path_with_at_most(allowed_reuse)) break;
      }
      if (progress) continue;
      if (least_excess != std::numeric_limits<uint32_t>::max()) {
        allowed_excess = least_excess;
      } else {
        ++allowed_reuse;
        allowed_excess = 0;
      }
    }
    return out;
  }

  uint32_t hashed() const { return hashed_; }
  uint64_t reachable() const { return seen_.size(); }
  uint64_t distinct_used() const { return lanes_on_path_.size(); }
  uint32_t max_switch_link_load() const {
    uint32_t most = 0;
    for (size_t l = fabric_.shape().nics; l < load_.size(); ++l) most = std::max(most, load_[l]);
    return most;
  }

 private:
  void hash_next() {
    FiveTuple t = base_;
    t.src_port = static_cast<uint16_t>(sport_min_ + hashed_);
    uint64_t path = ecmp_path(paths_, ecmp_, t);
    path_of_port_[hashed_++] = path;
    seen_.insert(path);
  }

  // How far above level the path's links are: sum over hops of (load of its link - least load in the group).
  uint32_t excess_of(uint64_t path) const {
    uint32_t digits[kMaxHops] = {};
    paths_.digits_of(path, digits);
    uint32_t excess = 0;
    const auto& hops = paths_.hops();
    for (size_t h = 0; h < hops.size(); ++h) {
      if (hops[h].choices <= 1) continue;
      uint32_t mine = load_[paths_.hop_link(h, digits, digits[h])];
      if (mine == 0) continue;
      uint32_t least = mine;
      for (uint32_t d = 0; d < hops[h].choices && least > 0; ++d) {
        least = std::min(least, load_[paths_.hop_link(h, digits, d)]);
      }
      excess += mine - least;
    }
    return excess;
  }

  // Whether some path carries at most `lanes` lanes (paths with none count).
  bool path_with_at_most(uint32_t lanes) const {
    if (lanes_on_path_.size() < paths_.count()) return true;
    for (uint32_t k = 1; k <= lanes && k < paths_by_lanes_.size(); ++k) {
      if (paths_by_lanes_[k] > 0) return true;
    }
    return false;
  }

  void take(uint32_t port, uint64_t path) {
    used_[port] = 1;
    uint32_t before = lanes_on_path_[path]++;
    if (paths_by_lanes_.size() <= before + 1) paths_by_lanes_.resize(before + 2, 0);
    if (before > 0) --paths_by_lanes_[before];
    ++paths_by_lanes_[before + 1];
    uint32_t digits[kMaxHops] = {};
    paths_.digits_of(path, digits);
    for (size_t h = 0; h < paths_.hops().size(); ++h) ++load_[paths_.hop_link(h, digits, digits[h])];
  }

  const Fabric& fabric_;
  const PathSet& paths_;
  const EcmpModel& ecmp_;
  FiveTuple base_;
  uint16_t sport_min_;
  uint32_t hashed_ = 0;
  std::vector<uint64_t> path_of_port_;
  std::vector<uint8_t> used_;
  std::vector<uint32_t> load_;  // lanes per link
  std::unordered_map<uint64_t, uint32_t> lanes_on_path_;
  std::vector<uint64_t> paths_by_lanes_;  // [k]: paths carrying exactly k lanes (k >= 1)
  std::unordered_set<uint64_t> seen_;
};

}  // namespace

uint64_t ecmp_path(const PathSet& paths, const EcmpModel& ecmp, const FiveTuple& tuple) {
  uint32_t digits[kMaxHops] = {};
  const auto& hops = paths.hops();
  for (size_t h = 0; h < hops.size(); ++h) {
    digits[h] =
        ecmp_select(ecmp.tier[tier_slot(hops[h].tier)], paths.decider(h, digits), tuple, hops[h].choices);
  }
  return paths.index_of(digits);
}

Result<PortMapping> map_source_ports(const Fabric& fabric, const PortMappingRequest& req) {
  Result<PathSet> paths = shortest_paths(fabric, req.src_nic, req.dst_nic);
  if (!paths) return paths.error();
  if (req.lanes == 0) return make_error("ports: at least one lane is needed");
  if (req.sport_max < req.sport_min)
    return make_error(fmt::format("ports: empty source-port range {}-{}", req.sport_min, req.sport_max));
  const uint32_t range = uint32_t{req.sport_max} - req.sport_min + 1;
  if (req.lanes > range)
    return make_error(fmt::format("ports: {} lanes need more ports than the range {}-{} has ({})", req.lanes,
                                  req.sport_min, req.sport_max, range));
  PortMapping out;
  out.path_count = paths->count();
  if (!req.ecmp) {
    // No model: step evenly, so lanes differ in many low-order bits whatever bits the switches use.
    for (uint32_t k = 0; k < req.lanes; ++k) {
      out.lanes.push_back(
          {static_cast<uint16_t>(req.sport_min + uint64_t{k} * range / req.lanes), std::nullopt});
    }
    return out;
  }
  FiveTuple base;
  base.src_ip = req.src_ip.value_or(nic_ipv4(fabric, req.src_nic));
  base.dst_ip = req.dst_ip.value_or(nic_ipv4(fabric, req.dst_nic));
  base.dst_port = req.dport;
  Mapper mapper(fabric, *paths, *req.ecmp, base, req.sport_min, range);
  out.lanes = mapper.run(req.lanes);
  out.distinct_paths = mapper.distinct_used();
  out.reachable_paths = mapper.reachable();
  out.ports_hashed = mapper.hashed();
  out.max_lanes_per_link = mapper.max_switch_link_load();
  return out;
}

}  // namespace megascale::topo
