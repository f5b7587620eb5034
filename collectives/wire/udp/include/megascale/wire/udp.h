// The UDP wire: drives the sans-I/O engine (collectives/engine) on real UDP sockets in real time.
// It owns one engine Endpoint, a pool of sockets (one UDP source port per lane path), the peer table
// (socket address <-> the engine's u32 peer id), optional fault injection, and the only clock reads of
// the transport (CLOCK_MONOTONIC).
//
// Two ways to drive it:
//  - caller-driven (NCCL's proxy thread): call progress() often from ONE thread; it receives what is
//    waiting, hands it to the engine, runs due timers, sends what the engine releases, and returns
//    without blocking. Post and test on that same thread, through the convenience calls below or
//    endpoint() directly.
//  - threaded (tools, tests): start() runs progress on a thread of its own that sleeps in epoll until
//    a datagram arrives, a post wakes it, or the engine's next deadline comes (or busy-polls). Any
//    thread may then use the convenience calls (connect, post_send, wait, ...): they take the wire's
//    lock, so they are safe to call concurrently with the progress thread, and wake it.
//
//   UdpConfig cfg;  cfg.bind_host = "127.0.0.1";  cfg.engine.lanes = 4;
//   auto wire = UdpWire::create(cfg);                    // Result<std::unique_ptr<UdpWire>>
//   if (!wire) { fmt::print(stderr, "{}\n", wire.error().message); return 2; }
//   (*wire)->start();                                    // threaded mode
//   auto conn = (*wire)->connect("127.0.0.1", 5000);    // Result<ConnId>
//   auto req = (*wire)->post_send(*conn, data, size, /*tag=*/0);
//   engine::Completion c = (*wire)->wait(*conn, *req, sec(10));
//
// Inside (src/): UdpWire is the public face; the progress loop (progress_loop.h) owns the engine, the
// I/O state and the one lock that guards them, runs the rounds and the thread; the ticket queue
// (tickets.h) carries submitted tickets into the engine and their completions back.
//
// Sending: each engine TxPacket goes out as the iovec pair [header, payload] (payload read straight
// from the application's buffer, no copy in user space), many per sendmmsg; a run of equal-size
// packets to one peer on one socket becomes one UDP GSO message when the kernel supports UDP_SEGMENT.
// Receiving: recvmmsg, UDP GRO aggregates split back into datagrams, the ECN field read from
// IP_TOS / IPV6_TCLASS and handed to the engine as CE, and the kernel's software receive timestamp
// (SO_TIMESTAMPNS, converted from CLOCK_REALTIME to CLOCK_MONOTONIC) handed over as the datagram's
// arrival time, so that delay-based control measures the path rather than this host's scheduling. Packets
// leave with ECT(0) (unless the engine says otherwise) and the configured DSCP. GSO, GRO and ECN are probed
// when the sockets open and fall back cleanly; capabilities() says what is on.
//
// Lanes and source ports: the engine gives every packet a path id; each path id in use is assigned the
// pool socket and keeps it while in use: a lane's first path id takes socket `lane % sockets`, so lane
// i of every connection leaves from socket i (with UdpConfig::source_ports, from source_ports[i]), and
// lanes get distinct UDP source ports while there are at least as many sockets as lanes. Repathing (a
// new path id for a lane: PLB after bad rounds, or repeated RTOs) moves the lane to the least-loaded
// other socket; when every socket carries a lane (the default pool) it then shares another lane's
// port, and so leaves the path a port mapping chose for it until its old id has been idle for 2 s
// and it repaths again. engine.repath_delay_rtts = 0 and a high repath_rto_threshold keep lanes on
// their mapped ports. Packets without a lane (SYN, endpoint RSTs: engine::kHomePathId) leave from socket 0,
// the port peers connect to. Receiving, every source address gets a peer id of its own in the peer
// table; the engine demultiplexes by connection id, so the lanes of one remote connection may arrive
// under several peer ids while replies go to the address the connection was opened with.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "megascale/common/result.h"
#include "megascale/common/units.h"
#include "megascale/engine/config.h"
#include "megascale/engine/connection.h"
#include "megascale/engine/endpoint.h"
#include "megascale/engine/request.h"
#include "megascale/wire/fault.h"
#include "megascale/wire/packet_port.h"

