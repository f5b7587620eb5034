// RDMA device, port and GID discovery from a sysfs-like tree, and GID selection as NCCL's NCCL_IB_*
// variables do it. Pure: it reads files under a root folder and never calls libibverbs, so tests run it
// over fixtures and any host runs it without a device.
//
//   Result<std::vector<DeviceInfo>> devs = discover_devices("/sys/class/infiniband");
//   Result<GidSelector> sel = gid_selector_from_env(std::getenv);   // MEGASCALE_IB_GID_*
//   Result<const PortInfo*> port = select_port((*devs)[0], /*port=*/0);
//   Result<GidEntry> gid = select_gid((*devs)[0], **port, *sel);
//   // gid->index goes into ibv_ah_attr.grh.sgid_index and the connection handle carries gid->gid
//
// The tree read, per device <dev> and port <n> (what the kernel's ib_core exposes):
//   <root>/<dev>/ports/<n>/state               "4: ACTIVE"
//   <root>/<dev>/ports/<n>/link_layer          "Ethernet" (RoCE) or "InfiniBand"
//   <root>/<dev>/ports/<n>/rate                "100 Gb/sec (2X HDR)" (optional)
//   <root>/<dev>/ports/<n>/active_mtu          "1024" (optional: the kernel does not expose it; the
//                                              verbs layer fills it in from ibv_query_port)
//   <root>/<dev>/ports/<n>/gids/<i>            "fe80:0000:0000:0000:5054:00ff:fe12:3456"
//   <root>/<dev>/ports/<n>/gid_attrs/types/<i> "RoCE v2" or "IB/RoCE v1"; unreadable for empty entries
//   <root>/<dev>/ports/<n>/gid_attrs/ndevs/<i> "eth0"; unreadable for empty entries
// and, for list_devices (`megascale topo`), all optional:
//   <root>/<dev>/node_guid                     "0002:c903:0011:2233"
//   <root>/<dev>/parent                        "eth0": the netdev a software device (rxe, siw) sits on
//   <root>/<dev>/device                        a link to the PCI function (/sys/devices/pci.../0000:3b:00.0)
//   <root>/<dev>/device/driver                 a link to its driver (/sys/bus/pci/drivers/mlx5_core)
//   <root>/<dev>/device/net/<netdev>           the function's netdevs
//   <root>/<dev>/ports/<n>/phys_state          "5: LinkUp", "3: Disabled"
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "megascale/common/env.h"
#include "megascale/common/result.h"

