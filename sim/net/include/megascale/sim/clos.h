// Simulated networks from topology/'s fabric model: one Host per NIC, one Switch per fabric switch,
// two one-way ports per fabric link at the link's speed, and up-down routing over the CLOS with ECMP
// by topology/'s switch hash models.
//
//   Result<topo::Fabric> model = topo::load_fabric("small-2tier");    // or "megascale", or a YAML path
//   FabricConfig fc;  fc.engine.cc = *cc::builtin_cc_config("swift");
//   auto fabric = build_clos(fc, *model, ClosOptions{});               // ECMP by default_clos_ecmp()
//   Host& h = (*fabric)->host(0);                                      // host address = the NIC's NodeId
//
// Routing (shortest up-down paths, the ones topo::shortest_paths counts): a switch sends a packet down
// when the destination NIC lies below it, else up. Every choice among equal links is an ECMP group
// whose members are ordered as topo::PathSet digits are (paths.h: switches first, then parallel
// links), and the member is topo::ecmp_select(model of the switch's tier, the switch's NodeId, the
// packet's tuple, group size). The tuple is what the NICs would put on the wire: source and
// destination IPv4 from topo::nic_ipv4, the lane's UDP source port (host.h), destination port 4791,
// UDP. So a flow's route in the simulator is exactly topo::ecmp_path for the same tuple and model;
// tests check that hop by hop. With `spray`, every group picks a random member per packet instead.
//
// Host addresses are the fabric's NIC NodeIds (host * nics_per_server + nic); every NIC runs at the
// server link speed (FabricConfig::host_rate_bps is overridden), each switch link at its own speed.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "megascale/common/result.h"
#include "megascale/sim/fabric.h"
#include "megascale/topology/fabric.h"
#include "megascale/topology/ports.h"

namespace megascale::sim {

struct ClosOptions {
  std::optional<topo::EcmpModel> ecmp;  // none: default_clos_ecmp()
  bool spray = false;                   // per-packet spraying instead of per-flow ECMP
};

// CRC16-BISYNC at every tier with a per-switch seed, reading bits 0, 5 and 10 at the ToR, tier 2 and
// core (different bits per tier avoid hash polarisation; topology/README.md, "Port mapping").
topo::EcmpModel default_clos_ecmp();

// How a simulated fabric maps onto the model it came from.
struct ClosInfo {
  topo::Fabric model;
  topo::EcmpModel ecmp;
  bool spray = false;
  std::vector<uint32_t> ipv4_of_host{};                   // by host address (= NIC NodeId)
  std::vector<topo::NodeId> node_of_switch{};             // by switch index in the Fabric
  std::vector<uint32_t> switch_of_node{};                 // by NodeId; kNoSwitch for NICs
  std::vector<std::vector<topo::LinkId>> link_of_port{};  // [switch][port]: the model link it drives
  // [model link]: the simulated one-way links (Fabric::link index) up (lower -> upper) and down, and
  // the switch ports that drive them (kNoPort where a NIC drives the up direction).
  std::vector<uint32_t> up_link{}, down_link{}, up_port{}, down_port{};
  static constexpr uint32_t kNoSwitch = 0xFFFFFFFF;

  // The tuple ECMP hashes for a packet (addresses mapped to the model's IPv4 addresses).
  topo::FiveTuple tuple_of(const FiveTuple& flow) const;
};

// Builds the network for `model`. Errors: a model without NICs, an engine refusal.
Result<std::unique_ptr<Fabric>> build_clos(const FabricConfig& config, const topo::Fabric& model,
                                           const ClosOptions& options);

// The model links a packet of `flow` crosses from its source NIC to its destination NIC, walking the
// simulated switches' own forwarding decisions (per-flow ECMP only). Empty if a switch has no route.
std::vector<topo::LinkId> traced_route(Fabric& fabric, const FiveTuple& flow);

}  // namespace megascale::sim