namespace megascale::wire {
namespace detail {
class ProgressLoop;  // the rounds, the thread, the waits and the fences (src/progress_loop.h)
class TicketQueue;   // submitted tickets on their way to the engine (src/tickets.h)
}  // namespace detail

// A seed no other process draws: getrandom(2) mixed with the pid and the clock (either alone
// suffices; both together survive a failing getrandom and a pid or clock that repeats).
uint64_t random_engine_seed();

struct UdpConfig {
  std::string bind_host = "127.0.0.1";  // local address ("0.0.0.0" or "::" for any); its family is the
                                        // wire's: an IPv6 wire talks to IPv6 peers only
  uint16_t bind_port = 0;               // port of socket 0, the one peers connect to; 0 = ephemeral
  uint32_t sockets = 0;                 // source ports in the pool; 0 = one per engine lane
  // With bind_port != 0, socket i binds bind_port + i (consecutive ports, easy to firewall and to
  // steer with ECMP hash models); with bind_port == 0 every socket takes an ephemeral port.
  // Explicit source ports: when non-empty, the pool has exactly these sockets, socket i binding
  // source_ports[i] (socket 0 is the one peers connect to), and lane i of every connection leaves from
  // socket i (lane % size beyond). Use the ports that the topology's port mapping chose for one
  // destination (topo::map_source_ports, `megascale topo ports`), so lane i takes the path chosen for
  // it. bind_port and sockets must then stay 0; ports are 1..65535, distinct, at most 1024 of them.
  std::vector<uint16_t> source_ports;
  uint8_t dscp = 0;  // DSCP code point (0..63) in the TOS / traffic class byte
  bool ecn = true;   // mark packets ECT(0)
  bool gso = true;   // use UDP GSO when the kernel supports it
  bool gro = true;   // use UDP GRO when the kernel supports it
  // Kernel software receive timestamps (SO_TIMESTAMPNS) as arrival times for the engine's RTT and
  // remote-delay measurements; off: a datagram "arrives" when progress() reads it.
  bool rx_timestamps = true;
  uint32_t batch = 64;                // datagrams per sendmmsg / messages per recvmmsg (1..1024)
  int socket_buffer_bytes = 4 << 20;  // SO_SNDBUF / SO_RCVBUF wished for (net.core.*mem_max caps
                                      // it unless the process has CAP_NET_ADMIN)
  uint32_t max_peers = 65536;         // peer table limit; datagrams from further addresses drop
  // Threaded mode: busy-poll instead of sleeping in epoll (lowest latency, burns a core).
  bool busy_poll = false;
  // Threaded mode: a deadline closer than this is waited for by spinning, not by sleeping (kernel
  // timers wake tens of microseconds late; pacing needs better).
  TimeNs spin_ns = 20 * kNsPerUs;
  // Threaded mode: after a round that moved packets, keep polling this long before sleeping. Waking
  // from epoll costs tens of microseconds, which a delay-based controller would see as queueing.
  TimeNs idle_poll_ns = 50 * kNsPerUs;
  // Threaded mode, while the application has requests outstanding (posted, not yet completed): keep
  // polling this long after the last packet or post instead. A receive waiting for a peer's message
  // then finds the threads awake when it comes (small messages: each wake-up would be on the critical
  // path); with nothing outstanding (between collectives, during compute) the threads sleep after
  // idle_poll_ns. 0..10 s; never shorter than idle_poll_ns (at most that turns it off).
  TimeNs pending_poll_ns = 1 * kNsPerMs;
  // help() runs a round on its caller's thread when no round has ended for this long
  // (the progress thread asleep, or waiting for a CPU on a host whose CPUs are all taken). A caller that
  // polls anyway (NCCL's proxy thread testing its requests) then moves the wire whenever it runs itself,
  // not only when the progress thread is scheduled. 0 = help() does nothing; 0..1 s.
  TimeNs help_after_ns = 0;
  // I/O threads: 0 = the thread that drives progress() makes every system call itself (lowest latency:
  // no hand-over between threads). N > 0 = N threads of the wire's own take the sockets (socket i:
  // thread i % N; at most one per socket): they receive, check CRCs and send, so lanes on different
  // sockets move in parallel and the driving thread only runs the protocol and copies payload into
  // posted buffers (collectives/wire/README.md, "I/O threads"). Works with either way of driving.
  // A packet may then leave after progress() returned: a retransmission still queued for an I/O thread
  // when its send completes reads a buffer the application may already reuse; that copy fails its CRC
  // at the receiver (which has the data already), or, if the memory is gone, the send fails (EFAULT,
  // counted in send_dropped_error). It is never delivered as data.
  uint32_t io_threads = 0;
  // I/O threads: one that has not come round its loop for this long while not asleep is taken as
  // stalled (the scheduler or the hypervisor took its CPU): the engine's thread hands the packets of its
  // sockets to the other I/O threads, and they read its receive-group member when their own is quiet,
  // until it is back. Any thread may send on any socket and the kernel gives each datagram to one
  // reader, so nothing waits for the missing thread but what it already held. 0 = off; 0..1 s.
  TimeNs stall_ns = 300 * kNsPerUs;
  FaultConfig fault;            // off by default
  engine::EngineConfig engine;  // the transport's own knobs
  // engine.seed is replaced by random_engine_seed() when the wire is created, so that every process
  // draws its own connection ids (the handshake's nonces: a fixed seed gives every run the same ids,
  // and datagrams captured from one run are valid in the next). true: engine.seed as given, for tests
  // that want the same ids every run.
  bool fixed_seed = false;