namespace megascale::wire::verbs {

using Gid = std::array<uint8_t, 16>;  // network byte order, as ibv_gid.raw

enum class GidType : uint8_t {
  kRoceV1,   // "IB/RoCE v1": InfiniBand GRH on Ethernet, not routable over IP
  kRoceV2,   // "RoCE v2": UDP/IP, port 4791, routable, ECN-capable
  kUnknown,  // a type string this code does not know
};
std::string_view to_string(GidType t);

struct GidEntry {
  uint32_t index = 0;  // the GID table index (ibv sgid_index)
  Gid gid{};
  GidType type = GidType::kUnknown;
  std::string ndev;  // the netdev the entry belongs to ("" when not given)
};

// "fe80::5054:ff:fe12:3456" or "::ffff:10.0.0.1" (inet_ntop's form).
std::string gid_to_string(const Gid& gid);
// True for ::ffff:a.b.c.d, the form RoCE v2 gives an IPv4 address.
bool gid_is_ipv4(const Gid& gid);
// True for fe80::/10.
bool gid_is_link_local(const Gid& gid);

struct PortInfo {
  uint32_t port = 0;              // 1-based, as ibv port_num
  std::string state;              // as read: "4: ACTIVE", "1: DOWN"
  bool active = false;            // state's number is 4 (IBV_PORT_ACTIVE)
  std::string link_layer;         // "Ethernet", "InfiniBand"
  uint32_t active_mtu_bytes = 0;  // 256..4096; 0 = not in the tree (ask the device)
  double rate_gbps = 0;           // from `rate`; 0 = not given
  std::vector<GidEntry> gids;     // non-empty entries only, by index
};

struct DeviceInfo {
  std::string name;             // "rxe0", "mlx5_0"
  std::vector<PortInfo> ports;  // by port number
};

// Every device under `root` (one folder per device), sorted by name, with its ports and non-empty GIDs.
// An absent or empty root gives an empty list (a host without RDMA devices); an unreadable one, a
// device without ports/ or a port without `state` is an error naming the path.
Result<std::vector<DeviceInfo>> discover_devices(const std::string& root);

// What `megascale topo` lists beyond DeviceInfo, per port.
struct PortListing {
  std::string phys_state;  // as read: "5: LinkUp", "3: Disabled"; "" = not given
  std::string rate;        // as read: "100 Gb/sec (2X HDR)"; "" = not given
  // The netdev the port sits on: its GIDs' netdev, else the device's `parent`, else the PCI function's
  // only netdev; "" when none is known (an InfiniBand port without IPoIB).
  std::string netdev;
  std::vector<std::string> problems;  // what was left out or unreadable, naming the file and why
};

struct DeviceListing {
  DeviceInfo info;                 // as discover_devices reads it, less what `problems` names
  std::vector<PortListing> ports;  // one per info.ports, in that order
  std::string node_guid;           // as read: "0002:c903:0011:2233"; "" = not given
  std::string pci_path;            // the `device` link resolved; "" for a device without one (rxe)
  std::string driver;              // the PCI function's driver ("mlx5_core"); "" = not known
  std::string parent;              // `parent` (software devices: their netdev); "" = not given
  std::vector<std::string> problems;
};

// Every device under `root` as discover_devices reads it, with the listing attributes, reading on past
// bad entries: a malformed GID is left out, a port without a readable `state` is kept as not active, a
// device without ports/ is kept without ports, a bad active_mtu reads as 0; each with a line in the
// port's or device's `problems`. An absent root is an empty list; only an unreadable root is an error.
Result<std::vector<DeviceListing>> list_devices(const std::string& root);

// The state text's name: "4: ACTIVE" -> "ACTIVE", "5: LinkUp" -> "LinkUp"; text without a number as is.
std::string_view state_name(std::string_view state);

// How to choose a GID, as NCCL_IB_GID_INDEX, NCCL_IB_ADDR_FAMILY, NCCL_IB_ADDR_RANGE and
// NCCL_IB_ROCE_VERSION_NUM do.
struct GidSelector {
  std::optional<uint32_t> index;  // MEGASCALE_IB_GID_INDEX: this entry, no other filter applies
  bool ipv6 = false;              // MEGASCALE_IB_ADDR_FAMILY: AF_INET (default) or AF_INET6
  // MEGASCALE_IB_ADDR_RANGE: a CIDR ("10.0.0.0/8", "fd00::/8") in the chosen family; prefix_len 0 =
  // any address.
  Gid range_addr{};
  uint32_t range_prefix_len = 0;
  GidType roce_version = GidType::kRoceV2;  // MEGASCALE_IB_ROCE_VERSION_NUM: 2 (default) or 1
};

// The selector the MEGASCALE_IB_* variables describe, read through `getenv` (std::getenv, or a map
// in tests). Unset variables keep the defaults; a bad value is an error naming the variable and value.
Result<GidSelector> gid_selector_from_env(const EnvLookup& getenv);

// Parses "a.b.c.d/len" (stored IPv4-mapped) or an IPv6 "addr/len".
Result<GidSelector> with_addr_range(GidSelector sel, std::string_view cidr);

// The port to use: `port` (1-based) if non-zero, else the first active Ethernet port. Errors name the
// device, the port and why (absent, not ACTIVE, InfiniBand link layer: the wire speaks RoCE only).
Result<const PortInfo*> select_port(const DeviceInfo& dev, uint32_t port);

// The GID to use on `port`. With an explicit index: that entry if it exists. Otherwise, among entries
// of the wanted family (and range), those of the wanted RoCE version first, else the other version;
// within those a global address before a link-local one, then the lowest index. The error names
// device, port and, per entry, why it was passed over.
Result<GidEntry> select_gid(const DeviceInfo& dev, const PortInfo& port, const GidSelector& sel);

}  // namespace megascale::wire::verbs
