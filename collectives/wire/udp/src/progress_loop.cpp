// The progress round: post submitted tickets, send, receive (on this thread or from the I/O threads),
// deliver to the engine, run its timers, send again, finish tickets (progress_loop.h).
#include "progress_loop.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <string>
#include <utility>

#include "megascale/engine/packet.h"

namespace megascale::wire::detail {

ProgressLoop::ProgressLoop(const UdpConfig& config, UdpCapabilities caps,
                           std::unique_ptr<engine::Endpoint> endpoint, std::unique_ptr<Io> io)
    : config_(config), caps_(std::move(caps)), endpoint_(std::move(endpoint)), io_(std::move(io)) {}

ProgressLoop::~ProgressLoop() {
  stop();
}

Status ProgressLoop::round(TimeNs now, bool read_clock, bool overlap_copies) {
  ++io_->progress_calls;
  moved_ = false;
  tickets_.post(*endpoint_);
  // What the caller posted since the last round, and what that round deferred, leaves first.
  transmit(now, read_clock);
  const uint64_t receives_before = endpoint_->stats().receives_completed;
  receive(now, read_clock, overlap_copies);
  report_port_errors(now);
  if (io_->fault) {
    // Held datagrams stand for packets delayed in the network: they arrive when released.
    HeldDatagram held;
    while (io_->fault->pop_ready(now, held)) {
      endpoint_->on_packet(now, held.peer, held.bytes.data(), held.bytes.size(), held.ce);
      moved_ = true;
    }
  }
  // The timers run at the time after the sends and receives above, which can take a while (system
  // calls, the engine's work on a batch). A round that moved nothing is only memory work past the
  // caller's clock read: it keeps that time (a timer due in between fires in the next round), and the
  // polling loop a waiter spins in reads the clock once a round, not twice.
  if (read_clock && moved_) now = clock();
  if (endpoint_->next_deadline() <= now) endpoint_->on_timer(now);
  if (io_->port && io_->port->next_deadline() <= now) io_->port->on_timer(now);
  if (endpoint_->stats().receives_completed != receives_before) {
    // A message completed: its caller will likely answer it (a pong, the next step's send) as soon as
    // this call returns. The ACKs and credits this round made wait for that answer, so that both leave
    // in one send call at the start of the next round instead of two on the answer's critical path.
    // next_deadline() is 0 meanwhile: a caller that sleeps on it comes straight back.
    ++io_->tx_deferred;
    more_tx_ = true;
  } else {
    transmit(now, read_clock);
  }
  if (now - io_->last_sweep_ns > kPathSweepIntervalNs) {
    io_->paths.sweep(now, kPathIdleNs);
    io_->last_sweep_ns = now;
  }
  publish_pending(now);
  finish_tickets();
  round_ns_.store(now, std::memory_order_relaxed);
  if (!port_error_.empty()) return make_error(ErrorCode::kSystem, port_error_);
  return {};
}

void ProgressLoop::report_port_errors(TimeNs now) {
  Io& io = *io_;
  CallerWake& w = io.caller_wake;
  if (w.has_unreachable.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(w.unreachable_mu);
    io.unreachable.insert(io.unreachable.end(), w.unreachable.begin(), w.unreachable.end());
    w.unreachable.clear();
    w.has_unreachable.store(false, std::memory_order_relaxed);
  }
  for (const SockAddr& a : io.unreachable) {
    // Only addresses we sent to are known; an ICMP message about anything else says nothing of ours.
    if (const std::optional<uint32_t> peer = io.peers.find(a)) {
      ++io.port_unreachable;
      endpoint_->on_port_unreachable(now, *peer);
    }
  }
  io.unreachable.clear();
}

void ProgressLoop::publish_pending(TimeNs now) {
  Io& io = *io_;
  const bool pending = endpoint_->requests_pending() > 0;
  if (pending == io.caller_wake.pending.load(std::memory_order_relaxed)) return;
  io.caller_wake.pending.store(pending, std::memory_order_seq_cst);
  if (!pending) return;
  // Work was posted after a quiet spell: the polling window starts now, not at the last packet, and
  // I/O threads asleep in epoll wake to poll for the answer (one eventfd write each, once per burst).
  io.last_io_ns = now;
  for (const auto& t : io.threads) t->wake();
}

TimeNs ProgressLoop::next_deadline() const {
  if (more_tx_) return 0;
  TimeNs t = endpoint_->next_deadline();
  if (io_->fault) t = std::min(t, io_->fault->next_deadline());
  if (io_->port) t = std::min(t, io_->port->next_deadline());
  return t;
}

void ProgressLoop::finish_tickets() {
  // Every request that finishes, ok or not, goes through the engine's completion counts; a failed or
  // reset connection is counted too, in case its requests are reported failed without them.
  const engine::EndpointStats& s = endpoint_->stats();
  const uint64_t epoch = s.sends_completed + s.receives_completed + s.connections_failed + s.rsts_received;
  tickets_.finish(
      epoch, [this](engine::ConnId conn, engine::RequestId req) { return test(conn, req); },
      [this](engine::ConnId conn, engine::RequestId req) {
        return io_->held.contains(std::make_pair(conn, req));
      });
}

uint64_t ProgressLoop::datagrams_moved() const {
  const Io& io = *io_;
  uint64_t n = io.sender.counters().datagrams + io.datagrams_received;
  for (const auto& t : io.threads) n += t->counters().tx_datagrams.load(std::memory_order_relaxed);
  return n;
}

void ProgressLoop::receive(TimeNs now, bool read_clock, bool overlap_copies) {
  Io& io = *io_;
  if (io.port) {
    receive_port(now, read_clock);
    return;
  }
  if (!io.threads.empty()) {
    receive_from_threads(now, read_clock, overlap_copies);
    return;
  }
  // Peers send every lane to the home socket (socket 0; "Lanes, ports, peers" in the README). While
  // datagrams stream in, the round after one that received reads it directly, without asking epoll
  // first: one system call where two would be made. The rest of the pool normally receives nothing
  // (ICMP errors, strays) and is still looked at every kEpollEveryRounds such rounds. A round after an
  // empty one asks epoll: reading straight away there would take a peer's send batch in halves and
  // add latency and ACKs to a ping-pong.
  if (io.home_streaming) {
    io.home_streaming = read_socket(now, read_clock, io.sockets[0].fd);
    if (++io.rounds_since_epoll < kEpollEveryRounds) return;
  }
  io.rounds_since_epoll = 0;
  const int n_ready = epoll_wait(io.epfd, io.events.data(), static_cast<int>(io.events.size()), 0);
  for (int e = 0; e < n_ready; ++e) {
    const uint32_t token = io.events[static_cast<size_t>(e)].data.u32;
    if (token != kWakeToken && (io.events[static_cast<size_t>(e)].events & EPOLLERR) != 0) {
      // An error queue that is not empty keeps the socket ready until it is read.
      read_port_unreachable(io.sockets[token].fd, io.unreachable);
    }
    if (token == kWakeToken) {
      eventfd_t drained = 0;
      eventfd_read(io.wakefd, &drained);
      io.wake_reads.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    const bool got = read_socket(now, read_clock, io.sockets[token].fd);
    if (token == 0) io.home_streaming = got;
  }
}

void ProgressLoop::receive_port(TimeNs now, bool read_clock) {
  Io& io = *io_;
  // The wake-up eventfd is not read here: a sleep that it ends drains it (wait_for_io), and the posts
  // that write it do so only while the loop sleeps. A write that raced a sleep being called off stays
  // readable and ends the next sleep early, once; reading it every round would cost a system call a
  // round for that.
  bool stamped = false;
  const PacketPort::Deliver deliver = [&](uint32_t peer, uint8_t* data, size_t len, bool ce) {
    if (!stamped) {
      // The packets are in hand now: the engine's processing time starts here.
      if (read_clock) now = clock();
      note_io(now);
      stamped = true;
    }
    this->deliver(now, peer, data, len, ce, engine::kRxTimeNow, false);
  };
  for (int round = 0; round < kRxRoundsPerSocket; ++round) {
    Result<size_t> n = io.port->receive(config_.batch, deliver);
    if (!n) {
      port_error_ = n.error().message;
      return;
    }
    if (*n < config_.batch) break;  // drained
  }
}

bool ProgressLoop::read_socket(TimeNs& now, bool read_clock, int fd) {
  Io& io = *io_;
  bool got = false;
  for (int round = 0; round < kRxRoundsPerSocket; ++round) {
    const int n = io.receiver.receive(fd);
    if (n < 0) {
      ++io.recv_errors;  // e.g. an ICMP error queued on the socket; the next call reads on
      read_port_unreachable(fd, io.unreachable);
      continue;
    }
    if (n > 0) {
      got = true;
      // The datagrams are in hand now: the engine's processing time starts here, and every kernel
      // stamp of this batch lies before it.
      if (read_clock) now = clock();
      note_io(now);
      if (caps_.rx_timestamps && io.rx_clock.stale(now)) io.rx_clock.refresh();
    }
    const uint8_t* none = nullptr;
    for (int i = 0; i < n; ++i) deliver_message(now, io.receiver.message(i), none);
    if (static_cast<size_t>(n) < config_.batch) break;  // drained
  }
  return got;
}

void ProgressLoop::release_copied() {
  Io& io = *io_;
  for (size_t t = 0; t < io.threads.size(); ++t) {
    IoThread& th = *io.threads[t];
    const uint64_t done = th.copies().done();
    for (const RxBatch* b = th.rx().consumer_slot();
         io.rx_delivered[t] > 0 && b != nullptr && b->copy_fence <= done; b = th.rx().consumer_slot()) {
      th.rx().release();
      --io.rx_delivered[t];
    }
  }
}

bool ProgressLoop::copies_pending() const {
  for (const uint32_t n : io_->rx_delivered) {
    if (n > 0) return true;
  }
  return false;
}

void ProgressLoop::receive_from_threads(TimeNs now, bool read_clock, bool overlap_copies) {
  Io& io = *io_;
  release_copied();
  // Take up to kRxRoundsPerSocket batches from each thread (after those still waiting for their copies),
  // then deliver their messages round-robin across the threads, one message (a GRO aggregate: a few
  // segments of one lane) at a time. Lanes share one sequence space, so delivering one lane's megabyte
  // before another's would leave the receiver with more holes than an ACK's SACK ranges can describe, and
  // the sender would take segments it was never told about for lost. Interleaved, the lanes advance
  // together, as they arrived.
  const size_t n_threads = io.threads.size();
  size_t total = 0;
  for (size_t t = 0; t < n_threads; ++t) {
    io.rx_taken[t] = 0;
    while (io.rx_taken[t] < static_cast<uint32_t>(kRxRoundsPerSocket) &&
           io.threads[t]->rx().consumer_slot(io.rx_delivered[t] + io.rx_taken[t]) != nullptr) {
      ++io.rx_taken[t];
      ++total;
    }
    io.rx_cursor[t] = RxCursor{};
  }
  if (total == 0) return;
  if (read_clock) now = clock();
  note_io(now);
  if (caps_.rx_timestamps && io.rx_clock.stale(now)) io.rx_clock.refresh();
  // Payload copies go to the thread whose batch holds the bytes, so the copies of several lanes run in
  // parallel while this thread goes on with the protocol. A batch goes back to its thread once its
  // copies are done (release_copied), and a receive they complete is reported only then (the
  // copy fence, test()). With `overlap_copies` (the wire's own progress thread) this round does not wait
  // for them: its ACKs leave and the next round starts while the I/O threads copy. Otherwise (a caller
  // driving progress, who may read the engine's completions directly) they are done before it returns.
  endpoint_->set_payload_copier(&io.copier);
  for (bool more = true; more;) {
    more = false;
    for (size_t t = 0; t < n_threads; ++t) {
      RxCursor& c = io.rx_cursor[t];
      if (c.batch >= io.rx_taken[t]) continue;
      RxBatch& b = *io.threads[t]->rx().consumer_slot(io.rx_delivered[t] + c.batch);
      if (c.message == 0) c.verified = b.verified.data();
      io.copier.queue = &io.threads[t]->copies();
      io.copier.thread = t;
      if (c.message < b.count) deliver_message(now, b.messages[static_cast<size_t>(c.message)], c.verified);
      if (++c.message >= b.count) {
        ++c.batch;
        c.message = 0;
      }
      more = more || c.batch < io.rx_taken[t];
    }
  }
  io.copier.queue = nullptr;
  endpoint_->set_payload_copier(nullptr);
  for (size_t t = 0; t < n_threads; ++t) {
    if (io.rx_taken[t] == 0) continue;
    IoThread& th = *io.threads[t];
    const uint64_t fence = th.copies().pushed();
    for (uint32_t k = 0; k < io.rx_taken[t]; ++k) {
      if (RxBatch* b = th.rx().consumer_slot(io.rx_delivered[t] + k)) b->copy_fence = fence;
    }
    io.rx_delivered[t] += io.rx_taken[t];
    if (overlap_copies) {
      th.wake();  // it runs them between its system calls, unless asleep
    } else {
      th.copies().finish(fence);
    }
  }
  release_copied();
}

void ProgressLoop::deliver_message(TimeNs now, const RxMessage& m, const uint8_t*& verified) {
  Io& io = *io_;
  if (m.truncated || m.segment_size == 0) return;
  // One stamp per message: every datagram split from a GRO aggregate arrived with it.
  TimeNs rx_ns = engine::kRxTimeNow;
  bool rejected = false;
  if (m.rx_realtime_ns != 0) {
    const TimeNs t = io.rx_clock.to_monotonic(m.rx_realtime_ns);
    rejected = !RxClock::plausible(t, now);
    if (!rejected) rx_ns = t;
  }
  for (size_t off = 0; off < m.bytes.size(); off += m.segment_size) {
    const size_t len = std::min(m.segment_size, m.bytes.size() - off);
    uint8_t* datagram = m.bytes.data() + off;
    const bool ok = verified != nullptr && *verified++ != 0;
    // Each source address is a peer id of its own: a remote connection's lanes (one source port
    // each) arrive under several ids, and the engine demultiplexes them by connection id.
    const std::optional<uint32_t> peer = io.peers.intern(*m.from);
    if (!peer) {
      ++io.peer_table_full;
      continue;
    }
    io.rx_timestamped += rx_ns != engine::kRxTimeNow ? 1 : 0;
    io.rx_timestamps_rejected += rejected ? 1 : 0;
    deliver(now, *peer, datagram, len, m.ce, rx_ns, ok);
  }
}

void ProgressLoop::deliver(TimeNs now, uint32_t peer, uint8_t* data, size_t len, bool ce, TimeNs rx_ns,
                           bool verified) {
  ++io_->datagrams_received;
  io_->bytes_received += len;
  io_->ce_received += ce ? 1 : 0;
  if (!io_->fault) {
    if (verified) {
      endpoint_->on_verified_packet(now, peer, data, len, ce, rx_ns);
    } else {
      endpoint_->on_packet(now, peer, data, len, ce, rx_ns);
    }
    return;
  }
  // Fault injection may change the bytes after an I/O thread checked them: the engine checks again.
  bool marked = ce;
  const FaultInjector::Verdict v = io_->fault->apply(now, peer, std::span<uint8_t>(data, len), marked);
  if (v.action != FaultInjector::Action::kDeliver) return;
  for (int i = 0; i < v.copies; ++i) endpoint_->on_packet(now, peer, data, len, marked, rx_ns);
}

}  // namespace megascale::wire::detail
