// Host discovery through hwloc (open-mpi/hwloc 2.x, include/hwloc.h): the live machine or an XML export,
// walked once into the plain HostTopology model. hwloc filters I/O objects out unless asked, so both
// paths keep the important ones (bridges that lead somewhere, GPUs, NICs, their OS devices).
#include <fmt/format.h>
#include <hwloc.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <map>
#include <string_view>

#include "megascale/topology/host.h"
#include "sysfs.h"

namespace megascale::topo::host {
namespace {

constexpr uint16_t kVendorNvidia = 0x10de;
using PcidevAttr = hwloc_obj_attr_u::hwloc_pcidev_attr_s;

struct TopologyHandle {
  hwloc_topology_t topology = nullptr;
  TopologyHandle() = default;
  TopologyHandle(const TopologyHandle&) = delete;
  TopologyHandle& operator=(const TopologyHandle&) = delete;
  ~TopologyHandle() {
    if (topology != nullptr) hwloc_topology_destroy(topology);
  }
};

std::string info(hwloc_obj_t obj, const char* name) {
  const char* value = hwloc_obj_get_info_by_name(obj, name);
  std::string out = value == nullptr ? "" : value;
  while (!out.empty() && out.back() == ' ') out.pop_back();  // hwloc keeps CPUID's padding
  return out;
}

int info_int(hwloc_obj_t obj, const char* name) {
  const std::string text = info(obj, name);
  int value = -1;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return (ec == std::errc() && ptr == text.data() + text.size()) ? value : -1;
}

std::vector<int> bitmap_members(hwloc_const_bitmap_t set) {
  std::vector<int> out;
  if (set == nullptr) return out;
  for (int i = hwloc_bitmap_first(set); i >= 0; i = hwloc_bitmap_next(set, i)) out.push_back(i);
  return out;
}

// The NUMA node an I/O object is local to: its first non-I/O ancestor's, when that is one node.
int numa_of(hwloc_topology_t topology, hwloc_obj_t io) {
  hwloc_obj_t anchor = hwloc_get_non_io_ancestor_obj(topology, io);
  if (anchor == nullptr || anchor->nodeset == nullptr || hwloc_bitmap_weight(anchor->nodeset) != 1) return -1;
  return hwloc_bitmap_first(anchor->nodeset);
}

std::string bus_id_of(const PcidevAttr& pci) {
  return fmt::format("{:04x}:{:02x}:{:02x}.{:x}", pci.domain, pci.bus, pci.dev, pci.func);
}

bool is_host_bridge(hwloc_obj_t obj) {
  return obj->type == HWLOC_OBJ_BRIDGE && obj->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST;
}

// A PCIe switch is seen through its upstream port: a PCI-to-PCI bridge at an even number of bridges
// below the host bridge (host bridge -> root port -> upstream port -> downstream ports -> ...). This is
// the bridge NCCL keeps when it walks sysfs two levels at a time (NCCL src/graph/xml.cc).
bool is_switch_upstream_port(hwloc_obj_t bridge) {
  if (bridge->type != HWLOC_OBJ_BRIDGE || is_host_bridge(bridge)) return false;
  int level = 0;
  for (hwloc_obj_t p = bridge->parent; p != nullptr && p->type == HWLOC_OBJ_BRIDGE; p = p->parent) ++level;
  return level >= 2 && level % 2 == 0;
}

class Walker {
 public:
  Walker(hwloc_topology_t topology, const DiscoveryOptions& options)
      : topology_(topology), options_(options) {}

