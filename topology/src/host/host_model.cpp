// The plain host model's helpers: path types between devices, CPU lists, bus ids, PCIe link decoding.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>

#include "megascale/topology/host.h"

namespace megascale::topo::host {

std::string_view to_string(PathType path) {
  switch (path) {
    case PathType::kPix:
      return "PIX";
    case PathType::kPxb:
      return "PXB";
    case PathType::kPhb:
      return "PHB";
    case PathType::kNode:
      return "NODE";
    case PathType::kSys:
      return "SYS";
  }
  return "SYS";
}

std::optional<PathType> parse_path_type(std::string_view text) {
  for (PathType p : {PathType::kPix, PathType::kPxb, PathType::kPhb, PathType::kNode, PathType::kSys}) {
    if (to_string(p) == text) return p;
  }
  return std::nullopt;
}

const std::string& Nic::name() const {
  if (!rdma_device.empty()) return rdma_device;
  if (!netdev.empty()) return netdev;
  return pci.bus_id;
}

const NumaNode* HostTopology::find_numa(int os_index) const {
  for (const NumaNode& n : numa_nodes) {
    if (n.os_index == os_index) return &n;
  }
  return nullptr;
}

PathType path_between(const HostTopology& host, const PciDevice& a, const PciDevice& b) {
  // Nearest switch the two share. A switch counts once (its upstream and downstream ports are one hop
  // for NCCL), so sharing the nearest switch of both is PIX, anything deeper in the tree is PXB.
  for (size_t i = 0; i < a.switches.size(); ++i) {
    auto it = std::find(b.switches.begin(), b.switches.end(), a.switches[i]);
    if (it != b.switches.end()) {
      return (i == 0 && it == b.switches.begin()) ? PathType::kPix : PathType::kPxb;
    }
  }
  if (a.host_bridge >= 0 && a.host_bridge == b.host_bridge) return PathType::kPhb;
  if (a.numa_node >= 0 && a.numa_node == b.numa_node) return PathType::kNode;
  // No locality known (a VM whose devices hang off the machine): one NUMA node means one memory domain.
  if (a.numa_node < 0 && b.numa_node < 0 && host.numa_nodes.size() <= 1) return PathType::kNode;
  return PathType::kSys;
}

std::string format_cpu_list(std::vector<int> cpus) {
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += (j == i) ? fmt::format("{}", cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]);
    i = j + 1;
  }
  return out;
}

namespace {

bool parse_int(std::string_view text, int& out) {
  if (text.empty()) return false;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && ptr == text.data() + text.size() && out >= 0;
}

}  // namespace

Result<std::vector<int>> parse_cpu_list(std::string_view text) {
  std::vector<int> cpus;
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  size_t start = 0;
  while (start < text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view token = text.substr(start, comma - start);
    size_t dash = token.find('-');
    int lo = 0;
    int hi = 0;
    bool ok = dash == std::string_view::npos
                  ? parse_int(token, lo) && parse_int(token, hi)
                  : parse_int(token.substr(0, dash), lo) && parse_int(token.substr(dash + 1), hi);
    if (!ok || hi < lo) return make_error(fmt::format("cpu list '{}': bad range '{}'", text, token));
    for (int c = lo; c <= hi; ++c) cpus.push_back(c);
    start = comma + 1;
  }
  return cpus;
}

Result<std::string> normalize_bus_id(std::string_view text) {
  // domain:bus:device.function, hex; the domain is optional ("18:00.0").
  unsigned domain = 0;
  unsigned bus = 0;
  unsigned dev = 0;
  unsigned func = 0;
  auto hex = [](std::string_view s, unsigned& out, size_t max_digits) {
    if (s.empty() || s.size() > max_digits) return false;
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out, 16);
    return ec == std::errc() && ptr == s.data() + s.size();
  };
  size_t dot = text.rfind('.');
  size_t c2 = text.rfind(':');
  bool ok = dot != std::string_view::npos && c2 != std::string_view::npos && c2 < dot;
  if (ok) {
    std::string_view head = text.substr(0, c2);
    size_t c1 = head.rfind(':');
    std::string_view bus_text = c1 == std::string_view::npos ? head : head.substr(c1 + 1);
    ok = (c1 == std::string_view::npos || hex(head.substr(0, c1), domain, 8)) && hex(bus_text, bus, 2) &&
         hex(text.substr(c2 + 1, dot - c2 - 1), dev, 2) && hex(text.substr(dot + 1), func, 1) && dev < 32 &&
         func < 8;
  }
  if (!ok) return make_error(fmt::format("'{}' is not a PCI bus id (expected like 0000:18:00.0)", text));
  return fmt::format("{:04x}:{:02x}:{:02x}.{:x}", domain, bus, dev, func);
}

std::pair<double, int> pcie_link_from_gbytes(double gbytes_per_s) {
  if (!(gbytes_per_s > 0)) return {0, 0};
  // (GT/s, encoding efficiency): Gen1/2 8b/10b, Gen3..5 128b/130b (PCIe base specification).
  constexpr std::array<std::pair<double, double>, 6> kGens = {{{2.5, 0.8},
                                                               {5.0, 0.8},
                                                               {8.0, 128.0 / 130},
                                                               {16.0, 128.0 / 130},
                                                               {32.0, 128.0 / 130},
                                                               {64.0, 128.0 / 130}}};
  for (int width : {16, 8, 4, 2, 1, 32}) {
    for (auto [gts, efficiency] : kGens) {
      double expected = width * gts * efficiency / 8;
      if (std::fabs(expected - gbytes_per_s) <= 0.01 * expected) return {gts, width};
    }
  }
  return {0, 0};
}

}  // namespace megascale::topo::host
