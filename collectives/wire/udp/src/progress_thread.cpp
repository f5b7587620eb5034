// The progress loop's thread and waits, and the fences between the engine's thread and the I/O
// threads (progress_loop.h).
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <string>
#include <utility>

#include "progress_loop.h"

namespace megascale::wire::detail {

Status ProgressLoop::start() {
  std::lock_guard<WireMutex> lock(mu_);
  if (thread_.joinable())
    return make_error(ErrorCode::kInvalidUsage, "udp wire: progress thread already running");
  stop_.store(false);
  thread_error_.clear();
  threaded_.store(true);
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "msprogress");  // for `top -H` and profilers
    thread_main();
  });
  return {};
}

void ProgressLoop::stop() {
  if (!thread_.joinable()) return;
  stop_.store(true);
  eventfd_write(io_->wakefd, 1);
  thread_.join();
  thread_ = std::thread();
  threaded_.store(false);
}

void ProgressLoop::wake() {
  // Only a sleeping progress loop needs the eventfd; a running one looks at the engine again anyway.
  if (sleeping_.load(std::memory_order_acquire)) eventfd_write(io_->wakefd, 1);
}

void ProgressLoop::submit(UdpWire::Ticket& t) {
  tickets_.submit(t);
  // The progress thread sets `sleeping_` and then looks at has_submitted() (both seq_cst): either it
  // sees this ticket, or this sees it asleep and wakes it.
  if (sleeping_.load(std::memory_order_seq_cst)) eventfd_write(io_->wakefd, 1);
}

void ProgressLoop::thread_main() {
  // Kernel timers may fire this late; the default 50 us slack would blur pacing and RTO timing.
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  while (!stop_.load(std::memory_order_relaxed)) {
    std::unique_lock<WireMutex> lock(mu_);
    const TimeNs round_ns = clock();
    if (Status s = round(round_ns, true, /*overlap_copies=*/true); !s) {
      thread_error_ = s.error().message;
      progressed_.notify_all();
      return;
    }
    const bool notify = waiters_changed();
    const TimeNs deadline = next_deadline();
    // Sleep unless busy-polling, the deadline is due or close enough to spin for, or packets moved
    // a moment ago (more are likely on their way; longer while the application waits for requests).
    // The round's own time: it read the clock after any packet it moved, and a round that moved none
    // took only memory work (a sleep reads the clock again for its length).
    const TimeNs t = round_time();
    const TimeNs window = io_->caller_wake.pending.load(std::memory_order_relaxed) ? config_.pending_poll_ns
                                                                                   : config_.idle_poll_ns;
    // Batches waiting for their payload copies are given back by a round: no sleep until they are.
    const bool copies_waiting = copies_pending();
    // A finished ticket waiting for its fence is looked at every round, as a caller's test() would; a
    // ticket queued behind an engine limit is posted by the round after one that finished a ticket.
    bool sleep = !config_.busy_poll && deadline > t + config_.spin_ns && t - io_->last_io_ns > window &&
                 !copies_waiting && !tickets_.wants_round();
    if (sleep) {
      // Set under the lock: a post that takes the lock after this sees it and writes the eventfd. A
      // ticket is submitted without the lock: looked for after the flag is set (see submit()).
      sleep_until_.store(deadline, std::memory_order_relaxed);
      sleeping_.store(true, std::memory_order_seq_cst);
      if (tickets_.has_submitted() || !arm_port()) {
        sleeping_.store(false, std::memory_order_relaxed);
        sleep = false;
      } else {
        ++io_->sleeps;
      }
    }
    // Read under the lock: help() rounds on other threads write it too.
    const bool quiet_round = io_->last_io_ns < round_ns;
    lock.unlock();
    if (notify) progressed_.notify_all();
    // Step aside while application threads wait for the lock (a post, a test, a woken waiter).
    for (int i = 0; i < 1000 && mu_.waiting() > 0; ++i) std::this_thread::yield();
    // A round that moved nothing and does not sleep: payload copies its I/O threads have not got to
    // yet are made here (outside the lock: a receive waits for them, and an I/O thread that lost its
    // CPU would otherwise hold its receives back); with none, it gives the CPU to any thread waiting
    // for one, as the I/O threads do (io_thread.cpp).
    if (!sleep && quiet_round) {
      size_t helped = 0;
      if (copies_waiting) {
        for (const auto& th : io_->threads) helped += th->copies().run();
      }
      if (helped == 0) std::this_thread::yield();
    }
    if (sleep) {
      // stop() sets the flag, then writes the eventfd: a stop() before this look is seen here, one
      // after it wakes the sleep.
      if (!stop_.load()) wait_for_io(deadline);
      sleeping_.store(false, std::memory_order_release);
    }
  }
}

bool ProgressLoop::waiters_changed() {
  bool changed = false;
  for (Waiter* w : waiters_) {
    const uint64_t sig = w->signature();
    changed |= sig != w->last;
    w->last = sig;
  }
  return changed;
}

