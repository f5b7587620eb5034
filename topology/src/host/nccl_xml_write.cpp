// Writes the host as an NCCL topology XML (format and choices: nccl_xml.h).
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>

#include "megascale/topology/nccl_xml.h"
#include "xml_lite.h"

namespace megascale::topo::host {
namespace {

// A CPU set as sysfs and NCCL write it: 32-bit hex words, most significant first, comma-separated.
std::string affinity_mask(const std::vector<int>& cpus) {
  if (cpus.empty()) return "00000000";
  const int top = *std::max_element(cpus.begin(), cpus.end());
  std::vector<uint32_t> words(static_cast<size_t>(top / 32 + 1), 0);
  for (int c : cpus) words[static_cast<size_t>(c / 32)] |= uint32_t{1} << (c % 32);
  std::string out;
  for (size_t i = words.size(); i-- > 0;) {
    if (!out.empty()) out += ',';
    out += fmt::format("{:08x}", words[i]);
  }
  return out;
}

std::string pci_attributes(const PciDevice& pci) {
  std::string out = fmt::format(R"(busid="{}" class="0x{:06x}")", pci.bus_id, pci.class_code);
  if (pci.vendor_id != 0) {
    out += fmt::format(
        R"( vendor="0x{:04x}" device="0x{:04x}" subsystem_vendor="0x{:04x}" subsystem_device="0x{:04x}")",
        pci.vendor_id, pci.device_id, pci.subsystem_vendor_id, pci.subsystem_device_id);
  }
  // The kernel's spelling since 5.7, which NCCL's table knows (topo.cc kvDictPciGen). NCCL requires
  // both attributes on every <pci> it turns into a node (ncclTopoAddPci fails with "Attribute link_width
  // of node pci not found", seen on a GPU host whose virtio NIC reports no link). Unknown values are
  // written as NCCL's own sysfs reader leaves them: width 0 (NCCL takes x16) and an empty speed (NCCL
  // takes its default rate).
  if (pci.link_gts > 0 && pci.link_width > 0) {
    out += fmt::format(R"( link_speed="{:.1f} GT/s PCIe" link_width="{}")", pci.link_gts, pci.link_width);
  } else {
    out += R"( link_speed="" link_width="0")";
  }
  return out;
}

class Writer {
 public:
  explicit Writer(const HostTopology& host) : host_(host) {}

  std::string run() {
    for (size_t g = 0; g < host_.gpus.size(); ++g) place(host_.gpus[g].pci, {Item::kGpu, g});
    for (size_t n = 0; n < host_.nics.size(); ++n) {
      const Nic& nic = host_.nics[n];
      if (nic.pci.bus_id.empty()) {
        cpu_nics_[numa_of(nic.pci)].push_back(n);
      } else {
        place(nic.pci, {Item::kNic, n});
      }
    }
    std::vector<int> numas;
    for (const auto& [key, items] : children_) {
      if (key.rfind("cpu:", 0) == 0) numas.push_back(std::stoi(key.substr(4)));
    }
    for (const auto& [numa, nics] : cpu_nics_) numas.push_back(numa);
    std::sort(numas.begin(), numas.end());
    numas.erase(std::unique(numas.begin(), numas.end()), numas.end());

    out_ = "<system version=\"1\">\n";
    for (int numa : numas) {
      out_ += fmt::format("  <cpu numaid=\"{}\"", numa);
      if (const NumaNode* node = host_.find_numa(numa))
        out_ += fmt::format(" affinity=\"{}\"", affinity_mask(node->cpus));
      if (!host_.arch.empty()) out_ += fmt::format(" arch=\"{}\"", xml::escape(nccl_arch(host_.arch)));
      if (!host_.cpu_vendor.empty()) out_ += fmt::format(" vendor=\"{}\"", xml::escape(host_.cpu_vendor));
      if (host_.cpu_family >= 0) out_ += fmt::format(" familyid=\"{}\"", host_.cpu_family);
      if (host_.cpu_model_number >= 0) out_ += fmt::format(" modelid=\"{}\"", host_.cpu_model_number);
      out_ += ">\n";
      emit_children(fmt::format("cpu:{}", numa), 2);
      if (auto it = cpu_nics_.find(numa); it != cpu_nics_.end()) {
        out_ += "    <nic>\n";
        for (size_t n : it->second) emit_net(n, 3);
        out_ += "    </nic>\n";
      }
      out_ += "  </cpu>\n";
    }
    out_ += "</system>\n";
    return out_;
  }

 private:
  struct Item {
    enum Kind { kSwitch, kGpu, kNic } kind;
    size_t index;  // into gpus or nics; for a switch, into switch_ids_
  };

