// The fabric model: a 2- or 3-tier CLOS of RoCE switches with multi-NIC servers, optionally rail-optimised
// (NIC i of every server on a ToR of rail i), as explicit nodes (NICs, ToRs, aggregation/spine and core
// switches) and links (with speeds and port numbers) that a packet-level simulator can walk. Path
// enumeration is in paths.h, ECMP hashing in ecmp.h, source-port choice in ports.h.
//
//   Result<Fabric> f = load_fabric("megascale");            // a built-in preset, or a YAML file's path
//   if (!f) { fmt::print(stderr, "{}\n", f.error().message); return 2; }
//   Result<NodeId> a = parse_endpoint(*f, "h0:n3");           // host 0, NIC 3 (rail 3)
//   FabricSummary s = summarize(*f);                          // counts, radix use, bisection bandwidth
//
// Wiring (derived from the spec, see configs/fabrics/megascale.yaml for a worked example):
//  - servers -> ToRs: rail-optimised, servers come in groups of `tor downlinks` servers that share one ToR
//    per rail (NIC k of each server in group g goes to ToR g*nics_per_server + k); otherwise each server
//    puts all its NICs on one ToR.
//  - ToRs -> tier 2: ToR t is in pod t / tors_per_pod; its uplinks are spread evenly over the pod's tier-2
//    switches (aggregation in 3 tiers, spines in 2 tiers, where there is one pod), uplinks/per_pod parallel
//    links to each.
//  - aggregation -> core (3 tiers): aggregation switch a of every pod is in core plane a % planes; its
//    uplinks are spread evenly over the plane's core switches.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "megascale/common/result.h"

namespace megascale::topo {

using NodeId = uint32_t;
using LinkId = uint32_t;

// Tier of a node, from the hosts up. In a 2-tier fabric tier 2 is the spine.
enum class Tier : uint8_t { nic = 0, tor = 1, aggregation = 2, core = 3 };

// What a fabric file says. Speeds are in bits per second; counts are ports or switches.
struct FabricSpec {
  std::string name;
  std::string source;  // where it came from, for messages: a path or "megascale.yaml (built-in preset)"
  int tiers = 2;       // 2 (ToR + spine) or 3 (ToR + aggregation + core)
  uint32_t switch_radix = 0;  // ports per switch, each at port_speed_bps
  int64_t port_speed_bps = 0;
  uint32_t servers = 0;
  uint32_t nics_per_server = 0;
  int64_t nic_speed_bps = 0;
  bool rail_optimized = true;
  uint32_t tor_downlink_ports = 0;  // physical ports facing servers
  uint32_t tor_downlink_split = 1;  // each split into this many server links (2: 400G -> 2x200G)
  uint32_t tor_uplink_ports = 0;
  uint32_t pods = 1;                      // 3 tiers only; a 2-tier fabric is one pod
  uint32_t tier2_per_pod = 0;             // spines (2 tiers) or aggregation switches per pod (3 tiers)
  uint32_t aggregation_uplink_ports = 0;  // 3 tiers
  uint32_t core_planes = 0;               // 3 tiers
  uint32_t core_per_plane = 0;            // 3 tiers
  // Where each YAML key was set ({"tor.uplink_ports", 14}), so wiring errors found by Fabric::build can
  // point at a line. Empty for specs built in code.
  std::vector<std::pair<std::string, int>> key_lines;
};

// Counts derived from a valid spec.
struct FabricShape {
  uint32_t nics = 0;
  uint32_t tors = 0;
  uint32_t tier2 = 0;  // spines or aggregation switches, all pods
  uint32_t cores = 0;
  uint32_t tor_server_links = 0;       // logical downlinks per ToR (ports x split)
  int64_t server_link_bps = 0;         // NIC <-> ToR link speed: the slower of NIC and split port
  uint32_t servers_per_tor_group = 0;  // rail-optimised: servers sharing one ToR per rail
  uint32_t tors_per_pod = 0;
  uint32_t tor_links_per_tier2 = 0;      // parallel links between a ToR and each tier-2 switch of its pod
  uint32_t tier2_down_used = 0;          // tier-2 ports facing ToRs
  uint32_t tier2_per_plane_per_pod = 0;  // aggregation switches of one pod in one core plane
  uint32_t agg_links_per_core = 0;       // parallel links between an aggregation switch and each plane core
  uint32_t core_down_used = 0;           // core ports in use
};

// A node: a NIC (one per server NIC, an endpoint) or a switch.
struct Node {
  Tier tier = Tier::nic;
  uint32_t index = 0;  // within its tier: NIC number (host * nics_per_server + nic), ToR number, ...
  uint32_t pod = 0;    // NICs, ToRs and aggregation switches: their pod; core switches: their plane
};

// A full-duplex cable between a lower-tier and an upper-tier node (a simulator gives each direction a
// queue). Ports are the logical port numbers on each end (a split ToR port counts as `split` ports).
struct Link {
  NodeId lower = 0;
  NodeId upper = 0;
  int64_t speed_bps = 0;
  uint32_t lower_port = 0;
  uint32_t upper_port = 0;
};

// A built fabric. Node ids: NICs first (id = host * nics_per_server + nic), then ToRs, tier-2 and core
// switches. Link ids: server links first (id = NIC id), then ToR uplinks, then aggregation uplinks.
class Fabric {
 public:
  // Validates the spec (radix, divisibility) and builds nodes and links. Errors name spec.source.
  static Result<Fabric> build(FabricSpec spec);

