// Path id -> socket of the pool. The engine gives each lane a random u32 path id (new on repathing);
// each id should leave from a UDP source port of its own, so that ECMP spreads lanes over paths. A
// plain `path_id % sockets` would put two of four lanes on one port about 60% of the time (birthday
// problem), so ids are assigned when first seen, and keep their socket while they are used:
//  - a lane's first path id (no live id of that connection's lane yet) takes socket `lane % sockets`,
//    so lane i of every connection leaves from socket i: with UdpConfig::source_ports chosen by the
//    topology's port mapping (megascale topo ports), lane i then takes the path chosen for lane i;
//  - a later id of the same lane (the engine repathed it: PLB after bad rounds, or repeated RTOs) takes
//    the least-loaded socket other than the one the lane's previous id holds (lowest index on ties,
//    after the socket the previous such choice took, so equal loads rotate). When every socket already
//    carries a lane (the default pool has one socket per lane) the repathed lane shares another lane's
//    port: it leaves its path for one that some other lane uses, which is the point of repathing.
// An id unused for `idle_ns` is forgotten (its lane repathed, closed or went quiet; if it comes back it
// is assigned again, as a first id when its lane has no other live id).
//
//   PathMap paths(4);
//   uint32_t s = paths.socket_for(path_id, conn_id, lane, now);   // stable while path_id stays in use
//   paths.sweep(now, sec(2));                                      // now and then
//
// Internal to collectives/wire/udp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "megascale/common/units.h"

namespace megascale::wire::detail {

class PathMap {
 public:
  explicit PathMap(uint32_t sockets) : live_(sockets, 0) {}

  // The socket for `path_id` of lane `lane` of local connection `conn_id` (see the rules above).
  uint32_t socket_for(uint32_t path_id, uint64_t conn_id, uint32_t lane, TimeNs now) {
    if (path_id == last_path_ && last_entry_ != nullptr) {
      last_entry_->last_used_ns = now;
      return last_entry_->socket;
    }
    auto it = map_.find(path_id);
    if (it == map_.end()) {
      const auto n = static_cast<uint32_t>(live_.size());
      const LaneKey key{conn_id, lane};
      auto current = lanes_.find(key);
      uint32_t socket = lane % n;
      if (current != lanes_.end()) {
        // A repath: the least-loaded socket other than the one the lane's previous id holds.
        const uint32_t avoid = n > 1 ? map_.at(current->second).socket : n;
        uint32_t best = n;
        for (uint32_t k = 0; k < n; ++k) {
          const uint32_t s = (next_ + k) % n;
          if (s == avoid) continue;
          if (best == n || live_[s] < live_[best]) best = s;
        }
        socket = best == n ? 0 : best;
        next_ = (socket + 1) % n;
      }
      ++live_[socket];
      it = map_.emplace(path_id, Entry{socket, now, key}).first;
      lanes_[key] = path_id;
    }
    it->second.last_used_ns = now;
    last_path_ = path_id;
    last_entry_ = &it->second;
    return it->second.socket;
  }

  // Forgets ids not used since `now - idle_ns`.
  void sweep(TimeNs now, TimeNs idle_ns) {
    for (auto it = map_.begin(); it != map_.end();) {
      if (now - it->second.last_used_ns > idle_ns) {
        --live_[it->second.socket];
        auto lane = lanes_.find(it->second.lane);
        if (lane != lanes_.end() && lane->second == it->first) lanes_.erase(lane);
        it = map_.erase(it);
      } else {
        ++it;
      }
    }
    last_entry_ = nullptr;  // erase may have invalidated it
  }

  // Live path ids on `socket`.
  uint32_t live(uint32_t socket) const { return live_[socket]; }
  size_t size() const { return map_.size(); }

 private:
  struct LaneKey {
    uint64_t conn_id = 0;
    uint32_t lane = 0;
    bool operator==(const LaneKey&) const = default;
  };
  struct LaneKeyHash {
    size_t operator()(const LaneKey& k) const {
      return std::hash<uint64_t>{}(k.conn_id * 0x9E3779B97F4A7C15ULL ^ k.lane);
    }
  };
  struct Entry {
    uint32_t socket = 0;
    TimeNs last_used_ns = 0;
    LaneKey lane;
  };
  std::unordered_map<uint32_t, Entry> map_;
  std::unordered_map<LaneKey, uint32_t, LaneKeyHash> lanes_;  // (connection, lane) -> its latest path id
  std::vector<uint32_t> live_;                                // per socket
  uint32_t next_ = 0;
  uint32_t last_path_ = 0;
  Entry* last_entry_ = nullptr;
};

}  // namespace megascale::wire::detail
