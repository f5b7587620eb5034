// A timeline of NCCL's requests as Chrome trace JSON (Perfetto, chrome://tracing), when
// MEGASCALE_TRACE_FILE is set: one slice per isend and per irecv buffer, from post to the test() that
// said done, with its phases (CommBase::phases: wait, transfer, ack for a send, report) nested inside.
//
//   pid  the process; tid  a comm's track: comm number x 100 + a lane, so that the requests a comm has
//   in flight at once (NCCL keeps up to 8 per connection) sit on lanes of their own and never overlap
//   (CommBase::trace_lanes_busy); lane 0's thread_name names the track and carries the connection's
//   ids, "conn" and "peer_conn" (16 hex digits, as in the stats files), so that a send and the receive
//   it feeds pair up across the ranks' files (scripts/megascale-message-times.py);
//   ts / dur  microseconds on CLOCK_MONOTONIC, the clock every process of a host shares, so the traces
//   of one host's ranks merge into one timeline (scripts/megascale-trace-merge.py) and show where a
//   step waits: on the network (a send's transfer, a receive's wait) or on NCCL and the GPU (the gap
//   between a receive reported done and the next isend that needed its data).
//
// The first kMaxRequests requests of the process are kept (later ones are counted, not kept); the file
// is written when the plugin's last comm closes and its wires stop, and again at process exit if more
// came since. A process killed outright writes nothing.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "megascale/common/result.h"
#include "megascale/common/units.h"
#include "megascale/engine/connection.h"

namespace megascale::nccl {

struct CommBase;

class TraceWriter {
 public:
  static constexpr size_t kMaxRequests = 200'000;
  // Empty path: disabled (every call returns at once).
  void configure(const std::string& path);
  bool enabled() const { return !path_.empty(); }
  const std::string& path() const { return path_; }

  // Gives the comm its track (CommBase::trace_id) and names it.
  void add(CommBase* comm);
  // One request (one buffer of a grouped irecv) that ended well, on lane `lane` of the comm's track:
  // posted at `posted_ns`, the engine's times in `c`, reported done to NCCL at `seen_ns`.
  void record(const CommBase& comm, uint8_t lane, TimeNs posted_ns, const engine::Completion& c,
              TimeNs seen_ns);
  // Writes the file (atomically: a temporary file renamed over it) if anything came since the last
  // write; the message says what failed.
  Status write();

 private:
  struct Request {
    uint32_t comm = 0;  // trace id
    uint8_t lane = 0;
    bool send = false;
    uint64_t bytes = 0;
    TimeNs posted = 0, first = 0, last = 0, done = 0, seen = 0;
  };
  struct Comm {
    std::string name;    // "send 127.0.0.1:40123 (lo)"
    uint32_t lanes = 0;  // lanes its recorded requests used (the highest + 1)
    uint64_t conn = 0;       // its engine connection's id, and the peer's id for the same connection:
    uint64_t peer_conn = 0;  // a send's (conn, peer_conn) is its receive's (peer_conn, conn)
    uint32_t stripes = 1;    // its stripes: a request's bytes are stripe 0's part of the message
  };

  std::string path_;
  mutable std::mutex mu_;  // guards everything below
  std::vector<Comm> comms_;
  std::vector<Request> requests_;
  uint64_t dropped_ = 0;
  size_t written_ = ~size_t{0};  // requests_.size() + dropped_ at the last write (none yet)
};

}  // namespace megascale::nccl
