// Which wire the plugin runs on (MEGASCALE_WIRE) and, on verbs, which RDMA ports become its devices.
// Pure: the device listing (gid.h list_devices over /sys/class/infiniband) and the GID selector
// (MEGASCALE_IB_*) go in, the decision comes out, so tests give it sysfs-like listings.
//
//   auto kind = parse_wire_kind(std::getenv("MEGASCALE_WIRE"));           // bad text: fail init
//   auto listing = verbs::list_devices("/sys/class/infiniband");
//   auto d = decide_wire(*kind, *listing, selector);  // error: an explicit verbs-* without a usable port
//   for (const VerbsPortChoice& p : d->ports) ...     // one plugin device each
//
// auto takes verbs-ud when at least one port is usable: ACTIVE, Ethernet link layer (RoCE) and a GID
// the selector accepts; else UDP, with the reason. An explicit verbs-ud or verbs-rc without a usable
// port is an error naming, per port, why it was passed over.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config.h"
#include "megascale/common/result.h"
#include "megascale/wire/verbs/gid.h"

namespace megascale::nccl {

// One usable RDMA port: a plugin device on verbs.
struct VerbsPortChoice {
  std::string device;  // "rxe0", "mlx5_0"
  uint32_t port = 0;   // 1-based
  wire::verbs::GidEntry gid;
  double rate_gbps = 0;  // from the port's `rate`; 0 when not given
  uint32_t active_mtu_bytes = 0;
  std::string pci_path;  // "" for a software device (rxe)
  std::string netdev;    // the netdev the port sits on ("" when unknown)
};

struct WireDecision {
  WireKind kind = WireKind::kUdp;      // never kAuto
  std::vector<VerbsPortChoice> ports;  // verbs: every usable port, by device name then port
  std::string reason;                  // one line for the log: what was chosen and why
};

// `requested` as MEGASCALE_WIRE gives it; `listing` as list_devices reads `root` (named in messages).
Result<WireDecision> decide_wire(WireKind requested, const std::vector<wire::verbs::DeviceListing>& listing,
                                 const wire::verbs::GidSelector& selector,
                                 std::string_view root = "/sys/class/infiniband");

}  // namespace megascale::nccl
