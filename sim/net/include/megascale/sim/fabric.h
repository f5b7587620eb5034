// A simulated network and its small builders: a star (N hosts on one switch) and a 2-tier leaf-spine
// with ECMP at the leaves. A Fabric owns the simulation, the packet pool and every element. Fabrics
// from topology/'s model (configs/fabrics/, 2- and 3-tier CLOS) are built by clos.h on the same
// building blocks.
//
//   FabricConfig fc;
//   fc.engine.cc = *cc::builtin_cc_config("swift");
//   auto fabric = build_leaf_spine(fc, LeafSpineShape{.leaves = 4, .spines = 2, .hosts_per_leaf = 8});
//   if (!fabric) { report(fabric.error().message); }
//   Host& h = (*fabric)->host(0);
//
// Every link has the same propagation delay. A host's NIC and its leaf's downlink run at
// host_rate_bps, leaf-spine links at fabric_rate_bps. Switch ports share one QueueConfig
// (switch_buffer_bytes, red); NIC ports never drop (the engine's windows bound them). Every link into
// a switch enters through a SwitchIngress (pfc.h); with pfc.enabled the switch is lossless: ingresses
// pause their upstream ports and output queues do not tail-drop (the data class, with two priorities).
// With shared_buffer.bytes each switch gets one SharedBuffer (shared_buffer.h) that its lossy queues and
// its PFC ingresses draw on; without PFC the links feed the switches directly.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "megascale/common/result.h"
#include "megascale/engine/config.h"
#include "megascale/sim/host.h"
#include "megascale/sim/link.h"
#include "megascale/sim/partition.h"
#include "megascale/sim/pfc.h"
#include "megascale/sim/queue.h"
#include "megascale/sim/shared_buffer.h"
#include "megascale/sim/simulation.h"
#include "megascale/sim/switch.h"

namespace megascale::sim {

struct ClosInfo;  // clos.h: how a fabric built from topology/'s model maps onto its elements

struct FabricConfig {
  // Every host's engine. virtual_payload is forced on; seed is mixed with the host's address so lanes
  // of different hosts pick different path ids. cc.flow.line_rate_bps is set to host_rate_bps.
  engine::EngineConfig engine;
  uint64_t host_rate_bps = 100'000'000'000;
  uint64_t fabric_rate_bps = 100'000'000'000;
  TimePs link_delay_ps = kPsPerUs;           // every link, one way
  uint64_t switch_buffer_bytes = 1'000'000;  // per switch output port, when there is no shared buffer
  RedConfig red;                             // every switch port
  PfcConfig pfc;                             // every switch ingress
  // One shared buffer per switch (shared_buffer.h; bytes 0: none, per-port capacity as before): output
  // queues are admitted by its dynamic threshold, PFC ingresses charge it (and take their XOFF from it
  // with pfc.dynamic).
  SharedBufferConfig shared_buffer;
  uint8_t priorities = 1;  // switch ports: 1 FIFO, or 2 (control strictly before data; packet.h)
  uint64_t seed = 1;       // the simulation's PRNG and the switches' hash seeds
  EcmpHash hash = default_ecmp_hash;
  // Partitions run on as many threads (partition.h); 1: the one simulation of before. The builders
  // place the elements (build_clos by ToR blocks, the others in equal blocks).
  uint32_t partitions = 1;
  // Canonical order (partition.h): same-time ties by element and RED/spraying draws from per-element
  // PRNG streams, so every partition count gives the same run. On whenever partitions > 1; with one
  // partition, set it to get that same run on one thread (off: the one-simulation order of before).
  bool canonical_order = false;
};

struct LeafSpineShape {
  uint32_t leaves = 2;
  uint32_t spines = 2;
  uint32_t hosts_per_leaf = 4;
};

class Fabric {
 public:
  explicit Fabric(const FabricConfig& config);
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  Simulation& sim() { return sim_; }
  PacketPool& pool() { return pool_; }

  // Partitions (partition.h; FabricConfig::partitions). Partition 0's simulation and pool are sim()
  // and pool(). set_partition_map places the elements added after it (call it before adding any).
  uint32_t partition_count() const { return static_cast<uint32_t>(extra_sims_.size()) + 1; }
  Simulation& sim(uint32_t partition) { return partition == 0 ? sim_ : *extra_sims_[partition - 1]; }
  PacketPool& pool(uint32_t partition) { return partition == 0 ? pool_ : *extra_pools_[partition - 1]; }
  Status set_partition_map(PartitionMap map);
  uint32_t host_partition(uint32_t address) const {
    return address < map_.host_partition.size() ? map_.host_partition[address] : 0;
  }
  uint32_t switch_partition(uint32_t id) const {
    return id < map_.switch_partition.size() ? map_.switch_partition[id] : 0;
  }
  // Canonical order in force (FabricConfig::canonical_order, or more than one partition).
  bool canonical_order() const { return canonical_; }
  // The PRNG a switch sprays with: its own stream in canonical order, else its partition's PRNG.
  Rng* spray_rng(uint32_t switch_id);
  // The links between partitions and their mailboxes; nullptr with one partition.
  PartitionLinks* partition_links() { return cross_.get(); }
  // Events run, over every partition.
  uint64_t events_processed() const;
  const FabricConfig& config() const { return cfg_; }

