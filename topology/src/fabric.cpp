// Fabric::build: checks that a spec can be wired (ports within the radix, counts that divide) and lays out
// nodes and links in the order fabric.h documents, so link ids can also be computed by arithmetic.
#include "megascale/topology/fabric.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

namespace megascale::topo {
namespace {

// "SOURCE:LINE: KEY: VALUE: why", the line being where KEY was set (when the spec came from a file).
Error spec_error(const FabricSpec& s, std::string_view key, uint64_t value, std::string_view why) {
  int line = 0;
  for (const auto& [k, l] : s.key_lines) {
    if (k == key) line = l;
  }
  std::string where = s.source.empty() ? fmt::format("fabric {}", s.name) : s.source;
  if (line > 0) where += fmt::format(":{}", line);
  return make_error(fmt::format("{}: {}: {}: {}", where, key, value, why));
}

// Derives the shape, or says which key's count does not fit (ports over the radix, counts that do not
// divide). The keys are the YAML paths of configs/fabrics/README.md.
Result<FabricShape> derive_shape(const FabricSpec& s) {
  FabricShape d;
  const bool two = s.tiers == 2;
  const char* tier2_key = two ? "spine.count" : "aggregation.per_pod";
  if (s.tiers != 2 && s.tiers != 3)
    return spec_error(s, "tiers", static_cast<uint64_t>(s.tiers), "must be 2 or 3");
  struct Positive {
    const char* key;
    int64_t value;
  };
  for (Positive p :
       {Positive{"switch.radix", s.switch_radix}, Positive{"switch.port_gbps", s.port_speed_bps},
        Positive{"servers.count", s.servers}, Positive{"servers.nics_per_server", s.nics_per_server},
        Positive{"servers.nic_gbps", s.nic_speed_bps}, Positive{"tor.downlink_ports", s.tor_downlink_ports},
        Positive{"tor.downlink_split", s.tor_downlink_split},
        Positive{"tor.uplink_ports", s.tor_uplink_ports}, Positive{"aggregation.pods", s.pods},
        Positive{tier2_key, s.tier2_per_pod}}) {
    if (p.value <= 0) return spec_error(s, p.key, 0, "must be given and positive");
  }
  if (s.nics_per_server > 255)
    return spec_error(s, "servers.nics_per_server", s.nics_per_server, "at most 255");
  if (s.servers > 65536) return spec_error(s, "servers.count", s.servers, "at most 65536");
  if (s.tor_downlink_ports + s.tor_uplink_ports > s.switch_radix) {
    return spec_error(s, "tor.uplink_ports", s.tor_uplink_ports,
                      fmt::format("downlink ports {} + uplink ports {} exceed the switch radix {}",
                                  s.tor_downlink_ports, s.tor_uplink_ports, s.switch_radix));
  }
  if (s.port_speed_bps % s.tor_downlink_split != 0)
    return spec_error(s, "tor.downlink_split", s.tor_downlink_split, "does not divide the port speed");
  d.nics = s.servers * s.nics_per_server;
  d.tor_server_links = s.tor_downlink_ports * s.tor_downlink_split;
  d.server_link_bps = std::min(s.nic_speed_bps, s.port_speed_bps / s.tor_downlink_split);
  if (s.rail_optimized) {
    d.servers_per_tor_group = d.tor_server_links;
  } else {
    if (d.tor_server_links % s.nics_per_server != 0) {
      return spec_error(
          s, "servers.nics_per_server", s.nics_per_server,
          fmt::format("a ToR's {} server links do not take whole servers (rail_optimized: false "
                      "puts all of a server's NICs on one ToR)",
                      d.tor_server_links));
    }
    d.servers_per_tor_group = d.tor_server_links / s.nics_per_server;
  }
  if (s.servers % d.servers_per_tor_group != 0) {
    return spec_error(
        s, "servers.count", s.servers,
        fmt::format("not a multiple of the {} servers that share a ToR{}", d.servers_per_tor_group,
                    s.rail_optimized ? " set (one ToR per rail)" : ""));
  }
  d.tors = s.servers / d.servers_per_tor_group * (s.rail_optimized ? s.nics_per_server : 1);
  if (two && s.pods != 1) return spec_error(s, "aggregation.pods", s.pods, "a 2-tier fabric is one pod");
  if (d.tors % s.pods != 0)
    return spec_error(s, "aggregation.pods", s.pods, fmt::format("does not divide the {} ToRs", d.tors));
  d.tors_per_pod = d.tors / s.pods;
  if (s.tor_uplink_ports % s.tier2_per_pod != 0) {
    return spec_error(
        s, tier2_key, s.tier2_per_pod,
        fmt::format("does not divide the ToR's {} uplink ports (each ToR connects evenly to every "
                    "tier-2 switch of its pod)",
                    s.tor_uplink_ports));
  }
  d.tor_links_per_tier2 = s.tor_uplink_ports / s.tier2_per_pod;
  d.tier2_down_used = d.tors_per_pod * d.tor_links_per_tier2;
  d.tier2 = s.pods * s.tier2_per_pod;
  const uint32_t tier2_up = two ? 0 : s.aggregation_uplink_ports;
  if (d.tier2_down_used + tier2_up > s.switch_radix) {
    return spec_error(
        s, two ? tier2_key : "aggregation.uplink_ports", two ? s.tier2_per_pod : tier2_up,
        fmt::format("tier-2 switches need {} ports down ({} ToRs per pod x {} links) + {} up, more "
                    "than the switch radix {}",
                    d.tier2_down_used, d.tors_per_pod, d.tor_links_per_tier2, tier2_up, s.switch_radix));
  }
  if (two) return d;
  for (Positive p : {Positive{"aggregation.uplink_ports", s.aggregation_uplink_ports},
                     Positive{"core.planes", s.core_planes}, Positive{"core.per_plane", s.core_per_plane}}) {
    if (p.value <= 0) return spec_error(s, p.key, 0, "must be given and positive for 3 tiers");
  }
  if (s.tier2_per_pod % s.core_planes != 0) {
    return spec_error(s, "core.planes", s.core_planes,
                      fmt::format("does not divide the {} aggregation switches per pod", s.tier2_per_pod));
  }
  if (s.aggregation_uplink_ports % s.core_per_plane != 0) {
    return spec_error(
        s, "core.per_plane", s.core_per_plane,
        fmt::format("does not divide the aggregation switch's {} uplink ports", s.aggregation_uplink_ports));
  }
  d.tier2_per_plane_per_pod = s.tier2_per_pod / s.core_planes;
  d.agg_links_per_core = s.aggregation_uplink_ports / s.core_per_plane;
  d.core_down_used = s.pods * d.tier2_per_plane_per_pod * d.agg_links_per_core;
  if (d.core_down_used > s.switch_radix) {
    return spec_error(
        s, "core.per_plane", s.core_per_plane,
        fmt::format("core switches need {} ports ({} pods x {} aggregation switches x {} links), "
                    "more than the switch radix {}",
                    d.core_down_used, s.pods, d.tier2_per_plane_per_pod, d.agg_links_per_core,
                    s.switch_radix));
  }
  d.cores = s.core_planes * s.core_per_plane;
  return d;
}

}  // namespace

Result<Fabric> Fabric::build(FabricSpec spec) {
  Result<FabricShape> shape = derive_shape(spec);
  if (!shape) return shape.error();
  Fabric f;
  f.spec_ = std::move(spec);
  f.shape_ = *shape;
  const FabricSpec& s = f.spec_;
  const FabricShape& d = f.shape_;

  f.nodes_.reserve(d.nics + d.tors + d.tier2 + d.cores);
  for (uint32_t n = 0; n < d.nics; ++n) f.nodes_.push_back({Tier::nic, n, f.pod_of_tor(f.tor_of_nic(n))});
  for (uint32_t t = 0; t < d.tors; ++t) f.nodes_.push_back({Tier::tor, t, f.pod_of_tor(t)});
  for (uint32_t a = 0; a < d.tier2; ++a) f.nodes_.push_back({Tier::aggregation, a, a / s.tier2_per_pod});
  for (uint32_t c = 0; c < d.cores; ++c) f.nodes_.push_back({Tier::core, c, c / s.core_per_plane});

  // Links, in id order: server links, ToR uplinks, aggregation uplinks.
  f.links_.reserve(d.nics + uint64_t{d.tors} * s.tor_uplink_ports +
                   uint64_t{d.tier2} * s.aggregation_uplink_ports);
  for (uint32_t n = 0; n < d.nics; ++n) {
    uint32_t host = n / s.nics_per_server;
    uint32_t nic = n % s.nics_per_server;
    uint32_t port = s.rail_optimized ? host % d.servers_per_tor_group
                                     : (host % d.servers_per_tor_group) * s.nics_per_server + nic;
    f.links_.push_back({n, f.tor_node(f.tor_of_nic(n)), d.server_link_bps, 0, port});
  }
  for (uint32_t t = 0; t < d.tors; ++t) {
    uint32_t pod = f.pod_of_tor(t);
    for (uint32_t a = 0; a < s.tier2_per_pod; ++a) {
      for (uint32_t j = 0; j < d.tor_links_per_tier2; ++j) {
        uint32_t tor_port = d.tor_server_links + a * d.tor_links_per_tier2 + j;
        uint32_t agg_port = (t % d.tors_per_pod) * d.tor_links_per_tier2 + j;
        f.links_.push_back({f.tor_node(t), f.tier2_node(pod, a), s.port_speed_bps, tor_port, agg_port});
      }
    }
  }
  if (s.tiers == 3) {
    for (uint32_t pod = 0; pod < s.pods; ++pod) {
      for (uint32_t a = 0; a < s.tier2_per_pod; ++a) {
        uint32_t plane = a % s.core_planes;
        for (uint32_t c = 0; c < s.core_per_plane; ++c) {
          for (uint32_t j = 0; j < d.agg_links_per_core; ++j) {
            uint32_t agg_port = d.tier2_down_used + c * d.agg_links_per_core + j;
            uint32_t core_port =
                (pod * d.tier2_per_plane_per_pod + a / s.core_planes) * d.agg_links_per_core + j;
            f.links_.push_back(
                {f.tier2_node(pod, a), f.core_node(plane, c), s.port_speed_bps, agg_port, core_port});
          }
        }
      }
    }
  }

  // CSR adjacency, links listed in id order within each node.
  size_t n_nodes = f.nodes_.size();
  f.up_first_.assign(n_nodes + 1, 0);
  f.down_first_.assign(n_nodes + 1, 0);
  for (const Link& l : f.links_) {
    ++f.up_first_[l.lower + 1];
    ++f.down_first_[l.upper + 1];
  }
  for (size_t i = 0; i < n_nodes; ++i) {
    f.up_first_[i + 1] += f.up_first_[i];
    f.down_first_[i + 1] += f.down_first_[i];
  }
  f.up_ids_.resize(f.links_.size());
  f.down_ids_.resize(f.links_.size());
  std::vector<uint32_t> up_fill(f.up_first_.begin(), f.up_first_.end() - 1);
  std::vector<uint32_t> down_fill(f.down_first_.begin(), f.down_first_.end() - 1);
  for (LinkId id = 0; id < f.links_.size(); ++id) {
    f.up_ids_[up_fill[f.links_[id].lower]++] = id;
    f.down_ids_[down_fill[f.links_[id].upper]++] = id;
  }
  return f;
}

std::span<const LinkId> Fabric::up_links(NodeId node) const {
  return {up_ids_.data() + up_first_[node], up_first_[node + 1] - up_first_[node]};
}

std::span<const LinkId> Fabric::down_links(NodeId node) const {
  return {down_ids_.data() + down_first_[node], down_first_[node + 1] - down_first_[node]};
}

uint32_t Fabric::tor_of_nic(NodeId nic) const {
  uint32_t host = nic / spec_.nics_per_server;
  uint32_t group = host / shape_.servers_per_tor_group;
  return spec_.rail_optimized ? group * spec_.nics_per_server + nic % spec_.nics_per_server : group;
}

std::string_view Fabric::tier_name(Tier tier) const {
  switch (tier) {
    case Tier::nic:
      return "nic";
    case Tier::tor:
      return "tor";
    case Tier::aggregation:
      return spec_.tiers == 2 ? "spine" : "aggregation";
    case Tier::core:
      return "core";
  }
  return "?";
}

std::string Fabric::node_name(NodeId node) const {
  const Node& n = nodes_.at(node);
  switch (n.tier) {
    case Tier::nic:
      return fmt::format("h{}:n{}", n.index / spec_.nics_per_server, n.index % spec_.nics_per_server);
    case Tier::tor:
      return fmt::format("tor{}", n.index);
    case Tier::aggregation:
      return fmt::format("{}{}", spec_.tiers == 2 ? "spine" : "agg", n.index);
    case Tier::core:
      return fmt::format("core{}", n.index);
  }
  return "?";
}

Result<NodeId> parse_endpoint(const Fabric& fabric, std::string_view text) {
  auto bad = [&](std::string why) {
    return make_error(fmt::format("endpoint '{}': {} (expected hH:nN, host H < {}, NIC N < {}, e.g. h0:n3)",
                                  text, why, fabric.spec().servers, fabric.spec().nics_per_server));
  };
  size_t colon = text.find(':');
  if (text.size() < 5 || text[0] != 'h' || colon == std::string_view::npos || colon + 1 >= text.size() ||
      text[colon + 1] != 'n') {
    return bad("not of the form hH:nN");
  }
  auto number = [](std::string_view digits, uint32_t& out) {
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), out);
    return !digits.empty() && ec == std::errc() && end == digits.data() + digits.size();
  };
  uint32_t host = 0;
  uint32_t nic = 0;
  if (!number(text.substr(1, colon - 1), host) || !number(text.substr(colon + 2), nic))
    return bad("not numbers");
  if (host >= fabric.spec().servers) return bad("no such host");
  if (nic >= fabric.spec().nics_per_server) return bad("no such NIC");
  return fabric.nic_node(host, nic);
}

