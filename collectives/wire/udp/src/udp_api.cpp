// The UDP wire's threaded mode, waits and thread-safe convenience calls.
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "io.h"
#include "megascale/wire/udp.h"

namespace megascale::wire {
namespace {

std::string seconds_text(TimeNs ns) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f s", static_cast<double>(ns) / 1e9);
  return text;
}

}  // namespace

void UdpWire::wake_locked() {
  // Only a sleeping progress loop needs the eventfd; a running one looks at the engine again anyway.
  if (sleeping_.load(std::memory_order_acquire)) eventfd_write(io_->wakefd, 1);
}

void UdpWire::wait_for_io(TimeNs until) {
  const TimeNs wait_ns = until - now();
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
    }
  }
}

Status UdpWire::start() {
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

void UdpWire::stop() {
  if (!thread_.joinable()) return;
  stop_.store(true);
  eventfd_write(io_->wakefd, 1);
  thread_.join();
  thread_ = std::thread();
  threaded_.store(false);
}

std::string UdpWire::thread_error() const {
  std::lock_guard<WireMutex> lock(mu_);
  return thread_error_;
}

void UdpWire::thread_main() {
  // Kernel timers may fire this late; the default 50 us slack would blur pacing and RTO timing.
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  while (!stop_.load(std::memory_order_relaxed)) {
    std::unique_lock<WireMutex> lock(mu_);
    const TimeNs round_ns = now();
    if (Status s = progress_locked(round_ns, true, /*overlap_copies=*/true); !s) {
      thread_error_ = s.error().message;
      progressed_.notify_all();
      return;
    }
    bool notify = false;
    for (Waiter* w : waiters_) {
      const uint64_t sig = w->signature();
      notify |= sig != w->last;
      w->last = sig;
    }
    const TimeNs deadline = next_deadline_locked();
    // Sleep unless busy-polling, the deadline is due or close enough to spin for, or packets moved
    // a moment ago (more are likely on their way; longer while the application waits for requests).
    const TimeNs t = now();
    const TimeNs window = io_->caller_wake.pending.load(std::memory_order_relaxed) ? config_.pending_poll_ns
                                                                                   : config_.idle_poll_ns;
    // Batches waiting for their payload copies are given back by a round: no sleep until they are.
    const bool copies_pending = copies_pending_locked();
    // A finished ticket waiting for its fence is looked at every round, as a caller's test() would; a
    // ticket queued behind an engine limit is posted by the round after one that finished a ticket.
    bool sleep = !config_.busy_poll && deadline > t + config_.spin_ns && t - io_->last_io_ns > window &&
                 !copies_pending && !tickets_fenced_ && !(tickets_finished_ && !queued_.empty());
    if (sleep) {
      // Set under the lock: a post that takes the lock after this sees it and writes the eventfd. A
      // ticket is submitted without the lock: looked for after the flag is set (see submit()).
      sleeping_.store(true, std::memory_order_seq_cst);
      if (has_submitted_.load(std::memory_order_seq_cst)) {
        sleeping_.store(false, std::memory_order_relaxed);
        sleep = false;
      } else {
        ++io_->sleeps;
      }
    }
    lock.unlock();
    if (notify) progressed_.notify_all();
    // Step aside while application threads wait for the lock (a post, a test, a woken waiter).
    for (int i = 0; i < 1000 && mu_.waiting() > 0; ++i) std::this_thread::yield();
    // A round that moved nothing and does not sleep: payload copies its I/O threads have not got to
    // yet are made here (outside the lock: a receive waits for them, and an I/O thread that lost its
    // CPU would otherwise hold its receives back); with none, it gives the CPU to any thread waiting
    // for one, as the I/O threads do (io_thread.cpp).
    if (!sleep && io_->last_io_ns < round_ns) {
      size_t helped = 0;
      if (copies_pending) {
        for (const auto& th : io_->threads) helped += th->copies().run();
      }
      if (helped == 0) std::this_thread::yield();
    }
    if (sleep) {
      // stop() sets the flag, then writes the eventfd; this round's receive may have drained that
      // write already. Looking at the flag again after the drain closes the gap: a stop() it misses
      // writes the eventfd afterwards, which wakes the sleep.
      if (!stop_.load()) wait_for_io(deadline);
      sleeping_.store(false, std::memory_order_release);
    }
  }
}

template <class Pred, class Signature>
bool UdpWire::wait_until(std::unique_lock<WireMutex>& lock, TimeNs timeout_ns, Pred pred,
                         Signature signature) {
  const TimeNs deadline = timeout_ns >= kNever - now() ? kNever : now() + timeout_ns;
  while (!pred()) {
    if (now() >= deadline) return false;
    if (threaded_.load(std::memory_order_relaxed)) {
      if (!thread_error_.empty()) return false;
      // Registered and waiting under the one lock: the progress thread cannot compute a signature
      // between our pred() and our wait, so no wake-up is lost. The cap is only a safety net.
      Waiter self{signature, signature()};
      waiters_.push_back(&self);
      const TimeNs left = deadline - now();
      progressed_.wait_for(lock, std::chrono::nanoseconds(std::min<TimeNs>(left, 100 * kNsPerMs)));
      waiters_.erase(std::find(waiters_.begin(), waiters_.end(), &self));
      continue;
    }
    // Caller-driven (or the thread was stopped): drive the wire ourselves.
    if (Status s = progress_locked(now(), true, false); !s) return false;
    if (pred()) return true;
    const TimeNs until = std::min(deadline, next_deadline_locked());
    if (until <= now() + config_.spin_ns) continue;
    sleeping_.store(true, std::memory_order_release);
    lock.unlock();
    wait_for_io(until);
    sleeping_.store(false, std::memory_order_release);
    lock.lock();
  }
  return true;
}

uint64_t UdpWire::completion_signature_locked(engine::ConnId conn) const {
  const engine::Connection* c = endpoint_->connection(conn);
  if (c == nullptr) return ~uint64_t{0};
  const engine::ConnectionStats& s = c->stats();
  const uint64_t finished = s.sends_completed + s.sends_failed + s.recvs_completed + s.recvs_failed;
  return finished << 3 | static_cast<uint64_t>(c->state());
}

Result<uint32_t> UdpWire::add_peer(std::string_view host, uint16_t port) {
  auto addr = detail::resolve_address(host, port, io_->family);
  if (!addr) {
    return make_error(addr.error().message + " (the wire is " + (caps_.ipv6 ? "IPv6" : "IPv4") +
                      ", bound to " + config_.bind_host + ")");
  }
  std::lock_guard<WireMutex> lock(mu_);
  const std::optional<uint32_t> id = io_->peers.intern(*addr);
  if (!id)
    return make_error(ErrorCode::kInvalidUsage,
                      "udp wire: peer table full (" + std::to_string(config_.max_peers) + " peers)");
  return *id;
}

std::string UdpWire::peer_address(uint32_t peer) const {
  std::lock_guard<WireMutex> lock(mu_);
  if (!io_->peers.contains(peer)) return "(unknown peer " + std::to_string(peer) + ")";
  return detail::format_address(io_->peers.address(peer));
}

Result<engine::ConnId> UdpWire::connect(std::string_view host, uint16_t port) {
  auto peer = add_peer(host, port);
  if (!peer) return peer.error();
  return connect(*peer);
}

Result<engine::ConnId> UdpWire::connect(uint32_t peer) {
  std::lock_guard<WireMutex> lock(mu_);
  if (!io_->peers.contains(peer))
    return make_error("udp wire: connect to unknown peer " + std::to_string(peer));
  auto id = endpoint_->connect(now(), peer);
  wake_locked();
  return id;
}

std::optional<engine::ConnId> UdpWire::accept() {
  std::lock_guard<WireMutex> lock(mu_);
  return endpoint_->accept();
}

bool UdpWire::pause_io_thread(uint32_t index, bool paused) {
  std::lock_guard<WireMutex> lock(mu_);
  if (index >= io_->threads.size()) return false;
  io_->threads[index]->pause(paused);
  return true;
}

Result<engine::RequestId> UdpWire::post_send(engine::ConnId conn, const void* data, uint64_t size_bytes,
                                             int32_t tag) {
  std::lock_guard<WireMutex> lock(mu_);
  engine::Connection* c = endpoint_->connection(conn);
  if (c == nullptr) return make_error("udp wire: unknown connection " + std::to_string(conn));
  auto r = c->post_send(data, size_bytes, tag);
  wake_locked();
  return r;
}

Result<engine::RequestId> UdpWire::post_recv(engine::ConnId conn, void* buf, uint64_t capacity_bytes,
                                             int32_t tag) {
  std::lock_guard<WireMutex> lock(mu_);
  engine::Connection* c = endpoint_->connection(conn);
  if (c == nullptr) return make_error("udp wire: unknown connection " + std::to_string(conn));
  auto r = c->post_recv(buf, capacity_bytes, tag);
  wake_locked();
  return r;
}

std::vector<uint64_t> UdpWire::fence_locked(Fence kind) const {
  std::vector<uint64_t> fence;
  fence.reserve(io_->threads.size());
  for (const auto& t : io_->threads)
    fence.push_back(kind == Fence::kTx ? t->tx().published() : t->copies().pushed());
  return fence;
}

bool UdpWire::fence_passed(Fence kind, const std::vector<uint64_t>& fence) const {
  for (size_t t = 0; t < fence.size(); ++t) {
    const detail::IoThread& th = *io_->threads[t];
    if (kind == Fence::kTx ? !th.tx_released(fence[t]) : th.copies().done() < fence[t]) return false;
  }
  return true;
}

bool UdpWire::wait_fence(Fence kind, const std::vector<uint64_t>& fence, TimeNs deadline) {
  while (!fence_passed(kind, fence)) {
    if (now() >= deadline) return false;
    for (const auto& t : io_->threads) {
      t->wake();
      if (kind == Fence::kCopies) t->copies().run();  // help with the copies rather than only wait
    }
    std::this_thread::yield();
  }
  return true;
}

std::vector<uint64_t> UdpWire::request_fence_locked(engine::ConnId conn, engine::RequestId req,
                                                    const engine::Completion& result) {
  // Empty when nothing of a send went to a thread (a 0-byte one), or every copy of a receive was made on
  // the spot.
  return (result.send ? io_->tx_marks : io_->copy_marks).take(conn, req);
}

void UdpWire::hold_locked(engine::ConnId conn, engine::RequestId req, engine::Completion& result) {
  if (!result.done || io_->threads.empty()) return;
  // A receive that failed places nothing more, but a copy queued for it may still be writing its buffer:
  // it waits for the copies too.
  const Fence kind = result.send ? Fence::kTx : Fence::kCopies;
  std::vector<uint64_t> fence = request_fence_locked(conn, req, result);
  if (fence_passed(kind, fence)) return;
  io_->held.emplace(std::make_pair(conn, req), Io::Held{kind, std::move(fence), std::move(result)});
  result = engine::Completion{};
  for (const auto& t : io_->threads) t->wake();
}

engine::Completion UdpWire::test(engine::ConnId conn, engine::RequestId req) {
  std::lock_guard<WireMutex> lock(mu_);
  return test_locked(conn, req);
}

engine::Completion UdpWire::test_locked(engine::ConnId conn, engine::RequestId req) {
  const auto key = std::make_pair(conn, req);
  if (auto it = io_->held.find(key); it != io_->held.end()) {
    const Io::Held& h = it->second;
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
  hold_locked(conn, req, result);
  return result;
}

void UdpWire::Ticket::set(bool send, engine::ConnId conn, void* data, uint64_t size_bytes, int32_t tag) {
  conn_ = conn;
  send_ = send;
  data_ = data;
  size_ = size_bytes;
  tag_ = tag;
  id_ = 0;
  completion_ = engine::Completion{};
  done_.store(false, std::memory_order_relaxed);
}

void UdpWire::Ticket::set_send(engine::ConnId conn, const void* data, uint64_t size_bytes, int32_t tag) {
  // Only read: the engine's post_send takes it as const again.
  set(true, conn, const_cast<void*>(data), size_bytes, tag);
}

void UdpWire::Ticket::set_recv(engine::ConnId conn, void* buf, uint64_t capacity_bytes, int32_t tag) {
  set(false, conn, buf, capacity_bytes, tag);
}

void UdpWire::submit(Ticket& t) {
  {
    std::lock_guard<std::mutex> lock(submit_mu_);
    submitted_.push_back(&t);
    has_submitted_.store(true, std::memory_order_seq_cst);
  }
  // The progress thread sets `sleeping_` and then looks at has_submitted_ (both seq_cst): either it
  // sees this ticket, or this sees it asleep and wakes it.
  if (sleeping_.load(std::memory_order_seq_cst)) eventfd_write(io_->wakefd, 1);
}

void UdpWire::finish_ticket(Ticket& t, engine::Completion c) {
  t.completion_ = std::move(c);
  t.done_.store(true, std::memory_order_release);
}

void UdpWire::post_tickets_locked() {
  if (has_submitted_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(submit_mu_);
    queued_.insert(queued_.end(), submitted_.begin(), submitted_.end());
    submitted_.clear();
    has_submitted_.store(false, std::memory_order_relaxed);
  }
  if (queued_.empty()) return;
  // In order; a connection whose ticket met a limit posts nothing more this round (its later tickets
  // must not overtake it: a receive's tag order, a send's byte order).
  std::vector<engine::ConnId> blocked;
  size_t kept = 0;
  for (Ticket* t : queued_) {
    const auto failed = [&](std::string why, ErrorCode code = ErrorCode::kInvalidArgument) {
      finish_ticket(*t,
                    engine::Completion{
                        .done = true, .ok = false, .error = std::move(why), .send = t->send_, .code = code});
    };
    if (std::find(blocked.begin(), blocked.end(), t->conn_) != blocked.end()) {
      queued_[kept++] = t;
      continue;
    }
    engine::Connection* c = endpoint_->connection(t->conn_);
    if (c == nullptr) {
      failed("udp wire: unknown connection " + std::to_string(t->conn_));
      continue;
    }
    // Checked here so that a refusal on a usable connection below can only be a limit.
    if (t->tag_ < (t->send_ ? 0 : -1) || (t->data_ == nullptr && t->size_ > 0)) {
      failed(std::string(t->send_ ? "post_send" : "post_recv") + ": bad arguments (tag " +
             std::to_string(t->tag_) + ", " + (t->data_ == nullptr ? "null buffer" : "buffer") + " of " +
             std::to_string(t->size_) + " bytes)");
      continue;
    }
    auto id =
        t->send_ ? c->post_send(t->data_, t->size_, t->tag_) : c->post_recv(t->data_, t->size_, t->tag_);
    if (id) {
      t->id_ = *id;
      posted_.push_back(t);
      continue;
    }
    const engine::ConnectionState st = c->state();
    if (st == engine::ConnectionState::kConnecting || st == engine::ConnectionState::kEstablished) {
      blocked.push_back(t->conn_);  // a limit (requests outstanding, the receive ring): a later round
      queued_[kept++] = t;
    } else {
      failed(id.error().message, id.error().code);
    }
  }
  queued_.resize(kept);
}

void UdpWire::finish_tickets_locked() {
  tickets_finished_ = false;
  if (posted_.empty()) {
    tickets_fenced_ = false;
    return;
  }
  // Every request that finishes, ok or not, goes through the engine's completion counts; a failed or
  // reset connection is counted too, in case its requests are reported failed without them. While the
  // sum stands and no finished ticket waits for its fence, no posted ticket can have finished.
  const engine::EndpointStats& s = endpoint_->stats();
  const uint64_t epoch = s.sends_completed + s.receives_completed + s.connections_failed + s.rsts_received;
  if (epoch == tickets_epoch_ && !tickets_fenced_) return;
  tickets_epoch_ = epoch;
  tickets_fenced_ = false;
  size_t kept = 0;
  for (Ticket* t : posted_) {
    engine::Completion c = test_locked(t->conn_, t->id_);
    if (c.done) {
      finish_ticket(*t, std::move(c));
      tickets_finished_ = true;
      continue;
    }
    posted_[kept++] = t;
    tickets_fenced_ |= io_->held.contains(std::make_pair(t->conn_, t->id_));
  }
  posted_.resize(kept);
}

void UdpWire::forget_tickets_locked(engine::ConnId conn) {
  const auto of_conn = [conn](const Ticket* t) { return t->conn_ == conn; };
  {
    std::lock_guard<std::mutex> lock(submit_mu_);
    std::erase_if(submitted_, of_conn);
  }
  std::erase_if(queued_, of_conn);
  std::erase_if(posted_, of_conn);
}

void UdpWire::close(engine::ConnId conn, bool release) {
  std::unique_lock<WireMutex> lock(mu_);
  forget_tickets_locked(conn);
  if (release) {
    endpoint_->release(conn);
    // Its held-back requests go with it (the fences below cover their payloads).
    auto& held = io_->held;
    held.erase(held.lower_bound({conn, 0}), held.upper_bound({conn, ~engine::RequestId{0}}));
    io_->tx_marks.erase_connection(conn);
    io_->copy_marks.erase_connection(conn);
  } else if (engine::Connection* c = endpoint_->connection(conn)) {
    c->close(now());
  }
  wake_locked();
  if (!io_->threads.empty()) {
    // The caller may free its buffers once this returns: no I/O thread may still read one (a send) or
    // write one (a payload copy for a receive).
    const std::vector<uint64_t> sent = fence_locked(Fence::kTx);
    const std::vector<uint64_t> copied = fence_locked(Fence::kCopies);
    lock.unlock();
    wait_fence(Fence::kTx, sent);
    wait_fence(Fence::kCopies, copied);
  }
}

engine::ConnectionState UdpWire::state(engine::ConnId conn) {
  std::lock_guard<WireMutex> lock(mu_);
  const engine::Connection* c = endpoint_->connection(conn);
  return c ? c->state() : engine::ConnectionState::kClosed;
}

std::string UdpWire::connection_error(engine::ConnId conn) {
  std::lock_guard<WireMutex> lock(mu_);
  const engine::Connection* c = endpoint_->connection(conn);
  return c ? c->error() : "unknown connection";
}

engine::Completion UdpWire::wait(engine::ConnId conn, engine::RequestId req, TimeNs timeout_ns) {
  const TimeNs deadline = timeout_ns >= kNever - now() ? kNever : now() + timeout_ns;
  std::unique_lock<WireMutex> lock(mu_);
  // A finished request whose fence does not pass by the deadline (an I/O thread that lost its CPU still
  // holds its packets or copies, and no sibling took them over) goes back to Io::held for a later test()
  // or wait(), and this wait times out: it does not block past its deadline.
  auto fence_or_hold = [&](Io::Held held) {
    lock.unlock();
    if (wait_fence(held.kind, held.fence, deadline)) return held.completion;
    lock.lock();
    io_->held.emplace(std::make_pair(conn, req), std::move(held));
    return engine::Completion{false, false, 0, 0,
                              "timed out after " + seconds_text(timeout_ns) +
                                  ": done, but an I/O thread has not finished with its buffer"};
  };
  if (auto it = io_->held.find({conn, req}); it != io_->held.end()) {
    // An earlier test() saw it finish and holds it back for its fence: wait for that fence.
    Io::Held held = std::move(it->second);
    io_->held.erase(it);
    return fence_or_hold(std::move(held));
  }
  engine::Completion result;
  const bool done = wait_until(
      lock, timeout_ns,
      [&] {
        engine::Connection* c = endpoint_->connection(conn);
        result = c ? c->test(req) : engine::Completion{true, false, 0, 0, "unknown connection"};
        return result.done;
      },
      [this, conn] { return completion_signature_locked(conn); });
  if (!done) {
    result.done = false;
    result.error = thread_error_.empty() ? "timed out after " + seconds_text(timeout_ns)
                                         : "progress thread stopped: " + thread_error_;
  } else if (!result.ok) {
    result.error += peer_suffix_locked(conn);
  }
  if (result.done && !io_->threads.empty()) {
    // The fence for its payload: out of the buffer (a send) or in it (a receive's copies).
    const Fence kind = result.send ? Fence::kTx : Fence::kCopies;
    std::vector<uint64_t> fence = request_fence_locked(conn, req, result);
    return fence_or_hold(Io::Held{kind, std::move(fence), std::move(result)});
  }
  return result;
}

std::string UdpWire::peer_suffix_locked(engine::ConnId conn) const {
  // The engine names peers by id; say which address that is.
  const engine::Connection* c = endpoint_->connection(conn);
  if (c == nullptr || !io_->peers.contains(c->peer())) return {};
  return " (peer " + std::to_string(c->peer()) + " is " +
         detail::format_address(io_->peers.address(c->peer())) + ")";
}

Result<engine::ConnId> UdpWire::wait_accept(TimeNs timeout_ns) {
  std::unique_lock<WireMutex> lock(mu_);
  std::optional<engine::ConnId> id;
  if (!wait_until(
          lock, timeout_ns, [&] { return (id = endpoint_->accept()).has_value(); },
          [this] { return endpoint_->stats().connections_accepted; })) {
    return make_error(ErrorCode::kTimeout,
                      "udp wire: no connection accepted within " + seconds_text(timeout_ns));
  }
  return *id;
}

Status UdpWire::wait_established(engine::ConnId conn, TimeNs timeout_ns) {
  std::unique_lock<WireMutex> lock(mu_);
  engine::ConnectionState st = engine::ConnectionState::kConnecting;
  std::string error;
  wait_until(
      lock, timeout_ns,
      [&] {
        const engine::Connection* c = endpoint_->connection(conn);
        if (c == nullptr) {
          st = engine::ConnectionState::kFailed;
          error = "unknown connection";
          return true;
        }
        st = c->state();
        error = c->error();
        return st != engine::ConnectionState::kConnecting;
      },
      [this, conn] { return completion_signature_locked(conn); });
  if (st == engine::ConnectionState::kEstablished) return {};
  if (st == engine::ConnectionState::kConnecting) {
    return make_error(ErrorCode::kTimeout,
                      "udp wire: connection not established within " + seconds_text(timeout_ns));
  }
  return make_error(ErrorCode::kRemote, "udp wire: connection " + std::string(engine::to_string(st)) +
                                            (error.empty() ? "" : ": " + error) + peer_suffix_locked(conn));
}

Status UdpWire::wait_closed(engine::ConnId conn, TimeNs timeout_ns) {
  std::unique_lock<WireMutex> lock(mu_);
  const bool done = wait_until(
      lock, timeout_ns,
      [&] {
        const engine::Connection* c = endpoint_->connection(conn);
        return c == nullptr || c->state() == engine::ConnectionState::kClosed ||
               c->state() == engine::ConnectionState::kFailed;
      },
      [this, conn] { return completion_signature_locked(conn); });
  if (!done)
    return make_error(ErrorCode::kTimeout,
                      "udp wire: connection not closed within " + seconds_text(timeout_ns));
  return {};
}

}  // namespace megascale::wire
