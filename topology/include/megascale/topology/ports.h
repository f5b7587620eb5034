// Source-port mapping: the UDP source ports for a connection's lanes, chosen so that under a switch hash
// model the lanes take distinct equal-cost paths, spread as evenly over every hop as the fabric and the
// hash allow. With no hash model, ports are stepped evenly over the range (the paths are then unknown).
//
//   Result<Fabric> f = load_fabric("megascale");
//   PortMappingRequest req{.src_nic = *parse_endpoint(*f, "h0:n0"), .dst_nic = *parse_endpoint(*f,
//   "h300:n0"),
//                          .lanes = 64};
//   req.ecmp = EcmpModel::per_tier(*parse_hash_model("crc16-bisync"), ...);  // or leave unset
//   Result<PortMapping> m = map_source_ports(*f, req);   // m->lanes[i].sport, m->lanes[i].path_index
//
// Method (with a model): ports are hashed hop by hop in ascending order, lazily; a lane takes the first
// unused port whose path is new and "level" at every hop (its link there carries no more lanes than the
// least loaded link of that ECMP group). When no port qualifies, the rule relaxes step by step: allow a
// little excess load, then paths already used, so every port in the range is eventually eligible.
// The default range is 0xC000-0xFFFF, where Linux puts RoCEv2 source ports
// (rdma_flow_label_to_udp_sport, include/rdma/ib_verbs.h).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "megascale/common/result.h"
#include "megascale/topology/ecmp.h"
#include "megascale/topology/fabric.h"
#include "megascale/topology/paths.h"

namespace megascale::topo {

// The hash each tier's switches use: [0] ToRs, [1] aggregation (spines), [2] core.
struct EcmpModel {
  std::array<HashModel, 3> tier;
  static EcmpModel uniform(const HashModel& m) { return {{m, m, m}}; }
};

// The model that repeated hash specs give (`megascale topo ports --hash`, `megascale perf --hash`): one
// spec (parse_hash_model) for every tier, or three for the ToR, aggregation (spine) and core tiers in
// that order. Errors (no flag named; callers add theirs): zero, two or more than three specs, or the
// first spec that does not parse.
Result<EcmpModel> parse_ecmp_model(std::span<const std::string> specs);

// "tor=crc16-bisync:per-switch, spine=crc16-bisync:offset=5" for the tiers `fabric` has.
std::string describe_ecmp_model(const Fabric& fabric, const EcmpModel& model);

struct PortMappingRequest {
  NodeId src_nic = 0;
  NodeId dst_nic = 0;
  uint32_t lanes = 1;
  std::optional<EcmpModel> ecmp;  // none: spread evenly, paths unknown
  uint16_t sport_min = 0xC000;
  uint16_t sport_max = 0xFFFF;
  uint16_t dport = kRoceV2UdpPort;
  std::optional<uint32_t> src_ip;  // default nic_ipv4(fabric, src_nic)
  std::optional<uint32_t> dst_ip;
};

struct LanePort {
  uint16_t sport = 0;
  std::optional<uint64_t> path_index;  // into shortest_paths(src, dst); none without a model
};

struct PortMapping {
  std::vector<LanePort> lanes;
  uint64_t path_count = 0;       // equal-cost paths between the endpoints
  uint64_t distinct_paths = 0;   // among the lanes (0 without a model)
  uint64_t reachable_paths = 0;  // distinct paths seen among the hashed ports (a lower bound on the
                                 // paths the hash can reach from this range when not every port was hashed)
  uint32_t ports_hashed = 0;
  uint32_t max_lanes_per_link = 0;  // the most lanes on any one switch-to-switch link (0 without a model)
};

// The path (index into `paths`) that `tuple` takes under `ecmp`, decided hop by hop as switches do.
uint64_t ecmp_path(const PathSet& paths, const EcmpModel& ecmp, const FiveTuple& tuple);

// Chooses the lanes' source ports. Errors: endpoints that are not two distinct NICs, zero lanes, an empty
// range, or more lanes than ports in the range.
Result<PortMapping> map_source_ports(const Fabric& fabric, const PortMappingRequest& request);

}  // namespace megascale::topo
