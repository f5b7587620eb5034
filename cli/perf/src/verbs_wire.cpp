// perf's verbs data wire: device checks and create_verbs_wire.
#include "verbs_wire.h"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>

#if MEGASCALE_PERF_HAVE_VERBS
#include "megascale/wire/verbs/gid.h"
#include "megascale/wire/verbs/port.h"
#endif

namespace megascale::perf::detail {

#if MEGASCALE_PERF_HAVE_VERBS

namespace {

namespace verbs = wire::verbs;

Result<verbs::GidSelector> selector_for(const PerfOptions& o) {
  auto sel = verbs::gid_selector_from_env([](const char* name) { return std::getenv(name); });
  if (!sel) return make_error(fmt::format("{}: {}", to_string(o.wire), sel.error().message));
  if (o.gid_index) sel->index = *o.gid_index;
  return sel;
}

}  // namespace

Status check_verbs_device(const PerfOptions& o) {
  const std::string w(to_string(o.wire));
  std::error_code ec;
  if (!std::filesystem::exists(o.sysfs_root, ec)) {
    return make_error(fmt::format("{}: no RDMA device (no {})", w, o.sysfs_root));
  }
  auto devices = verbs::discover_devices(o.sysfs_root);
  if (!devices) return make_error(fmt::format("{}: {}", w, devices.error().message));
  if (devices->empty()) return make_error(fmt::format("{}: no RDMA device (none under {})", w, o.sysfs_root));
  const verbs::DeviceInfo* dev = nullptr;
  std::string names;
  for (const verbs::DeviceInfo& d : *devices) {
    names += (names.empty() ? "" : ", ") + d.name;
    if (d.name == o.device) dev = &d;
  }
  if (!o.device.empty() && dev == nullptr) {
    return make_error(fmt::format("{}: -d {}: no such RDMA device (here: {})", w, o.device, names));
  }
  if (dev != nullptr && o.ib_port != 0) {
    bool found = false;
    for (const verbs::PortInfo& p : dev->ports) found = found || p.port == o.ib_port;
    if (!found) return make_error(fmt::format("{}: -i {}: {} has no such port", w, o.ib_port, o.device));
  }
  if (auto sel = selector_for(o); !sel) return sel.error();
  return {};
}

Result<std::unique_ptr<wire::UdpWire>> open_verbs_wire(const PerfOptions& o, const wire::UdpConfig& cfg) {
  auto sel = selector_for(o);
  if (!sel) return sel.error();
  verbs::VerbsPortConfig pc;
  pc.mode = o.wire == PerfWire::kVerbsRc ? verbs::PortMode::kRc : verbs::PortMode::kUd;
  pc.device = o.device;
  pc.port = o.ib_port;
  pc.gid = *sel;
  pc.sysfs_root = o.sysfs_root;
  pc.traffic_class = static_cast<uint8_t>(o.dscp << 2);
  auto w = verbs::create_verbs_wire(cfg, pc);
  if (!w) return make_error(fmt::format("{}: {}", to_string(o.wire), w.error().message));
  return w;
}

#else

namespace {
Error no_verbs(const PerfOptions& o) {
  return make_error(
      ErrorCode::kUnsupported,
      fmt::format("{}: this build has no verbs wire (libibverbs was not found when it was built)",
                  to_string(o.wire)));
}
}  // namespace

Status check_verbs_device(const PerfOptions& o) {
  return no_verbs(o);
}

Result<std::unique_ptr<wire::UdpWire>> open_verbs_wire(const PerfOptions& o, const wire::UdpConfig& /*cfg*/) {
  return no_verbs(o);
}

#endif

}  // namespace megascale::perf::detail
