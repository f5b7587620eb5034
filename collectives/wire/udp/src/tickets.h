// The ticket queue: requests a caller submits without the wire's lock (UdpWire::submit), on their way
// into the engine and back out as completions. Internal to collectives/wire/udp.
//
//   queue.submit(t);                 // any thread: t joins `submitted`
//   // each progress round, under the wire's lock:
//   queue.post(endpoint);            // submitted -> queued -> posted to the engine (in order)
//   queue.finish(epoch, test, held); // posted tickets the engine finished get their completion
//
// Lock discipline: submit() and the `submitted` list take the queue's own mutex, which no progress
// round holds, so a caller never waits out a round to submit. Everything else (queued, posted and the
// round's flags) belongs to the progress loop: those methods run under the wire's lock
// (ProgressLoop::mutex()).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "megascale/engine/endpoint.h"
#include "megascale/wire/udp.h"

namespace megascale::wire::detail {

class TicketQueue {
 public:
  using Ticket = UdpWire::Ticket;

  // Any thread.
  void submit(Ticket& t);
  // Any thread: tickets wait in `submitted` (read before the progress thread sleeps).
  bool has_submitted() const { return has_submitted_.load(std::memory_order_seq_cst); }

  // ---- Under the wire's lock, from the progress round. ----

  // Start of a round: takes what was submitted and posts it to the engine, in submission order. While
  // the engine refuses a ticket for a limit (too many receives outstanding, ...), it and its
  // connection's later tickets wait for a later round; a ticket whose connection is gone or failed
  // finishes at once, not ok, with the engine's reason.
  void post(engine::Endpoint& endpoint);
  // End of a round: finishes the posted tickets whose request `test(conn, req)` reports done.
  // `epoch` is a sum of the engine's completion counts: while it stands and no finished ticket waits
  // for its fence (`held(conn, req)`), no posted ticket can have finished and none is looked at.
  template <class Test, class IsHeld>
  void finish(uint64_t epoch, Test&& test, IsHeld&& held);
  // Forgets the connection's tickets, submitted, queued or posted: they never finish.
  void forget(engine::ConnId conn);
  // Whether the next round has ticket work even if nothing else happens: a finished ticket waits for
  // its fence (looked at every round, as a caller's test() would), or a ticket queued behind an engine
  // limit may go in after the last round finished one.
  bool wants_round() const { return fenced_ || (finished_ && !queued_.empty()); }

 private:
  static void finish_ticket(Ticket& t, engine::Completion c);

  std::mutex submit_mu_;
  std::vector<Ticket*> submitted_;          // under submit_mu_
  std::atomic<bool> has_submitted_{false};  // submitted_ is not empty
  std::vector<Ticket*> queued_;             // submitted, not yet accepted by the engine (in order)
  std::vector<Ticket*> posted_;             // accepted, not finished
  uint64_t epoch_ = ~uint64_t{0};           // the completion sum when posted_ was last looked through
  bool fenced_ = false;                     // a finished ticket waits for its fence: look every round
  bool finished_ = false;                   // the last round finished a ticket (a limit may have eased)
};

template <class Test, class IsHeld>
void TicketQueue::finish(uint64_t epoch, Test&& test, IsHeld&& held) {
  finished_ = false;
  if (posted_.empty()) {
    fenced_ = false;
    return;
  }
  if (epoch == epoch_ && !fenced_) return;
  epoch_ = epoch;
  fenced_ = false;
  size_t kept = 0;
  for (Ticket* t : posted_) {
    engine::Completion c = test(t->conn_, t->id_);
    if (c.done) {
      finish_ticket(*t, std::move(c));
      finished_ = true;
      continue;
    }
    posted_[kept++] = t;
    fenced_ |= held(t->conn_, t->id_);
  }
  posted_.resize(kept);
}

}  // namespace megascale::wire::detail
