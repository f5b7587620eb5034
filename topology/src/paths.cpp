// Shortest paths in the CLOS of fabric.h: which ECMP decisions a pair of NICs goes through and what each
// digit of a path index picks. The wiring is regular, so every decision's group size is the same on all
// paths of a pair and the path set is a product of the groups: counted by multiplication, decoded by
// mixed-radix arithmetic, never materialised as a whole.
#include "megascale/topology/paths.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace megascale::topo {
namespace {

uint64_t saturating_mul(uint64_t a, uint64_t b) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) return std::numeric_limits<uint64_t>::max();
  return a * b;
}

}  // namespace

Result<PathSet> shortest_paths(const Fabric& fabric, NodeId src_nic, NodeId dst_nic) {
  if (!fabric.is_nic(src_nic) || !fabric.is_nic(dst_nic))
    return make_error(fmt::format("paths: node {} or {} is not a NIC", src_nic, dst_nic));
  if (src_nic == dst_nic)
    return make_error(fmt::format("paths: {} to itself has no network path", fabric.node_name(src_nic)));
  const FabricSpec& s = fabric.spec();
  const FabricShape& d = fabric.shape();
  PathSet ps;
  ps.fabric_ = &fabric;
  ps.src_ = src_nic;
  ps.dst_ = dst_nic;
  ps.src_tor_ = fabric.tor_of_nic(src_nic);
  ps.dst_tor_ = fabric.tor_of_nic(dst_nic);
  ps.src_pod_ = fabric.pod_of_tor(ps.src_tor_);
  ps.dst_pod_ = fabric.pod_of_tor(ps.dst_tor_);
  if (ps.src_tor_ == ps.dst_tor_) {
    ps.scope_ = PairScope::same_tor;
  } else if (ps.src_pod_ == ps.dst_pod_) {
    ps.scope_ = PairScope::same_pod;
    ps.hops_ = {{s.tor_uplink_ports, Tier::tor, true}, {d.tor_links_per_tier2, Tier::aggregation, false}};
  } else {
    ps.scope_ = PairScope::cross_pod;
    ps.hops_ = {{s.tor_uplink_ports, Tier::tor, true},
                {s.aggregation_uplink_ports, Tier::aggregation, true},
                {d.tier2_per_plane_per_pod * d.agg_links_per_core, Tier::core, false},
                {d.tor_links_per_tier2, Tier::aggregation, false}};
  }
  return ps;
}

uint64_t PathSet::count() const {
  uint64_t n = 1;
  for (const PathHop& h : hops_) n = saturating_mul(n, h.choices);
  return n;
}

uint64_t PathSet::switch_path_count() const {
  const FabricSpec& s = fabric_->spec();
  const FabricShape& d = fabric_->shape();
  switch (scope_) {
    case PairScope::same_pod:
      return s.tier2_per_pod;
    case PairScope::cross_pod:
      return uint64_t{s.tier2_per_pod} * s.core_per_plane * d.tier2_per_plane_per_pod;
    default:
      return 1;
  }
}

std::vector<uint64_t> PathSet::switches_per_position() const {
  const FabricSpec& s = fabric_->spec();
  switch (scope_) {
    case PairScope::same_pod:
      return {1, s.tier2_per_pod, 1};
    case PairScope::cross_pod:
      return {1, s.tier2_per_pod, uint64_t{s.core_planes} * s.core_per_plane, s.tier2_per_pod, 1};
    default:
      return {1};
  }
}

// Digit -> (switch, parallel link): switches vary fastest, so consecutive digits land on different switches.
NodeId PathSet::decider(size_t hop, const uint32_t* digits) const {
  const FabricSpec& s = fabric_->spec();
  const FabricShape& d = fabric_->shape();
  const uint32_t agg_s = hop >= 1 ? digits[0] % s.tier2_per_pod : 0;
  switch (hop) {
    case 0:
      return fabric_->tor_node(src_tor_);
    case 1:
      return fabric_->tier2_node(src_pod_, agg_s);
    case 2:
      return fabric_->core_node(agg_s % s.core_planes, digits[1] % s.core_per_plane);
    default: {
      uint32_t agg_d = agg_s % s.core_planes + (digits[2] % d.tier2_per_plane_per_pod) * s.core_planes;
      return fabric_->tier2_node(dst_pod_, agg_d);
    }
  }
}

LinkId PathSet::hop_link(size_t hop, const uint32_t* digits, uint32_t digit) const {
  const FabricSpec& s = fabric_->spec();
  const FabricShape& d = fabric_->shape();
  if (hop == 0) return fabric_->tor_uplink(src_tor_, digit % s.tier2_per_pod, digit / s.tier2_per_pod);
  const uint32_t agg_s = digits[0] % s.tier2_per_pod;
  if (scope_ == PairScope::same_pod) return fabric_->tor_uplink(dst_tor_, agg_s, digit);
  switch (hop) {
    case 1:
      return fabric_->aggregation_uplink(src_pod_, agg_s, digit % s.core_per_plane, digit / s.core_per_plane);
    case 2: {
      uint32_t agg_d = agg_s % s.core_planes + (digit % d.tier2_per_plane_per_pod) * s.core_planes;
      return fabric_->aggregation_uplink(dst_pod_, agg_d, digits[1] % s.core_per_plane,
                                         digit / d.tier2_per_plane_per_pod);
    }
    default: {
      uint32_t agg_d = agg_s % s.core_planes + (digits[2] % d.tier2_per_plane_per_pod) * s.core_planes;
      return fabric_->tor_uplink(dst_tor_, agg_d, digit);
    }
  }
}

uint64_t PathSet::index_of(const uint32_t* digits) const {
  uint64_t index = 0;
  for (size_t h = hops_.size(); h-- > 0;) index = index * hops_[h].choices + digits[h];
  return index;
}

void PathSet::digits_of(uint64_t index, uint32_t* digits) const {
  for (size_t h = 0; h < hops_.size(); ++h) {
    digits[h] = static_cast<uint32_t>(index % hops_[h].choices);
    index /= hops_[h].choices;
  }
}

Path PathSet::at(uint64_t index) const {
  uint32_t digits[4] = {};
  digits_of(index, digits);
  Path p;
  p.links.reserve(length());
  p.switches.reserve(length() - 1);
  p.links.push_back(fabric_->server_link(src_));
  for (size_t h = 0; h < hops_.size(); ++h) {
    p.switches.push_back(decider(h, digits));
    p.links.push_back(hop_link(h, digits, digits[h]));
  }
  p.switches.push_back(fabric_->tor_node(dst_tor_));
  p.links.push_back(fabric_->server_link(dst_));
  return p;
}

std::vector<Path> PathSet::enumerate(uint64_t limit) const {
  std::vector<Path> out;
  uint64_t n = std::min(limit, count());
  out.reserve(n);
  for (uint64_t i = 0; i < n; ++i) out.push_back(at(i));
  return out;
}

}  // namespace megascale::topo