  HostTopology run() {
    HostTopology host;
    describe_machine(host);
    for (hwloc_obj_t b = hwloc_get_next_bridge(topology_, nullptr); b != nullptr;
         b = hwloc_get_next_bridge(topology_, b)) {
      if (is_host_bridge(b)) {
        const auto& down = b->attr->bridge.downstream.pci;
        host_bridges_[b] = static_cast<int>(host.host_bridges.size());
        host.host_bridges.push_back(
            {fmt::format("{:04x}:[{:02x}-{:02x}]", down.domain, down.secondary_bus, down.subordinate_bus),
             numa_of(topology_, b)});
      }
    }
    for (hwloc_obj_t b = hwloc_get_next_bridge(topology_, nullptr); b != nullptr;
         b = hwloc_get_next_bridge(topology_, b)) {
      if (is_switch_upstream_port(b)) host.switches.push_back({pci_of(b, b->attr->bridge.upstream.pci)});
    }
    for (hwloc_obj_t d = hwloc_get_next_pcidev(topology_, nullptr); d != nullptr;
         d = hwloc_get_next_pcidev(topology_, d)) {
      add_device(host, d);
    }
    order(host);
    return host;
  }

 private:
  void describe_machine(HostTopology& host) {
    hwloc_obj_t root = hwloc_get_root_obj(topology_);
    host.hostname = info(root, "HostName");
    host.arch = info(root, "Architecture");
    hwloc_obj_t package = hwloc_get_next_obj_by_type(topology_, HWLOC_OBJ_PACKAGE, nullptr);
    if (package != nullptr) {
      host.cpu_vendor = info(package, "CPUVendor");
      host.cpu_model = info(package, "CPUModel");
      host.cpu_family = info_int(package, "CPUFamilyNumber");
      host.cpu_model_number = info_int(package, "CPUModelNumber");
    }
    for (hwloc_obj_t n = hwloc_get_next_obj_by_type(topology_, HWLOC_OBJ_NUMANODE, nullptr); n != nullptr;
         n = hwloc_get_next_obj_by_type(topology_, HWLOC_OBJ_NUMANODE, n)) {
      hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(topology_, HWLOC_OBJ_PACKAGE, n);
      host.numa_nodes.push_back({static_cast<int>(n->os_index),
                                 pkg == nullptr ? -1 : static_cast<int>(pkg->os_index),
                                 bitmap_members(n->cpuset)});
    }
    std::sort(host.numa_nodes.begin(), host.numa_nodes.end(),
              [](const NumaNode& a, const NumaNode& b) { return a.os_index < b.os_index; });
  }

  PciDevice pci_of(hwloc_obj_t obj, const PcidevAttr& attr) {
    PciDevice pci;
    pci.bus_id = bus_id_of(attr);
    // hwloc keeps class and subclass; the programming interface is not exported (0 is every GPU's and
    // NIC's anyway).
    pci.class_code = static_cast<uint32_t>(attr.class_id) << 8;
    pci.vendor_id = attr.vendor_id;
    pci.device_id = attr.device_id;
    pci.subsystem_vendor_id = attr.subvendor_id;
    pci.subsystem_device_id = attr.subdevice_id;
    std::tie(pci.link_gts, pci.link_width) = pcie_link_from_gbytes(attr.linkspeed);
    pci.numa_node = numa_of(topology_, obj);
    for (hwloc_obj_t p = obj->parent; p != nullptr && p->type == HWLOC_OBJ_BRIDGE; p = p->parent) {
      if (is_host_bridge(p)) {
        pci.host_bridge = host_bridges_.at(p);
      } else if (is_switch_upstream_port(p)) {
        pci.switches.push_back(bus_id_of(p->attr->bridge.upstream.pci));
      }
    }
    sysfs::fill_pci(options_.sysfs_root, pci);
    return pci;
  }

  void add_device(HostTopology& host, hwloc_obj_t dev) {
    const auto& attr = dev->attr->pcidev;
    const unsigned base_class = attr.class_id >> 8;
    bool network_os_device = false;
    for (hwloc_obj_t os = dev->io_first_child; os != nullptr; os = os->next_sibling) {
      if (os->type == HWLOC_OBJ_OS_DEVICE && (os->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK ||
                                              os->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS)) {
        network_os_device = true;
      }
    }
    if (attr.vendor_id == kVendorNvidia && base_class == 0x03) {
      add_gpu(host, dev);
    } else if (base_class == 0x02 || network_os_device) {
      add_nic(host, dev);
    }
  }

