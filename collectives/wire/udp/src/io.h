// The UDP wire's I/O state: socket pool, epoll set, peer table, batching buffers, fault injector, the
// I/O threads and the fences between them and the engine's thread. Owned by the ProgressLoop
// (progress_loop.h) and guarded by its lock; opened by open_io(). Internal to collectives/wire/udp.
#pragma once

#include <sys/epoll.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "io_thread.h"
#include "megascale/common/result.h"
#include "megascale/engine/endpoint.h"
#include "megascale/wire/fault.h"
#include "megascale/wire/packet_port.h"
#include "megascale/wire/udp.h"
#include "path_map.h"
#include "peers.h"
#include "receiver.h"
#include "rx_clock.h"
#include "sender.h"
#include "socket.h"

namespace megascale::wire::detail {

// epoll data for the wake-up eventfd and a packet port's wait fd (sockets use their pool index).
inline constexpr uint32_t kWakeToken = UINT32_MAX;
inline constexpr uint32_t kPortToken = UINT32_MAX - 1;
// Receive batches per readable socket per progress round, and send batches per round: bounded so one
// busy direction cannot starve the other (ACKs must get in while data goes out).
inline constexpr int kRxRoundsPerSocket = 4;
inline constexpr int kTxRoundsPerProgress = 8;
// Without I/O threads: streaming rounds that read only the home socket before epoll is asked about the
// rest of the pool (ProgressLoop::receive).
inline constexpr uint32_t kEpollEveryRounds = 16;
// Batches in each direction between the engine's thread and one I/O thread.
inline constexpr size_t kIoThreadSlots = 8;
// Messages per recvmmsg on an I/O thread: with GRO up to 64 KiB each, so 1 MiB per batch and 8 MiB per
// thread in its slots.
inline constexpr size_t kIoThreadRxBatch = 16;
// Path ids unused this long release their socket (PathMap); looked at this often.
inline constexpr TimeNs kPathIdleNs = 2 * kNsPerSec;
inline constexpr TimeNs kPathSweepIntervalNs = 100 * kNsPerMs;

// Payload copies below this size are made on the spot: handing them over costs more than copying.
inline constexpr size_t kInlineCopyBytes = 2048;

// The precise TX and copy fences (Io::tx_marks, Io::copy_marks): per (connection, request), the position
// each I/O thread must reach before that request's buffer is the caller's again (0: none of it went to
// that thread). Written under the wire's lock by the engine's thread as it hands a send's packets or a
// receive's payload copies to the threads, a message's in runs, so the entry last written per thread is
// kept at hand; taken when the request ends.
class RequestMarks {
 public:
  void resize(size_t n_threads) {
    n_threads_ = n_threads;
    forget();
  }
  // Thread `t` must reach `position` for (conn, req).
  void set(engine::ConnId conn, engine::RequestId req, size_t t, uint64_t position) {
    Last& last = last_[t];
    if (last.marks == nullptr || last.conn != conn || last.req != req) {
      std::vector<uint64_t>& m = marks_[{conn, req}];
      if (m.empty()) m.assign(n_threads_, 0);
      last.conn = conn;
      last.req = req;
      last.marks = &m;
    }
    (*last.marks)[t] = position;
  }
  // The request's positions, taken out of the table; empty if nothing of it went to a thread.
  std::vector<uint64_t> take(engine::ConnId conn, engine::RequestId req) {
    auto it = marks_.find({conn, req});
    if (it == marks_.end()) return {};
    std::vector<uint64_t> fence = std::move(it->second);
    marks_.erase(it);
    forget();
    return fence;
  }
  // Drops every request of a released connection.
  void erase_connection(engine::ConnId conn) {
    marks_.erase(marks_.lower_bound({conn, 0}), marks_.upper_bound({conn, ~engine::RequestId{0}}));
    forget();
  }

 private:
  struct Last {
    engine::ConnId conn = 0;
    engine::RequestId req = 0;
    std::vector<uint64_t>* marks = nullptr;  // into marks_; cleared whenever an entry is erased
  };
  void forget() { last_.assign(n_threads_, Last{}); }