bool ProgressLoop::help(TimeNs now) {
  if (config_.help_after_ns <= 0) return false;
  // A progress thread that polls ends a round every few microseconds; one that has not for this long
  // sleeps or waits for a CPU. (One in a long round holds the lock: the try-lock fails.)
  if (now - round_time() < config_.help_after_ns) return false;
  std::unique_lock<WireMutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock() || !thread_error_.empty()) return false;
  ++io_->help_rounds;
  // A socket error here is the progress thread's to report: its next round meets it too.
  const bool threaded = threaded_.load(std::memory_order_relaxed);
  if (!round(clock(), true, /*overlap_copies=*/threaded)) return true;
  // The round deferred ACKs for an answer (a completed receive) or filled a whole batch: the caller
  // answers through a ticket, which the next round posts, so what was deferred leaves now rather than
  // waiting for that round.
  if (more_tx_) transmit(clock(), true);
  const bool notify = waiters_changed();
  // A sleeping progress thread wakes at the deadline it saw before this round; one that came due
  // sooner (a retransmission timer this round armed, pacing) needs it awake.
  const bool wake_thread = threaded && sleeping_.load(std::memory_order_acquire) &&
                           next_deadline() < sleep_until_.load(std::memory_order_relaxed);
  lock.unlock();
  if (notify) progressed_.notify_all();
  if (wake_thread) eventfd_write(io_->wakefd, 1);
  return true;
}

bool ProgressLoop::arm_port() {
  return io_->port == nullptr || io_->port->arm();
}

