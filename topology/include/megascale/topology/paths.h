// Equal-cost shortest paths between two NICs of a fabric, counted analytically and decoded one at a time,
// so a pair with millions of paths costs no more than one with four.
//
//   Result<PathSet> ps = shortest_paths(fabric, a, b);   // a, b: NIC node ids (parse_endpoint)
//   ps->count();                                         // e.g. 8192 between pods of the MegaScale preset
//   Path p = ps->at(5);                                  // links and switches of path 5
//   for (const Path& q : ps->enumerate(16)) { ... }      // the first 16, at most
//
// A path is the sequence of links from NIC a up to a common ancestor and down to NIC b. At each switch on
// the way the next link is one of several equal-cost choices (an ECMP group); a path is the list of those
// choices, its "digits". Path index i holds digit h at radix position h with hop 0 the least significant:
// i = d0 + r0 * (d1 + r1 * (d2 + ...)), and digit values spread over switches before parallel links, so
// paths 0..n-1 are spread as evenly as possible over every hop (ports.h starts from that order).
#pragma once

#include <cstdint>
#include <vector>

#include "megascale/common/result.h"
#include "megascale/topology/fabric.h"

namespace megascale::topo {

struct Path {
  std::vector<LinkId> links;     // NIC a's server link first, NIC b's last
  std::vector<NodeId> switches;  // in order, ToR of a first
};

// One ECMP decision on the way: the switch that makes it and how many equal-cost links it chooses from.
struct PathHop {
  uint32_t choices = 1;
  Tier tier = Tier::tor;  // tier of the deciding switch
  bool up = true;         // going up (towards the core) or down
};

// Where a pair of NICs sits relative to each other.
enum class PairScope { same_nic, same_tor, same_pod, cross_pod };

class PathSet {
 public:
  PairScope scope() const { return scope_; }
  // Number of distinct paths (link sequences). Saturates at UINT64_MAX, which no 3-tier fabric reaches.
  uint64_t count() const;
  // Distinct switch sequences (parallel links between the same switches collapsed).
  uint64_t switch_path_count() const;
  // Links per path, NIC to NIC.
  size_t length() const {
    return scope_ == PairScope::same_tor ? 2 : (scope_ == PairScope::same_pod ? 4 : 6);
  }
  // The ECMP decisions, in order from NIC a (only the switch hops; the server links are forced).
  const std::vector<PathHop>& hops() const { return hops_; }
  // Distinct switches that some path passes at each position of Path::switches.
  std::vector<uint64_t> switches_per_position() const;

  // Path `index` (< count()).
  Path at(uint64_t index) const;
  // The first min(limit, count()) paths in index order.
  std::vector<Path> enumerate(uint64_t limit) const;

  // Step-by-step access for an ECMP walk (ports.h) or a simulator's router: the switch that makes
  // decision `hop` and the link that digit `digit` picks there, given the digits of the hops before it.
  NodeId decider(size_t hop, const uint32_t* digits) const;
  LinkId hop_link(size_t hop, const uint32_t* digits, uint32_t digit) const;
  // The index of the path with these digits (one per hop), and the reverse.
  uint64_t index_of(const uint32_t* digits) const;
  void digits_of(uint64_t index, uint32_t* digits) const;

  NodeId src() const { return src_; }
  NodeId dst() const { return dst_; }

 private:
  friend Result<PathSet> shortest_paths(const Fabric& fabric, NodeId src_nic, NodeId dst_nic);
  const Fabric* fabric_ = nullptr;
  NodeId src_ = 0;
  NodeId dst_ = 0;
  PairScope scope_ = PairScope::same_nic;
  uint32_t src_tor_ = 0;
  uint32_t dst_tor_ = 0;
  uint32_t src_pod_ = 0;
  uint32_t dst_pod_ = 0;
  std::vector<PathHop> hops_;
};

// All equal-cost shortest paths between two NICs. The PathSet refers to `fabric`, which must outlive it.
// Errors: an id that is not a NIC, or the same NIC twice.
Result<PathSet> shortest_paths(const Fabric& fabric, NodeId src_nic, NodeId dst_nic);

}  // namespace megascale::topo
