// The registration cache (mr_cache.h).
#include "megascale/wire/verbs/mr_cache.h"

#include <algorithm>
#include <string>

namespace megascale::wire::verbs {

MrCache::~MrCache() {
  for (auto& [start, region] : regions_) deregister_(region.reg.handle);
}

Result<MrKeys> MrCache::find_or_register(uint64_t addr, uint64_t len) {
  if (len == 0) return make_error(ErrorCode::kInvalidArgument, "memory registration of 0 bytes");
  if (addr + len < addr) return make_error(ErrorCode::kInvalidArgument, "memory registration range wraps");
  const uint64_t end = addr + len;
  // Regions starting at or before addr, nearest first; none starting more than longest_ before addr
  // can reach it.
  for (auto it = regions_.upper_bound(addr); it != regions_.begin();) {
    --it;
    if (addr - it->first > longest_) break;
    if (it->second.end >= end) {
      ++hits_;
      return it->second.reg.keys;
    }
  }
  ++misses_;
  const uint64_t start = addr & ~(kPageBytes - 1);
  const uint64_t page_end =
      end > UINT64_MAX - (kPageBytes - 1) ? UINT64_MAX : (end + kPageBytes - 1) & ~(kPageBytes - 1);
  Result<Registration> reg = register_(start, page_end - start);
  if (!reg) return reg.error();
  regions_.emplace(start, Region{.end = page_end, .reg = *reg});
  longest_ = std::max(longest_, page_end - start);
  return reg->keys;
}

void MrCache::invalidate(uint64_t addr, uint64_t len) {
  const uint64_t end = addr + len;
  for (auto it = regions_.begin(); it != regions_.end();) {
    if (it->first < end && it->second.end > addr) {
      deregister_(it->second.reg.handle);
      it = regions_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace megascale::wire::verbs
