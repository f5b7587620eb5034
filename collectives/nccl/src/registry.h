// The plugin's process-wide state: the configuration read at the first init, the devices, the UDP
// wires (created on first use, one set per device and DSCP), the live contexts and comms, and the
// stats writer. The only global mutable state of the plugin; it lives behind the exported tables.
//
//   Registry& r = Registry::get();
//   if (Status s = r.ensure_ready(logger); !s) { MS_WARN(...); return abi::kNetInvalidArgument; }
//   auto wires = r.wires_for(dev, dscp, n);  // n wires in turn over MEGASCALE_LAYOUT wires (a comm's
//   stripes)
//
// Teardown: when the last context is finalized and no comm is open, every wire is destroyed (threads
// joined, sockets closed) and the request trace written, so NCCL may dlclose the library. The destructor
// (library unload, process exit) tears down whatever is left.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "config.h"
#include "device.h"
#include "interfaces.h"
#include "megascale/common/result.h"
#include "megascale/nccl/abi/net_v12.h"
#include "stats_writer.h"
#include "trace_writer.h"
#include "transport.h"

namespace megascale::nccl {

class Registry {
 public:
  static Registry& get();
  ~Registry();

  // The first call reads the configuration and finds the devices, and echoes both at INFO; later calls
  // return the same outcome (the environment is read once).
  Status ensure_ready();
  bool ready() const { return ready_.load(std::memory_order_acquire); }
  const PluginConfig& config() const { return config_; }
  const std::vector<Device>& devices() const { return devices_; }

  // `count` wires of device `dev` sending with `dscp`, each created on first use: the layout's wires
  // (MEGASCALE_LAYOUT wires=) are taken in turn, under one lock, so a comm's stripes are on distinct wires
  // while count <= wires.
  Result<std::vector<DeviceWire*>> wires_for(int dev, uint8_t dscp, uint32_t count);

  void add_context(Context* ctx);
  // Forgets a context (its pending connects must already be retired). False if it was not known.
  bool remove_context(Context* ctx);
  Context* legacy_context();
  Context* make_legacy_context();

  // Comm bookkeeping: the stats writer sees every comm (the closer calls stats().remove(comm) while
  // the connection still exists); teardown waits for the last comm.
  void comm_opened(CommBase* comm);
  void comm_closed();
  void listen_opened();
  void listen_closed();

  // Housekeeping from the data path: releases finished closes and writes due stats. Cheap when
  // nothing is due.
  void tick(TimeNs now);

  StatsWriter& stats() { return stats_; }
  TraceWriter& trace() { return trace_; }

 private:
  Registry() = default;
  void maybe_teardown_locked();
  // Each wire's final "wire" stats record, and the stats writer forgets it (before the wires stop).
  void remove_wires_from_stats_locked();
  // WARNs when the wire saw many segments arrive twice in its window (DeviceWire::late_acks).
  void warn_late_acks_locked(DeviceWire& w, TimeNs now, bool last);
  wire::UdpConfig udp_config(const Device& d, uint8_t dscp, uint32_t index) const;
  // The devices MEGASCALE_WIRE and MEGASCALE_IFNAME give (verbs ports or interfaces); logs the choice.
  Status find_devices_locked();
  Result<std::unique_ptr<wire::UdpWire>> create_wire_locked(const Device& d, uint8_t dscp, uint32_t index);
  Result<DeviceWire*> wire_for_locked(int dev, uint8_t dscp);

  struct WireSet {
    std::vector<std::unique_ptr<DeviceWire>> wires;
    uint32_t next = 0;
  };

  std::mutex mu_;  // guards everything below (never held while waiting on the network)
  std::atomic<bool> ready_{false};
  bool tried_ = false;
  Status status_;
  PluginConfig config_;
  std::vector<Device> devices_;
  std::map<std::pair<int, uint8_t>, WireSet> wires_;
  // Devices whose wire binds MEGASCALE_SOURCE_PORTS: the first wire opened on the device takes them; a
  // wire for another traffic class on the same device cannot bind them again and stays ephemeral.
  std::map<int, uint8_t> source_ports_dscp_;
  std::unordered_set<Context*> contexts_;
  std::unique_ptr<Context> legacy_;
  size_t open_comms_ = 0;
  std::atomic<TimeNs> next_reap_ns_{0};
  StatsWriter stats_;
  TraceWriter trace_;
};

}  // namespace megascale::nccl