  void add_gpu(HostTopology& host, hwloc_obj_t dev) {
    Gpu gpu;
    gpu.pci = pci_of(dev, dev->attr->pcidev);
    int cuda = -1;
    int nvml = -1;
    for (hwloc_obj_t os = dev->io_first_child; os != nullptr; os = os->next_sibling) {
      if (os->type != HWLOC_OBJ_OS_DEVICE || os->name == nullptr) continue;
      std::string_view name = os->name;
      auto index_after = [&](std::string_view prefix) {
        int value = -1;
        if (name.substr(0, prefix.size()) == prefix) {
          std::from_chars(name.data() + prefix.size(), name.data() + name.size(), value);
        }
        return value;
      };
      if (index_after("cuda") >= 0) cuda = index_after("cuda");
      if (index_after("nvml") >= 0) nvml = index_after("nvml");
      if (gpu.name.empty()) gpu.name = info(os, "GPUModel");
    }
    if (gpu.name.empty()) gpu.name = info(dev, "PCIDevice");
    if (gpu.name.empty())
      gpu.name = fmt::format("NVIDIA GPU [{:04x}:{:04x}]", gpu.pci.vendor_id, gpu.pci.device_id);
    gpu_osdev_index_.push_back({cuda, nvml});
    host.gpus.push_back(std::move(gpu));
  }

  void add_nic(HostTopology& host, hwloc_obj_t dev) {
    Nic nic;
    nic.pci = pci_of(dev, dev->attr->pcidev);
    int first_port = 0;
    for (hwloc_obj_t os = dev->io_first_child; os != nullptr; os = os->next_sibling) {
      if (os->type != HWLOC_OBJ_OS_DEVICE || os->name == nullptr) continue;
      if (os->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK && nic.netdev.empty()) nic.netdev = os->name;
      if (os->attr->osdev.type != HWLOC_OBJ_OSDEV_OPENFABRICS || !nic.rdma_device.empty()) continue;
      nic.rdma_device = os->name;
      // "e8eb:d303:0036:1a2e" -> 0xe8ebd30300361a2e
      std::string guid = info(os, "NodeGUID");
      guid.erase(std::remove(guid.begin(), guid.end(), ':'), guid.end());
      std::from_chars(guid.data(), guid.data() + guid.size(), nic.node_guid, 16);
      // hwloc's infos: Port<p>State, Port<p>GID<i> (hwloc topology-linux.c, infiniband class).
      for (unsigned i = 0; i < os->infos_count; ++i) {
        std::string_view key = os->infos[i].name;
        int port = 0;
        int index = 0;
        if (key.substr(0, 4) != "Port") continue;
        auto [p_end, p_ec] = std::from_chars(key.data() + 4, key.data() + key.size(), port);
        if (p_ec != std::errc() || port <= 0) continue;
        std::string_view rest(p_end, static_cast<size_t>(key.data() + key.size() - p_end));
        if (first_port == 0 || port < first_port) first_port = port;
        if (rest.substr(0, 3) != "GID") continue;
        std::from_chars(rest.data() + 3, rest.data() + rest.size(), index);
        nic.gids.push_back({.port = port, .index = index, .gid = os->infos[i].value, .type = ""});
      }
    }
    if (first_port > 0) nic.port = first_port;
    sysfs::fill_nic(options_.sysfs_root, nic);
    host.nics.push_back(std::move(nic));
  }