  // Software-path floors, applied to engine.cc when the wire is created (config() shows the result).
  // The congestion presets' pacer burst and RTO floor are fabric values (a NIC paces per packet and
  // answers in microseconds); a software wire needs more (collectives/wire/README.md):
  //  - The engine's clock stands still within a progress round, so a lane releases at most one pacer
  //    burst per round: with 16 KiB (two 8 KiB segments) a lane is capped at burst / round time, a few
  //    Gbit/s. One GSO message (64 KiB) per lane per round lifts the cap. 0 = no floor.
  uint64_t pacer_burst_floor_bytes = 64 * 1024;
  //  - ACKs wait for the peer's progress thread, which a busy host schedules hundreds of us late; a
  //    100 us RTO floor then fires spuriously (and the RTO's randomised first timeout may be half the
  //    smoothed RTO). 0 = no floor.
  TimeNs min_rto_floor_ns = kNsPerMs;
};

// Checks ranges; the message names the field and the value.
Status validate_udp_config(const UdpConfig& config);

// Parses a source-port list "P1,P2,..." as `megascale topo ports` prints it (decimal ports 1..65535,
// distinct, 1..1024 of them; spaces around items allowed). Errors name the bad item; callers prefix
// their flag or variable (--source-ports, MEGASCALE_SOURCE_PORTS).
Result<std::vector<uint16_t>> parse_source_ports(std::string_view text);

// The CPUs this process can use. A wire's progress and I/O threads poll while traffic flows; callers
// size them by this. The affinity mask (NCCL ranks are often pinned), capped by the cgroup's CPU quota
// rounded up: a container limited to 8 CPUs on a 128-CPU host may run on all 128 but gets 8 CPU-seconds
// a second, and polling threads sized for 128 would spend the quota and leave the whole cgroup
// throttled for the rest of each period.
struct CpuBudget {
  unsigned affinity = 1;     // CPUs in the affinity mask
  double quota_cpus = 0;     // the cgroup quota in CPUs (quota / period); 0 when none is set
  std::string quota_source;  // the file that set it, e.g. /sys/fs/cgroup/cpu.max
  unsigned usable = 1;       // min(affinity, ceil(quota_cpus)), at least 1
  // "cgroup CPU quota 8 in /sys/fs/cgroup/cpu.max, 32 in the affinity mask" when the quota is what
  // limits; empty otherwise.
  std::string note() const;
};
CpuBudget cpu_budget();
// cpu_budget().usable, at least 1.
unsigned usable_cpus();
// The smallest CPU quota (in CPUs) set on this process's cgroup or its ancestors, cgroup v2 (cpu.max)
// or v1 (cpu.cfs_quota_us / cpu.cfs_period_us), found through /proc/self/cgroup and
// /proc/self/mountinfo; 0 when none is set. `prefix` is prepended to every path read (tests give a
// fake tree); `source`, when not null, gets the file that set the quota (without the prefix).
double cgroup_cpu_quota(const std::string& prefix, std::string* source);

// What the kernel granted when the sockets opened (GSO may later turn off if a send is refused).
struct UdpCapabilities {
  bool ipv6 = false;
  bool gso = false;            // UDP_SEGMENT in use
  bool gro = false;            // UDP_GRO in use
  bool ecn_send = false;       // ECT(0) set on outgoing packets
  bool ecn_recv = false;       // IP_RECVTOS / IPV6_RECVTCLASS: CE marks are seen
  bool rx_timestamps = false;  // SO_TIMESTAMPNS: kernel receive timestamps are used
  int sndbuf_bytes = 0;        // as the kernel reports them (Linux reports twice the granted value)
  int rcvbuf_bytes = 0;
  std::vector<uint16_t> ports;  // the pool's source ports; ports[0] is the one peers connect to
  // With I/O threads (> 1): ports[0] is an SO_REUSEPORT receive group of this many sockets, one per
  // I/O thread, so that arriving lanes spread over the threads (0: no group). `rx_spread` says how the
  // kernel picks a member: "lane" (by lane and connection, a BPF program) or "hash" (its 4-tuple hash,
  // when the program was refused).
  uint32_t rx_group = 0;
  std::string rx_spread;

