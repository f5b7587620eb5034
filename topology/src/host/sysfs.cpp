// sysfs readers for NIC and PCI details hwloc does not carry. Layout of /sys/class/infiniband per the
// kernel's Documentation/ABI/stable/sysfs-class-infiniband; /sys/bus/pci/devices per sysfs-bus-pci.
#include "sysfs.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <system_error>

namespace megascale::topo::host::sysfs {
namespace {

namespace fs = std::filesystem;

// The first line of a file, trimmed; empty when it cannot be read.
std::string read_line(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return {};
  while (!line.empty() && (line.back() == ' ' || line.back() == '\r' || line.back() == '\t')) line.pop_back();
  return line;
}

bool all_zero_gid(const std::string& gid) {
  return std::all_of(gid.begin(), gid.end(), [](char c) { return c == '0' || c == ':'; });
}

// Directory entries that are numbers, ascending.
std::vector<int> numbered_entries(const fs::path& dir) {
  std::vector<int> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.empty() && std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      out.push_back(std::atoi(name.c_str()));
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

int64_t parse_ib_rate_mbps(const std::string& rate) {
  char* end = nullptr;
  double gbps = std::strtod(rate.c_str(), &end);
  if (end == rate.c_str() || gbps <= 0) return 0;
  return static_cast<int64_t>(gbps * 1000 + 0.5);
}

double parse_link_speed_gts(const std::string& text) {
  char* end = nullptr;
  double gts = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || gts <= 0 || std::string(end).find("GT/s") == std::string::npos) return 0;
  return gts;
}

void fill_nic(const std::string& root, Nic& nic) {
  if (root.empty()) return;
  if (!nic.rdma_device.empty()) {
    const fs::path dev = fs::path(root) / "class/infiniband" / nic.rdma_device;
    const fs::path port = dev / "ports" / std::to_string(nic.port);
    if (nic.speed_mbps == 0) nic.speed_mbps = parse_ib_rate_mbps(read_line(port / "rate"));
    if (nic.link_layer.empty()) nic.link_layer = read_line(port / "link_layer");
    std::vector<RoceGid> gids;
    for (int index : numbered_entries(port / "gids")) {
      RoceGid gid{.port = nic.port,
                  .index = index,
                  .gid = read_line(port / "gids" / std::to_string(index)),
                  .type = read_line(port / "gid_attrs/types" / std::to_string(index))};
      if (!gid.gid.empty() && !all_zero_gid(gid.gid)) gids.push_back(std::move(gid));
    }
    // sysfs has the types hwloc lacks, so its table wins when it has one.
    if (!gids.empty()) nic.gids = std::move(gids);
    if (nic.netdev.empty()) {
      std::error_code ec;
      for (const auto& entry : fs::directory_iterator(dev / "device/net", ec)) {
        nic.netdev = entry.path().filename().string();
        break;
      }
    }
  }
  if (nic.speed_mbps == 0 && !nic.netdev.empty()) {
    // Mbps; -1 or unreadable while the link is down.
    const std::string speed = read_line(fs::path(root) / "class/net" / nic.netdev / "speed");
    const long mbps = speed.empty() ? 0 : std::strtol(speed.c_str(), nullptr, 10);
    if (mbps > 0) nic.speed_mbps = mbps;
  }
}

void fill_pci(const std::string& root, PciDevice& pci) {
  if (root.empty() || pci.bus_id.empty()) return;
  const fs::path dev = fs::path(root) / "bus/pci/devices" / pci.bus_id;
  // max_link_*, as NCCL reads them: a GPU at idle trains its link down, so current_* can say 2.5 GT/s.
  double gts = parse_link_speed_gts(read_line(dev / "max_link_speed"));
  int width = std::atoi(read_line(dev / "max_link_width").c_str());
  if (gts <= 0 || width <= 0) {
    gts = parse_link_speed_gts(read_line(dev / "current_link_speed"));
    width = std::atoi(read_line(dev / "current_link_width").c_str());
  }
  if (gts > 0 && width > 0) {
    pci.link_gts = gts;
    pci.link_width = width;
  }
  if (pci.numa_node < 0) {
    const std::string numa = read_line(dev / "numa_node");
    if (!numa.empty() && std::atoi(numa.c_str()) >= 0) pci.numa_node = std::atoi(numa.c_str());
  }
}

}  // namespace megascale::topo::host::sysfs
