// The I/O threads of a UdpWire with UdpConfig::io_threads > 0: each owns a share of the socket pool
// (socket i belongs to thread i % io_threads), receives its datagrams (recvmmsg, GRO), checks their
// CRCs, and sends what the engine's thread hands it (sendmmsg, GSO). The thread that drives the engine
// (the caller of progress(), or the wire's progress thread) then does only protocol work and the one
// copy of payload into posted buffers.
//
// Why: on one thread, a wire's loopback bandwidth is bounded by its per-byte work: per payload byte the
// receiver pays the kernel's copy, a CRC pass and the copy into the posted buffer, the sender a
// CRC pass and the kernel's copy (on loopback, also the receiving half of the kernel's path). With the
// system calls and the receive CRC on I/O threads, lanes on different sockets proceed in parallel.
//
//   IoThread t(index, sockets, config, caller_wake);   // t.start()
//   if (TxBatch* b = t.tx().producer_slot()) { fill b; t.tx().publish(); t.wake(); }
//   while (RxBatch* b = t.rx().consumer_slot()) { deliver b->messages (payload copies may go to
//                                                  t.copies()); b->copy_fence = t.copies().pushed(); }
//   ... later, once t.copies().done() >= the oldest batch's copy_fence: t.rx().release();
//
// Both hand-overs are rings of preallocated batches with one producer: no allocation and no lock per
// packet. The receive ring has one consumer (the engine's thread); the send ring's batches are claimed
// by the thread, or by a sibling while it is stalled (ClaimRing). Internal to collectives/wire/udp.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "megascale/engine/endpoint.h"
#include "receiver.h"
#include "sender.h"
#include "socket.h"

namespace megascale::wire::detail {

// A ring of preallocated slots between one producer thread and one consumer thread.
template <class T>
class SlotRing {
 public:
  explicit SlotRing(std::vector<std::unique_ptr<T>> slots) : slots_(std::move(slots)) {}
  // Producer: the slot to fill next, or nullptr while every slot is published and not yet released.
  T* producer_slot() {
    const uint64_t head = head_.load(std::memory_order_relaxed);
    if (head - tail_.load(std::memory_order_acquire) >= slots_.size()) return nullptr;
    return slots_[head % slots_.size()].get();
  }
  // Producer: hands the slot from producer_slot() over. Sequentially consistent, so that a producer that
  // publishes and then reads the consumer's "sleeping" flag and a consumer that sets that flag and then
  // looks here cannot both miss each other.
  void publish() { head_.fetch_add(1, std::memory_order_seq_cst); }
  // Consumer: the oldest published slot not yet released (k = 0), or the k-th after it; nullptr if none.
  T* consumer_slot(uint64_t k = 0) {
    const uint64_t tail = tail_.load(std::memory_order_relaxed) + k;
    if (tail >= head_.load(std::memory_order_seq_cst)) return nullptr;
    return slots_[tail % slots_.size()].get();
  }
  // Consumer: gives the oldest slot back.
  void release() { tail_.fetch_add(1, std::memory_order_release); }
  // Any thread: slots published, and slots released, so far.
  uint64_t published() const { return head_.load(std::memory_order_acquire); }
  uint64_t released() const { return tail_.load(std::memory_order_acquire); }

 private:
  std::vector<std::unique_ptr<T>> slots_;
  alignas(64) std::atomic<uint64_t> head_{0};  // slots published (written by the producer)
  alignas(64) std::atomic<uint64_t> tail_{0};  // slots released (written by the consumer)
};

// Jobs numbered 0, 1, 2, ... that several threads may run: each job is claimed by exactly one of them
// (claim), finished in any order (finish), and done() counts the jobs finished in order, so that "every
// job below n is finished" is one comparison. Used by the payload copies (any thread that gets there
// first) and by the TX batches (their I/O thread, or a sibling while it is stalled).
class ClaimedSequence {
 public:
  explicit ClaimedSequence(size_t capacity) : marks_(capacity) {}
  // Claims the oldest job below `available` that nobody has claimed; false if there is none.
  bool claim(uint64_t available, uint64_t& job);
  // Marks a claimed job finished, and advances done() over every finished job in order.
  void finish(uint64_t job);
  uint64_t done() const { return done_.load(std::memory_order_acquire); }
  bool unclaimed_below(uint64_t available) const {
    return claimed_.load(std::memory_order_acquire) < available;
  }

