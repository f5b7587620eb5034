// Which wire the plugin runs on (MEGASCALE_WIRE) and, on verbs, which RDMA ports become its devices.
// Pure: the device listing (gid.h list_devices over /sys/class/infiniband) and the GID selector
// (MEGASCALE_IB_*) go in, the decision comes out, so tests give it sysfs-like listings.
//
//   auto kind = parse_wire_kind(std::getenv("MEGASCALE_WIRE"));           // bad text: fail init
//   auto listing = verbs::list_devices("/sys/class/infiniband");
//   auto d = decide_wire(*kind, *listing, selector);  // error: an explicit verbs-* without a usable port
//   std::vector<Device> devs = verbs_devices(*d, config, probe);  // one plugin device per port
//
// auto takes verbs-ud when at least one port is usable: ACTIVE, Ethernet link layer (RoCE) and a GID
// the selector accepts; else UDP, with the reason. An explicit verbs-ud or verbs-rc without a usable
// port is an error naming, per port, why it was passed over.
//
// A verbs device's ptrSupport (decide_ptr_support, ptr_support.h): NCCL_PTR_HOST, plus NCCL_PTR_CUDA
// with MEGASCALE_GDR_COPY on (the plugin's host shadows: the wire sees host memory only), exactly as on
// UDP. Never NCCL_PTR_DMABUF: the verbs wire copies every payload with the CPU, so the NIC cannot read
// or write GPU memory itself; the reason says so and what the port's dma-buf probe found.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "config.h"
#include "device.h"
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

// Whether the port can register dma-bufs (IbDevice::probe_dmabuf on it), or why that could not be asked.
using DmabufProbe = std::function<Status(const VerbsPortChoice&)>;

// The plugin's devices for a verbs decision, one per port in the decision's order: name, GID, rate,
// MTU, PCI path, segment size (MEGASCALE_SEGMENT_BYTES or 4096) and ptrSupport with its reason, from
// `config`'s MEGASCALE_GDR_COPY and `probe`'s result (called once per port).
std::vector<Device> verbs_devices(const WireDecision& decision, const PluginConfig& config,
                                  const DmabufProbe& probe);

}  // namespace megascale::nccl
