// A switch: output ports (OutputQueues, each feeding a Link) and a next-hop table per destination
// host. Where a destination has several equal next hops, ECMP picks one by hashing the packet's
// 5-tuple with the switch's seed, so one flow (one engine lane: one UDP source port) keeps one path
// and different switches spread differently. The choice is pluggable: an EcmpHash (a 64-bit hash taken
// modulo the group size; default_ecmp_hash by default), an EcmpSelect that returns the member itself
// (fabrics built from topology/'s model plug its switch hash models in through it, clos.h), or
// per-packet spraying (a uniformly random member per frame from the simulation's PRNG, as in
// packet-spraying fabrics; configs/sim/htsim-tails-*.yaml compare it with per-flow ECMP).
// Next hops are kept as groups shared by destinations (a ToR's one uplink group serves every remote
// host), so a 12,288-NIC fabric costs one 4-byte group id per (switch, destination).
// Forwarding is store-and-forward with no switching latency: a frame enters its output queue when its
// last bit has arrived.
//
//   Switch leaf(/*id=*/0, /*hash_seed=*/0x1234, pool);
//   uint32_t up0 = leaf.add_port(&uplink0_queue), up1 = leaf.add_port(&uplink1_queue);
//   leaf.set_route(/*dst_host=*/17, {up0, up1});     // two equal next hops
//   link_from_host.set_far_end(&leaf);
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "megascale/sim/packet.h"
#include "megascale/sim/queue.h"
#include "megascale/sim/simulation.h"

namespace megascale::sim {

// A 5-tuple hash for ECMP; `seed` is the switch's own.
using EcmpHash = std::function<uint64_t(const FiveTuple& flow, uint64_t seed)>;
// Picks the member (0 .. group_size-1) of an ECMP group for a flow; replaces the hash when set.
using EcmpSelect = std::function<uint32_t(const FiveTuple& flow, uint32_t group_size)>;

// A stand-in hash: the tuple's fields folded into 64 bits and mixed with SplitMix64's finaliser,
// so every bit of every field moves the result (uniform, unlike the XOR/CRC hashes real ASICs use).
uint64_t default_ecmp_hash(const FiveTuple& flow, uint64_t seed);

class Switch : public PacketSink {
 public:
  Switch(uint32_t id, uint64_t hash_seed, PacketPool& pool, EcmpHash hash = default_ecmp_hash);

  // Adds an output port; returns its index.
  uint32_t add_port(OutputQueue* queue);
  // Sets the equal next hops (port indices) toward `dst_host`; one port for a single path.
  void set_route(uint32_t dst_host, const std::vector<uint32_t>& ports);
  // A group of equal next hops, in member order (what an EcmpSelect's member indexes); returns its id.
  uint32_t add_group(const std::vector<uint32_t>& ports);
  // Routes `dst_host` over group `group` (from add_group).
  void set_route_group(uint32_t dst_host, uint32_t group);
  // Member choice by `select` instead of the hash.
  void set_ecmp_select(EcmpSelect select) { select_ = std::move(select); }
  // Per-packet spraying: each frame takes a random member drawn from `rng` (the simulation's PRNG);
  // nullptr turns it off.
  void set_spraying(Rng* rng) { spray_rng_ = rng; }

  // Link failures (faults.h). With reroute on, a group skips its members whose port is down and picks
  // among the live ones (the same hash or select over the live count), as a switch does once it has
  // detected the port down and withdrawn it from the ECMP group; a group with no live member keeps its
  // members (frames go to a dead link and are lost). With reroute off the switch goes on using a dead
  // port: the failure is not (yet) detected.
  void set_port_up(uint32_t port, bool up);
  void set_reroute(bool reroute) { reroute_ = reroute; }

  // Routes a frame to its output port; a frame with no route is dropped (counted).
  void receive(Packet* pkt) override;

  uint32_t id() const { return id_; }
  size_t port_count() const { return ports_.size(); }
  OutputQueue& port(uint32_t index) { return *ports_[index]; }
  const OutputQueue& port(uint32_t index) const { return *ports_[index]; }
  // The port ECMP picks for `flow` toward flow.dst_addr (kNoPort if there is no route). With spraying
  // on it draws from the PRNG.
  uint32_t select_port(const FiveTuple& flow) const;
  static constexpr uint32_t kNoPort = 0xFFFFFFFF;
  uint64_t unroutable() const { return unroutable_; }

 private:
  uint32_t id_;
  uint64_t hash_seed_;
  PacketPool& pool_;
  EcmpHash hash_;
  EcmpSelect select_;
  Rng* spray_rng_ = nullptr;
  std::vector<OutputQueue*> ports_;
  struct Group {
    uint32_t first;  // into group_ports_
    uint32_t size;
  };
  std::vector<Group> groups_;
  std::vector<uint32_t> group_ports_;
  std::vector<uint32_t> route_group_;  // by destination host; kNoPort: none
  uint64_t unroutable_ = 0;
  std::vector<uint8_t> port_down_;  // by port; empty until a port goes down
  uint32_t ports_down_ = 0;
  bool reroute_ = false;
};

}  // namespace megascale::sim
