// The progress loop of a UdpWire: the rounds that drive the engine (post submitted tickets, send,
// receive, run timers, send again), the thread that runs them in threaded mode, the waits that sleep
// until a round changed what they wait for, and the fences between the engine's thread and the I/O
// threads. Internal to collectives/wire/udp; UdpWire (udp.h) is its public face.
//
//   auto loop = std::make_unique<ProgressLoop>(config, caps, std::move(endpoint), std::move(io));
//   loop->start();                                          // threaded mode, or:
//   { std::lock_guard lock(loop->mutex()); loop->round(UdpWire::now(), true, false); }
//
// Lock discipline: mutex() guards all the loop's state: the engine endpoint, the I/O state (Io), the
// ticket queue's engine side and the waiters. Every method is called with it held, except those listed
// under "Without the lock" (they read only atomics and the I/O threads' own counters, or take the lock
// themselves).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "io.h"
#include "megascale/engine/endpoint.h"
#include "megascale/wire/udp.h"
#include "tickets.h"

namespace megascale::wire::detail {

// A mutex that knows how many threads wait for it, so the progress thread, which would otherwise take
// it back at once (mutexes are not fair), can step aside for a post or a waiter.
class WireMutex {
 public:
  void lock() {
    waiting_.fetch_add(1, std::memory_order_relaxed);
    m_.lock();
    waiting_.fetch_sub(1, std::memory_order_relaxed);
  }
  void unlock() { m_.unlock(); }
  bool try_lock() { return m_.try_lock(); }
  int waiting() const { return waiting_.load(std::memory_order_relaxed); }

 private:
  std::mutex m_;
  std::atomic<int> waiting_{0};
};

class ProgressLoop {
 public:
  ProgressLoop(const UdpConfig& config, UdpCapabilities caps, std::unique_ptr<engine::Endpoint> endpoint,
               std::unique_ptr<Io> io);
  ~ProgressLoop();  // stops the thread
  ProgressLoop(const ProgressLoop&) = delete;
  ProgressLoop& operator=(const ProgressLoop&) = delete;

  WireMutex& mutex() const { return mu_; }
  // Fixed once created: readable without the lock.
  const UdpConfig& config() const { return config_; }
  const UdpCapabilities& caps() const { return caps_; }

  engine::Endpoint& endpoint() { return *endpoint_; }
  const engine::Endpoint& endpoint() const { return *endpoint_; }
  Io& io() { return *io_; }
  const Io& io() const { return *io_; }

  // One round at `now` (re-read from the clock between its steps when `read_clock`): post submitted
  // tickets, send what was posted, receive, engine timers, send, finish tickets. `overlap_copies`: the
  // round hands payload copies to the I/O threads and goes on without waiting for them (threaded
  // mode); otherwise they are done before it returns. Errors are socket failures.
  Status round(TimeNs now, bool read_clock, bool overlap_copies);
  // When the next round has timer work; 0 when it has packets to send at once; kNever if none.
  TimeNs next_deadline() const;
  // UdpWire::now(), counted (UdpWireStats::clock_reads): every read of a round and of the progress
  // thread between rounds goes through here.
  TimeNs clock() {
    ++io_->clock_reads;
    return UdpWire::now();
  }
  // The time the last round ended at: the clock it read last (a round re-reads it only after it moved
  // packets, so this is at most that round's own memory work old), or the time it was given.
  // Atomic: help() reads it without the lock.
  TimeNs round_time() const { return round_ns_.load(std::memory_order_relaxed); }
  // Wakes the loop if it sleeps (a post gave it work).
  void wake();
  // Over a packet port: arms its wait fd before a sleep; false when work arrived meanwhile (then do
  // not sleep). True without a port.
  bool arm_port();

  // test(): a held request once its fence passed, else the engine's answer, held back while its own
  // fence has not passed (it then reads not done).
  engine::Completion test(engine::ConnId conn, engine::RequestId req);
  // Each I/O thread's position now: what close() waits for before the caller's buffers are free.
  std::vector<uint64_t> fence(Fence kind) const;
  // The fence a finished request waits for, taken out of its table: a send's TX batches that hold its
  // packets (Io::tx_marks), a receive's own payload copies (Io::copy_marks). Empty if none went to a
  // thread.
  std::vector<uint64_t> request_fence(engine::ConnId conn, engine::RequestId req,
                                      const engine::Completion& result);
  // A finished request held back for its fence (by test(), or by a wait() that timed out), taken out.
  std::optional<Held> take_held(engine::ConnId conn, engine::RequestId req);
  // Holds a finished request back until a later test() or wait() sees its fence passed.
  void hold_back(engine::ConnId conn, engine::RequestId req, Held held);
  // Releases the connection in the engine and forgets its held requests and fence marks (the fences
  // of close() cover their payloads).
  void release(engine::ConnId conn);
  // A summary of what waits on `conn` look at (completion counts, state): a waiter wakes when it changes.
  uint64_t completion_signature(engine::ConnId conn) const;
  // " (peer 3 is 10.0.0.2:5000)": the address of a connection's peer, for error messages.
  std::string peer_suffix(engine::ConnId conn) const;
  // Waits until pred() holds (true) or `timeout_ns` passes (false), with `lock` (on mutex()) held
  // while pred() and signature() run. Threaded mode: sleeps until a round changes `signature()`;
  // otherwise runs rounds itself.
  bool wait_until(std::unique_lock<WireMutex>& lock, TimeNs timeout_ns, const std::function<bool()>& pred,
                  const std::function<uint64_t()>& signature);
  // The first socket error the thread hit (it stops on one); empty while fine.
  const std::string& thread_error() const { return thread_error_; }
  UdpWireStats stats() const { return collect_stats(*io_); }
  uint64_t datagrams_moved() const;