 private:
  // marks_[i % size] == i + 1 once job i is finished: jobs finish out of order when several threads run
  // them, and done_ advances over the marks in order (a mark is never reset: a later job's index
  // differs). The capacity must be at least the jobs that can be outstanding at once.
  std::vector<std::atomic<uint64_t>> marks_;
  alignas(64) std::atomic<uint64_t> claimed_{0};
  alignas(64) std::atomic<uint64_t> done_{0};
};

// The batches the engine's thread hands one I/O thread to send: a ring of preallocated slots with one
// producer (the engine's thread, under the wire's lock) and claiming consumers. The I/O thread claims
// them in order; while it is stalled (IoThread::stalled) its siblings claim what it has not, so that a
// thread without a CPU holds at most the one batch it was sending. released() counts the batches sent
// in order, so a send's TX fence (the batches that read its buffer) passes only once every batch up to
// its own has been sent, by whichever thread.
template <class T>
class ClaimRing {
 public:
  explicit ClaimRing(std::vector<std::unique_ptr<T>> slots)
      : slots_(std::move(slots)), sequence_(slots_.size()) {}
  // Producer: the slot to fill next, or nullptr while every slot is published and not yet released.
  T* producer_slot() {
    const uint64_t head = head_.load(std::memory_order_relaxed);
    if (head - sequence_.done() >= slots_.size()) return nullptr;
    return slots_[head % slots_.size()].get();
  }
  // Producer: hands the slot over (sequentially consistent, as SlotRing::publish).
  void publish() { head_.fetch_add(1, std::memory_order_seq_cst); }
  // Consumers: claims the oldest published slot nobody has claimed; nullptr if none. Give it back with
  // finish(seq) once nothing reads it any more.
  T* claim(uint64_t& seq) {
    if (!sequence_.claim(head_.load(std::memory_order_seq_cst), seq)) return nullptr;
    return slots_[seq % slots_.size()].get();
  }
  void finish(uint64_t seq) { sequence_.finish(seq); }
  // Any thread: whether a published slot waits to be claimed.
  bool has_unclaimed() const { return sequence_.unclaimed_below(head_.load(std::memory_order_seq_cst)); }
  uint64_t published() const { return head_.load(std::memory_order_acquire); }
  uint64_t released() const { return sequence_.done(); }

 private:
  std::vector<std::unique_ptr<T>> slots_;
  alignas(64) std::atomic<uint64_t> head_{0};  // slots published (written by the producer)
  ClaimedSequence sequence_;
};

// Payload copies into posted receive buffers, handed by the engine's thread to an I/O thread (the one
// whose batch holds the source bytes) and run by whoever gets to a job first: the I/O thread between its
// system calls, or a thread that must see them done now (caller-driven progress, a close). done() says how
// many are finished in queue order, so a batch whose copies are all below done() may be given back, and
// a receive whose copies are may be reported; the engine's thread need not wait for them (threaded mode:
// its ACKs and the next round go on while the I/O threads copy).
class CopyQueue {
 public:
  explicit CopyQueue(size_t capacity) : jobs_(capacity), sequence_(capacity) {}
  // Engine's thread (under the wire's lock): queues a copy; false when every slot holds a copy not yet
  // done (copy it yourself).
  bool push(uint8_t* dst, const uint8_t* src, size_t n) {
    if (pushed_ - sequence_.done() >= jobs_.size()) return false;
    jobs_[pushed_ % jobs_.size()] = Job{dst, src, n};
    ++pushed_;
    published_.store(pushed_, std::memory_order_release);
    return true;
  }
  // Engine's thread: copies queued so far (a fence: done() >= it means all of them are finished).
  uint64_t pushed() const { return pushed_; }
  // Any thread: the copies finished, in queue order (every copy below it is done; acquire).
  uint64_t done() const { return sequence_.done(); }
  // Any thread: whether copies are queued that no thread has finished.
  bool busy() const { return done() < published_.load(std::memory_order_acquire); }
  // Any thread: runs queued jobs nobody has claimed; returns how many it ran.
  size_t run();
  // Any thread: runs jobs and waits until done() >= fence.
  void finish(uint64_t fence);

