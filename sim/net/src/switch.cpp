#include "megascale/sim/switch.h"

#include <utility>

#include "megascale/common/splitmix.h"
#include "megascale/sim/pfc.h"

namespace megascale::sim {

namespace {
uint64_t mix64(uint64_t z) {
  return splitmix64_mix(z);
}
}  // namespace

uint64_t default_ecmp_hash(const FiveTuple& flow, uint64_t seed) {
  const uint64_t a = (uint64_t{flow.src_addr} << 32) | flow.dst_addr;
  const uint64_t b = (uint64_t{flow.src_port} << 24) | (uint64_t{flow.dst_port} << 8) | flow.protocol;
  return mix64(mix64(a ^ seed) ^ b);
}

Switch::Switch(uint32_t id, uint64_t hash_seed, PacketPool& pool, EcmpHash hash)
    : id_(id), hash_seed_(hash_seed), pool_(pool), hash_(std::move(hash)) {}

uint32_t Switch::add_port(OutputQueue* queue) {
  ports_.push_back(queue);
  return static_cast<uint32_t>(ports_.size() - 1);
}

uint32_t Switch::add_group(const std::vector<uint32_t>& ports) {
  groups_.push_back(Group{static_cast<uint32_t>(group_ports_.size()), static_cast<uint32_t>(ports.size())});
  group_ports_.insert(group_ports_.end(), ports.begin(), ports.end());
  return static_cast<uint32_t>(groups_.size() - 1);
}

void Switch::set_route_group(uint32_t dst_host, uint32_t group) {
  if (route_group_.size() <= dst_host) route_group_.resize(dst_host + 1, kNoPort);
  route_group_[dst_host] = group;
}

void Switch::set_route(uint32_t dst_host, const std::vector<uint32_t>& ports) {
  set_route_group(dst_host, add_group(ports));
}

uint32_t Switch::select_port(const FiveTuple& flow) const {
  if (flow.dst_addr >= route_group_.size() || route_group_[flow.dst_addr] == kNoPort) return kNoPort;
  const Group g = groups_[route_group_[flow.dst_addr]];
  if (g.size == 0) return kNoPort;
  const uint32_t* hops = &group_ports_[g.first];
  if (g.size == 1) return hops[0];
  if (reroute_ && ports_down_ > 0) {
    uint32_t live[64];  // ECMP groups are at most a switch's radix; larger ones fall back below
    uint32_t n = 0;
    for (uint32_t i = 0; i < g.size && g.size <= 64; ++i)
      if (port_down_[hops[i]] == 0) live[n++] = hops[i];
    if (n > 0 && n < g.size) {
      if (spray_rng_ != nullptr) return live[spray_rng_->below(n)];
      if (select_) return live[select_(flow, n)];
      return live[hash_(flow, hash_seed_) % n];
    }
  }
  if (spray_rng_ != nullptr) return hops[spray_rng_->below(g.size)];
  if (select_) return hops[select_(flow, g.size)];
  return hops[hash_(flow, hash_seed_) % g.size];
}

void Switch::set_port_up(uint32_t port, bool up) {
  if (port_down_.size() < ports_.size()) port_down_.resize(ports_.size(), 0);
  const uint8_t down = up ? 0 : 1;
  if (port_down_[port] == down) return;
  port_down_[port] = down;
  ports_down_ = up ? ports_down_ - 1 : ports_down_ + 1;
}

void Switch::receive(Packet* pkt) {
  const uint32_t port = select_port(pkt->flow);
  if (port == kNoPort) {
    ++unroutable_;
    if (pkt->ingress != nullptr) pkt->ingress->on_departure(pkt);
    pool_.release(pkt);
    return;
  }
  ports_[port]->receive(pkt);
}

}  // namespace megascale::sim