  // One line: "udp ipv4 127.0.0.1:41234, 4 ports, gso on, gro on, ecn send+recv, dscp 0, ...".
  std::string describe() const;
};

struct UdpWireStats {
  // Sending.
  uint64_t datagrams_sent = 0;
  uint64_t bytes_sent = 0;     // UDP payload bytes (engine header + payload)
  uint64_t send_messages = 0;  // msghdrs given to the kernel (a GSO message counts once)
  uint64_t gso_messages = 0;
  uint64_t send_syscalls = 0;
  uint64_t send_dropped_full = 0;   // datagrams lost because a socket buffer was full
  uint64_t send_dropped_error = 0;  // datagrams lost to another send error
  // Sends retried once after an error: mostly a socket's pending ICMP error (a closed port of some peer)
  // reported on an unrelated send, which the retry then delivers.
  uint64_t send_error_retries = 0;
  uint64_t gso_fallbacks = 0;
  std::vector<uint64_t> datagrams_per_port;  // datagrams sent from each pool socket (capabilities().ports)
  // Receiving.
  uint64_t datagrams_received = 0;  // after GRO split, before fault injection
  uint64_t bytes_received = 0;
  uint64_t recv_messages = 0;
  uint64_t gro_messages = 0;  // messages that carried more than one datagram
  uint64_t recv_syscalls = 0;
  uint64_t recv_truncated = 0;
  uint64_t recv_errors = 0;
  // ICMP port unreachable from a known peer's address: its process is gone (Endpoint::on_port_unreachable).
  uint64_t port_unreachable = 0;
  uint64_t ce_received = 0;             // datagrams that arrived CE-marked (before fault injection)
  uint64_t rx_timestamped = 0;          // datagrams handed to the engine with their kernel receive timestamp
  uint64_t rx_timestamps_rejected = 0;  // stamps implausible against the clock (a realtime step):
                                        // those datagrams went over with the processing time
  uint64_t peer_table_full = 0;         // datagrams dropped: unknown source and the table was full
  // Driving.
  uint64_t progress_calls = 0;
  uint64_t tx_deferred = 0;  // rounds that completed a receive and left their ACKs for the next round
  uint64_t sleeps = 0;       // threaded mode: times the thread slept in epoll
  uint64_t help_rounds = 0;  // rounds help() ran on a caller's thread
  // What a progress round costs besides its sends and receives: CLOCK_MONOTONIC reads made by the
  // rounds (and, in threaded mode, by the progress thread between them; not those of a sleep), and
  // reads of the wake-up eventfd (another thread's post ending a sleep). Under emulation a clock read
  // can cost microseconds, as much as a system call.
  uint64_t clock_reads = 0;
  uint64_t wake_reads = 0;
  uint64_t io_thread_sleeps = 0;  // io_threads > 0: times an I/O thread slept in epoll
  // io_threads > 0, summed over the I/O threads: nanoseconds awake (not asleep in epoll), and of those,
  // in rounds that moved something. An awake thread polls, so its CPU time reads about one core whatever
  // it moves; io_busy_ns / io_awake_ns is the share that was work (near 1: the threads are the limit).
  uint64_t io_awake_ns = 0;
  uint64_t io_busy_ns = 0;
  // io_threads > 0, UdpConfig::stall_ns: messages an I/O thread read from a stalled sibling's socket,
  // packets the engine's thread gave another I/O thread because their own had stalled, and datagrams
  // an I/O thread sent from the queue of a stalled sibling (batches handed to it before it stalled).
  uint64_t rx_stolen = 0;
  uint64_t tx_rerouted = 0;
  uint64_t tx_stolen = 0;
  // io_threads > 0: messages (a GRO aggregate counts once) each I/O thread received; an uneven split
  // means the lanes did not spread over the receive group (UdpCapabilities::rx_group).
  std::vector<uint64_t> recv_messages_per_io_thread;
  FaultCounters fault;
  // Over a packet port: the port's own counters (PortStats::extra), name and value; empty on sockets.
  std::vector<std::pair<std::string, uint64_t>> port;
};

class UdpWire {
 public:
  // Validates `config`, applies the software-path floors to its engine settings, creates the engine
  // endpoint and opens the sockets.
  static Result<std::unique_ptr<UdpWire>> create(const UdpConfig& config);
  // The same wire over a packet port instead of UDP sockets (packet_port.h: the verbs wire's UD and RC
  // modes). The socket settings of `config` are unused; io_threads must be 0, and the engine's segment
  // must fit the port's packets. Everything else (threads, tickets, waits, fault injection) is as on UDP.
  static Result<std::unique_ptr<UdpWire>> create(const UdpConfig& config, std::unique_ptr<PacketPort> port);
  ~UdpWire();  // stops the progress thread if running, closes the sockets
  UdpWire(const UdpWire&) = delete;
  UdpWire& operator=(const UdpWire&) = delete;

