// The plugin's process-wide state (see registry.h).
#include "registry.h"

#include <sys/socket.h>
#include <unistd.h>  // environ

#include <algorithm>
#include <cstdlib>

#include "device_rails.h"
#include "log.h"
#if MEGASCALE_NCCL_VERBS
#include "megascale/wire/verbs/ib_device.h"
#include "megascale/wire/verbs/port.h"
#include "wire_choice.h"
#endif

namespace megascale::nccl {

Registry& Registry::get() {
  static Registry registry;
  return registry;
}

Registry::~Registry() {
  // The requests traced since the last comm closed (a program that exits with its comms open).
  if (Status s = trace_.write(); !s) MS_WARN("%s", s.error().message.c_str());
  std::lock_guard<std::mutex> lock(mu_);
  if (open_comms_ > 0) {
    // NCCL (or a program that exits without destroying its communicators) still holds comms whose
    // proxy threads may call in during exit: leave the wires running rather than free them under it.
    for (auto& [key, set] : wires_) {
      for (auto& w : set.wires) (void)w.release();
    }
  } else {
    remove_wires_from_stats_locked();
  }
  wires_.clear();
  source_ports_dscp_.clear();
}

Status Registry::ensure_ready() {
  std::lock_guard<std::mutex> lock(mu_);
  if (tried_) return status_;
  tried_ = true;
  auto cfg =
      load_plugin_config([](const char* name) { return std::getenv(name); }, megascale_env_names(environ));
  if (!cfg) {
    status_ = cfg.error();
    return status_;
  }
  config_ = std::move(*cfg);
  if (Status s = find_devices_locked(); !s) {
    status_ = s.error();
    return status_;
  }
  const std::string rails_line = assign_rail_ids(devices_);
  stats_.configure(config_.stats_dir, config_.stats_interval_ns, settings_of(config_),
                   stats_identity([](const char* name) { return std::getenv(name); }),
                   config_.stats_keep_prom);
  trace_.configure(config_.trace_file);

  for (const Setting& setting : config_.settings)
    MS_INFO(abi::kSubsysInit | abi::kSubsysEnv, "%s", echo_line(setting).c_str());
  for (const std::string& line : config_.warnings) MS_WARN("%s", line.c_str());
  MS_INFO(abi::kSubsysInit | abi::kSubsysNet, "%s", rails_line.c_str());
  std::string using_text;
  for (size_t i = 0; i < devices_.size(); ++i) {
    const InterfaceInfo& f = devices_[i].iface;
    char entry[512];
    if (is_verbs(devices_[i].wire)) {
      // The port's MTU is known once its wire opens, which fits the segment to it.
      std::snprintf(
          entry, sizeof entry, " [%zu]%s:%s<port %u, gid %u, %d Mbps, segment <= %u B, rail %d%s%s>", i,
          f.name.c_str(), f.address.c_str(), devices_[i].rdma_port, devices_[i].gid_index, f.speed_mbps,
          devices_[i].segment_bytes, devices_[i].rail_id, f.pci_path.empty() ? "" : ", ", f.pci_path.c_str());
    } else {
      std::snprintf(entry, sizeof entry, " [%zu]%s:%s<mtu %d, %d Mbps, segment %u B, rail %d%s%s>", i,
                    f.name.c_str(), f.address.c_str(), f.mtu_bytes, f.speed_mbps, devices_[i].segment_bytes,
                    devices_[i].rail_id, f.pci_path.empty() ? "" : ", ", f.pci_path.c_str());
    }
    using_text += entry;
  }
  MS_INFO(abi::kSubsysInit | abi::kSubsysNet, "Using%s", using_text.c_str());
  if (!config_.stats_dir.empty()) {
    MS_INFO(abi::kSubsysInit, "stats every %.1f s to %s and %s",
            static_cast<double>(config_.stats_interval_ns) / 1e9, stats_.jsonl_path().c_str(),
            stats_.prom_path().c_str());
  }
  if (trace_.enabled()) {
    MS_INFO(abi::kSubsysInit,
            "request timeline (Chrome trace JSON) to %s when the last comm closes and at exit",
            trace_.path().c_str());
  }
  ready_.store(true, std::memory_order_release);
  return status_;
}

Status Registry::find_devices_locked() {
  WireKind kind = WireKind::kUdp;
#if MEGASCALE_NCCL_VERBS
  std::vector<VerbsPortChoice> ports;
  if (config_.wire != WireKind::kUdp) {
    constexpr const char* kRoot = "/sys/class/infiniband";
    auto listing = wire::verbs::list_devices(kRoot);
    if (!listing && is_verbs(config_.wire)) {
      return make_error("MEGASCALE_WIRE=" + std::string(to_string(config_.wire)) + ": " +
                        listing.error().message);
    }
    auto decision = decide_wire(config_.wire, listing ? *listing : std::vector<wire::verbs::DeviceListing>{},
                                config_.gid_selector, kRoot);
    if (!decision) return decision.error();
    kind = decision->kind;
    ports = std::move(decision->ports);
    MS_INFO(abi::kSubsysInit | abi::kSubsysNet, "wire: %s", decision->reason.c_str());
  }
  if (is_verbs(kind)) {
    // The dma-buf probe opens each port once (a failing ibv_reg_dmabuf_mr); it never loads libcuda.
    const DmabufProbe probe = [](const VerbsPortChoice& p) -> Status {
      auto dev = wire::verbs::IbDevice::open(p.device, p.port);
      if (!dev) return make_error(dev.error().code, "not probed: " + dev.error().message);
      return (*dev)->probe_dmabuf();
    };
    devices_ = verbs_devices(WireDecision{kind, ports, {}}, config_, probe);
    for (size_t i = 0; i < devices_.size(); ++i) {
      const Device& d = devices_[i];
      const VerbsPortChoice& p = ports[i];
      MS_INFO(abi::kSubsysInit | abi::kSubsysNet, "using %s %s port %u gid %u (%s, %s, netdev %s, %s, %s)",
              std::string(to_string(kind)).c_str(), p.device.c_str(), p.port, p.gid.index,
              d.iface.address.c_str(), std::string(wire::verbs::to_string(p.gid.type)).c_str(),
              p.netdev.empty() ? "unknown" : p.netdev.c_str(),
              p.pci_path.empty() ? "no PCI path" : p.pci_path.c_str(), d.ptr_reason.c_str());
    }
    return {};
  }
#else
  if (is_verbs(config_.wire)) {
    return make_error("MEGASCALE_WIRE=" + std::string(to_string(config_.wire)) +
                      ": this plugin was built without libibverbs (no verbs wire); use udp or auto");
  }
#endif
  auto all = discover_interfaces();
  if (!all) return all.error();
  auto picked = select_interfaces(*all, config_.ifname);
  if (!picked) return picked.error();
  for (InterfaceInfo& i : *picked) {
    Device d;
    d.wire = kind;
    d.segment_bytes = config_.segment_bytes ? config_.segment_bytes
                                            : default_segment_bytes(i.mtu_bytes, i.family == AF_INET6);
    // GPU buffers only where the plugin copies them itself (MEGASCALE_GDR_COPY).
    if (config_.gdr_copy != GdrCopyMode::kOff) d.ptr_support |= abi::kPtrCuda;
    d.iface = std::move(i);
    devices_.push_back(std::move(d));
  }
  return {};
}

Result<std::unique_ptr<wire::UdpWire>> Registry::create_wire_locked(const Device& d, uint8_t dscp,
                                                                    uint32_t index) {
  wire::UdpConfig cfg = udp_config(d, dscp, index);
#if MEGASCALE_NCCL_VERBS
  if (is_verbs(d.wire)) {
    wire::verbs::VerbsPortConfig pc;
    pc.mode = d.wire == WireKind::kVerbsRc ? wire::verbs::PortMode::kRc : wire::verbs::PortMode::kUd;
    pc.device = d.iface.name;
    pc.port = d.rdma_port;
    pc.gid = config_.gid_selector;
    pc.slots = config_.layout.lanes;
    pc.traffic_class = static_cast<uint8_t>(dscp << 2);
    pc.retry_budget_ns = config_.retry_budget_ns;
    pc.segment_bytes = d.segment_bytes;
    return wire::verbs::create_verbs_wire(cfg, pc);
  }
#endif
  const int dev = static_cast<int>(&d - devices_.data());
  if (!config_.source_ports.empty()) {
    auto [it, first] = source_ports_dscp_.emplace(dev, dscp);
    if (first || it->second == dscp) {
      cfg.source_ports = config_.source_ports;
    } else {
      MS_INFO(abi::kSubsysNet | abi::kSubsysInit,
              "device %d %s: MEGASCALE_SOURCE_PORTS are bound by the wire for dscp %u; the wire for dscp %u "
              "takes ephemeral ports",
              dev, d.iface.name.c_str(), it->second, dscp);
    }
  }
  return wire::UdpWire::create(cfg);
}

wire::UdpConfig Registry::udp_config(const Device& d, uint8_t dscp, uint32_t index) const {
  wire::UdpConfig u;
  u.bind_host = d.iface.address;
  u.bind_port = 0;
  u.dscp = dscp;
  u.busy_poll = config_.busy_poll;
  u.idle_poll_ns = config_.idle_poll_ns;
  u.pending_poll_ns = config_.pending_poll_ns;
  u.help_after_ns = config_.help_after_ns;
  u.stall_ns = config_.stall_ns;
  u.io_threads = config_.layout.io_threads;
  u.min_rto_floor_ns = config_.rto_floor_ns;
  u.fault = config_.fault;
  u.fault.seed = config_.fault.seed + index;
  u.engine.cc = config_.cc;
  if (d.iface.speed_mbps > 0) u.engine.cc.flow.line_rate_bps = static_cast<double>(d.iface.speed_mbps) * 1e6;
  u.engine.lanes = config_.layout.lanes;
  u.engine.tail_probe = config_.tail_probe;
  u.engine.payload_crc = config_.payload_crc;
  u.engine.port_closed_fail_ns = config_.port_closed_fail_ns;
  u.engine.tail_probe_min_ns = config_.tail_probe_min_ns;
  u.engine.segment_bytes = d.segment_bytes;
  u.engine.max_posted_recvs = kEngineMaxRecvs;
  u.engine.connect_timeout_ns = config_.retry_budget_ns;
  u.engine.keepalive_interval_ns = config_.keepalive_interval_ns();
  // engine.seed: the wire draws a random one per process (UdpConfig::fixed_seed false).
  return u;
}

Result<std::vector<DeviceWire*>> Registry::wires_for(int dev, uint8_t dscp, uint32_t count) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<DeviceWire*> wires;
  for (uint32_t i = 0; i < count; ++i) {
    auto w = wire_for_locked(dev, dscp);
    if (!w) return w.error();
    wires.push_back(*w);
  }
  return wires;
}

