#include "megascale/sim/switch.h"

#include <utility>

namespace megascale::sim {

namespace {
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
constexpr uint32_t kNoRoute = 0xFFFFFFFF;
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

void Switch::set_route(uint32_t dst_host, std::vector<uint32_t> ports) {
  if (routes_.size() <= dst_host) routes_.resize(dst_host + 1);
  routes_[dst_host] = std::move(ports);
}

uint32_t Switch::select_port(const FiveTuple& flow) const {
  if (flow.dst_addr >= routes_.size()) return kNoRoute;
  const std::vector<uint32_t>& hops = routes_[flow.dst_addr];
  if (hops.empty()) return kNoRoute;
  if (hops.size() == 1) return hops[0];
  return hops[hash_(flow, hash_seed_) % hops.size()];
}

void Switch::receive(Packet* pkt) {
  const uint32_t port = select_port(pkt->flow);
  if (port == kNoRoute) {
    ++unroutable_;
    pool_.release(pkt);
    return;
  }
  ports_[port]->receive(pkt);
}

}  // namespace megascale::sim
