// The request slab: allocation, ids, completion and release.
#include "request_table.h"

#include <algorithm>
#include <utility>

namespace megascale::engine::detail {

RequestTable::RequestTable(const EngineConfig& cfg, ConnectionStats& stats, EndpointStats* ep_stats)
    : cfg_(cfg), stats_(stats), ep_stats_(ep_stats) {
  const uint32_t n = initial_entries(cfg, cfg.max_posted_sends + cfg.max_posted_recvs);
  reqs_.resize(n);
  free_.reserve(n);
  for (uint32_t i = n; i > 0; --i) free_.push_back(i - 1);
}

uint32_t RequestTable::alloc() {
  if (free_.empty()) {
    // grow_connection_state: every slot is in use. The new slots are handed out lowest first, the
    // order a whole slab's untouched slots would go in.
    const auto old_size = static_cast<uint32_t>(reqs_.size());
    const uint32_t limit = cfg_.max_posted_sends + cfg_.max_posted_recvs;
    const uint32_t new_size = std::min(limit, old_size * 2);
    reqs_.resize(new_size);
    for (uint32_t i = new_size; i > old_size; --i) free_.push_back(i - 1);
  }
  const uint32_t idx = free_.back();
  free_.pop_back();
  Request& r = reqs_[idx];
  const uint32_t gen = r.gen;
  r = Request{};
  r.gen = gen;
  r.in_use = true;
  ++in_use_;
  ++pending_;
  ++ep_stats_->requests_posted;
  return idx;
}

uint32_t RequestTable::find(RequestId id) const {
  const uint64_t low = id & 0xFFFFFFFFULL;
  const auto gen = static_cast<uint32_t>(id >> 32);
  if (low == 0 || low > reqs_.size() || !reqs_[low - 1].in_use || reqs_[low - 1].gen != gen)
    return kNoRequest;
  return static_cast<uint32_t>(low - 1);
}

bool RequestTable::complete(uint32_t idx, bool ok, uint64_t bytes, int32_t tag, std::string error,
                            ErrorCode code) {
  Request& r = reqs_[idx];
  if (r.done) return false;
  r.done = true;
  --pending_;
  r.ok = ok;
  r.bytes = bytes;
  r.tag = tag;
  r.error = std::move(error);
  r.code = code;
  if (r.is_send) {
    ++(ok ? stats_.sends_completed : stats_.sends_failed);
    ++ep_stats_->sends_completed;
  } else {
    ++(ok ? stats_.recvs_completed : stats_.recvs_failed);
    ++ep_stats_->receives_completed;
  }
  return true;
}

void RequestTable::release(uint32_t idx) {
  Request& r = reqs_[idx];
  r.in_use = false;
  ++r.gen;
  r.error.clear();
  --in_use_;
  free_.push_back(idx);
}

}  // namespace megascale::engine::detail