  size_t n_threads_ = 0;
  std::map<std::pair<engine::ConnId, engine::RequestId>, std::vector<uint64_t>> marks_;
  std::vector<Last> last_;
};

// The engine's payload copies, routed to the I/O thread whose batch is being delivered (`thread`, whose
// queue is `queue`). Each queued copy is noted in `marks` under its receive: the thread's queue position
// after it, so that the receive is reported once its own copies are done (copy fence), not every copy
// queued by then.
struct ThreadCopier final : engine::PayloadCopier {
  CopyQueue* queue = nullptr;
  size_t thread = 0;
  RequestMarks* marks = nullptr;

  void copy(uint8_t* dst, const uint8_t* src, size_t n, engine::ConnId conn,
            engine::RequestId request) override {
    if (n < kInlineCopyBytes || queue == nullptr || !queue->push(dst, src, n)) {
      std::memcpy(dst, src, n);
      return;
    }
    marks->set(conn, request, thread, queue->pushed());  // done() >= this: the copy just queued is made
  }
};

// Where ProgressLoop::receive_from_threads stands in one thread's batches.
struct RxCursor {
  uint32_t batch = 0;                 // index among the batches taken this round
  int message = 0;                    // next message of that batch
  const uint8_t* verified = nullptr;  // next datagram's CRC verdict in that batch
};

// The fences: how far each I/O thread must get before the caller may have a request's buffer back.
//  - kTx: a packet's payload (an application buffer) is read by an I/O thread after the engine call
//    that released it, so before the caller learns that a send finished, failed or was closed (and may
//    free its buffer), every TX batch holding one of its packets must be sent (later batches cannot
//    hold them: the engine sends nothing more of a finished request or a closed connection). test()
//    and wait() use the send's own batches (Io::tx_marks); close() every batch published.
//  - kCopies: in threaded mode a round hands payload copies to the I/O threads and does not wait for
//    them, so a receive the engine reports done may still be copying: its copies must be done (test()
//    and wait(): its own, Io::copy_marks; close(): every copy pushed so far).
enum class Fence : uint8_t { kTx, kCopies };

// A finished request held back, without blocking its caller, until its fence has passed: a send until
// the I/O threads have sent the batches holding its packets (its payload is no longer read), a receive
// until they have made its payload copies (its payload is all in place).
struct Held {
  Fence kind = Fence::kTx;      // kTx for a send, kCopies for a receive
  std::vector<uint64_t> fence;  // per I/O thread: TX batches released, or copies done
  engine::Completion completion;
};

struct Io {
  explicit Io(const UdpConfig& config)
      : paths(1),
        peers(config.max_peers),
        sender(config.batch),
        receiver(config.batch),
        tx(config.batch),
        items(config.batch) {}
  ~Io() {
    // Stop the I/O threads before their sockets close, and all of them before any is destroyed: each
    // reads its siblings (IoThread::set_siblings).
    for (const auto& t : threads) t->stop();
    threads.clear();
    for (UdpSocket& s : sockets) close_udp_socket(s);
    for (UdpSocket& s : rx_group) close_udp_socket(s);
    if (epfd >= 0) ::close(epfd);
    if (wakefd >= 0) ::close(wakefd);
  }
  Io(const Io&) = delete;
  Io& operator=(const Io&) = delete;

