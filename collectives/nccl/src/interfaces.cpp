// Interface discovery (getifaddrs + /sys/class/net) and MEGASCALE_IFNAME selection.
#include "interfaces.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace megascale::nccl {
namespace {

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// One integer from a sysfs file; `fallback` when the file is missing or says nothing useful (the
// speed of a virtual or down interface reads as -1 or fails with EINVAL).
int read_sysfs_int(const std::string& path, int fallback) {
  std::ifstream in(path);
  long long v = 0;
  if (!(in >> v) || v < INT_MIN || v > INT_MAX) return fallback;
  return static_cast<int>(v);
}

std::string realpath_or_empty(const std::string& path) {
  char* resolved = ::realpath(path.c_str(), nullptr);
  if (resolved == nullptr) return {};
  std::string out(resolved);
  std::free(resolved);
  return out;
}

bool default_excluded(const InterfaceInfo& i) {
  return i.loopback || starts_with(i.name, "docker") || starts_with(i.name, "virbr");
}

}  // namespace

Result<IfnameSpec> parse_ifname_spec(std::string_view text) {
  IfnameSpec spec;
  if (!text.empty() && text.front() == '^') {
    spec.exclude = true;
    text.remove_prefix(1);
  }
  if (!text.empty() && text.front() == '=') {
    spec.exact = true;
    text.remove_prefix(1);
  }
  if (text.empty()) {
    if (spec.exclude || spec.exact) return make_error("an interface list must name at least one interface");
    return spec;
  }
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string_view name = text.substr(start, comma == std::string_view::npos ? comma : comma - start);
    if (name.empty()) return make_error("empty interface name in the list");
    spec.names.emplace_back(name);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return spec;
}

bool ifname_listed(const IfnameSpec& spec, std::string_view ifname) {
  for (const std::string& n : spec.names) {
    if (spec.exact ? ifname == n : starts_with(ifname, n)) return true;
  }
  return false;
}

Result<std::vector<InterfaceInfo>> select_interfaces(const std::vector<InterfaceInfo>& all,
                                                     std::string_view spec_text) {
  auto spec = parse_ifname_spec(spec_text);
  if (!spec) return make_error("MEGASCALE_IFNAME=" + std::string(spec_text) + ": " + spec.error().message);
  std::vector<InterfaceInfo> out;
  if (spec->names.empty()) {
    for (const InterfaceInfo& i : all) {
      if (!default_excluded(i)) out.push_back(i);
    }
    if (out.empty()) {
      for (const InterfaceInfo& i : all) {
        if (i.loopback) out.push_back(i);
      }
    }
  } else {
    for (const InterfaceInfo& i : all) {
      if (ifname_listed(*spec, i.name) != spec->exclude) out.push_back(i);
    }
  }
  if (out.empty()) {
    std::string have;
    for (const InterfaceInfo& i : all) have += (have.empty() ? "" : ", ") + i.name;
    return make_error(spec_text.empty() ? "no usable network interface (up, with an address) found"
                                        : "MEGASCALE_IFNAME=" + std::string(spec_text) +
                                              " selects no usable interface (up, with " +
                                              "an address: " + (have.empty() ? "none" : have) + ")");
  }
  return out;
}

Result<std::vector<InterfaceInfo>> discover_interfaces() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return make_error(std::string("getifaddrs: ") + std::strerror(errno));
  std::vector<InterfaceInfo> out;
  // Two passes so that an interface with both families is listed once, with its IPv4 address.
  for (int pass = 0; pass < 2; ++pass) {
    const int family = pass == 0 ? AF_INET : AF_INET6;
    for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
      if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != family) continue;
      if ((a->ifa_flags & IFF_UP) == 0) continue;
      bool seen = false;
      for (const InterfaceInfo& i : out) seen = seen || i.name == a->ifa_name;
      if (seen) continue;
      char text[INET6_ADDRSTRLEN] = {};
      if (family == AF_INET) {
        inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof text);
      } else {
        const in6_addr& v6 = reinterpret_cast<const sockaddr_in6*>(a->ifa_addr)->sin6_addr;
        if (IN6_IS_ADDR_LINKLOCAL(&v6)) continue;
        inet_ntop(AF_INET6, &v6, text, sizeof text);
      }
      InterfaceInfo info;
      info.name = a->ifa_name;
      info.family = family;
      info.address = text;
      info.loopback = (a->ifa_flags & IFF_LOOPBACK) != 0;
      const std::string sys = "/sys/class/net/" + info.name;
      info.mtu_bytes = read_sysfs_int(sys + "/mtu", 1500);
      info.speed_mbps = read_sysfs_int(sys + "/speed", -1);
      if (info.speed_mbps <= 0) info.speed_mbps = -1;
      info.pci_path = realpath_or_empty(sys + "/device");
      out.push_back(std::move(info));
    }
  }
  freeifaddrs(list);
  return out;
}

}  // namespace megascale::nccl