Result<DeviceWire*> Registry::wire_for_locked(int dev, uint8_t dscp) {
  if (dev < 0 || static_cast<size_t>(dev) >= devices_.size()) {
    return make_error("device " + std::to_string(dev) + " does not exist (" +
                      std::to_string(devices_.size()) + " devices)");
  }
  WireSet& set = wires_[{dev, dscp}];
  if (set.wires.size() < config_.layout.wires) {
    const uint32_t index = static_cast<uint32_t>(set.wires.size());
    const Device& d = devices_[static_cast<size_t>(dev)];
    auto udp = create_wire_locked(d, dscp, index);
    if (!udp)
      return make_error(udp.error().code,
                        "device " + d.iface.name + " (" + d.iface.address + "): " + udp.error().message);
    if (Status s = (*udp)->start(); !s) return s.error();
    const engine::EngineConfig& ec = (*udp)->config().engine;
    const std::string probe_text =
        ec.tail_probe ? "after max(2 x SRTT, " + std::to_string(ec.tail_probe_min_ns / kNsPerUs) + " us)"
                      : "off";
    MS_INFO(abi::kSubsysNet | abi::kSubsysInit,
            "device %d %s wire %u: %s, dscp %u, %u lanes, segment %u B, %s, RTO >= %lld us, tail probes %s, "
            "payload CRC %s",
            dev, d.iface.name.c_str(), index, (*udp)->describe().c_str(), dscp, config_.layout.lanes,
            ec.segment_bytes, config_.cc.name.c_str(),
            static_cast<long long>(ec.cc.rto.min_rto_ns / kNsPerUs), probe_text.c_str(),
            ec.payload_crc ? "on" : "off (unchecked to version-2 peers)");
    set.wires.push_back(std::make_unique<DeviceWire>(
        dev, dscp, index, std::move(*udp), config_.retry_budget_ns + kNsPerSec, config_.late_ack_window_ns));
    stats_.add_wire(set.wires.back().get(), d.iface.name);
    return set.wires.back().get();
  }
  DeviceWire* w = set.wires[set.next % set.wires.size()].get();
  ++set.next;
  return w;
}