uint32_t nic_ipv4(const Fabric& fabric, NodeId nic) {
  uint32_t host = nic / fabric.spec().nics_per_server;
  uint32_t index = nic % fabric.spec().nics_per_server;
  return (10u << 24) | (index << 16) | (host & 0xFFFF);
}

FabricSummary summarize(const Fabric& fabric) {
  const FabricSpec& s = fabric.spec();
  const FabricShape& d = fabric.shape();
  FabricSummary out;
  out.gpus = d.nics;
  out.links = fabric.links().size();
  out.host_bandwidth_bps = static_cast<double>(d.nics) * static_cast<double>(d.server_link_bps);

  TierSummary tor{Tier::tor,
                  d.tors,
                  s.tor_downlink_ports + s.tor_uplink_ports,
                  d.tor_server_links,
                  d.server_link_bps,
                  s.tor_uplink_ports,
                  s.port_speed_bps,
                  0};
  double tor_down = static_cast<double>(d.servers_per_tor_group) *
                    (s.rail_optimized ? 1 : s.nics_per_server) * static_cast<double>(d.server_link_bps);
  tor.oversubscription =
      tor_down / (static_cast<double>(s.tor_uplink_ports) * static_cast<double>(s.port_speed_bps));
  out.tiers.push_back(tor);

  uint32_t agg_up = s.tiers == 3 ? s.aggregation_uplink_ports : 0;
  TierSummary t2{Tier::aggregation, d.tier2, d.tier2_down_used + agg_up,    d.tier2_down_used,
                 s.port_speed_bps,  agg_up,  agg_up ? s.port_speed_bps : 0, 0};
  if (agg_up) t2.oversubscription = static_cast<double>(d.tier2_down_used) / agg_up;
  out.tiers.push_back(t2);
  if (s.tiers == 3) {
    out.tiers.push_back({Tier::core, d.cores, d.core_down_used, d.core_down_used, s.port_speed_bps, 0, 0, 0});
  }

  double cut = out.host_bandwidth_bps;
  cut =
      std::min(cut, static_cast<double>(d.tors) * s.tor_uplink_ports * static_cast<double>(s.port_speed_bps));
  if (s.tiers == 3 && s.pods > 1) {
    cut = std::min(cut, static_cast<double>(d.tier2) * agg_up * static_cast<double>(s.port_speed_bps));
  }
  out.bisection_bandwidth_bps = cut / 2;
  return out;
}

}  // namespace megascale::topo
