// Helpers shared by the topology tests: small fabrics built in code and an independent shortest-path
// counter (breadth-first search over the built links) to check the analytic counts against.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <deque>
#include <vector>

#include "megascale/topology/fabric.h"

namespace megascale::topo::testing {

// 3 tiers, 2 pods, parallel links at both tiers: ToR-aggregation x2, aggregation-core x2.
inline FabricSpec small_three_tier(uint32_t core_planes) {
  FabricSpec s;
  s.name = "test-3tier";
  s.tiers = 3;
  s.switch_radix = 16;
  s.port_speed_bps = 100'000'000'000;
  s.servers = 16;
  s.nics_per_server = 2;
  s.nic_speed_bps = 100'000'000'000;
  s.tor_downlink_ports = 4;
  s.tor_uplink_ports = 4;
  s.pods = 2;
  s.tier2_per_pod = 2;
  s.aggregation_uplink_ports = 4;
  s.core_planes = core_planes;
  s.core_per_plane = 2;
  return s;
}

// Number of shortest link sequences from NIC a to NIC b, by BFS with path counting over every link in
// both directions. Independent of paths.cpp: it only reads Fabric::links().
inline uint64_t bfs_shortest_path_count(const Fabric& f, NodeId a, NodeId b, int* hops_out = nullptr) {
  const size_t n = f.nodes().size();
  std::vector<std::vector<NodeId>> adj(n);
  for (const Link& l : f.links()) {
    adj[l.lower].push_back(l.upper);  // one entry per link: parallel links count separately
    adj[l.upper].push_back(l.lower);
  }
  std::vector<int> dist(n, -1);
  std::vector<uint64_t> ways(n, 0);
  std::deque<NodeId> queue{a};
  dist[a] = 0;
  ways[a] = 1;
  while (!queue.empty()) {
    NodeId u = queue.front();
    queue.pop_front();
    // NICs other than a are leaves: a path does not pass through a server.
    if (u != a && f.is_nic(u)) continue;
    for (NodeId v : adj[u]) {
      if (dist[v] < 0) {
        dist[v] = dist[u] + 1;
        queue.push_back(v);
      }
      if (dist[v] == dist[u] + 1) ways[v] += ways[u];
    }
  }
  if (hops_out) *hops_out = dist[b];
  return ways[b];
}

}  // namespace megascale::topo::testing
