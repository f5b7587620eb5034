// The peer table: socket address <-> u32 peer id. The engine names peers only by id; the wire keeps the
// addresses. Ids are dense (0, 1, 2, ...) and never reused, so an id doubles as an index.
//
//   PeerTable peers(1024);
//   auto id = peers.intern(addr);     // the same address always gives the same id
//   const SockAddr& a = peers.address(*id);
//
// Internal to collectives/wire/udp.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "socket.h"

namespace megascale::wire::detail {

class PeerTable {
 public:
  explicit PeerTable(size_t max_peers) : max_peers_(max_peers) {}

  // The id of `addr`, adding it when new; nullopt when the table is full (the datagram is dropped:
  // a flood of spoofed source addresses must not grow memory without bound).
  std::optional<uint32_t> intern(const SockAddr& addr) {
    if (last_ < addresses_.size() && addresses_[last_] == addr) return last_;  // bursts from one peer
    const size_t h = hash_address(addr);
    auto [it, end] = index_.equal_range(h);
    for (; it != end; ++it) {
      if (addresses_[it->second] == addr) return last_ = it->second;
    }
    if (addresses_.size() >= max_peers_) return std::nullopt;
    const auto id = static_cast<uint32_t>(addresses_.size());
    addresses_.push_back(addr);
    index_.emplace(h, id);
    return last_ = id;
  }

  // The id of `addr` if known.
  std::optional<uint32_t> find(const SockAddr& addr) const {
    auto [it, end] = index_.equal_range(hash_address(addr));
    for (; it != end; ++it) {
      if (addresses_[it->second] == addr) return it->second;
    }
    return std::nullopt;
  }

  bool contains(uint32_t id) const { return id < addresses_.size(); }
  const SockAddr& address(uint32_t id) const { return addresses_[id]; }
  std::span<const SockAddr> addresses() const { return addresses_; }
  size_t size() const { return addresses_.size(); }

 private:
  size_t max_peers_;
  std::vector<SockAddr> addresses_;
  std::unordered_multimap<size_t, uint32_t> index_;
  uint32_t last_ = UINT32_MAX;
};

}  // namespace megascale::wire::detail