  size_t host_count() const { return hosts_.size(); }
  Host& host(uint32_t address) { return *hosts_[address]; }
  size_t switch_count() const { return switches_.size(); }
  Switch& switch_at(size_t i) { return *switches_[i]; }
  // Switch i's shared buffer; nullptr without one (FabricConfig::shared_buffer.bytes == 0).
  SharedBuffer* shared_buffer(size_t i) { return buffers_.empty() ? nullptr : buffers_[i].get(); }

  // Frames lost on links that were down (link.h), over every link.
  uint64_t total_link_down_drops() const;
  // Drops (tail drops and PFC headroom drops) and CE marks over every queue (switch ports and NICs).
  uint64_t total_drops() const;
  uint64_t total_marks() const;
  // PFC: PAUSEs sent by every ingress, and the time ports spent paused, summed over ports.
  uint64_t total_pauses() const;
  TimePs total_paused_ps() const;
  size_t ingress_count() const { return ingresses_.size(); }
  const SwitchIngress& ingress(size_t i) const { return *ingresses_[i]; }
  size_t queue_count() const { return queues_.size(); }
  const OutputQueue& queue(size_t i) const { return *queues_[i]; }
  // Links in creation order: add_port makes one, attach_host two (NIC -> switch, then switch -> host),
  // connect_switches two (a -> b, then b -> a).
  size_t link_count() const { return links_.size(); }
  Link& link(size_t i) { return *links_[i]; }

  // For fabrics from topology/'s model (clos.h); nullptr otherwise.
  const ClosInfo* clos() const { return clos_.get(); }
  void set_clos(std::shared_ptr<const ClosInfo> info) { clos_ = std::move(info); }

  // Building blocks (the builders below use them). add_host creates the host's engine endpoint.
  Result<Host*> add_host();
  Switch& add_switch();
  // A one-way port: a queue at `q.rate_bps` feeding a link with the fabric's delay into `far_end`.
  // Both in partition 0 (attach_host and connect_switches place ports by their owners).
  OutputQueue& add_port(const QueueConfig& q, PacketSink* far_end);
  // A one-way port into a switch: a queue at `q.rate_bps`, a link, and a SwitchIngress of `sw` (all in
  // `sw`'s partition).
  OutputQueue& add_port_into(const QueueConfig& q, Switch& sw);
  // Connects host <-> switch: the host's NIC feeds the switch; a new switch port feeds the host.
  // Returns the switch's port index toward the host.
  uint32_t attach_host(Host& host, Switch& sw);
  // Connects two switches at `rate_bps` (0: fabric_rate_bps); returns (a's port toward b, b's port
  // toward a).
  std::pair<uint32_t, uint32_t> connect_switches(Switch& a, Switch& b, uint64_t rate_bps = 0);

 private:
  QueueConfig switch_port(uint64_t rate_bps) const;
  // add_port and add_port_into with the sending port in partition `from` and the far end in `to`.
  OutputQueue& add_port_between(const QueueConfig& q, PacketSink* far_end, uint32_t from, uint32_t to);
  OutputQueue& add_port_into_from(const QueueConfig& q, Switch& sw, uint32_t from);

  FabricConfig cfg_;
  Simulation sim_;
  PacketPool pool_;
  std::vector<std::unique_ptr<Host>> hosts_;
  std::vector<std::unique_ptr<Switch>> switches_;
  std::vector<std::unique_ptr<OutputQueue>> queues_;
  std::vector<std::unique_ptr<Link>> links_;
  std::vector<std::unique_ptr<SwitchIngress>> ingresses_;
  std::vector<std::unique_ptr<SharedBuffer>> buffers_;  // by switch id; empty without shared buffers
  std::shared_ptr<const ClosInfo> clos_;
  // Partitions 1.. (partition 0 is sim_ and pool_, so a one-partition fabric is the one of before).
  std::vector<std::unique_ptr<Simulation>> extra_sims_;
  std::vector<std::unique_ptr<PacketPool>> extra_pools_;
  PartitionMap map_;
  std::unique_ptr<PartitionLinks> cross_;
  bool canonical_ = false;
  uint32_t next_order_id_ = 1;  // canonical order: ids of event sources in creation order
  std::deque<Rng> spray_rngs_;  // canonical order: by switch id (a deque: stable addresses)
  // Gives `source` the next id (canonical order only).
  void number(EventSource& source) {
    if (canonical_) source.set_order_id(next_order_id_++);
  }
};

// N hosts on one switch.
Result<std::unique_ptr<Fabric>> build_star(const FabricConfig& config, uint32_t hosts);

// leaves x hosts_per_leaf hosts; every leaf connects to every spine. Host h sits on leaf
// h / hosts_per_leaf. Leaves route local hosts down and others over all spines (ECMP); spines route
// to the destination's leaf.
Result<std::unique_ptr<Fabric>> build_leaf_spine(const FabricConfig& config, const LeafSpineShape& shape);

}  // namespace megascale::sim
