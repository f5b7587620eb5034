// An I/O thread of the UDP wire (see io_thread.h).
#include "io_thread.h"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "megascale/engine/packet.h"
#include "megascale/wire/udp.h"

namespace megascale::wire::detail {
namespace {

constexpr uint32_t kWake = UINT32_MAX;
// Receive batches per socket per loop, so that one busy socket cannot starve the sends.
constexpr int kRxRoundsPerSocket = 4;
// Loops between reads of the sockets peers do not send to (see rx_fds_).
constexpr uint32_t kOtherSocketsEvery = 16;
constexpr int kTxBatchesPerRound = 2;
// Longest sleep: a stop() that loses its wake-up is still noticed.
constexpr int kMaxSleepMs = 100;

template <class T>
std::vector<std::unique_ptr<T>> make_slots(size_t n, size_t batch) {
  std::vector<std::unique_ptr<T>> v;
  for (size_t i = 0; i < n; ++i) v.push_back(std::make_unique<T>(batch));
  return v;
}

void add(std::atomic<uint64_t>& a, uint64_t delta) {
  // The thread is the only writer: a plain load and store, no read-modify-write.
  if (delta != 0) a.store(a.load(std::memory_order_relaxed) + delta, std::memory_order_relaxed);
}

}  // namespace

bool ClaimedSequence::claim(uint64_t available, uint64_t& job) {
  uint64_t i = claimed_.load(std::memory_order_relaxed);
  while (i < available) {
    if (claimed_.compare_exchange_weak(i, i + 1, std::memory_order_acq_rel)) {
      job = i;
      return true;
    }  // else i reloaded
  }
  return false;
}

void ClaimedSequence::finish(uint64_t job) {
  // Sequentially consistent: two threads that each mark a job and then look at the other's mark must not
  // both miss the other's (the store-buffer pattern), or done_ would stop below a finished job.
  marks_[job % marks_.size()].store(job + 1, std::memory_order_seq_cst);
  uint64_t d = done_.load(std::memory_order_seq_cst);
  while (marks_[d % marks_.size()].load(std::memory_order_seq_cst) == d + 1) {
    if (done_.compare_exchange_weak(d, d + 1, std::memory_order_seq_cst)) ++d;
  }
}

size_t CopyQueue::run() {
  size_t ran = 0;
  uint64_t i = 0;
  while (sequence_.claim(published_.load(std::memory_order_acquire), i)) {
    const Job& job = jobs_[i % jobs_.size()];
    std::memcpy(job.dst, job.src, job.n);
    sequence_.finish(i);
    ++ran;
  }
  return ran;
}

void CopyQueue::finish(uint64_t fence) {
  run();
  while (done() < fence) {
    // Another thread is in the middle of a copy it claimed: a few microseconds, unless the scheduler took
    // its CPU away mid-copy.
    std::this_thread::yield();
    run();
  }
}

IoThread::IoThread(uint32_t index, uint32_t threads, std::span<const UdpSocket> sockets, int group_fd,
                   size_t tx_batch, size_t rx_batch, size_t slots, bool gso, PollPolicy poll,
                   CallerWake* caller)
    : index_(index),
      sockets_(sockets),
      rx_batch_(rx_batch),
      gso_(gso),
      poll_(poll),
      caller_(caller),
      rx_(make_slots<RxBatch>(slots, rx_batch)),
      tx_(make_slots<TxBatch>(slots, tx_batch)),
      copies_(slots * rx_batch * 64),
      sender_(tx_batch),
      per_socket_(new std::atomic<uint64_t>[sockets.size()]) {
  // Peers send every lane to the pool's socket 0, whose receive group gives thread t member t (socket 0
  // itself for thread 0, `group_fd` for the others): that one is read every loop. The thread's other
  // sockets are lane source ports, which receive nothing but ICMP errors and strays.
  if (group_fd >= 0) rx_fds_.push_back(group_fd);
  for (uint32_t i = 0; i < sockets.size(); ++i) {
    if (i % threads == index) rx_fds_.push_back(sockets[i].fd);
    per_socket_[i].store(0);
  }
}

IoThread::~IoThread() {
  stop();
  if (epfd_ >= 0) ::close(epfd_);
  if (wakefd_ >= 0) ::close(wakefd_);
}

Status IoThread::start() {
  epfd_ = epoll_create1(EPOLL_CLOEXEC);
  wakefd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epfd_ < 0 || wakefd_ < 0) {
    return make_error(ErrorCode::kSystem, "udp wire: I/O thread " + std::to_string(index_) +
                                              ": epoll/eventfd: " + strerror(errno));
  }
  for (size_t s = 0; s < rx_fds_.size(); ++s) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = static_cast<uint32_t>(s);
    if (epoll_ctl(epfd_, EPOLL_CTL_ADD, rx_fds_[s], &ev) != 0) {
      return make_error(ErrorCode::kSystem,
                        "udp wire: I/O thread " + std::to_string(index_) + ": epoll_ctl: " + strerror(errno));
    }
  }
  epoll_event wake{};
  wake.events = EPOLLIN;
  wake.data.u32 = kWake;
  epoll_ctl(epfd_, EPOLL_CTL_ADD, wakefd_, &wake);
  heartbeat_.store(UdpWire::now(), std::memory_order_relaxed);
  thread_ = std::thread([this] {
    // Named for `top -H` and profilers: "msio<wire-local index>" (15 characters at most on Linux).
    const std::string name = "msio" + std::to_string(index_);
    pthread_setname_np(pthread_self(), name.c_str());
    run();
  });
  return {};
}