  const FabricSpec& spec() const { return spec_; }
  const FabricShape& shape() const { return shape_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<Link>& links() const { return links_; }

  // Links going up from / down from a node (empty for a NIC's down and the top tier's up).
  std::span<const LinkId> up_links(NodeId node) const;
  std::span<const LinkId> down_links(NodeId node) const;

  NodeId nic_node(uint32_t host, uint32_t nic) const { return host * spec_.nics_per_server + nic; }
  NodeId tor_node(uint32_t tor) const { return shape_.nics + tor; }
  NodeId tier2_node(uint32_t pod, uint32_t in_pod) const {
    return shape_.nics + shape_.tors + pod * spec_.tier2_per_pod + in_pod;
  }
  NodeId core_node(uint32_t plane, uint32_t in_plane) const {
    return shape_.nics + shape_.tors + shape_.tier2 + plane * spec_.core_per_plane + in_plane;
  }
  bool is_nic(NodeId node) const { return node < shape_.nics; }

  // The ToR a NIC hangs off, and its port there.
  uint32_t tor_of_nic(NodeId nic) const;
  uint32_t pod_of_tor(uint32_t tor) const { return tor / shape_.tors_per_pod; }

  // Link ids by position in the wiring (see the header comment).
  LinkId server_link(NodeId nic) const { return nic; }
  LinkId tor_uplink(uint32_t tor, uint32_t tier2_in_pod, uint32_t parallel) const {
    return shape_.nics + tor * spec_.tor_uplink_ports + tier2_in_pod * shape_.tor_links_per_tier2 + parallel;
  }
  LinkId aggregation_uplink(uint32_t pod, uint32_t agg_in_pod, uint32_t core_in_plane,
                            uint32_t parallel) const {
    return shape_.nics + shape_.tors * spec_.tor_uplink_ports +
           (pod * spec_.tier2_per_pod + agg_in_pod) * spec_.aggregation_uplink_ports +
           core_in_plane * shape_.agg_links_per_core + parallel;
  }

  // "h12:n3", "tor5", "agg17" ("spine3" in 2 tiers), "core40".
  std::string node_name(NodeId node) const;
  // "tor", "aggregation" or "spine", "core", "nic".
  std::string_view tier_name(Tier tier) const;

 private:
  FabricSpec spec_;
  FabricShape shape_;
  std::vector<Node> nodes_;
  std::vector<Link> links_;
  // Adjacency in CSR form: node n's up links are up_ids_[up_first_[n] .. up_first_[n + 1]).
  std::vector<uint32_t> up_first_, down_first_;
  std::vector<LinkId> up_ids_, down_ids_;
};

// Parses a fabric YAML document (schema in topology/README.md, "Fabric model"). `source` names it in errors,
// which read "SOURCE:LINE: KEY: VALUE: what is wrong".
Result<FabricSpec> parse_fabric_yaml(std::string_view text, std::string_view source);

// Loads a fabric: a path to a YAML file, or the stem of a built-in preset ("megascale", "small-2tier").
Result<Fabric> load_fabric(std::string_view name_or_path);

// Names of the built-in presets (configs/fabrics/*.yaml, embedded at build time).
std::vector<std::string> fabric_preset_names();

// Endpoint names: "hH:nN" is NIC N of host (server) H, both from 0; with rails, NIC N is on rail N.
Result<NodeId> parse_endpoint(const Fabric& fabric, std::string_view text);

// The IPv4 address the port-mapping model gives a NIC: 10.N.H/256.H%256 (host H < 65536, NIC N < 256),
// as a host-order integer. Real deployments pass their own addresses (ports.h).
uint32_t nic_ipv4(const Fabric& fabric, NodeId nic);

// What `megascale topo fabric` prints about a fabric as a whole.
struct TierSummary {
  Tier tier = Tier::tor;
  uint32_t switches = 0;
  uint32_t ports_used = 0;  // per switch
  uint32_t down_links = 0;  // per switch
  int64_t down_speed_bps = 0;
  uint32_t up_links = 0;  // per switch
  int64_t up_speed_bps = 0;
  double oversubscription = 0;  // down bandwidth / up bandwidth; 0 at the top tier
};

struct FabricSummary {
  std::vector<TierSummary> tiers;  // tor, then tier 2, then core
  uint32_t gpus = 0;               // = NICs: one NIC per GPU
  uint64_t links = 0;
  double host_bandwidth_bps = 0;  // sum of server link speeds
  // Bandwidth across the worst cut that splits the hosts in half: half the smallest of the host bandwidth
  // and each tier's total uplink bandwidth (the cut splits pods, or ToRs in one pod, in half).
  double bisection_bandwidth_bps = 0;
};

FabricSummary summarize(const Fabric& fabric);

}  // namespace megascale::topo
