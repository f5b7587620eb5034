// The registration cache (mr_cache.h).
#include "megascale/wire/verbs/mr_cache.h"

#include <algorithm>
#include <string>

namespace megascale::wire::verbs {

MrCache::~MrCache() {
  for (auto& [key, region] : regions_) deregister_(region.reg.handle);
}

size_t MrCache::regions(MrKind kind) const {
  return static_cast<size_t>(std::count_if(regions_.begin(), regions_.end(),
                                           [kind](const auto& kv) { return kv.first.first == kind; }));
}

Result<MrCache::Regions::iterator> MrCache::find_or_add(MrKind kind, uint64_t addr, uint64_t len,
                                                        DmabufRef buf) {
  if (len == 0) return make_error(ErrorCode::kInvalidArgument, "memory registration of 0 bytes");
  if (addr + len < addr) return make_error(ErrorCode::kInvalidArgument, "memory registration range wraps");
  const uint64_t end = addr + len;
  const uint64_t longest = longest_[static_cast<size_t>(kind)];
  // Regions of this kind starting at or before addr, nearest first; none starting more than the
  // longest region's length before addr can reach it.
  for (auto it = regions_.upper_bound(Key{kind, addr}); it != regions_.begin();) {
    --it;
    if (it->first.first != kind || addr - it->first.second > longest) break;
    if (it->second.end >= end) {
      ++hits_;
      return it;
    }
  }
  uint64_t start = addr;
  uint64_t region_end = end;
  Result<Registration> reg = make_error(ErrorCode::kInternal, "no registration");
  if (kind == MrKind::kHost) {
    start = addr & ~(kPageBytes - 1);
    region_end =
        end > UINT64_MAX - (kPageBytes - 1) ? UINT64_MAX : (end + kPageBytes - 1) & ~(kPageBytes - 1);
    reg = register_(start, region_end - start);
  } else {
    if (buf.fd < 0) {
      return make_error(ErrorCode::kInvalidArgument, "dma-buf registration with fd " +
                                                         std::to_string(buf.fd) + " (not a file descriptor)");
    }
    if (!register_dmabuf_) {
      return make_error(ErrorCode::kUnsupported, "dma-buf registration is not available in this cache");
    }
    reg = register_dmabuf_(start, len, buf);
  }
  ++misses_;
  if (!reg) return reg.error();
  auto it = regions_.emplace(Key{kind, start}, Region{.end = region_end, .reg = *reg, .id = next_id_++});
  by_id_.emplace(it->second.id, it);
  longest_[static_cast<size_t>(kind)] = std::max(longest, region_end - start);
  return it;
}

void MrCache::erase(Regions::iterator it) {
  deregister_(it->second.reg.handle);
  by_id_.erase(it->second.id);
  regions_.erase(it);
}

Result<MrKeys> MrCache::find_or_register(uint64_t addr, uint64_t len) {
  Result<Regions::iterator> it = find_or_add(MrKind::kHost, addr, len, {});
  if (!it) return it.error();
  return (*it)->second.reg.keys;
}

Result<MrKeys> MrCache::find_or_register_dmabuf(uint64_t addr, uint64_t len, DmabufRef buf) {
  Result<Regions::iterator> it = find_or_add(MrKind::kDmabuf, addr, len, buf);
  if (!it) return it.error();
  return (*it)->second.reg.keys;
}

Result<MrHold> MrCache::hold(uint64_t addr, uint64_t len) {
  Result<Regions::iterator> it = find_or_add(MrKind::kHost, addr, len, {});
  if (!it) return it.error();
  ++(*it)->second.holds;
  return MrHold{.keys = (*it)->second.reg.keys, .region = (*it)->second.id};
}

Result<MrHold> MrCache::hold_dmabuf(uint64_t addr, uint64_t len, DmabufRef buf) {
  Result<Regions::iterator> it = find_or_add(MrKind::kDmabuf, addr, len, buf);
  if (!it) return it.error();
  ++(*it)->second.holds;
  return MrHold{.keys = (*it)->second.reg.keys, .region = (*it)->second.id};
}

bool MrCache::release(uint64_t region) {
  auto found = by_id_.find(region);
  if (found == by_id_.end() || found->second->second.holds == 0) return false;
  if (--found->second->second.holds == 0) erase(found->second);
  return true;
}

void MrCache::invalidate(uint64_t addr, uint64_t len) {
  const uint64_t end = len > UINT64_MAX - addr ? UINT64_MAX : addr + len;
  for (auto it = regions_.begin(); it != regions_.end();) {
    const auto next = std::next(it);
    if (it->first.second < end && it->second.end > addr) erase(it);
    it = next;
  }
}

}  // namespace megascale::wire::verbs
