// `megascale topo`'s RDMA section (topo_rdma.h): devices, ports, GIDs and link state read by the verbs
// wire's own discovery (collectives/wire/verbs gid.h), and the GID its selection picks per device.
#include <fmt/format.h>

#include <filesystem>
#include <string_view>

#include "topo_rdma.h"

#ifdef MEGASCALE_HAVE_VERBS
#include "megascale/wire/verbs/gid.h"
#endif

namespace megascale::cli {
namespace {

using nlohmann::json;

#ifdef MEGASCALE_HAVE_VERBS
using namespace megascale::wire::verbs;

// "mlx5_0" -> "mlx5", "rxe0" -> "rxe", "bnxt_re1" -> "bnxt_re": the kernel names a device after its
// driver and a number (rxe and siw devices by convention).
std::string device_kind(std::string_view name) {
  while (!name.empty() && name.back() >= '0' && name.back() <= '9') name.remove_suffix(1);
  while (!name.empty() && name.back() == '_') name.remove_suffix(1);
  return std::string(name);
}

// The last component of a PCI path when it is a bus id ("0000:3b:00.0"); "" otherwise.
std::string pci_bus_id(const std::string& pci_path) {
  const std::string last = std::filesystem::path(pci_path).filename().string();
  const bool looks = last.size() == 12 && last[4] == ':' && last[7] == ':' && last[10] == '.';
  return looks ? last : "";
}

std::string speed_text(double gbps) {
  return gbps > 0 ? fmt::format("{:g} Gb/s", gbps) : "-";
}

std::string or_dash(std::string_view s) {
  return s.empty() ? "-" : std::string(s);
}

// Why `select_gid` took `e`: the rule that made it first, in the order select_gid ranks.
std::string why_chosen(const GidEntry& e, const GidSelector& sel) {
  if (sel.index) return fmt::format("MEGASCALE_IB_GID_INDEX={}", *sel.index);
  const int wanted = sel.roce_version == GidType::kRoceV1 ? 1 : 2;
  std::string why = e.type == sel.roce_version
                        ? fmt::format("RoCE v{} as MEGASCALE_IB_ROCE_VERSION_NUM={} asks", wanted, wanted)
                        : fmt::format("{}: no RoCE v{} GID fits", to_string(e.type), wanted);
  why += sel.ipv6 ? ", IPv6 (AF_INET6)" : ", IPv4 (AF_INET)";
  if (sel.range_prefix_len > 0) why += ", in MEGASCALE_IB_ADDR_RANGE";
  why += gid_is_link_local(e.gid) ? ", link-local: no global address of this version fits"
                                  : ", a global address";
  return why + ", lowest such index";
}

struct Choice {
  json doc;
  std::string line;  // the human line after "verbs wire: "
  int port = -1;
  int gid_index = -1;
};

Choice choose(const DeviceInfo& dev, const Result<GidSelector>& sel) {
  Choice c;
  c.doc = {{"usable", false}, {"port", 0}, {"gid_index", -1}, {"gid", ""},
           {"type", ""},      {"why", ""}, {"error", ""}};
  if (!sel) {
    c.doc["error"] = sel.error().message;
    c.line = "no choice: " + sel.error().message;
    return c;
  }
  Result<const PortInfo*> port = select_port(dev, 0);
  if (!port) {
    c.doc["error"] = port.error().message;
    c.line = "unusable: " + port.error().message;
    return c;
  }
  Result<GidEntry> gid = select_gid(dev, **port, *sel);
  if (!gid) {
    c.doc["port"] = (*port)->port;
    c.doc["error"] = gid.error().message;
    c.line = "unusable: " + gid.error().message;
    return c;
  }
  const std::string why = why_chosen(*gid, *sel);
  c.port = static_cast<int>((*port)->port);
  c.gid_index = static_cast<int>(gid->index);
  c.doc.update({{"usable", true},
                {"port", (*port)->port},
                {"gid_index", gid->index},
                {"gid", gid_to_string(gid->gid)},
                {"type", to_string(gid->type)},
                {"why", why}});
  c.line = fmt::format("port {} GID {} ({}, {}): {}", (*port)->port, gid->index, gid_to_string(gid->gid),
                       to_string(gid->type), why);
  return c;
}

json selection_json(const Result<GidSelector>& sel, const EnvLookup& getenv) {
  const char* range = getenv("MEGASCALE_IB_ADDR_RANGE");
  const GidSelector s = sel ? *sel : GidSelector{};
  return {{"gid_index", s.index ? static_cast<int64_t>(*s.index) : -1},
          {"addr_family", s.ipv6 ? "AF_INET6" : "AF_INET"},
          {"addr_range", sel && range != nullptr ? range : ""},
          {"roce_version", s.roce_version == GidType::kRoceV1 ? 1 : 2},
          {"error", sel ? "" : sel.error().message}};
}

void print_problems(std::FILE* out, const char* indent, const std::vector<std::string>& problems) {
  for (const std::string& p : problems) fmt::print(out, "{}! {}\n", indent, p);
}
#endif

}  // namespace

Result<json> print_rdma(std::FILE* out, const std::string& root,
                        const EnvLookup& getenv) {
  json doc = {{"root", root}, {"note", ""}, {"devices", json::array()}};
#ifdef MEGASCALE_HAVE_VERBS
  Result<std::vector<DeviceListing>> devs = list_devices(root);
  if (!devs) return make_error(ErrorCode::kSystem, "RDMA devices: " + devs.error().message);
  const Result<GidSelector> sel = gid_selector_from_env(getenv);
  doc["gid_selection"] = selection_json(sel, getenv);
  if (devs->empty()) {
    std::error_code ec;
    const std::string note = fmt::format("no RDMA devices (no {})",
                                         std::filesystem::exists(root, ec) ? "device under " + root : root);
    fmt::print(out, "\n{}\n", note);
    doc["note"] = note;
    return doc;
  }
  const json& gs = doc["gid_selection"];
  fmt::print(out, "\nRDMA devices ({}): {}\n", root, devs->size());
  if (sel) {
    fmt::print(out,
               "  verbs wire's GID choice: index {}, {}, range {}, RoCE v{} (MEGASCALE_IB_GID_INDEX, "
               "_ADDR_FAMILY, _ADDR_RANGE, _ROCE_VERSION_NUM)\n",
               sel->index ? std::to_string(*sel->index) : "auto", gs["addr_family"].get<std::string>(),
               gs["addr_range"].get<std::string>().empty() ? "any" : gs["addr_range"].get<std::string>(),
               gs["roce_version"].get<int>());
  } else {
    fmt::print(out, "  verbs wire's GID choice: none, {}\n", sel.error().message);
  }
  for (const DeviceListing& d : *devs) {
    const std::string bus = pci_bus_id(d.pci_path);
    std::string where = !d.pci_path.empty() ? "PCI " + (bus.empty() ? d.pci_path : bus)
                        : !d.parent.empty() ? "software, on " + d.parent
                                            : "no PCI device";
    fmt::print(out, "\n{}: {}{}, node GUID {}, {}\n", d.info.name, device_kind(d.info.name),
               d.driver.empty() ? "" : " (" + d.driver + ")", or_dash(d.node_guid), where);
    print_problems(out, "  ", d.problems);
    const Choice choice = choose(d.info, sel);
    json ports = json::array();
    for (size_t i = 0; i < d.info.ports.size(); ++i) {
      const PortInfo& p = d.info.ports[i];
      const PortListing& l = d.ports[i];
      fmt::print(out, "  port {}: {}, {}, {}, MTU {}, {}, netdev {}\n", p.port, or_dash(state_name(p.state)),
                 or_dash(state_name(l.phys_state)), or_dash(p.link_layer),
                 p.active_mtu_bytes == 0 ? "-" : std::to_string(p.active_mtu_bytes), speed_text(p.rate_gbps),
                 or_dash(l.netdev));
      print_problems(out, "    ", l.problems);
      json gids = json::array();
      if (!p.gids.empty()) fmt::print(out, "    {:<5} {:<8} {:<40} {}\n", "GID", "type", "address", "netdev");
      for (const GidEntry& g : p.gids) {
        const bool picked =
            static_cast<int>(p.port) == choice.port && static_cast<int>(g.index) == choice.gid_index;
        fmt::print(out, "    {:<5} {:<8} {:<40} {}{}\n", g.index, to_string(g.type), gid_to_string(g.gid),
                   or_dash(g.ndev), picked ? "  <- verbs wire" : "");
        gids.push_back({{"index", g.index},
                        {"type", to_string(g.type)},
                        {"gid", gid_to_string(g.gid)},
                        {"netdev", g.ndev},
                        {"ipv4", gid_is_ipv4(g.gid)},
                        {"link_local", gid_is_link_local(g.gid)}});
      }
      if (p.gids.empty()) fmt::print(out, "    (no GIDs)\n");
      ports.push_back({{"port", p.port},
                       {"state", std::string(state_name(p.state))},
                       {"active", p.active},
                       {"phys_state", std::string(state_name(l.phys_state))},
                       {"link_layer", p.link_layer},
                       {"active_mtu_bytes", p.active_mtu_bytes},
                       {"rate", l.rate},
                       {"speed_gbps", p.rate_gbps},
                       {"netdev", l.netdev},
                       {"gids", gids},
                       {"problems", l.problems}});
    }
    if (d.info.ports.empty()) fmt::print(out, "  (no ports)\n");
    fmt::print(out, "  verbs wire: {}\n", choice.line);
    doc["devices"].push_back({{"name", d.info.name},
                              {"kind", device_kind(d.info.name)},
                              {"driver", d.driver},
                              {"node_guid", d.node_guid},
                              {"pci_path", d.pci_path},
                              {"pci_bus_id", bus},
                              {"parent", d.parent},
                              {"ports", ports},
                              {"verbs_choice", choice.doc},
                              {"problems", d.problems}});
  }
  return doc;
#else
  (void)getenv;
  const std::string note =
      "RDMA devices not listed: megascale was built without the verbs wire (libibverbs-dev not found)";
  fmt::print(out, "\n{}\n", note);
  doc["note"] = note;
  return doc;
#endif
}

}  // namespace megascale::cli