void ProgressLoop::wait_for_io(TimeNs until) {
  const TimeNs wait_ns = until - UdpWire::now();
  if (wait_ns <= 0) return;
  timespec ts{};
  const bool forever = until == kNever;
  if (!forever) {
    ts.tv_sec = wait_ns / kNsPerSec;
    ts.tv_nsec = wait_ns % kNsPerSec;
  }
  // I/O threads write the eventfd after publishing a batch only while this flag is set; set, then look
  // at their rings, so that a batch published in between is not slept through.
  io_->caller_wake.sleeping.store(true, std::memory_order_seq_cst);
  struct Clear {
    std::atomic<bool>& flag;
    ~Clear() { flag.store(false, std::memory_order_relaxed); }
  } clear{io_->caller_wake.sleeping};
  for (const auto& t : io_->threads) {
    if (t->rx().consumer_slot() != nullptr) return;
  }
  // Level-triggered: the events are looked at again by the next progress round; here they only wake.
  epoll_event events[8];
  int rc = epoll_pwait2(io_->epfd, events, 8, forever ? nullptr : &ts, nullptr);
  if (rc < 0 && errno == ENOSYS) {  // kernels before 5.11: millisecond resolution, rounded up
    const int ms = forever ? -1 : static_cast<int>((wait_ns + kNsPerMs - 1) / kNsPerMs);
    rc = epoll_wait(io_->epfd, events, 8, ms);
  }
  for (int i = 0; i < rc; ++i) {
    if (events[i].data.u32 == kWakeToken) {
      eventfd_t drained = 0;
      eventfd_read(io_->wakefd, &drained);
      io_->wake_reads.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

bool ProgressLoop::wait_until(std::unique_lock<WireMutex>& lock, TimeNs timeout_ns,
                              const std::function<bool()>& pred, const std::function<uint64_t()>& signature) {
  const TimeNs deadline = timeout_ns >= kNever - UdpWire::now() ? kNever : UdpWire::now() + timeout_ns;
  while (!pred()) {
    if (UdpWire::now() >= deadline) return false;
    if (threaded_.load(std::memory_order_relaxed)) {
      if (!thread_error_.empty()) return false;
      // Registered and waiting under the one lock: the progress thread cannot compute a signature
      // between our pred() and our wait, so no wake-up is lost. The cap is only a safety net.
      Waiter self{signature, signature()};
      waiters_.push_back(&self);
      const TimeNs left = deadline - UdpWire::now();
      progressed_.wait_for(lock, std::chrono::nanoseconds(std::min<TimeNs>(left, 100 * kNsPerMs)));
      waiters_.erase(std::find(waiters_.begin(), waiters_.end(), &self));
      continue;
    }
    // Caller-driven (or the thread was stopped): drive the wire ourselves.
    if (Status s = round(clock(), true, false); !s) return false;
    if (pred()) return true;
    const TimeNs until = std::min(deadline, next_deadline());
    if (until <= UdpWire::now() + config_.spin_ns) continue;
    if (!arm_port()) continue;
    sleeping_.store(true, std::memory_order_release);
    lock.unlock();
    wait_for_io(until);
    sleeping_.store(false, std::memory_order_release);
    lock.lock();
  }
  return true;
}

uint64_t ProgressLoop::completion_signature(engine::ConnId conn) const {
  const engine::Connection* c = endpoint_->connection(conn);
  if (c == nullptr) return ~uint64_t{0};
  const engine::ConnectionStats& s = c->stats();
  const uint64_t finished = s.sends_completed + s.sends_failed + s.recvs_completed + s.recvs_failed;
  return finished << 3 | static_cast<uint64_t>(c->state());
}

std::string ProgressLoop::peer_suffix(engine::ConnId conn) const {
  // The engine names peers by id; say which address that is.
  const engine::Connection* c = endpoint_->connection(conn);
  if (c == nullptr || !io_->has_peer(c->peer())) return {};
  const std::string address =
      io_->port ? io_->port->peer_address(c->peer()) : format_address(io_->peers.address(c->peer()));
  return " (peer " + std::to_string(c->peer()) + " is " + address + ")";
}

engine::Completion ProgressLoop::test(engine::ConnId conn, engine::RequestId req) {
  const auto key = std::make_pair(conn, req);
  if (auto it = io_->held.find(key); it != io_->held.end()) {
    const Held& h = it->second;
    if (!fence_passed(h.kind, h.fence)) {
      // Wake them on every look, not only the first: a thread that went to sleep between that look and
      // this one must not leave the caller polling until its sleep times out.
      for (const auto& t : io_->threads) t->wake();
      return engine::Completion{};
    }
    engine::Completion result = std::move(it->second.completion);
    io_->held.erase(it);
    return result;
  }
  engine::Connection* c = endpoint_->connection(conn);
  if (c == nullptr) return engine::Completion{true, false, 0, 0, "unknown connection"};
  engine::Completion result = c->test(req);
  // The fences without blocking: the request is reported once its payload is out of (a send) or in (a
  // receive) the application's buffer, at a later test().
  hold(conn, req, result);
  return result;
}

void ProgressLoop::hold(engine::ConnId conn, engine::RequestId req, engine::Completion& result) {
  if (!result.done || io_->threads.empty()) return;
  // A receive that failed places nothing more, but a copy queued for it may still be writing its buffer:
  // it waits for the copies too.
  const Fence kind = result.send ? Fence::kTx : Fence::kCopies;
  std::vector<uint64_t> fence = request_fence(conn, req, result);
  if (fence_passed(kind, fence)) return;
  io_->held.emplace(std::make_pair(conn, req), Held{kind, std::move(fence), std::move(result)});
  result = engine::Completion{};
  for (const auto& t : io_->threads) t->wake();
}

std::vector<uint64_t> ProgressLoop::fence(Fence kind) const {
  std::vector<uint64_t> fence;
  fence.reserve(io_->threads.size());
  for (const auto& t : io_->threads)
    fence.push_back(kind == Fence::kTx ? t->tx().published() : t->copies().pushed());
  return fence;
}

bool ProgressLoop::fence_passed(Fence kind, const std::vector<uint64_t>& fence) const {
  for (size_t t = 0; t < fence.size(); ++t) {
    const IoThread& th = *io_->threads[t];
    if (kind == Fence::kTx ? !th.tx_released(fence[t]) : th.copies().done() < fence[t]) return false;
  }
  return true;
}

bool ProgressLoop::wait_fence(Fence kind, const std::vector<uint64_t>& fence, TimeNs deadline) {
  while (!fence_passed(kind, fence)) {
    if (UdpWire::now() >= deadline) return false;
    for (const auto& t : io_->threads) {
      t->wake();
      if (kind == Fence::kCopies) t->copies().run();  // help with the copies rather than only wait
    }
    std::this_thread::yield();
  }
  return true;
}

std::vector<uint64_t> ProgressLoop::request_fence(engine::ConnId conn, engine::RequestId req,
                                                  const engine::Completion& result) {
  // Empty when nothing of a send went to a thread (a 0-byte one), or every copy of a receive was made on
  // the spot.
  return (result.send ? io_->tx_marks : io_->copy_marks).take(conn, req);
}

std::optional<Held> ProgressLoop::take_held(engine::ConnId conn, engine::RequestId req) {
  auto it = io_->held.find({conn, req});
  if (it == io_->held.end()) return std::nullopt;
  Held held = std::move(it->second);
  io_->held.erase(it);
  return held;
}

void ProgressLoop::hold_back(engine::ConnId conn, engine::RequestId req, Held held) {
  io_->held.emplace(std::make_pair(conn, req), std::move(held));
}

void ProgressLoop::release(engine::ConnId conn) {
  endpoint_->release(conn);
  auto& held = io_->held;
  held.erase(held.lower_bound({conn, 0}), held.upper_bound({conn, ~engine::RequestId{0}}));
  io_->tx_marks.erase_connection(conn);
  io_->copy_marks.erase_connection(conn);
}

}  // namespace megascale::wire::detail
