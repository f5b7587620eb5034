// perf's -d: a network interface's address, from getifaddrs.
#include "megascale/perf/device.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <algorithm>
#include <memory>

namespace megascale::perf {
namespace {

using IfAddrs = std::unique_ptr<ifaddrs, decltype(&freeifaddrs)>;

IfAddrs read_ifaddrs() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) list = nullptr;
  return IfAddrs(list, &freeifaddrs);
}

}  // namespace

std::vector<std::string> interface_names() {
  std::vector<std::string> names;
  const IfAddrs list = read_ifaddrs();
  for (const ifaddrs* a = list.get(); a != nullptr; a = a->ifa_next) {
    if (a->ifa_name != nullptr) names.emplace_back(a->ifa_name);
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

Result<std::string> interface_address(const std::string& name, bool ipv6) {
  const IfAddrs list = read_ifaddrs();
  bool exists = false;
  std::string link_local;
  for (const ifaddrs* a = list.get(); a != nullptr; a = a->ifa_next) {
    if (a->ifa_name == nullptr || name != a->ifa_name) continue;
    exists = true;
    if (a->ifa_addr == nullptr) continue;
    char text[INET6_ADDRSTRLEN] = {};
    if (!ipv6 && a->ifa_addr->sa_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
      if (inet_ntop(AF_INET, &in->sin_addr, text, sizeof text) != nullptr) return std::string(text);
    }
    if (ipv6 && a->ifa_addr->sa_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a->ifa_addr);
      if (inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text) == nullptr) continue;
      if (!IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr)) return std::string(text);
      if (link_local.empty()) link_local = std::string(text) + "%" + name;
    }
  }
  if (!link_local.empty()) return link_local;
  if (exists) {
    return make_error(fmt::format("-d {}: the interface has no {} address", name, ipv6 ? "IPv6" : "IPv4"));
  }
  const std::vector<std::string> names = interface_names();
  return make_error(
      fmt::format("-d {}: no such interface (here: {})", name,
                  names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", "))));
}

}  // namespace megascale::perf