void Registry::add_context(Context* ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  contexts_.insert(ctx);
}

bool Registry::remove_context(Context* ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  if (contexts_.erase(ctx) == 0) return false;
  maybe_teardown_locked();
  return true;
}

Context* Registry::legacy_context() {
  std::lock_guard<std::mutex> lock(mu_);
  return legacy_.get();
}

Context* Registry::make_legacy_context() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!legacy_) {
    legacy_ = std::make_unique<Context>();
    legacy_->traffic_class = std::max(config_.traffic_class, 0);
  }
  return legacy_.get();
}

void Registry::comm_opened(CommBase* comm) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++open_comms_;
  }
  stats_.add(comm);
  trace_.add(comm);
}

void Registry::comm_closed() {
  std::lock_guard<std::mutex> lock(mu_);
  --open_comms_;
  maybe_teardown_locked();
}

void Registry::listen_opened() {
  std::lock_guard<std::mutex> lock(mu_);
  ++open_comms_;
}

void Registry::listen_closed() {
  std::lock_guard<std::mutex> lock(mu_);
  --open_comms_;
  maybe_teardown_locked();
}

void Registry::maybe_teardown_locked() {
  if (!contexts_.empty() || legacy_ || open_comms_ > 0 || wires_.empty()) return;
  size_t n = 0;
  for (const auto& [key, set] : wires_) n += set.wires.size();
  MS_INFO(abi::kSubsysNet, "last context finalized: stopping %zu wire(s)", n);
  const TimeNs now = wire::UdpWire::now();
  for (const auto& [key, set] : wires_) {
    for (const auto& w : set.wires) warn_late_acks_locked(*w, now, true);
  }
  remove_wires_from_stats_locked();
  wires_.clear();
  source_ports_dscp_.clear();
  if (Status s = trace_.write(); !s) MS_WARN("%s", s.error().message.c_str());
}

