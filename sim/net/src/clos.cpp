// Building a simulated network from topology/'s fabric model. The group member orders below mirror
// PathSet::hop_link (topology/src/paths.cpp) digit for digit, so that hashing a tuple here picks the
// link that topo::ecmp_path picks.
#include "megascale/sim/clos.h"

#include <string>
#include <utility>

#include "megascale/topology/ecmp.h"

namespace megascale::sim {

topo::EcmpModel default_clos_ecmp() {
  topo::HashModel m{
      .function = topo::HashFunction::crc16_bisync, .seed = 0, .offset_bits = 0, .seed_per_switch = true};
  topo::EcmpModel e = topo::EcmpModel::uniform(m);
  e.tier[1].offset_bits = 5;
  e.tier[2].offset_bits = 10;
  return e;
}

topo::FiveTuple ClosInfo::tuple_of(const FiveTuple& flow) const {
  return topo::FiveTuple{.src_ip = ipv4_of_host[flow.src_addr],
                         .dst_ip = ipv4_of_host[flow.dst_addr],
                         .src_port = flow.src_port,
                         .dst_port = flow.dst_port,
                         .protocol = flow.protocol};
}

namespace {

size_t tier_slot(topo::Tier tier) {
  return tier == topo::Tier::tor ? 0 : (tier == topo::Tier::aggregation ? 1 : 2);
}

}  // namespace

Result<std::unique_ptr<Fabric>> build_clos(const FabricConfig& config, const topo::Fabric& model,
                                           const ClosOptions& options) {
  const topo::FabricSpec& spec = model.spec();
  const topo::FabricShape& shape = model.shape();
  if (shape.nics == 0) return make_error("fabric " + spec.name + ": no NICs");
  FabricConfig fc = config;
  fc.host_rate_bps = static_cast<uint64_t>(shape.server_link_bps);
  auto f = std::make_unique<Fabric>(fc);
  if (fc.partitions > 1) {
    if (Status st = f->set_partition_map(clos_partition_map(model, fc.partitions)); !st) return st.error();
  }

  auto info = std::make_shared<ClosInfo>(
      ClosInfo{.model = model, .ecmp = options.ecmp.value_or(default_clos_ecmp()), .spray = options.spray});
  const auto n_nodes = static_cast<uint32_t>(model.nodes().size());
  info->switch_of_node.assign(n_nodes, ClosInfo::kNoSwitch);
  std::vector<Switch*> sw_of_node(n_nodes, nullptr);
  for (topo::NodeId n = shape.nics; n < n_nodes; ++n) {
    Switch& sw = f->add_switch();
    info->switch_of_node[n] = static_cast<uint32_t>(info->node_of_switch.size());
    info->node_of_switch.push_back(n);
    info->link_of_port.emplace_back();
    sw_of_node[n] = &sw;
  }
  for (topo::NodeId n = 0; n < shape.nics; ++n) {
    auto host = f->add_host();
    if (!host.ok()) return host.error();
    info->ipv4_of_host.push_back(topo::nic_ipv4(model, n));
  }

  // Two one-way ports per link: up (at the lower node) and down (at the upper switch).
  const auto& links = model.links();
  std::vector<uint32_t> up_port(links.size(), Switch::kNoPort), down_port(links.size(), Switch::kNoPort);
  for (topo::LinkId l = 0; l < links.size(); ++l) {
    const topo::Link& link = links[l];
    Switch& upper = *sw_of_node[link.upper];
    // attach_host and connect_switches each add two links, the up direction first (fabric.h).
    info->up_link.push_back(static_cast<uint32_t>(f->link_count()));
    info->down_link.push_back(static_cast<uint32_t>(f->link_count() + 1));
    if (model.is_nic(link.lower)) {
      down_port[l] = f->attach_host(f->host(link.lower), upper);
    } else {
      auto [up, down] =
          f->connect_switches(*sw_of_node[link.lower], upper, static_cast<uint64_t>(link.speed_bps));
      up_port[l] = up;
      down_port[l] = down;
      info->link_of_port[info->switch_of_node[link.lower]].resize(up + 1);
      info->link_of_port[info->switch_of_node[link.lower]][up] = l;
    }
    info->link_of_port[info->switch_of_node[link.upper]].resize(down_port[l] + 1);
    info->link_of_port[info->switch_of_node[link.upper]][down_port[l]] = l;
  }

  info->up_port = up_port;
  info->down_port = down_port;

  // Routes. Member d of each group is the link PathSet::hop_link gives digit d.
  const uint32_t per_pod = spec.tier2_per_pod;
  for (topo::NodeId n = shape.nics; n < n_nodes; ++n) {
    const topo::Node& node = model.nodes()[n];
    Switch& sw = *sw_of_node[n];
    if (node.tier == topo::Tier::tor) {
      std::vector<uint32_t> up;
      for (uint32_t d = 0; d < spec.tor_uplink_ports; ++d)
        up.push_back(up_port[model.tor_uplink(node.index, d % per_pod, d / per_pod)]);
      const uint32_t up_group = up.empty() ? Switch::kNoPort : sw.add_group(up);
      for (topo::NodeId nic = 0; nic < shape.nics; ++nic) {
        if (model.tor_of_nic(nic) == node.index) {
          sw.set_route(nic, {down_port[model.server_link(nic)]});
        } else if (up_group != Switch::kNoPort) {
          sw.set_route_group(nic, up_group);
        }
      }
    } else if (node.tier == topo::Tier::aggregation) {
      const uint32_t pod = node.index / per_pod, agg = node.index % per_pod;
      uint32_t up_group = Switch::kNoPort;
      if (spec.tiers == 3) {
        std::vector<uint32_t> up;
        for (uint32_t d = 0; d < spec.aggregation_uplink_ports; ++d) {
          up.push_back(
              up_port[model.aggregation_uplink(pod, agg, d % spec.core_per_plane, d / spec.core_per_plane)]);
        }
        up_group = sw.add_group(up);
      }
      std::vector<uint32_t> down_group_of_tor(shape.tors, Switch::kNoPort);
      for (uint32_t t = pod * shape.tors_per_pod; t < (pod + 1) * shape.tors_per_pod; ++t) {
        std::vector<uint32_t> down;
        for (uint32_t k = 0; k < shape.tor_links_per_tier2; ++k)
          down.push_back(down_port[model.tor_uplink(t, agg, k)]);
        down_group_of_tor[t] = sw.add_group(down);
      }
      for (topo::NodeId nic = 0; nic < shape.nics; ++nic) {
        const uint32_t t = model.tor_of_nic(nic);
        const uint32_t g = down_group_of_tor[t] != Switch::kNoPort ? down_group_of_tor[t] : up_group;
        if (g != Switch::kNoPort) sw.set_route_group(nic, g);
      }
    } else {  // core: plane c, switch i of the plane; down to the destination pod's aggregation
      const uint32_t plane = node.index / spec.core_per_plane, i = node.index % spec.core_per_plane;
      const uint32_t tppp = shape.tier2_per_plane_per_pod;
      std::vector<uint32_t> group_of_pod(spec.pods);
      for (uint32_t q = 0; q < spec.pods; ++q) {
        std::vector<uint32_t> down;
        for (uint32_t d = 0; d < tppp * shape.agg_links_per_core; ++d) {
          const uint32_t agg_d = plane + (d % tppp) * spec.core_planes;
          down.push_back(down_port[model.aggregation_uplink(q, agg_d, i, d / tppp)]);
        }
        group_of_pod[q] = sw.add_group(down);
      }
      for (topo::NodeId nic = 0; nic < shape.nics; ++nic)
        sw.set_route_group(nic, group_of_pod[model.pod_of_tor(model.tor_of_nic(nic))]);
    }
    if (options.spray) {
      sw.set_spraying(f->spray_rng(sw.id()));
    } else {
      const topo::HashModel hm = info->ecmp.tier[tier_slot(node.tier)];
      const ClosInfo* ci = info.get();
      sw.set_ecmp_select([ci, hm, n](const FiveTuple& flow, uint32_t group_size) {
        return topo::ecmp_select(hm, n, ci->tuple_of(flow), group_size);
      });
    }
  }
  f->set_clos(std::move(info));
  return f;
}

std::vector<topo::LinkId> traced_route(Fabric& fabric, const FiveTuple& flow) {
  const ClosInfo* info = fabric.clos();
  if (info == nullptr) return {};
  const topo::Fabric& model = info->model;
  std::vector<topo::LinkId> route{model.server_link(flow.src_addr)};
  topo::NodeId at = model.links()[route[0]].upper;
  for (int hops = 0; hops < 8; ++hops) {
    const uint32_t s = info->switch_of_node[at];
    const uint32_t port = fabric.switch_at(s).select_port(flow);
    if (port == Switch::kNoPort) return {};
    const topo::LinkId l = info->link_of_port[s][port];
    route.push_back(l);
    const topo::Link& link = model.links()[l];
    at = link.lower == at ? link.upper : link.lower;
    if (model.is_nic(at)) return at == flow.dst_addr ? route : std::vector<topo::LinkId>{};
  }
  return {};
}

}  // namespace megascale::sim