  // CLOCK_MONOTONIC in ns: the transport's clock (the engine and congestion control never read one).
  static TimeNs now();

  const UdpCapabilities& capabilities() const;
  uint16_t local_port() const;  // 0 over a packet port
  // What a peer passes to connect(address): "10.0.0.1:5000", "[fd00::1]:5000", or the packet port's
  // own address text.
  std::string local_address() const;
  // One line for logs: capabilities().describe() on UDP, the port's describe() over a port.
  std::string describe() const;
  bool over_port() const;
  // The configuration in effect: as given to create(), with the software-path floors applied.
  const UdpConfig& config() const;

  // ---- Caller-driven mode: call from the one thread that owns the wire. ----

  // One non-blocking round at `now` (or at the clock's now): send what was posted, receive, engine,
  // timers, send. A round that completes a receive leaves its ACKs and credits for the next round
  // (next_deadline() is then 0), so that they leave with the caller's answer in one send call. Errors
  // are socket failures that make the wire unusable; protocol problems surface per connection.
  // `now` must be on CLOCK_MONOTONIC (UdpWire::now()), the domain receive timestamps are converted to.
  Status progress();
  Status progress(TimeNs now);
  // When progress() next has timer work (engine timers, held fault-injected datagrams); kNever if none.
  // Packets arriving are not deadlines: wait_for_io() returns on those.
  TimeNs next_deadline() const;
  // The clock as the last progress() left it: read after any packet that round moved, else the time
  // the round began (a caller's loop that needs the time after progress() need not read it again).
  TimeNs progress_time() const;
  // Sleeps until a datagram is readable, `until` (CLOCK_MONOTONIC ns) passes, or another thread posts.
  // Returns at once when until <= now().
  void wait_for_io(TimeNs until);
  // The engine, for a caller that drives progress itself and posts on the same thread (no locking).
  engine::Endpoint& endpoint();

