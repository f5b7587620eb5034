// The posted sends and receives of one connection, in a slab: a request's RequestId carries its slab
// index and a generation, so a stale id is told apart from the request that reuses its slot.
//
//   RequestTable reqs(cfg, stats, &ep_stats);
//   const uint32_t idx = reqs.alloc();           // a fresh Request, counted posted and pending
//   RequestId id = reqs.id(idx);                 // what the application holds
//   reqs.complete(idx, true, bytes, tag, {});    // done: counted in ConnectionStats
//   reqs.release(reqs.find(id));                 // test() took its completion: the slot is free
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "conn_common.h"
#include "megascale/common/result.h"
#include "megascale/engine/config.h"
#include "megascale/engine/stats.h"

namespace megascale::engine::detail {

// A posted send or receive.
struct Request {
  uint32_t gen = 0;
  bool in_use = false;
  bool is_send = false;
  bool done = false;
  bool ok = false;
  int32_t tag = 0;                        // posted tag; after completion of a receive, the sender's tag
  uint64_t bytes = 0;                     // completion bytes
  std::string error;                      // set only on failure (allocation off the hot path)
  ErrorCode code = ErrorCode::kInternal;  // on failure: its kind (Completion::code)
  // Send.
  const uint8_t* data = nullptr;
  uint64_t size = 0;
  uint64_t next_offset = 0;   // segmentation cursor
  uint64_t segs_unacked = 0;  // segments sent at least once and not yet acknowledged
  bool matched = false;       // took a peer credit
  bool all_sent = false;      // every segment has been sent at least once
  // Receive.
  uint8_t* buf = nullptr;
  uint64_t capacity = 0;
  uint64_t placed = 0;   // payload bytes placed (each seq counted once)
  uint64_t slot = 0;     // receive slot (cumulative), or the credit's slot for a send
  uint64_t msg_len = 0;  // receive: the message's size, from its first segment
  bool msg_len_known = false;
  bool credit_sent = false;
  // Where the request's time went (Completion::first_ns etc.).
  TimeNs first_ns = 0;  // send: its first segment released; receive: its first segment placed
  TimeNs last_ns = 0;   // send: its last segment released (once); receive: its last segment placed
  TimeNs done_ns = 0;   // completed (a send: the ACK that covered its last segment)
};

class RequestTable {
 public:
  // `stats`, `ep_stats`: the connection's and the endpoint's counters; completions are counted there.
  RequestTable(const EngineConfig& cfg, ConnectionStats& stats, EndpointStats* ep_stats);

  // A fresh request (in use, not done). EngineConfig::grow_connection_state: the slab doubles when
  // every slot is taken; the caller has checked max_posted_sends / max_posted_recvs.
  uint32_t alloc();
  // The id the application knows request `idx` by (its slab index and generation).
  RequestId id(uint32_t idx) const { return (uint64_t{reqs_[idx].gen} << 32) | (uint64_t{idx} + 1); }
  // The slab index of the live request `id`, or kNoRequest for an id that names none.
  uint32_t find(RequestId id) const;
  // Marks request `idx` done and counts it; false (nothing changed) if it already was. `error`, `code`:
  // why a failure failed.
  bool complete(uint32_t idx, bool ok, uint64_t bytes, int32_t tag, std::string error = {},
                ErrorCode code = ErrorCode::kInternal);
  // The application took `idx`'s completion: its slot may be reused.
  void release(uint32_t idx);

  Request& operator[](uint32_t idx) { return reqs_[idx]; }
  const Request& operator[](uint32_t idx) const { return reqs_[idx]; }
  uint32_t size() const { return static_cast<uint32_t>(reqs_.size()); }
  uint64_t in_use() const { return in_use_; }
  uint64_t pending() const { return pending_; }  // posted and not yet done

 private:
  const EngineConfig& cfg_;
  ConnectionStats& stats_;
  EndpointStats* ep_stats_;
  std::vector<Request> reqs_;
  std::vector<uint32_t> free_;
  uint64_t in_use_ = 0;
  uint64_t pending_ = 0;
};

}  // namespace megascale::engine::detail