void Registry::warn_late_acks_locked(DeviceWire& w, TimeNs now, bool last) {
  const std::optional<std::string> why = w.late_acks(now, last);
  if (!why) return;
  MS_WARN(
      "device %s wire %u: %s. With %u wires x (1 + %u I/O threads) a rank here, "
      "`STEPS=layouts scripts/check-nccl-plugin.sh` compares thread layouts on this host "
      "(MEGASCALE_LAYOUT; docs/CONFIG.md)",
      devices_[static_cast<size_t>(w.dev())].iface.name.c_str(), w.index(), why->c_str(),
      config_.layout.wires, config_.layout.io_threads);
}

void Registry::remove_wires_from_stats_locked() {
  for (const auto& [key, set] : wires_) {
    for (const auto& w : set.wires) stats_.remove_wire(w.get());
  }
}

void Registry::tick(TimeNs now) {
  TimeNs due = next_reap_ns_.load(std::memory_order_relaxed);
  if (now >= due &&
      next_reap_ns_.compare_exchange_strong(due, now + 100 * kNsPerMs, std::memory_order_relaxed)) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [key, set] : wires_) {
      for (auto& w : set.wires) {
        w->reap_closing(now);
        warn_late_acks_locked(*w, now, false);
        if (std::optional<std::string> why = w->floor_stalls()) {
          MS_WARN("device %s wire %u: %s", devices_[static_cast<size_t>(w->dev())].iface.name.c_str(),
                  w->index(), why->c_str());
        }
      }
    }
  }
  stats_.tick(now);
}

}  // namespace megascale::nccl