  // CUDA indices from "cudaN" when every GPU has one, else NVML's "nvmlN", else PCI bus order (which is
  // also CUDA's order under CUDA_DEVICE_ORDER=PCI_BUS_ID and NVML's always).
  void order(HostTopology& host) {
    const bool all_cuda = std::all_of(gpu_osdev_index_.begin(), gpu_osdev_index_.end(),
                                      [](const auto& ix) { return ix.first >= 0; });
    const bool all_nvml = std::all_of(gpu_osdev_index_.begin(), gpu_osdev_index_.end(),
                                      [](const auto& ix) { return ix.second >= 0; });
    for (size_t i = 0; i < host.gpus.size(); ++i) {
      if (all_cuda) {
        host.gpus[i].cuda_index = gpu_osdev_index_[i].first;
        host.gpus[i].index_source = Gpu::IndexSource::kCuda;
      } else if (all_nvml) {
        host.gpus[i].cuda_index = gpu_osdev_index_[i].second;
        host.gpus[i].index_source = Gpu::IndexSource::kNvml;
      }
    }
    if (!all_cuda && !all_nvml) {
      std::sort(host.gpus.begin(), host.gpus.end(),
                [](const Gpu& a, const Gpu& b) { return a.pci.bus_id < b.pci.bus_id; });
      for (size_t i = 0; i < host.gpus.size(); ++i) {
        host.gpus[i].cuda_index = static_cast<int>(i);
        host.gpus[i].index_source = Gpu::IndexSource::kBusOrder;
      }
    }
    std::sort(host.gpus.begin(), host.gpus.end(), [](const Gpu& a, const Gpu& b) {
      return a.cuda_index != b.cuda_index ? a.cuda_index < b.cuda_index : a.pci.bus_id < b.pci.bus_id;
    });
    std::sort(host.nics.begin(), host.nics.end(), [](const Nic& a, const Nic& b) {
      return a.pci.bus_id != b.pci.bus_id ? a.pci.bus_id < b.pci.bus_id : a.name() < b.name();
    });
    std::sort(host.switches.begin(), host.switches.end(),
              [](const PcieSwitch& a, const PcieSwitch& b) { return a.pci.bus_id < b.pci.bus_id; });
  }

  hwloc_topology_t topology_;
  const DiscoveryOptions& options_;
  std::map<hwloc_obj_t, int> host_bridges_;
  std::vector<std::pair<int, int>> gpu_osdev_index_;  // (cudaN, nvmlN) per GPU in discovery order
};

Result<HostTopology> discover(const std::string& xml_path, const DiscoveryOptions& options) {
  TopologyHandle handle;
  if (hwloc_topology_init(&handle.topology) != 0) return make_error("hwloc: topology init failed");
  hwloc_topology_set_io_types_filter(handle.topology, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (!options.gpu_libraries) {
    for (const char* component : {"cuda", "nvml", "opencl", "rsmi", "levelzero", "gl"}) {
      // An unknown name (a component this hwloc lacks) is not an error worth stopping for.
      (void)hwloc_topology_set_components(handle.topology, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST,
                                          component);
    }
  }
  if (!xml_path.empty() && hwloc_topology_set_xml(handle.topology, xml_path.c_str()) != 0) {
    return make_error(fmt::format("{}: hwloc cannot read this XML file: {}", xml_path, std::strerror(errno)));
  }
  if (hwloc_topology_load(handle.topology) != 0) {
    return make_error(xml_path.empty()
                          ? fmt::format("hwloc: topology load failed: {}", std::strerror(errno))
                          : fmt::format("{}: not a valid hwloc XML topology (hwloc load failed)", xml_path));
  }
  return Walker(handle.topology, options).run();
}

}  // namespace

Result<HostTopology> discover_host(const DiscoveryOptions& options) {
  return discover("", options);
}

Result<HostTopology> load_hwloc_xml(const std::string& path, const DiscoveryOptions& options) {
  if (path.empty()) return make_error("hwloc XML: empty path");
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return make_error(fmt::format("{}: no such file", path));
  return discover(path, options);
}

}  // namespace megascale::topo::host