  // ---- Without the lock. ----

  // Threaded mode, from the thread that owns the wire: start() takes the lock itself.
  Status start();
  void stop();
  bool running() const { return threaded_.load(); }
  // Sleeps until a datagram is readable, `until` (CLOCK_MONOTONIC ns) passes, or wake() is called.
  void wait_for_io(TimeNs until);
  // Whether each I/O thread got past `fence` (their own counters).
  bool fence_passed(Fence kind, const std::vector<uint64_t>& fence) const;
  // Waits until the fence passes (true) or `deadline` (UdpWire::now()) comes (false), helping with
  // copies.
  bool wait_fence(Fence kind, const std::vector<uint64_t>& fence, TimeNs deadline = kNever);
  // Queues a ticket for the next round (the ticket queue's own lock) and wakes the loop if it sleeps.
  void submit(UdpWire::Ticket& t);
  // UdpWire::help(): takes the lock only if free, and only when no round ended for help_after_ns.
  bool help(TimeNs now);
  TicketQueue& tickets() { return tickets_; }

 private:
  void receive(TimeNs now, bool read_clock, bool overlap_copies);
  void receive_port(TimeNs now, bool read_clock);  // over a packet port
  void transmit_port(TimeNs now, bool read_clock);
  bool read_socket(TimeNs& now, bool read_clock, int fd);  // true if it got datagrams
  void receive_from_threads(TimeNs now, bool read_clock, bool overlap_copies);
  // Gives back to the I/O threads the receive batches whose payload copies are done.
  void release_copied();
  // Whether receive batches wait for payload copies (the progress thread then does not sleep).
  bool copies_pending() const;
  // One received message (a datagram or a GRO aggregate). `verified`, if not null, has a flag per
  // datagram (1: an I/O thread found its CRCs good) and is advanced past this message's.
  void deliver_message(TimeNs now, const RxMessage& m, const uint8_t*& verified);
  void deliver(TimeNs now, uint32_t peer, uint8_t* data, size_t len, bool ce, TimeNs rx_ns, bool verified);
  void transmit(TimeNs now, bool read_clock);
  // A send or receive moved packets at `now` (Io::last_io_ns): the round re-reads the clock for its
  // timers.
  void note_io(TimeNs now) {
    io_->last_io_ns = now;
    moved_ = true;
  }
  void transmit_to_threads(TimeNs now, bool read_clock);
  uint32_t socket_for(const engine::TxPacket& p, TimeNs now);  // pool index a packet leaves from
  // Hands the closed ports read from the sockets (here or by the I/O threads) to the engine.
  void report_port_errors(TimeNs now);
  // Whether the application has requests outstanding, for the threads' polling (pending_poll_ns).
  void publish_pending(TimeNs now);
  // Holds a finished request back (Io::held) while its fence has not passed: `result` then reads not
  // done.
  void hold(engine::ConnId conn, engine::RequestId req, engine::Completion& result);
  void finish_tickets();
  void thread_main();
  // Under the lock: whether a waiter's signature changed since it last looked (then notify them).
  bool waiters_changed();

  struct Waiter {
    std::function<uint64_t()> signature;
    uint64_t last = 0;
  };

  const UdpConfig config_;
  const UdpCapabilities caps_;
  std::unique_ptr<engine::Endpoint> endpoint_;
  std::unique_ptr<Io> io_;
  TicketQueue tickets_;

  mutable WireMutex mu_;
  std::condition_variable_any progressed_;  // signalled when a waiter's signature changed
  std::vector<Waiter*> waiters_;            // threads waiting on progressed_
  std::thread thread_;
  std::atomic<bool> threaded_{false};  // a progress thread was started and not yet stopped
  std::atomic<bool> stop_{false};
  std::atomic<bool> sleeping_{false};  // the loop is in (or about to enter) epoll_wait
  std::atomic<TimeNs> sleep_until_{0};     // while sleeping_: the deadline it sleeps until
  std::string thread_error_;
  bool more_tx_ = false;    // the last round filled a whole batch: go again without sleeping
  bool moved_ = false;      // this round sent or received packets (note_io)
  std::atomic<TimeNs> round_ns_{0};  // round_time()
  std::string port_error_;  // a packet port's failure: round() returns it
};

}  // namespace megascale::wire::detail
