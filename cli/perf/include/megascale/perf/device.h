// perf's -d (perftest's --ib-dev): the device is a network interface, and a side binds its address.
//
//   auto addr = interface_address("eth0", /*ipv6=*/false);   // "10.0.0.2"
//   if (!addr) print(addr.error().message);  // "-d eth9: no such interface (here: eth0, lo)"
//   o.bind_host = *addr;
#pragma once

#include <string>
#include <vector>

#include "megascale/common/result.h"

namespace megascale::perf {

// The interfaces this host has, by name, sorted, each once (getifaddrs).
std::vector<std::string> interface_names();

// The address of interface `name` to bind: its first IPv4 address, or with `ipv6` its first IPv6
// address that is not link-local (a link-local one with "%name" where it has no other). The error
// names the interface and lists the ones that exist, or says which address family it lacks.
Result<std::string> interface_address(const std::string& name, bool ipv6);

}  // namespace megascale::perf