  // ---- Threaded mode. ----

  // Starts the progress thread. Error if already running.
  Status start();
  // Stops and joins it (no-op if not running). The engine state stays; progress() may be used again,
  // and wait*() calls then drive progress themselves. Call start()/stop() from the thread that owns
  // the wire.
  void stop();
  bool running() const;
  // The first socket error the progress thread hit (it stops on one); empty while fine.
  std::string thread_error() const;

  // ---- Convenience calls: safe from any thread in either mode (they take the wire's lock). In
  //      threaded mode they wake the progress thread; wait*() then sleep on a condition variable, in
  //      caller-driven mode they run progress() themselves until done or timed out. ----

  // Adds (or finds) a peer address and returns its id.
  Result<uint32_t> add_peer(std::string_view host, uint16_t port);
  // A peer given as local_address() text: "host:port" / "[v6]:port" on UDP, the port's form over one.
  Result<uint32_t> add_peer(std::string_view address);
  std::string peer_address(uint32_t peer) const;

  Result<engine::ConnId> connect(std::string_view host, uint16_t port);
  Result<engine::ConnId> connect(std::string_view address);
  Result<engine::ConnId> connect(uint32_t peer);
  std::optional<engine::ConnId> accept();
  // Errors name the problem: an unknown connection, bad arguments (SendRequest::make's messages), the
  // connection's state or limits.
  Result<engine::RequestId> post_send(engine::ConnId conn, const void* data, uint64_t size_bytes,
                                      int32_t tag);
  Result<engine::RequestId> post_send(engine::ConnId conn, const engine::SendRequest& request);
  Result<engine::RequestId> post_recv(engine::ConnId conn, void* buf, uint64_t capacity_bytes, int32_t tag);
  engine::Completion test(engine::ConnId conn, engine::RequestId req);
  void close(engine::ConnId conn, bool release = false);

  // ---- Tickets: posting and finding a request finished without the wire's lock (threaded mode). ----
  //
  // A post or test() waits for the lock while the progress thread runs a round (tens of microseconds
  // under load). A caller that serves many connections from one polling loop (NCCL's proxy thread)
  // would wait out a round for each. submit() instead queues the ticket under a lock of its own that
  // no round holds; the progress thread posts it to the engine at the start of its next round (in
  // submission order; while the engine refuses it for a limit, such as too many receives outstanding,
  // it and the connection's later tickets wait for a later round), and once the request finished (the
  // moment test() would report it: after its TX or copy fence) stores the completion and sets done().
  // A ticket whose connection is gone or failed finishes at once, not ok, with the engine's reason.
  // The caller keeps the ticket alive and in place until done(), or until close(conn) returns: close
  // forgets the connection's tickets, queued or posted, which then never finish.
  class Ticket {
   public:
    Ticket() = default;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    // Sets the request up for submit() (and clears what a previous use left). A send whose arguments
    // were checked (engine::SendRequest::make), or a send or receive checked here: with bad arguments
    // (a negative tag, -1 allowed for a receive; a null buffer with room for bytes) the ticket finishes
    // at submit(), not ok, with "post_send: bad arguments (...)" or "post_recv: ...".
    void set_send(engine::ConnId conn, const engine::SendRequest& request);
    void set_send(engine::ConnId conn, const void* data, uint64_t size_bytes, int32_t tag);
    void set_recv(engine::ConnId conn, void* buf, uint64_t capacity_bytes, int32_t tag);
    bool done() const { return done_.load(std::memory_order_acquire); }
    // Valid once done(): the engine's completion (ok, bytes, its times, or the error).
    const engine::Completion& completion() const { return completion_; }

