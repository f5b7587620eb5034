// One reliable, full-duplex, message-oriented connection: the application's side of the engine.
//
// Connections are created by an Endpoint (connect / accept) and owned by it; the Endpoint moves packets
// and timers, the application posts sends and receives and polls them:
//
//   Connection* c = ep->connection(id);
//   Result<RequestId> r = c->post_recv(buf, sizeof buf, /*tag=*/7);  // buf must outlive the request
//   Result<RequestId> s = c->post_send(data, size, /*tag=*/7);         // data too (zero copy)
//   ... drive the endpoint (on_packet / poll_tx / on_timer) ...
//   Completion done = c->test(*r);
//   if (done.done && done.ok) use(buf, done.bytes);                    // bytes = the message's size
//
// Semantics (engine-design.md, "Messages"):
// - Tags: a send has a tag >= 0; a receive has a tag >= 0 or -1 (any). Each send, in post order, takes
//   the earliest of the peer's receives not yet taken whose tag matches. Data moves only into a posted
//   receive (receiver-driven credits): a send waits, without limit, until the peer posts a matching
//   receive. A message larger than the matched receive's capacity fails that send (and that receive).
// - Sizes are u64: 0 bytes .. 2^64-1. The receive completes with the message's real size.
// - Requests complete in any order; test() reports each once: a done request's id is released by the
//   test() that reports it, and a later test() of it says "unknown request".
// - Failures (peer unreachable within the retry budget, reset, peer closed) complete every pending
//   request with ok = false and an error naming the cause. The engine never hangs a request silently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "megascale/common/result.h"
#include "megascale/common/units.h"
#include "megascale/engine/request.h"
#include "megascale/engine/stats.h"

namespace megascale::engine {

using ConnId = uint64_t;     // the local connection id (random, nonzero)
using RequestId = uint64_t;  // a posted send or receive; never 0

enum class ConnectionState : uint8_t {
  kConnecting,   // SYN sent, waiting for SYN_ACK (posts are queued)
  kEstablished,  // data flows
  kClosing,      // close() called: draining our sends, then FIN until the peer answers
  kClosed,       // both FINs exchanged (or the peer closed): pending work was reported, nothing flows
  kFailed,       // error(): retry budget spent, reset, version mismatch, no answer to SYN
};

std::string_view to_string(ConnectionState s);

struct Completion {
  bool done = false;   // finished, successfully or not
  bool ok = false;     // meaningful when done
  uint64_t bytes = 0;  // send: bytes sent; receive: the message's size (<= the posted capacity)
  int32_t tag = 0;     // send: its tag; receive: the matched send's tag
  std::string error;   // when done && !ok: why ("peer unreachable: ...", "unknown request", ...)
  bool send = false;   // when done: the request was a send (its buffer is the caller's again)
  // Where its time went, on the clock the engine is driven with; meaningful when ok.
  // A send: its first segment released to the wire (it had the peer's credit, its turn behind earlier
  // sends and room in the window), its last segment released (first transmission), and the ACK that
  // covered its last segment processed (done). A receive: its first and last segments placed, the
  // last being when it completed. The poster's own post and test() times complete the picture.
  TimeNs first_ns = 0;
  TimeNs last_ns = 0;
  TimeNs done_ns = 0;
  // When done && !ok: what kind of failure (megascale/common/result.h). kInvalidUsage: this request
  // alone failed (a message larger than the receive, an unknown id, a local close); kRemote: the peer
  // refused, reset or closed the connection, or its port is closed; kTimeout: the peer stopped
  // answering within the retry budget. kInternal: a failure nobody classified.
  ErrorCode code = ErrorCode::kInternal;
};

// What was left unfinished when the connection closed (both sides' counts, from the FIN exchange).
struct CloseReport {
  uint32_t unfinished_sends = 0;       // our sends failed by the close
  uint32_t unfinished_recvs = 0;       // our receives failed by the close
  uint32_t peer_unfinished_sends = 0;  // the peer's, as its FIN reported them
  uint32_t peer_unfinished_recvs = 0;
  bool closed_by_peer = false;  // the peer's FIN came first
};

namespace detail {
class ConnectionCore;  // the protocol state machine (src/connection_core.h)
}

class Connection {
 public:
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Queues a message of `size_bytes` bytes at `data` with `tag` (>= 0). `data` must stay valid and
  // unchanged until the send completes (segments are read from it, also for retransmission).
  // Errors: connection closing/closed/failed, negative tag, too many sends outstanding.
  Result<RequestId> post_send(const void* data, uint64_t size_bytes, int32_t tag);
  // The same with arguments checked already (SendRequest::make): errors are the connection's state and
  // its limits.
  Result<RequestId> post_send(const SendRequest& request);

  // Posts a receive buffer of `capacity_bytes` for a message with `tag` (-1 = any tag). `buf` must stay
  // valid until the receive completes; payload is written straight into it, in any order.
  // Errors: connection closing/closed/failed, tag < -1, too many receives outstanding.
  Result<RequestId> post_recv(void* buf, uint64_t capacity_bytes, int32_t tag);

  // Reports a request: done or not, and how it ended. Releases the id once it reports done.
  Completion test(RequestId id);

  // Starts a clean close: no new posts; our sends drain until acknowledged (a send still waiting for
  // the peer's receive waits at most cc.rto.retry_budget_ns); then the sends left and our pending
  // receives fail ("connection closed locally ..."), and a FIN carrying those counts goes to the
  // peer, which fails its own pending work and answers. The connection ends kClosed (or kFailed if
  // the peer stops answering within the retry budget). Receives are not drained: close when they are
  // done.
  // Calling close() again, or on a closed/failed connection, does nothing.
  void close(TimeNs now);

  ConnectionState state() const;
  // Why the connection failed; empty unless state() == kFailed.
  const std::string& error() const;
  // Valid once state() is kClosed.
  const CloseReport& close_report() const;

  ConnId id() const;
  uint64_t remote_id() const;  // the peer's connection id (0 while connecting)
  uint32_t peer() const;       // the wire's handle for the remote address

  // Negotiated segment payload size, lanes we send on.
  uint32_t segment_bytes() const;
  uint32_t lanes() const;

  const ConnectionStats& stats() const;
  // lane < lanes(); cwnd/rate/in-flight are current as of the last engine call.
  const LaneStats& lane_stats(uint32_t lane) const;

  // Requests not yet reported done by test() (posted and not yet released).
  uint64_t pending_requests() const;

 private:
  friend class Endpoint;
  explicit Connection(std::unique_ptr<detail::ConnectionCore> core);
  std::unique_ptr<detail::ConnectionCore> core_;
};

}  // namespace megascale::engine