  // NCCL's arch names (topo.cc kvDictCpuArch): x86_64, arm64, ppc64.
  static std::string nccl_arch(const std::string& arch) {
    if (arch == "aarch64") return "arm64";
    if (arch == "ppc64le") return "ppc64";
    return arch;
  }

  int numa_of(const PciDevice& pci) const {
    if (pci.numa_node >= 0) return pci.numa_node;
    return host_.numa_nodes.size() == 1 ? host_.numa_nodes.front().os_index : -1;
  }

  // Hangs a device under its nearest switch, and each switch above it under the next, the top one
  // under the device's <cpu>.
  void place(const PciDevice& pci, Item item) {
    std::string parent = pci.switches.empty() ? fmt::format("cpu:{}", numa_of(pci)) : pci.switches.front();
    add_child(parent, item, pci.bus_id);
    for (size_t i = 0; i < pci.switches.size(); ++i) {
      const std::string& id = pci.switches[i];
      if (placed_switches_.count(id) != 0) break;  // the rest of the chain is placed already
      placed_switches_[id] = switch_ids_.size();
      switch_ids_.push_back(id);
      const std::string up =
          i + 1 < pci.switches.size() ? pci.switches[i + 1] : fmt::format("cpu:{}", numa_of(pci));
      add_child(up, {Item::kSwitch, placed_switches_[id]}, id);
    }
  }

  void add_child(const std::string& parent, Item item, const std::string& bus_id) {
    auto& list = children_[parent];
    // Several NICs on one PCI function (ports of one device) share a <pci>.
    if (item.kind == Item::kNic) {
      for (auto& [id, items] : list) {
        if (id == bus_id && items.front().kind == Item::kNic) {
          items.push_back(item);
          return;
        }
      }
    }
    list.push_back({bus_id, {item}});
  }

  PciDevice switch_pci(const std::string& bus_id) const {
    for (const PcieSwitch& s : host_.switches) {
      if (s.pci.bus_id == bus_id) return s.pci;
    }
    PciDevice pci;  // a switch the model does not describe: NCCL needs only busid and class
    pci.bus_id = bus_id;
    pci.class_code = 0x060400;
    return pci;
  }

  void emit_children(const std::string& parent, int depth) {
    auto it = children_.find(parent);
    if (it == children_.end()) return;
    auto list = it->second;
    std::sort(list.begin(), list.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    const std::string pad(static_cast<size_t>(depth) * 2, ' ');
    for (const auto& [bus_id, items] : list) {
      const Item& first = items.front();
      if (first.kind == Item::kSwitch) {
        out_ += fmt::format("{}<pci {}>\n", pad, pci_attributes(switch_pci(bus_id)));
        emit_children(bus_id, depth + 1);
        out_ += fmt::format("{}</pci>\n", pad);
      } else if (first.kind == Item::kGpu) {
        out_ += fmt::format("{}<pci {}/>\n", pad, pci_attributes(host_.gpus[first.index].pci));
      } else {
        out_ += fmt::format("{}<pci {}>\n{}  <nic>\n", pad, pci_attributes(host_.nics[first.index].pci), pad);
        for (const Item& item : items) emit_net(item.index, depth + 2);
        out_ += fmt::format("{}  </nic>\n{}</pci>\n", pad, pad);
      }
    }
  }

  void emit_net(size_t n, int depth) {
    const Nic& nic = host_.nics[n];
    out_ += fmt::format("{}<net name=\"{}\" dev=\"{}\"", std::string(static_cast<size_t>(depth) * 2, ' '),
                        xml::escape(nic.name()), n);
    if (nic.speed_mbps > 0) out_ += fmt::format(" speed=\"{}\"", nic.speed_mbps);
    out_ += fmt::format(" port=\"{}\"", nic.port);
    if (nic.node_guid != 0) out_ += fmt::format(" guid=\"0x{:x}\"", nic.node_guid);
    out_ += "/>\n";
  }

  const HostTopology& host_;
  std::string out_;
  std::map<std::string, std::vector<std::pair<std::string, std::vector<Item>>>> children_;
  std::map<std::string, size_t> placed_switches_;
  std::vector<std::string> switch_ids_;
  std::map<int, std::vector<size_t>> cpu_nics_;
};

}  // namespace

std::string nccl_topo_xml(const HostTopology& host) {
  return Writer(host).run();
}

Status write_nccl_topo_xml(const HostTopology& host, const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return make_error(fmt::format("{}: cannot open for writing", path));
  out << nccl_topo_xml(host);
  out.close();
  if (!out) return make_error(fmt::format("{}: write failed", path));
  return {};
}

}  // namespace megascale::topo::host