   private:
    friend class detail::TicketQueue;
    void reset(bool send, engine::ConnId conn);
    void refuse(const char* what, const void* buf, uint64_t size_bytes, int32_t tag);
    engine::ConnId conn_ = 0;
    bool send_ = false;
    bool refused_ = false;         // bad arguments: completion_ holds the error; submit() finishes it
    engine::SendRequest request_;  // a send's message (checked)
    void* buf_ = nullptr;          // a receive's buffer, capacity and tag (checked)
    uint64_t capacity_ = 0;
    int32_t recv_tag_ = 0;
    engine::RequestId id_ = 0;  // the engine's, once posted
    engine::Completion completion_;
    std::atomic<bool> done_{false};
  };
  // Queues `t` for the progress thread; never blocks on a round. Requires threaded mode or a caller
  // that runs progress(): the ticket is posted by the next round.
  void submit(Ticket& t);
  // One round on the calling thread, if no round has ended for config().help_after_ns and no other
  // thread holds the wire (a try-lock: never waits); `now` is the caller's UdpWire::now(). True if it
  // ran one. For a caller that polls tickets in a loop, from any thread and in either mode: the round
  // finishes tickets as the progress thread's would, and wakes that thread if it sleeps past a timer
  // the round armed.
  bool help(TimeNs now);
  engine::ConnectionState state(engine::ConnId conn);
  std::string connection_error(engine::ConnId conn);

  // Waits until the request is done or `timeout_ns` has passed; returns the completion (done = false
  // with error "timed out after ..." on timeout: the request stays pending; also when it finished but an
  // I/O thread has not yet finished with its buffer: a later test() or wait() reports it).
  engine::Completion wait(engine::ConnId conn, engine::RequestId req, TimeNs timeout_ns);
  // Waits for an incoming connection.
  Result<engine::ConnId> wait_accept(TimeNs timeout_ns);
  // Waits until the connection is established (error if it fails or the time runs out).
  Status wait_established(engine::ConnId conn, TimeNs timeout_ns);
  // Waits until the connection is closed or failed (after close(), or the peer's).
  Status wait_closed(engine::ConnId conn, TimeNs timeout_ns);

  // Runs `fn(Endpoint&)` under the wire's lock: any other engine access from an application thread.
  // `fn` must not call back into the wire (the lock is not recursive).
  template <class Fn>
  auto with_endpoint(Fn&& fn) {
    EndpointAccess access(*loop_);
    return fn(access.endpoint());
  }

  UdpWireStats stats() const;
  // Fault injection (io_threads > 0): pauses I/O thread `index` (it touches no socket and no queue, as
  // if its CPU were taken away) or resumes it; false if there is no such thread.
  bool pause_io_thread(uint32_t index, bool paused);
  // The engine endpoint's counters, copied under the wire's lock (safe while the wire's thread runs).
  engine::EndpointStats endpoint_stats() const;
  // datagrams_sent + datagrams_received of stats(), without building the rest: cheap enough for a
  // polling loop that only asks "did anything move since last time?".
  uint64_t datagrams_moved() const;
  // Whether a finished request is held back for its fence (a send until the I/O threads have sent its
  // packets, a receive until they have copied its payload into place): none is once every test() or
  // wait() has reported what finished. Takes the lock.
  bool requests_held() const;

 private:
  // with_endpoint(): holds the loop's lock, and wakes the loop when it lets go.
  class EndpointAccess {
   public:
    explicit EndpointAccess(detail::ProgressLoop& loop);
    ~EndpointAccess();
    EndpointAccess(const EndpointAccess&) = delete;
    EndpointAccess& operator=(const EndpointAccess&) = delete;
    engine::Endpoint& endpoint() const;

   private:
    detail::ProgressLoop& loop_;
  };

  explicit UdpWire(std::unique_ptr<detail::ProgressLoop> loop);

  std::unique_ptr<detail::ProgressLoop> loop_;
};

}  // namespace megascale::wire
