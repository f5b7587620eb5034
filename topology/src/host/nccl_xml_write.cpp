// Writes the host as an NCCL topology XML (format and choices: nccl_xml.h). tinyxml2's printer writes
// the elements and escapes the values.
#include <fmt/format.h>
#include <tinyxml2.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>

#include "megascale/topology/nccl_xml.h"

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

// NCCL's own dumps indent by two spaces (tinyxml2's printer, by four).
class Printer : public tinyxml2::XMLPrinter {
 public:
  // As tinyxml2's PushAttribute, but a control character is written as a character reference: written
  // raw, a CR would read back as LF and a tab or newline could be normalised by another reader.
  void attribute(const char* name, const std::string& value) {
    Putc(' ');
    Write(name);
    Write("=\"");
    for (char c : value) {
      switch (c) {
        case '&': Write("&amp;"); break;
        case '<': Write("&lt;"); break;
        case '>': Write("&gt;"); break;
        case '"': Write("&quot;"); break;
        case '\'': Write("&apos;"); break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            Write(fmt::format("&#{};", static_cast<int>(c)).c_str());
          } else {
            Putc(c);
          }
      }
    }
    Putc('"');
  }

 protected:
  void PrintSpace(int depth) override {
    for (int i = 0; i < depth; ++i) Write("  ");
  }
};

void pci_attributes(Printer& out, const PciDevice& pci) {
  out.attribute("busid", pci.bus_id);
  out.attribute("class", fmt::format("0x{:06x}", pci.class_code));
  if (pci.vendor_id != 0) {
    out.attribute("vendor", fmt::format("0x{:04x}", pci.vendor_id));
    out.attribute("device", fmt::format("0x{:04x}", pci.device_id));
    out.attribute("subsystem_vendor", fmt::format("0x{:04x}", pci.subsystem_vendor_id));
    out.attribute("subsystem_device", fmt::format("0x{:04x}", pci.subsystem_device_id));
  }
  // The kernel's spelling since 5.7, which NCCL's table knows (topo.cc kvDictPciGen). NCCL requires
  // both attributes on every <pci> it turns into a node (ncclTopoAddPci fails with "Attribute link_width
  // of node pci not found", seen on a GPU host whose virtio NIC reports no link). Unknown values are
  // written as NCCL's own sysfs reader leaves them: width 0 (NCCL takes x16) and an empty speed (NCCL
  // takes its default rate).
  if (pci.link_gts > 0 && pci.link_width > 0) {
    // PCIe's rates (2.5 to 64.0) as the kernel writes them; any other value in full, so that it reads
    // back the same.
    std::string gts = fmt::format("{:.1f}", pci.link_gts);
    if (std::strtod(gts.c_str(), nullptr) != pci.link_gts) gts = fmt::format("{}", pci.link_gts);
    out.attribute("link_speed", gts + " GT/s PCIe");
    out.attribute("link_width", std::to_string(pci.link_width));
  } else {
    out.attribute("link_speed", "");
    out.attribute("link_width", "0");
  }
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
    // Devices of unknown NUMA node on a host of several (numa_of): every NUMA node is written, empty
    // where it holds no device, so that reading the file back makes the same choice.
    if (std::find(numas.begin(), numas.end(), -1) != numas.end()) {
      for (const NumaNode& node : host_.numa_nodes) numas.push_back(node.os_index);
    }
    std::sort(numas.begin(), numas.end());
    numas.erase(std::unique(numas.begin(), numas.end()), numas.end());

    out_.OpenElement("system");
    out_.attribute("version", "1");
    for (int numa : numas) {
      out_.OpenElement("cpu");
      out_.attribute("numaid", std::to_string(numa));
      if (const NumaNode* node = host_.find_numa(numa)) out_.attribute("affinity", affinity_mask(node->cpus));
      if (!host_.arch.empty()) out_.attribute("arch", nccl_arch(host_.arch));
      if (!host_.cpu_vendor.empty()) out_.attribute("vendor", host_.cpu_vendor);
      if (host_.cpu_family >= 0) out_.attribute("familyid", std::to_string(host_.cpu_family));
      if (host_.cpu_model_number >= 0) out_.attribute("modelid", std::to_string(host_.cpu_model_number));
      emit_children(fmt::format("cpu:{}", numa));
      if (auto it = cpu_nics_.find(numa); it != cpu_nics_.end()) {
        out_.OpenElement("nic");
        for (size_t n : it->second) emit_net(n);
        out_.CloseElement();
      }
      out_.CloseElement();
    }
    out_.CloseElement();
    return std::string(out_.CStr(), static_cast<size_t>(out_.CStrSize() - 1));
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

  void emit_children(const std::string& parent) {
    auto it = children_.find(parent);
    if (it == children_.end()) return;
    auto list = it->second;
    std::stable_sort(list.begin(), list.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [bus_id, items] : list) {
      const Item& first = items.front();
      out_.OpenElement("pci");
      if (first.kind == Item::kSwitch) {
        pci_attributes(out_, switch_pci(bus_id));
        emit_children(bus_id);
      } else if (first.kind == Item::kGpu) {
        pci_attributes(out_, host_.gpus[first.index].pci);
      } else {
        pci_attributes(out_, host_.nics[first.index].pci);
        out_.OpenElement("nic");
        for (const Item& item : items) emit_net(item.index);
        out_.CloseElement();
      }
      out_.CloseElement();
    }
  }

  void emit_net(size_t n) {
    const Nic& nic = host_.nics[n];
    out_.OpenElement("net");
    out_.attribute("name", nic.name());
    out_.attribute("dev", std::to_string(n));
    if (nic.speed_mbps > 0) out_.attribute("speed", std::to_string(nic.speed_mbps));
    out_.attribute("port", std::to_string(nic.port));
    if (nic.node_guid != 0) out_.attribute("guid", fmt::format("0x{:x}", nic.node_guid));
    out_.CloseElement();
  }

  const HostTopology& host_;
  Printer out_;
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
