// MEGASCALE_WIRE and the choice of verbs ports (see wire_choice.h).
#include "wire_choice.h"

#include <cstdio>

namespace megascale::nccl {

namespace verbs = wire::verbs;

Result<WireDecision> decide_wire(WireKind requested, const std::vector<verbs::DeviceListing>& listing,
                                 const verbs::GidSelector& selector, std::string_view root) {
  WireDecision d;
  if (requested == WireKind::kUdp) {
    d.kind = WireKind::kUdp;
    d.reason = "udp (MEGASCALE_WIRE=udp)";
    return d;
  }
  std::string why;  // per port passed over: "rxe0 port 1: not ACTIVE (1: DOWN)"
  auto passed_over = [&why](const std::string& what) { why += (why.empty() ? "" : "; ") + what; };
  for (const verbs::DeviceListing& dev : listing) {
    if (dev.info.ports.empty()) passed_over(dev.info.name + ": no ports");
    for (size_t i = 0; i < dev.info.ports.size(); ++i) {
      const verbs::PortInfo& p = dev.info.ports[i];
      const std::string name = dev.info.name + " port " + std::to_string(p.port);
      if (!p.active) {
        passed_over(name + ": not ACTIVE (" + (p.state.empty() ? "state unreadable" : p.state) + ")");
        continue;
      }
      if (p.link_layer != "Ethernet") {
        passed_over(name + ": link layer " + (p.link_layer.empty() ? "unknown" : p.link_layer) +
                    ", not Ethernet (RoCE)");
        continue;
      }
      auto gid = verbs::select_gid(dev.info, p, selector);
      if (!gid) {
        passed_over(name + ": " + gid.error().message);
        continue;
      }
      VerbsPortChoice c;
      c.device = dev.info.name;
      c.port = p.port;
      c.gid = *gid;
      c.rate_gbps = p.rate_gbps;
      c.active_mtu_bytes = p.active_mtu_bytes;
      c.pci_path = dev.pci_path;
      if (i < dev.ports.size()) c.netdev = dev.ports[i].netdev;
      d.ports.push_back(std::move(c));
    }
  }
  if (listing.empty()) why = "no RDMA device under " + std::string(root);
  if (d.ports.empty()) {
    if (is_verbs(requested)) {
      return make_error("MEGASCALE_WIRE=" + std::string(to_string(requested)) +
                        ": no usable RDMA port (ACTIVE, RoCE, with a GID matching MEGASCALE_IB_*): " + why);
    }
    d.kind = WireKind::kUdp;
    d.reason = "udp (MEGASCALE_WIRE=auto: " + why + ")";
    return d;
  }
  d.kind = requested == WireKind::kAuto ? WireKind::kVerbsUd : requested;
  d.reason = std::string(to_string(d.kind)) + " (MEGASCALE_WIRE=" + std::string(to_string(requested)) + ": " +
             std::to_string(d.ports.size()) + " usable RDMA port(s)" +
             (why.empty() ? "" : "; passed over: " + why) + ")";
  return d;
}

}  // namespace megascale::nccl