 private:
  struct Job {
    uint8_t* dst = nullptr;
    const uint8_t* src = nullptr;
    size_t n = 0;
  };
  std::vector<Job> jobs_;
  uint64_t pushed_ = 0;  // engine's thread only
  alignas(64) std::atomic<uint64_t> published_{0};
  ClaimedSequence sequence_;
};

// Datagrams received from one socket by one recvmmsg, split and checked on the I/O thread.
struct RxBatch {
  explicit RxBatch(size_t batch) : receiver(batch), messages(batch) {}
  UdpReceiver receiver;             // owns the bytes and source addresses until released
  std::vector<RxMessage> messages;  // the first `count` are this batch's
  std::vector<uint8_t> verified;    // per datagram, in message order: 1 = decode_packet said kOk
  int count = 0;
  // Engine's thread: its thread's CopyQueue::pushed() once the batch was delivered; the batch goes back
  // to the I/O thread when done() reaches it (its payload is copied out).
  uint64_t copy_fence = 0;
};

// Packets the engine released, for one I/O thread to send.
struct TxBatch {
  explicit TxBatch(size_t batch) : packets(batch), items(batch) {}
  std::vector<engine::TxPacket> packets;  // the headers live here; payloads are the application's
  std::vector<TxItem> items;              // item.peer indexes `peers`
  std::vector<SockAddr> peers;            // destinations of this batch (a copy: the peer table may grow)
  std::vector<uint32_t> peer_ids;         // the wire's peer id of each entry of `peers`
  size_t count = 0;
  TimeNs polled_ns = 0;  // the engine's time at the poll_tx calls that filled it
};

// Counters an I/O thread publishes after each send or receive (it is their only writer).
struct IoThreadCounters {
  std::atomic<uint64_t> tx_datagrams{0}, tx_bytes{0}, tx_messages{0}, tx_gso_messages{0}, tx_syscalls{0},
      tx_dropped_full{0}, tx_dropped_error{0}, tx_error_retries{0}, tx_gso_fallbacks{0};
  std::atomic<uint64_t> rx_messages{0}, rx_gro_messages{0}, rx_syscalls{0}, rx_truncated{0}, rx_errors{0};
  std::atomic<uint64_t> sleeps{0};
  // Nanoseconds the thread was awake (not asleep in epoll, not paused), and of those, in rounds that
  // moved something (a send, a receive or a copy): busy / awake is how much of its polling went to
  // work, which its CPU time (about one core whenever awake) does not tell.
  std::atomic<uint64_t> awake_ns{0};
  std::atomic<uint64_t> busy_ns{0};
  // Messages this thread received from a stalled sibling's socket, and datagrams it sent from a stalled
  // sibling's queue (IoThread::set_siblings).
  std::atomic<uint64_t> rx_stolen{0};
  std::atomic<uint64_t> tx_stolen{0};
};

// Shared with the engine's thread. Where it sleeps: an I/O thread that published received datagrams
// writes `fd` when `sleeping` is set. `pending`: the application has requests outstanding (the engine's
// thread sets it after each round; PollPolicy::pending_ns applies while it is set).
struct CallerWake {
  int fd = -1;
  std::atomic<bool> sleeping{false};
  std::atomic<bool> pending{false};
  // Destinations whose datagrams met ICMP port unreachable (read_port_unreachable), for the engine's
  // thread to report (Endpoint::on_port_unreachable). Rare: a mutex, and a flag to skip it.
  std::mutex unreachable_mu;
  std::vector<SockAddr> unreachable;
  std::atomic<bool> has_unreachable{false};
};

// When a thread with nothing to do sleeps in epoll (UdpConfig::busy_poll, idle_poll_ns, pending_poll_ns):
// never when `busy`; else once `idle_ns` passed since its last work, or `pending_ns` while
// CallerWake::pending is set.
struct PollPolicy {
  bool busy = false;
  TimeNs idle_ns = 0;
  TimeNs pending_ns = 0;
};

class IoThread {
 public:
  // `sockets`: the whole pool (indexed by TxItem::socket); the thread receives on those with
  // index % threads == index, and on `group_fd` too unless it is -1 (its member of socket 0's receive
  // group, socket.h). `tx_batch`: packets per TxBatch; `rx_batch`: messages per recvmmsg (each RxBatch
  // holds rx_batch x 64 KiB); `slots`: batches in each direction.
  IoThread(uint32_t index, uint32_t threads, std::span<const UdpSocket> sockets, int group_fd,
           size_t tx_batch, size_t rx_batch, size_t slots, bool gso, PollPolicy poll, CallerWake* caller);
  ~IoThread();  // stops the thread
  IoThread(const IoThread&) = delete;
  IoThread& operator=(const IoThread&) = delete;

