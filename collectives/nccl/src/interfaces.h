// Network interfaces the plugin exposes to NCCL as devices, and MEGASCALE_IFNAME's selection syntax.
//
//   auto all = discover_interfaces();                  // every interface that is up with an address
//   auto picked = select_interfaces(*all, "^docker,lo");  // Result<std::vector<InterfaceInfo>>
//
// Selection follows NCCL_SOCKET_IFNAME: a comma-separated list of name prefixes; a leading `^` turns it
// into an exclude list; a leading `=` (after any `^`) makes the names exact instead of prefixes
// ("=eth0" does not match eth01). With no list, every interface except loopback and docker*/virbr*
// bridges is used, and loopback (`lo`) only when nothing else is up: single-host runs on GPU boxes
// use it, and it must work like any other device.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "megascale/common/result.h"

namespace megascale::nccl {

struct InterfaceInfo {
  std::string name;     // "eth0", "lo"
  int family = 0;       // AF_INET or AF_INET6
  std::string address;  // numeric address the device binds ("10.0.0.1", "127.0.0.1", "fd00::1")
  bool loopback = false;
  int mtu_bytes = 1500;  // from /sys/class/net/<if>/mtu
  int speed_mbps = -1;   // from /sys/class/net/<if>/speed; -1 when the kernel does not say
  std::string pci_path;  // realpath of /sys/class/net/<if>/device; empty when not a PCI device
};

struct IfnameSpec {
  bool exclude = false;            // `^`: the names are excluded, everything else is kept
  bool exact = false;              // `=`: whole names, not prefixes
  std::vector<std::string> names;  // empty: the default selection
};

// Parses the MEGASCALE_IFNAME syntax. Errors: an empty name in the list ("eth0,,eth1"), a lone "^".
Result<IfnameSpec> parse_ifname_spec(std::string_view text);

// Whether `ifname` is named by the spec's list (before `^` inverts it).
bool ifname_listed(const IfnameSpec& spec, std::string_view ifname);

// Applies `spec_text` (MEGASCALE_IFNAME; empty = default) to `all`, keeping its order. An empty result is
// an error naming the spec and the interfaces there are.
Result<std::vector<InterfaceInfo>> select_interfaces(const std::vector<InterfaceInfo>& all,
                                                     std::string_view spec_text);

// Interfaces that are up and have a usable address (IPv4 preferred; IPv6 link-local skipped since it
// needs a scope), one entry per interface, with MTU, speed and PCI path read from /sys.
Result<std::vector<InterfaceInfo>> discover_interfaces();

}  // namespace megascale::nccl
