// MEGASCALE_WIRE and the choice of verbs ports (see wire_choice.h).
#include "wire_choice.h"

#include <sys/socket.h>

#include <cstdio>

#include "megascale/wire/verbs/ptr_support.h"

namespace megascale::nccl {

namespace verbs = wire::verbs;

static_assert(verbs::kPtrHost == abi::kPtrHost && verbs::kPtrCuda == abi::kPtrCuda &&
                  verbs::kPtrDmabuf == abi::kPtrDmabuf,
              "the verbs wire's ptrSupport bits are NCCL's");

namespace {

// MEGASCALE_GDR_COPY's text for the reason: "" when off.
std::string gdr_copy_text(GdrCopyMode m) {
  switch (m) {
    case GdrCopyMode::kCuda:
      return "1";
    case GdrCopyMode::kEmulate:
      return "emulate";
    case GdrCopyMode::kOff:
      break;
  }
  return "";
}

}  // namespace

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

std::vector<Device> verbs_devices(const WireDecision& decision, const PluginConfig& config,
                                  const DmabufProbe& probe) {
  std::vector<Device> out;
  for (const VerbsPortChoice& p : decision.ports) {
    Device d;
    d.wire = decision.kind;
    d.rdma_port = p.port;
    d.gid_index = p.gid.index;
    d.iface.name = p.device;
    d.iface.family = AF_INET6;
    d.iface.address = verbs::gid_to_string(p.gid.gid);
    d.iface.mtu_bytes = static_cast<int>(p.active_mtu_bytes);
    d.iface.speed_mbps = p.rate_gbps > 0 ? static_cast<int>(p.rate_gbps * 1000) : -1;
    d.iface.pci_path = p.pci_path;
    d.netdev = p.netdev;
    // UD carries one segment per datagram: the wire lowers a segment larger than the port's MTU allows.
    d.segment_bytes = config.segment_bytes ? config.segment_bytes : 4096;
    // The UD receive path lands in bounce buffers and RC's in its ring, both copied out by the CPU.
    const verbs::PtrSupport ptr = verbs::decide_ptr_support(
        {.gdr_copy = gdr_copy_text(config.gdr_copy), .direct_placement = false, .nic_dmabuf = probe(p)});
    d.ptr_support = ptr.bits;
    d.ptr_reason = ptr.reason;
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace megascale::nccl