  // Every I/O thread of the wire (this one among them), before any starts. With `stall_ns` > 0 this
  // thread, when its own socket is quiet, also reads the receive-group member of any sibling that is
  // stalled(), and when its own TX queue is drained, sends that sibling's queued batches: a thread whose
  // CPU the scheduler or the hypervisor took away would otherwise hold its lanes' datagrams, and every
  // message that has bytes on those lanes, for as long as it is gone (milliseconds). The kernel gives
  // each datagram to one reader; each batch is claimed by one thread (ClaimRing).
  void set_siblings(std::span<const std::unique_ptr<IoThread>> all, TimeNs stall_ns);
  // Whether the thread has given no sign of life (heartbeat) for longer than `stall_ns` while not asleep
  // in epoll.
  bool stalled(TimeNs now, TimeNs stall_ns) const {
    return !sleeping_.load(std::memory_order_relaxed) &&
           now - heartbeat_.load(std::memory_order_relaxed) > stall_ns;
  }
  TimeNs heartbeat() const { return heartbeat_.load(std::memory_order_relaxed); }
  // Fault injection: a paused thread touches no socket and no ring, and does not loop, as if its CPU
  // were taken away; it resumes where it was. A sleeping thread is woken to take the pause.
  void pause(bool paused) {
    paused_.store(paused, std::memory_order_seq_cst);
    wake();
  }

  // Opens the thread's epoll set and eventfd and starts it; the message says what failed.
  Status start();
  void stop();

  SlotRing<RxBatch>& rx() { return rx_; }
  ClaimRing<TxBatch>& tx() { return tx_; }
  CopyQueue& copies() { return copies_; }
  const CopyQueue& copies() const { return copies_; }
  // After publishing a TxBatch: wakes the thread if it sleeps.
  void wake();
  // Whether the thread's first `published` TX batches are sent (or dropped), i.e. their payloads are no
  // longer read, by it or by a sibling; true at once if the thread is stopped (it will never read them).
  // Never waits; needs no lock.
  bool tx_released(uint64_t published) const;

  const IoThreadCounters& counters() const { return counters_; }
  // Datagrams sent per pool socket (only this thread's sockets are non-zero).
  std::vector<uint64_t> per_socket() const;

 private:
  void run();
  // Sends up to kTxBatchesPerRound of this thread's batches; returns how many.
  int send_ready();
  // Sends one queued batch of each stalled sibling (set_siblings), so that a thread without a CPU holds
  // no more than the batch it was sending: the sends they belong to complete, and their datagrams go
  // out in lane order before retransmissions would be needed.
  bool send_for_stalled();
  void send_batch(TxBatch& b);
  bool receive_ready(bool& rx_full);
  // Receives what `fd` holds into this thread's batches; returns the messages received (rx_full: no
  // free batch).
  uint64_t receive_from(int fd, bool& rx_full);
  // Reads the sockets of siblings that stalled (set_siblings).
  bool steal_from_stalled(bool& rx_full);
  void publish_tx_counters();
  // Reads the ICMP errors queued on this thread's sockets and hands closed ports to the engine's thread.
  void read_errors();

  uint32_t index_;
  std::vector<int> rx_fds_;  // the sockets this thread receives on, the one peers send to first
  uint64_t loops_ = 0;       // receive_ready calls
  std::span<const UdpSocket> sockets_;
  size_t rx_batch_;
  bool gso_;
  PollPolicy poll_;
  CallerWake* caller_;
  SlotRing<RxBatch> rx_;
  ClaimRing<TxBatch> tx_;
  CopyQueue copies_;
  UdpSender sender_;
  engine::Packet scratch_;             // decode_packet's output while checking CRCs
  std::vector<SockAddr> unreachable_;  // read_errors' scratch
  ReceiveCounters rx_totals_;
  IoThreadCounters counters_;
  std::unique_ptr<std::atomic<uint64_t>[]> per_socket_;
  int epfd_ = -1;
  int wakefd_ = -1;
  std::atomic<bool> sleeping_{false};
  std::atomic<bool> stop_{false};
  std::atomic<bool> paused_{false};
  // When the loop last came round or a system call of it returned (UdpWire::now()); siblings and the
  // engine's thread read it. A line of its own: written that often.
  alignas(64) std::atomic<TimeNs> heartbeat_{0};
  std::span<const std::unique_ptr<IoThread>> siblings_;
  TimeNs stall_ns_ = 0;
  std::thread thread_;
};

}  // namespace megascale::wire::detail