  int family = 0;
  std::vector<UdpSocket> sockets;
  // A packet port in place of the sockets (packet_port.h): the wire then has no sockets, no I/O threads
  // and no peer table of its own (the port keeps its peers).
  std::unique_ptr<PacketPort> port;
  std::vector<PortPacket> port_tx;  // one batch for port->send()
  bool has_peer(uint32_t peer) const { return port ? port->has_peer(peer) : peers.contains(peer); }
  // With I/O threads (> 1): members 1.. of socket 0's SO_REUSEPORT receive group (member 0 is
  // sockets[0]), thread t receiving on member t; and the claim on their port (socket.h).
  std::vector<UdpSocket> rx_group;
  PortClaim port_claim;
  PathMap paths;  // path id -> index into sockets
  TimeNs last_sweep_ns = 0;
  PeerTable peers;
  UdpSender sender;
  UdpReceiver receiver;
  RxClock rx_clock;  // kernel receive timestamps -> CLOCK_MONOTONIC
  std::optional<FaultInjector> fault;
  // UdpConfig::io_threads > 0: the threads that own the sockets' system calls (socket i: thread
  // i % threads.size()), and where they wake this side.
  std::vector<std::unique_ptr<IoThread>> threads;
  CallerWake caller_wake;
  std::vector<TxBatch*> tx_open;  // ProgressLoop::transmit_to_threads: the batch being filled per thread
  // Per send whose payload went into TX batches: the batches each I/O thread must release before
  // nothing reads its buffer (ProgressLoop::transmit_to_threads), so its fence does not wait for the later
  // messages queued behind it.
  RequestMarks tx_marks;
  // Per receive with payload copies queued on I/O threads: the queue position its last copy on each
  // thread must reach (ThreadCopier), so it does not wait for the copies queued after its own.
  RequestMarks copy_marks;
  // Finished requests held back for their fence, by (connection, request).
  std::map<std::pair<engine::ConnId, engine::RequestId>, Held> held;
  ThreadCopier copier;
  // Threaded mode: receive batches delivered and waiting for their payload copies, per I/O thread (the
  // oldest of its ring's published slots); given back once done (ProgressLoop::release_copied).
  std::vector<uint32_t> rx_delivered;
  std::vector<uint32_t> rx_taken;  // receive_from_threads: batches taken per thread this round
  std::vector<RxCursor> rx_cursor;
  std::vector<engine::TxPacket> tx;  // one batch from poll_tx
  std::vector<TxItem> items;
  std::vector<epoll_event> events = std::vector<epoll_event>(64);
  int epfd = -1;
  int wakefd = -1;
  bool gso = false;             // in use now (cleared if the kernel refuses a GSO send)
  TimeNs last_io_ns = 0;        // when a round last received or sent a datagram, or requests became pending
  bool home_streaming = false;  // receive(): the last round read datagrams from socket 0
  uint32_t rounds_since_epoll = 0;  // receive(): rounds that read socket 0 without epoll

  // Counters the wire keeps itself (the sender and receiver keep theirs).
  uint64_t datagrams_received = 0;
  uint64_t bytes_received = 0;
  uint64_t ce_received = 0;
  uint64_t rx_timestamped = 0;
  uint64_t rx_timestamps_rejected = 0;
  uint64_t recv_errors = 0;
  uint64_t port_unreachable = 0;      // ICMP port unreachable for a known peer, reported to the engine
  std::vector<SockAddr> unreachable;  // closed ports read from the sockets, not yet reported
  uint64_t peer_table_full = 0;
  uint64_t tx_bad_peer = 0;  // engine packets for a peer id the table does not have
  uint64_t tx_rerouted = 0;  // packets sent by another I/O thread than their socket's (stalled) one
  uint64_t progress_calls = 0;
  uint64_t tx_deferred = 0;
  uint64_t sleeps = 0;
  uint64_t help_rounds = 0;  // rounds UdpWire::help() ran
  uint64_t clock_reads = 0;  // ProgressLoop::clock(): the progress rounds' and progress thread's reads
  // Reads of the wake-up eventfd (wakefd); also made by a sleep, outside the lock.
  std::atomic<uint64_t> wake_reads{0};
};

// The configuration in effect for `given`: a fresh engine seed (unless fixed_seed), the software-path
// floors raised onto the engine's congestion settings, and pending_poll_ns at least idle_poll_ns.
UdpConfig with_software_floors(UdpConfig given);

// Opens the sockets (and receive group, epoll set, eventfd, I/O threads) that `config` asks for, and
// fills `caps` with what the kernel granted. `config` is the one in effect (software floors applied).
Result<std::unique_ptr<Io>> open_io(const UdpConfig& config, UdpCapabilities& caps);
// The same over a packet port: the epoll set has the port's wait fd and the wake-up eventfd.
Result<std::unique_ptr<Io>> open_port_io(const UdpConfig& config, std::unique_ptr<PacketPort> port);

// The wire's counters: its own, its sender's and receiver's, and every I/O thread's.
UdpWireStats collect_stats(const Io& io);

}  // namespace megascale::wire::detail