void IoThread::stop() {
  if (!thread_.joinable()) return;
  stop_.store(true);
  eventfd_write(wakefd_, 1);
  thread_.join();
  thread_ = std::thread();
}

void IoThread::wake() {
  if (sleeping_.load(std::memory_order_seq_cst)) eventfd_write(wakefd_, 1);
}

bool IoThread::tx_released(uint64_t published) const {
  return tx_.released() >= published || !thread_.joinable() || stop_.load(std::memory_order_relaxed);
}

std::vector<uint64_t> IoThread::per_socket() const {
  std::vector<uint64_t> v(sockets_.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = per_socket_[i].load(std::memory_order_relaxed);
  return v;
}

void IoThread::publish_tx_counters() {
  const SendCounters& c = sender_.counters();
  IoThreadCounters& p = counters_;
  p.tx_datagrams.store(c.datagrams, std::memory_order_relaxed);
  p.tx_bytes.store(c.bytes, std::memory_order_relaxed);
  p.tx_messages.store(c.messages, std::memory_order_relaxed);
  p.tx_gso_messages.store(c.gso_messages, std::memory_order_relaxed);
  p.tx_syscalls.store(c.syscalls, std::memory_order_relaxed);
  p.tx_dropped_full.store(c.dropped_full, std::memory_order_relaxed);
  p.tx_dropped_error.store(c.dropped_error, std::memory_order_relaxed);
  p.tx_error_retries.store(c.error_retries, std::memory_order_relaxed);
  p.tx_gso_fallbacks.store(c.gso_fallbacks, std::memory_order_relaxed);
  const std::vector<uint64_t>& sent = sender_.per_socket();
  for (size_t i = 0; i < sent.size() && i < sockets_.size(); ++i) {
    per_socket_[i].store(sent[i], std::memory_order_relaxed);
  }
}

void IoThread::read_errors() {
  unreachable_.clear();
  for (int fd : rx_fds_) read_port_unreachable(fd, unreachable_);
  if (unreachable_.empty()) return;
  std::lock_guard<std::mutex> lock(caller_->unreachable_mu);
  caller_->unreachable.insert(caller_->unreachable.end(), unreachable_.begin(), unreachable_.end());
  caller_->has_unreachable.store(true, std::memory_order_release);
}

void IoThread::send_batch(TxBatch& b) {
  // The payload CRCs the engine left to the wire (EngineConfig::wire_seals_payload_crc): here, off the
  // engine's thread, and in parallel with the other I/O threads. The time the batch waited for a thread
  // goes into its ACKs' remote delay: it is this host's queueing, not the fabric's.
  const TimeNs waited = UdpWire::now() - b.polled_ns;
  for (size_t i = 0; i < b.count; ++i) {
    engine::seal_seg_payload_crc(b.packets[i]);
    engine::add_tx_wait(b.packets[i], waited);
  }
  const uint64_t errors_before = sender_.counters().error_retries;
  sender_.send(std::span<const TxItem>(b.items.data(), b.count), sockets_, b.peers, gso_);
  // Alive, only busy: a batch of 60 KiB datagrams takes hundreds of microseconds to send.
  heartbeat_.store(UdpWire::now(), std::memory_order_relaxed);
  // A send that failed may have failed on a queued ICMP error (a peer's closed port).
  if (sender_.counters().error_retries != errors_before) read_errors();
}

int IoThread::send_ready() {
  int sent = 0;
  // A bounded number of batches per call, then the sockets are read: while the engine's thread keeps
  // this thread's lanes busy (their window opened by ACKs that other threads receive), an unbounded
  // loop here never returned to this thread's own receive-group member, whose ACKs then overflowed the
  // socket buffer (seen on the 16-core host: 8 MiB queued, thousands dropped, each loss a burst of
  // retransmissions).
  for (; sent < kTxBatchesPerRound; ++sent) {
    uint64_t seq = 0;
    TxBatch* b = tx_.claim(seq);
    if (b == nullptr) break;
    send_batch(*b);
    tx_.finish(seq);
    copies_.run();  // received payload waiting to be given to its receive
  }
  if (sent > 0) publish_tx_counters();
  return sent;
}

bool IoThread::send_for_stalled() {
  if (stall_ns_ <= 0 || siblings_.size() < 2) return false;
  TimeNs now = 0;
  bool sent = false;
  for (const auto& s : siblings_) {
    if (s.get() == this || !s->tx_.has_unclaimed()) continue;
    if (now == 0) now = UdpWire::now();
    if (!s->stalled(now, stall_ns_)) continue;
    // One batch per stalled sibling per loop: this thread's own lanes come first.
    uint64_t seq = 0;
    TxBatch* b = s->tx_.claim(seq);
    if (b == nullptr) continue;  // its thread, or another sibling, took it first
    send_batch(*b);
    add(counters_.tx_stolen, b->count);  // before finish(): the slot is the producer's again after it
    s->tx_.finish(seq);
    sent = true;
  }
  if (sent) publish_tx_counters();
  return sent;
}

uint64_t IoThread::receive_from(int fd, bool& rx_full) {
  uint64_t messages = 0;
  for (int round = 0; round < kRxRoundsPerSocket; ++round) {
    RxBatch* b = rx_.producer_slot();
    if (b == nullptr) {
      rx_full = true;
      return messages;
    }
    copies_.run();
    const ReceiveCounters before = b->receiver.counters();
    const int n = b->receiver.receive(fd);
    heartbeat_.store(UdpWire::now(), std::memory_order_relaxed);
    const ReceiveCounters& after = b->receiver.counters();
    add(counters_.rx_syscalls, after.syscalls - before.syscalls);
    add(counters_.rx_messages, after.messages - before.messages);
    if (n < 0) {
      add(counters_.rx_errors, 1);  // e.g. an ICMP error queued on the socket
      read_errors();
      continue;
    }
    if (n == 0) break;
    // Split and check here, so the engine's thread only demultiplexes and copies.
    b->verified.clear();
    for (int i = 0; i < n; ++i) {
      RxMessage m = b->receiver.message(i);
      b->messages[static_cast<size_t>(i)] = m;
      if (m.truncated || m.segment_size == 0) continue;
      for (size_t off = 0; off < m.bytes.size(); off += m.segment_size) {
        const size_t len = std::min(m.segment_size, m.bytes.size() - off);
        const bool ok =
            engine::decode_packet(m.bytes.data() + off, len, scratch_, true) == engine::DecodeResult::kOk;
        b->verified.push_back(ok ? 1 : 0);
      }
    }
    add(counters_.rx_gro_messages, after.gro_messages - before.gro_messages);
    add(counters_.rx_truncated, after.truncated - before.truncated);
    b->count = n;
    rx_.publish();
    messages += static_cast<uint64_t>(n);
    if (caller_->sleeping.load(std::memory_order_seq_cst)) eventfd_write(caller_->fd, 1);
    if (static_cast<size_t>(n) < rx_batch_) break;  // drained
  }
  return messages;
}

bool IoThread::receive_ready(bool& rx_full) {
  bool received = false;
  // The first socket every loop, the others every kOtherSocketsEvery loops: an empty recvmmsg is a
  // system call all the same, and with 4 lanes on 2 threads two of a thread's three looks found nothing
  // (several recvmmsg per datagram received under NCCL).
  const size_t looks =
      ++loops_ % kOtherSocketsEvery == 0 ? rx_fds_.size() : std::min<size_t>(1, rx_fds_.size());
  for (size_t k = 0; k < looks && !rx_full; ++k) received = receive_from(rx_fds_[k], rx_full) > 0 || received;
  return received;
}

void IoThread::set_siblings(std::span<const std::unique_ptr<IoThread>> all, TimeNs stall_ns) {
  siblings_ = all;
  stall_ns_ = stall_ns;
}

bool IoThread::steal_from_stalled(bool& rx_full) {
  if (stall_ns_ <= 0 || siblings_.size() < 2) return false;
  const TimeNs now = UdpWire::now();
  bool received = false;
  for (const auto& s : siblings_) {
    if (s.get() == this || s->rx_fds_.empty() || !s->stalled(now, stall_ns_)) continue;
    const uint64_t n = receive_from(s->rx_fds_[0], rx_full);
    add(counters_.rx_stolen, n);
    received = received || n > 0;
    if (rx_full) break;
  }
  return received;
}

void IoThread::run() {
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  TimeNs last_work_ns = UdpWire::now();
  // The previous round's start, and how long it slept or was paused: the rest of it was awake.
  TimeNs round_ns = last_work_ns;
  TimeNs asleep_ns = 0;
  while (!stop_.load(std::memory_order_relaxed)) {
    const TimeNs start_ns = UdpWire::now();
    add(counters_.awake_ns, static_cast<uint64_t>(std::max<TimeNs>(0, start_ns - round_ns - asleep_ns)));
    round_ns = start_ns;
    asleep_ns = 0;
    if (paused_.load(std::memory_order_relaxed)) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      asleep_ns = UdpWire::now() - start_ns;
      continue;
    }
    heartbeat_.store(start_ns, std::memory_order_relaxed);
    bool rx_full = false;
    const bool copied = copies_.run() > 0;
    const int own_sent = send_ready();
    bool received = receive_ready(rx_full);
    // Batches queued on a stalled sibling, once this thread's own queue is drained.
    const bool sent_for_sibling = own_sent < kTxBatchesPerRound && send_for_stalled();
    const bool sent = own_sent > 0 || sent_for_sibling;
    // Only when its own socket was quiet: a sibling's lanes never come before this thread's own.
    if (!received && !rx_full) received = steal_from_stalled(rx_full);
    if (sent || received || copied) {
      last_work_ns = UdpWire::now();
      add(counters_.busy_ns, static_cast<uint64_t>(last_work_ns - start_ns));
      continue;
    }
    const bool pending = caller_->pending.load(std::memory_order_seq_cst);
    const TimeNs window = pending ? poll_.pending_ns : poll_.idle_ns;
    if (poll_.busy || rx_full || UdpWire::now() - last_work_ns < window) {
      // Traffic is flowing (or the engine's thread has batches of ours to process, or the application
      // waits for an answer): more is due within microseconds, and waking from epoll costs tens of them.
      // But this round found nothing: give the CPU to any thread waiting for one. With more polling
      // threads than CPUs, the thread that holds the next packet otherwise waits out a scheduler slice
      // (milliseconds), and RTOs follow (`megascale perf --io-threads 1` on 2 CPUs moves many times more
      // with the yield than without; figures in docs/PERFORMANCE.md). With a CPU to spare, the yield
      // returns at once.
      std::this_thread::yield();
      continue;
    }
    sleeping_.store(true, std::memory_order_seq_cst);
    // Looked at again after `sleeping_` is set: requests that became pending meanwhile were published
    // with a wake() this thread may have missed; it polls for them instead of sleeping.
    const bool now_pending = !pending && caller_->pending.load(std::memory_order_seq_cst);
    if (!tx_.has_unclaimed() && !copies_.busy() && !stop_.load() && !now_pending) {
      add(counters_.sleeps, 1);
      epoll_event events[8];
      const TimeNs slept_from = UdpWire::now();
      const int rc = epoll_wait(epfd_, events, 8, kMaxSleepMs);
      const TimeNs woke_ns = UdpWire::now();
      asleep_ns = woke_ns - slept_from;
      // Woken (a packet, a batch to send, requests posted): the polling window restarts here.
      if (rc > 0) last_work_ns = woke_ns;
      bool errors = false;
      for (int i = 0; i < rc; ++i) {
        // An error queue that is not empty keeps a socket ready (EPOLLERR) until it is read.
        errors = errors || (events[i].events & EPOLLERR) != 0;
        if (events[i].data.u32 == kWake) {
          eventfd_t drained = 0;
          eventfd_read(wakefd_, &drained);
        }
      }
      if (errors) read_errors();
    }
    heartbeat_.store(UdpWire::now(), std::memory_order_relaxed);  // awake again: not stalled
    sleeping_.store(false, std::memory_order_relaxed);
    if (now_pending) last_work_ns = UdpWire::now();
  }
}

}  // namespace megascale::wire::detail
