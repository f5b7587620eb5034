// Path id -> socket of the pool. The engine gives each lane a random u32 path id (new on repathing);
// each id should leave from a UDP source port of its own, so that ECMP spreads lanes over paths. A
// plain `path_id % sockets` would put two of four lanes on one port about 60% of the time (birthday
// problem), so ids are assigned on first sight to the socket carrying the fewest live ids, and keep it
// while they are used. An id unused for `idle_ns` is forgotten (its lane repathed, closed or went
// quiet; if it comes back it is assigned again).
//
//   PathMap paths(4);
//   uint32_t s = paths.socket_for(path_id, now);   // stable while path_id stays in use
//   paths.sweep(now, sec(2));                       // now and then
//
// Internal to collectives/wire/udp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "megascale/common/units.h"

namespace megascale::wire::detail {

class PathMap {
 public:
  explicit PathMap(uint32_t sockets) : live_(sockets, 0) {}

  // The socket for `path_id`; assigns the least-loaded one (lowest index on ties, after the socket
  // the previous assignment took, so equal loads rotate) when the id is new.
  uint32_t socket_for(uint32_t path_id, TimeNs now) {
    if (path_id == last_path_ && last_entry_ != nullptr) {
      last_entry_->last_used_ns = now;
      return last_entry_->socket;
    }
    auto it = map_.find(path_id);
    if (it == map_.end()) {
      const auto n = static_cast<uint32_t>(live_.size());
      uint32_t best = (next_ + 0) % n;
      for (uint32_t k = 1; k < n; ++k) {
        const uint32_t s = (next_ + k) % n;
        if (live_[s] < live_[best]) best = s;
      }
      next_ = (best + 1) % n;
      ++live_[best];
      it = map_.emplace(path_id, Entry{best, now}).first;
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
  struct Entry {
    uint32_t socket = 0;
    TimeNs last_used_ns = 0;
  };
  std::unordered_map<uint32_t, Entry> map_;
  std::vector<uint32_t> live_;  // per socket
  uint32_t next_ = 0;
  uint32_t last_path_ = 0;
  Entry* last_entry_ = nullptr;
};

}  // namespace megascale::wire::detail
