// A switch: output ports (OutputQueues, each feeding a Link) and a next-hop table per destination
// host. Where a destination has several equal next hops, ECMP picks one by hashing the packet's
// 5-tuple with the switch's seed, so one flow (one engine lane: one UDP source port) keeps one path
// and different switches spread differently. The hash is pluggable: topology/'s hash models (the
// Broadcom/Mellanox-like functions) will be plugged in here; until then default_ecmp_hash stands in.
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

namespace megascale::sim {

// A 5-tuple hash for ECMP; `seed` is the switch's own.
using EcmpHash = std::function<uint64_t(const FiveTuple& flow, uint64_t seed)>;

// A stand-in hash: the tuple's fields folded into 64 bits and mixed with SplitMix64's finaliser,
// so every bit of every field moves the result (uniform, unlike the XOR/CRC hashes real ASICs use).
uint64_t default_ecmp_hash(const FiveTuple& flow, uint64_t seed);

class Switch : public PacketSink {
 public:
  Switch(uint32_t id, uint64_t hash_seed, PacketPool& pool, EcmpHash hash = default_ecmp_hash);

  // Adds an output port; returns its index.
  uint32_t add_port(OutputQueue* queue);
  // Sets the equal next hops (port indices) toward `dst_host`; one port for a single path.
  void set_route(uint32_t dst_host, std::vector<uint32_t> ports);

  // Routes a frame to its output port; a frame with no route is dropped (counted).
  void receive(Packet* pkt) override;

  uint32_t id() const { return id_; }
  size_t port_count() const { return ports_.size(); }
  OutputQueue& port(uint32_t index) { return *ports_[index]; }
  const OutputQueue& port(uint32_t index) const { return *ports_[index]; }
  // The port ECMP picks for `flow` toward flow.dst_addr.
  uint32_t select_port(const FiveTuple& flow) const;
  uint64_t unroutable() const { return unroutable_; }

 private:
  uint32_t id_;
  uint64_t hash_seed_;
  PacketPool& pool_;
  EcmpHash hash_;
  std::vector<OutputQueue*> ports_;
  std::vector<std::vector<uint32_t>> routes_;  // by destination host
  uint64_t unroutable_ = 0;
};

}  // namespace megascale::sim
