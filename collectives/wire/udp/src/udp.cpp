// The UDP wire: creation, and the progress round (receive -> engine -> timers -> send).
#include "megascale/wire/udp.h"

#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <string>

#include "io.h"
#include "megascale/engine/packet.h"

namespace megascale::wire {

TimeNs UdpWire::now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<TimeNs>(ts.tv_sec) * kNsPerSec + ts.tv_nsec;
}

Status validate_udp_config(const UdpConfig& c) {
  auto bad = [](const std::string& what) { return make_error("udp config: " + what); };
  if (c.bind_host.empty()) return bad("bind_host is empty");
  if (c.sockets > 1024) return bad("sockets=" + std::to_string(c.sockets) + ": at most 1024");
  if (c.bind_port != 0 && c.sockets > 0 && uint32_t{c.bind_port} + c.sockets - 1 > 65535) {
    return bad("bind_port=" + std::to_string(c.bind_port) + " with " + std::to_string(c.sockets) +
               " sockets runs past port 65535");
  }
  if (!c.source_ports.empty()) {
    if (c.bind_port != 0 || c.sockets != 0) {
      return bad("source_ports given with bind_port=" + std::to_string(c.bind_port) +
                 " sockets=" + std::to_string(c.sockets) + ": explicit ports set both; leave those 0");
    }
    if (c.source_ports.size() > 1024) {
      return bad("source_ports has " + std::to_string(c.source_ports.size()) + " ports: at most 1024");
    }
    for (size_t i = 0; i < c.source_ports.size(); ++i) {
      if (c.source_ports[i] == 0) {
        return bad("source_ports[" + std::to_string(i) + "]=0: ports are 1..65535 (0 would be ephemeral)");
      }
      for (size_t j = 0; j < i; ++j) {
        if (c.source_ports[j] == c.source_ports[i]) {
          return bad("source_ports[" + std::to_string(i) + "]=" + std::to_string(c.source_ports[i]) +
                     " repeats source_ports[" + std::to_string(j) + "]: ports must be distinct");
        }
      }
    }
  }
  if (c.dscp > 63) return bad("dscp=" + std::to_string(c.dscp) + ": a DSCP code point is 0..63");
  if (c.batch < 1 || c.batch > 1024) return bad("batch=" + std::to_string(c.batch) + ": must be 1..1024");
  if (c.socket_buffer_bytes <= 0) {
    return bad("socket_buffer_bytes=" + std::to_string(c.socket_buffer_bytes) + ": must be > 0");
  }
  if (c.max_peers < 1) return bad("max_peers must be >= 1");
  if (c.io_threads > 64) return bad("io_threads=" + std::to_string(c.io_threads) + ": at most 64");
  if (c.spin_ns < 0) return bad("spin_ns=" + std::to_string(c.spin_ns) + ": must be >= 0");
  if (c.idle_poll_ns < 0) return bad("idle_poll_ns=" + std::to_string(c.idle_poll_ns) + ": must be >= 0");
  if (c.stall_ns < 0 || c.stall_ns > kNsPerSec) {
    return bad("stall_ns=" + std::to_string(c.stall_ns) + ": must be in 0..1 s");
  }
  if (c.pending_poll_ns < 0 || c.pending_poll_ns > 10 * kNsPerSec) {
    return bad("pending_poll_ns=" + std::to_string(c.pending_poll_ns) + ": must be in 0..10 s");
  }
  if (Status s = validate_fault_config(c.fault, "udp config"); !s) return s;
  if (c.pacer_burst_floor_bytes > (64ULL << 20)) {
    return bad("pacer_burst_floor_bytes=" + std::to_string(c.pacer_burst_floor_bytes) + ": at most 64 MiB");
  }
  if (c.min_rto_floor_ns < 0 || c.min_rto_floor_ns > c.engine.cc.rto.max_rto_ns) {
    return bad("min_rto_floor_ns=" + std::to_string(c.min_rto_floor_ns) +
               ": must be in 0..engine.cc.rto.max_rto_ns");
  }
  return {};
}

Result<std::vector<uint16_t>> parse_source_ports(std::string_view text) {
  std::vector<uint16_t> ports;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    std::string_view item = text.substr(start, comma == std::string_view::npos ? text.npos : comma - start);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    uint32_t value = 0;
    bool ok = !item.empty() && item.size() <= 5;
    for (char ch : item) {
      if (ch < '0' || ch > '9') ok = false;
      value = value * 10 + static_cast<uint32_t>(ch - '0');
    }
    if (!ok || value < 1 || value > 65535) {
      std::string msg = "'";
      msg.append(item).append("' is not a port (1..65535) in '").append(text).append("'");
      return make_error(std::move(msg));
    }
    for (uint16_t p : ports) {
      if (p == value)
        return make_error("port " + std::to_string(value) + " is listed twice: ports must be distinct");
    }
    ports.push_back(static_cast<uint16_t>(value));
    if (ports.size() > 1024) return make_error("more than 1024 ports");
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return ports;
}

namespace {

// The software-path floors of UdpConfig, raised onto the engine's congestion settings, and the floor of
// pending_poll_ns (idle_poll_ns): config() reports what the wire uses.
UdpConfig with_software_floors(UdpConfig c) {
  if (!c.fixed_seed) c.engine.seed = random_engine_seed();
  cc::PacerParams& pacer = c.engine.cc.pacer;
  pacer.burst_bytes = std::max(pacer.burst_bytes, c.pacer_burst_floor_bytes);
  cc::RtoParams& rto = c.engine.cc.rto;
  rto.min_rto_ns = std::max(rto.min_rto_ns, c.min_rto_floor_ns);
  rto.initial_rto_ns = std::max(rto.initial_rto_ns, rto.min_rto_ns);
  // I/O threads compute the payload CRCs of what they send.
  c.engine.wire_seals_payload_crc = c.io_threads > 0;
  // Polling while requests are pending is never shorter than polling after traffic.
  c.pending_poll_ns = std::max(c.pending_poll_ns, c.idle_poll_ns);
  return c;
}

}  // namespace

std::string UdpCapabilities::describe() const {
  std::string ports_text;
  for (size_t i = 0; i < ports.size(); ++i) {
    if (i > 0) ports_text.push_back(',');
    ports_text.append(std::to_string(ports[i]));
  }
  return std::string("udp ") + (ipv6 ? "ipv6" : "ipv4") + ", ports " + ports_text + ", gso " +
         (gso ? "on" : "off") + ", gro " + (gro ? "on" : "off") + ", ecn send " + (ecn_send ? "on" : "off") +
         " recv " + (ecn_recv ? "on" : "off") + ", rx timestamps " + (rx_timestamps ? "on" : "off") +
         ", sndbuf " + std::to_string(sndbuf_bytes) + " B, rcvbuf " + std::to_string(rcvbuf_bytes) + " B" +
         (rx_group > 0 ? ", rx group " + std::to_string(rx_group) + " by " + rx_spread : std::string());
}

uint64_t random_engine_seed() {
  uint64_t r[2] = {};
  size_t got = 0;
  while (got < sizeof r) {
    const ssize_t n = getrandom(reinterpret_cast<uint8_t*>(r) + got, sizeof r - got, 0);
    if (n <= 0 && errno != EINTR) break;
    if (n > 0) got += static_cast<size_t>(n);
  }
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t x = r[0] ^ (static_cast<uint64_t>(getpid()) << 32) ^ static_cast<uint64_t>(ts.tv_nsec) ^
               (static_cast<uint64_t>(ts.tv_sec) * 0x9E3779B97F4A7C15ULL);
  // SplitMix64's finalizer, so that seeds differing in one bit share nothing.
  x += 0x9E3779B97F4A7C15ULL + r[1];
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

UdpWire::UdpWire(const UdpConfig& config, std::unique_ptr<engine::Endpoint> endpoint, std::unique_ptr<Io> io)
    : config_(config), endpoint_(std::move(endpoint)), io_(std::move(io)) {}

UdpWire::~UdpWire() {
  stop();
}

Result<std::unique_ptr<UdpWire>> UdpWire::create(const UdpConfig& given) {
  if (Status s = validate_udp_config(given); !s) return s.error();
  const UdpConfig config = with_software_floors(given);
  auto endpoint = engine::Endpoint::create(config.engine);
  if (!endpoint) return endpoint.error();

  auto io = std::make_unique<Io>(config);
  auto bind_addr = detail::resolve_address(config.bind_host, config.bind_port);
  if (!bind_addr) return bind_addr.error();
  io->family = bind_addr->family();

  detail::SocketOptions opts;
  opts.dscp = config.dscp;
  opts.ecn = config.ecn;
  opts.gso = config.gso;
  opts.gro = config.gro;
  opts.rx_timestamps = config.rx_timestamps;
  opts.buffer_bytes = config.socket_buffer_bytes;
  const uint32_t n_sockets = !config.source_ports.empty() ? static_cast<uint32_t>(config.source_ports.size())
                             : config.sockets             ? config.sockets
                                                          : std::max(1u, config.engine.lanes);
  UdpCapabilities caps;
  caps.ipv6 = io->family == AF_INET6;
  caps.gso = caps.gro = caps.ecn_send = caps.ecn_recv = true;
  caps.rx_timestamps = config.rx_timestamps;
  // With I/O threads, the port peers send to (socket 0's) becomes a receive group of one socket per
  // thread (socket.h, "Receive groups"); its port is chosen and claimed first.
  const uint32_t group = config.io_threads > 1 ? config.io_threads : 0;
  uint16_t group_port = 0;
  if (group > 0) {
    const bool chosen = !config.source_ports.empty() || config.bind_port != 0;
    group_port =
        !config.source_ports.empty() ? config.source_ports[0] : static_cast<uint16_t>(config.bind_port);
    for (int attempt = 0;; ++attempt) {
      if (!chosen) {
        auto free_port = detail::pick_free_port(*bind_addr);
        if (!free_port)
          return make_error(free_port.error().code, "udp wire: receive group: " + free_port.error().message);
        group_port = *free_port;
      }
      auto claim = detail::claim_port(io->family, group_port);
      if (claim) {
        io->port_claim = std::move(*claim);
        break;
      }
      // A chosen port can only be taken by another wire: say so. A picked one: pick again.
      if (chosen || attempt >= 16)
        return make_error(claim.error().code, "udp wire: receive group: " + claim.error().message);
    }
  }
  for (uint32_t i = 0; i < n_sockets; ++i) {
    detail::SockAddr a = *bind_addr;
    const uint16_t port = i == 0 && group > 0            ? group_port
                          : !config.source_ports.empty() ? config.source_ports[i]
                          : config.bind_port             ? static_cast<uint16_t>(config.bind_port + i)
                                                         : 0;
    if (a.family() == AF_INET) {
      reinterpret_cast<sockaddr_in*>(&a.storage)->sin_port = htons(port);
    } else {
      reinterpret_cast<sockaddr_in6*>(&a.storage)->sin6_port = htons(port);
    }
    detail::SocketOptions sock_opts = opts;
    sock_opts.reuseport = i == 0 && group > 0;
    auto sock = detail::open_udp_socket(a, sock_opts);
    if (!sock)
      return make_error(sock.error().code,
                        "udp wire: socket " + std::to_string(i) + ": " + sock.error().message);
    caps.gso &= sock->gso;
    caps.gro &= sock->gro;
    caps.ecn_send &= sock->ect;
    caps.ecn_recv &= sock->recv_tos;
    caps.rx_timestamps &= sock->rx_timestamps;
    caps.sndbuf_bytes = sock->sndbuf_bytes;
    caps.rcvbuf_bytes = sock->rcvbuf_bytes;
    caps.ports.push_back(sock->local.port());
    io->sockets.push_back(*sock);
  }
  if (group > 0) {
    // Members 1.. of socket 0's group: receive only (nothing is sent from them), one per I/O thread.
    detail::SocketOptions member_opts = opts;
    member_opts.reuseport = true;
    for (uint32_t m = 1; m < group; ++m) {
      auto sock = detail::open_udp_socket(io->sockets[0].local, member_opts);
      if (!sock)
        return make_error(sock.error().code, "udp wire: receive group member " + std::to_string(m) + ": " +
                                                 sock.error().message);
      caps.gro &= sock->gro;
      caps.ecn_recv &= sock->recv_tos;
      caps.rx_timestamps &= sock->rx_timestamps;
      io->rx_group.push_back(*sock);
    }
    caps.rx_group = group;
    caps.rx_spread = detail::attach_lane_spread(io->sockets[0].fd, group) ? "lane" : "hash";
  }
  io->gso = caps.gso;
  io->paths = detail::PathMap(static_cast<uint32_t>(io->sockets.size()));

  io->epfd = epoll_create1(EPOLL_CLOEXEC);
  io->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (io->epfd < 0 || io->wakefd < 0)
    return make_error(ErrorCode::kSystem, std::string("udp wire: epoll/eventfd: ") + strerror(errno));
  // With I/O threads the sockets are theirs; this side's epoll set has only the wake-up eventfd.
  for (uint32_t i = 0; i < io->sockets.size() && config.io_threads == 0; ++i) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = i;
    if (epoll_ctl(io->epfd, EPOLL_CTL_ADD, io->sockets[i].fd, &ev) != 0) {
      return make_error(ErrorCode::kSystem, std::string("udp wire: epoll_ctl: ") + strerror(errno));
    }
  }
  epoll_event wake{};
  wake.events = EPOLLIN;
  wake.data.u32 = kWakeToken;
  epoll_ctl(io->epfd, EPOLL_CTL_ADD, io->wakefd, &wake);
  if (io->events.size() < io->sockets.size() + 1) io->events.resize(io->sockets.size() + 1);
  if (config.fault.enabled()) io->fault.emplace(config.fault);
  if (config.io_threads > 0) {
    // Every thread has a member of the receive group; without a group (one thread) it has the pool.
    const uint32_t n = config.io_threads;
    io->caller_wake.fd = io->wakefd;
    for (uint32_t t = 0; t < n; ++t) {
      const int group_fd = t > 0 && t <= io->rx_group.size() ? io->rx_group[t - 1].fd : -1;
      io->threads.push_back(std::make_unique<detail::IoThread>(
          t, n, io->sockets, group_fd, config.batch, std::min<size_t>(config.batch, kIoThreadRxBatch),
          kIoThreadSlots, io->gso,
          detail::PollPolicy{config.busy_poll, config.idle_poll_ns, config.pending_poll_ns},
          &io->caller_wake));
    }
    for (const auto& t : io->threads) t->set_siblings(io->threads, config.stall_ns);
    for (const auto& t : io->threads) {
      if (Status s = t->start(); !s) return s.error();
    }
    io->tx_open.resize(n, nullptr);
    io->tx_marks.resize(n);
    io->copy_marks.resize(n);
    io->copier.marks = &io->copy_marks;
    io->rx_taken.resize(n, 0);
    io->rx_delivered.resize(n, 0);
    io->rx_cursor.resize(n);
  }

  std::unique_ptr<UdpWire> wire(new UdpWire(config, std::move(*endpoint), std::move(io)));
  wire->caps_ = std::move(caps);
  return wire;
}

Status UdpWire::progress() {
  std::lock_guard<WireMutex> lock(mu_);
  return progress_locked(now(), true, false);
}

Status UdpWire::progress(TimeNs now) {
  std::lock_guard<WireMutex> lock(mu_);
  return progress_locked(now, false, false);
}

Status UdpWire::progress_locked(TimeNs now, bool read_clock, bool overlap_copies) {
  ++io_->progress_calls;
  post_tickets_locked();
  // What the caller posted since the last round, and what that round deferred, leaves first.
  transmit_locked(now, read_clock);
  const uint64_t receives_before = endpoint_->stats().receives_completed;
  receive_locked(now, read_clock, overlap_copies);
  report_port_errors_locked(now);
  if (io_->fault) {
    // Held datagrams stand for packets delayed in the network: they arrive when released.
    HeldDatagram held;
    while (io_->fault->pop_ready(now, held)) {
      endpoint_->on_packet(now, held.peer, held.bytes.data(), held.bytes.size(), held.ce);
    }
  }
  if (read_clock) now = UdpWire::now();
  if (endpoint_->next_deadline() <= now) endpoint_->on_timer(now);
  if (endpoint_->stats().receives_completed != receives_before) {
    // A message completed: its caller will likely answer it (a pong, the next step's send) as soon as
    // this call returns. The ACKs and credits this round made wait for that answer, so that both leave
    // in one send call at the start of the next round instead of two on the answer's critical path.
    // next_deadline() is 0 meanwhile: a caller that sleeps on it comes straight back.
    ++io_->tx_deferred;
    more_tx_ = true;
  } else {
    transmit_locked(now, read_clock);
  }
  if (now - io_->last_sweep_ns > kPathSweepIntervalNs) {
    io_->paths.sweep(now, kPathIdleNs);
    io_->last_sweep_ns = now;
  }
  publish_pending_locked(now);
  finish_tickets_locked();
  return {};
}

bool UdpWire::requests_held() const {
  std::lock_guard<WireMutex> lock(mu_);
  return !io_->held.empty();
}

void UdpWire::report_port_errors_locked(TimeNs now) {
  Io& io = *io_;
  detail::CallerWake& w = io.caller_wake;
  if (w.has_unreachable.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(w.unreachable_mu);
    io.unreachable.insert(io.unreachable.end(), w.unreachable.begin(), w.unreachable.end());
    w.unreachable.clear();
    w.has_unreachable.store(false, std::memory_order_relaxed);
  }
  for (const detail::SockAddr& a : io.unreachable) {
    // Only addresses we sent to are known; an ICMP message about anything else says nothing of ours.
    if (const std::optional<uint32_t> peer = io.peers.find(a)) {
      ++io.port_unreachable;
      endpoint_->on_port_unreachable(now, *peer);
    }
  }
  io.unreachable.clear();
}

void UdpWire::publish_pending_locked(TimeNs now) {
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

void UdpWire::deliver_locked(TimeNs now, uint32_t peer, uint8_t* data, size_t len, bool ce, TimeNs rx_ns,
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

void UdpWire::deliver_message_locked(TimeNs now, const detail::RxMessage& m, const uint8_t*& verified) {
  Io& io = *io_;
  if (m.truncated || m.segment_size == 0) return;
  // One stamp per message: every datagram split from a GRO aggregate arrived with it.
  TimeNs rx_ns = engine::kRxTimeNow;
  bool rejected = false;
  if (m.rx_realtime_ns != 0) {
    const TimeNs t = io.rx_clock.to_monotonic(m.rx_realtime_ns);
    rejected = !detail::RxClock::plausible(t, now);
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
    deliver_locked(now, *peer, datagram, len, m.ce, rx_ns, ok);
  }
}

bool UdpWire::read_socket_locked(TimeNs& now, bool read_clock, int fd) {
  Io& io = *io_;
  bool got = false;
  for (int round = 0; round < kRxRoundsPerSocket; ++round) {
    const int n = io.receiver.receive(fd);
    if (n < 0) {
      ++io.recv_errors;  // e.g. an ICMP error queued on the socket; the next call reads on
      detail::read_port_unreachable(fd, io.unreachable);
      continue;
    }
    if (n > 0) {
      got = true;
      // The datagrams are in hand now: the engine's processing time starts here, and every kernel
      // stamp of this batch lies before it.
      if (read_clock) now = UdpWire::now();
      io.last_io_ns = now;
      if (caps_.rx_timestamps && io.rx_clock.stale(now)) io.rx_clock.refresh();
    }
    const uint8_t* none = nullptr;
    for (int i = 0; i < n; ++i) deliver_message_locked(now, io.receiver.message(i), none);
    if (static_cast<size_t>(n) < config_.batch) break;  // drained
  }
  return got;
}

void UdpWire::receive_locked(TimeNs now, bool read_clock, bool overlap_copies) {
  Io& io = *io_;
  if (!io.threads.empty()) {
    receive_from_threads_locked(now, read_clock, overlap_copies);
    return;
  }
  // Peers send every lane to the home socket (socket 0; "Lanes, ports, peers" in the README). While
  // datagrams stream in, the round after one that received reads it directly, without asking epoll
  // first: one system call where two were made (on the dev VM a third of a 1-lane sender's system
  // calls were that epoll_wait). The rest of the pool normally receives nothing (ICMP errors, strays)
  // and is still looked at every kEpollEveryRounds such rounds. A round after an empty one asks epoll
  // as before: reading straight away there took a peer's send batch in halves and cost a ping-pong
  // 1-2 us and extra ACKs.
  if (io.home_streaming) {
    io.home_streaming = read_socket_locked(now, read_clock, io.sockets[0].fd);
    if (++io.rounds_since_epoll < kEpollEveryRounds) return;
  }
  io.rounds_since_epoll = 0;
  const int n_ready = epoll_wait(io.epfd, io.events.data(), static_cast<int>(io.events.size()), 0);
  for (int e = 0; e < n_ready; ++e) {
    const uint32_t token = io.events[static_cast<size_t>(e)].data.u32;
    if (token != kWakeToken && (io.events[static_cast<size_t>(e)].events & EPOLLERR) != 0) {
      // An error queue that is not empty keeps the socket ready until it is read.
      detail::read_port_unreachable(io.sockets[token].fd, io.unreachable);
    }
    if (token == kWakeToken) {
      eventfd_t drained = 0;
      eventfd_read(io.wakefd, &drained);
      continue;
    }
    const bool got = read_socket_locked(now, read_clock, io.sockets[token].fd);
    if (token == 0) io.home_streaming = got;
  }
}

void UdpWire::release_copied_locked() {
  Io& io = *io_;
  for (size_t t = 0; t < io.threads.size(); ++t) {
    detail::IoThread& th = *io.threads[t];
    const uint64_t done = th.copies().done();
    for (const detail::RxBatch* b = th.rx().consumer_slot();
         io.rx_delivered[t] > 0 && b != nullptr && b->copy_fence <= done; b = th.rx().consumer_slot()) {
      th.rx().release();
      --io.rx_delivered[t];
    }
  }
}

bool UdpWire::copies_pending_locked() const {
  for (const uint32_t n : io_->rx_delivered) {
    if (n > 0) return true;
  }
  return false;
}

void UdpWire::receive_from_threads_locked(TimeNs now, bool read_clock, bool overlap_copies) {
  Io& io = *io_;
  release_copied_locked();
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
  if (read_clock) now = UdpWire::now();
  io.last_io_ns = now;
  if (caps_.rx_timestamps && io.rx_clock.stale(now)) io.rx_clock.refresh();
  // Payload copies go to the thread whose batch holds the bytes, so the copies of several lanes run in
  // parallel while this thread goes on with the protocol. A batch goes back to its thread once its
  // copies are done (release_copied_locked), and a receive they complete is reported only then (the
  // copy fence, test()). With `overlap_copies` (the wire's own progress thread) this round does not wait
  // for them: its ACKs leave and the next round starts while the I/O threads copy. Otherwise (a caller
  // driving progress, who may read the engine's completions directly) they are done before it returns.
  endpoint_->set_payload_copier(&io.copier);
  for (bool more = true; more;) {
    more = false;
    for (size_t t = 0; t < n_threads; ++t) {
      RxCursor& c = io.rx_cursor[t];
      if (c.batch >= io.rx_taken[t]) continue;
      detail::RxBatch& b = *io.threads[t]->rx().consumer_slot(io.rx_delivered[t] + c.batch);
      if (c.message == 0) c.verified = b.verified.data();
      io.copier.queue = &io.threads[t]->copies();
      io.copier.thread = t;
      if (c.message < b.count)
        deliver_message_locked(now, b.messages[static_cast<size_t>(c.message)], c.verified);
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
    detail::IoThread& th = *io.threads[t];
    const uint64_t fence = th.copies().pushed();
    for (uint32_t k = 0; k < io.rx_taken[t]; ++k) {
      if (detail::RxBatch* b = th.rx().consumer_slot(io.rx_delivered[t] + k)) b->copy_fence = fence;
    }
    io.rx_delivered[t] += io.rx_taken[t];
    if (overlap_copies) {
      th.wake();  // it runs them between its system calls, unless asleep
    } else {
      th.copies().finish(fence);
    }
  }
  release_copied_locked();
}

void UdpWire::transmit_locked(TimeNs now, bool read_clock) {
  Io& io = *io_;
  if (!io.threads.empty()) {
    transmit_to_threads_locked(now, read_clock);
    return;
  }
  for (int round = 0; round < kTxRoundsPerProgress; ++round) {
    // Each segment's send time is the RTT sample's start: a round stamped with the clock read before
    // the previous round's send calls would add their time (hundreds of microseconds for a batch of
    // 60 KiB datagrams, a scheduling quantum when the thread is preempted) to the fabric delay.
    if (read_clock && round > 0) now = UdpWire::now();
    size_t n = 0;
    while (n < config_.batch && endpoint_->poll_tx(now, io.tx[n])) ++n;
    size_t k = 0;
    for (size_t i = 0; i < n; ++i) {
      engine::TxPacket& p = io.tx[i];
      engine::seal_seg_payload_crc(p);  // no-op unless the engine left the CRC to the wire
      if (!io.peers.contains(p.peer)) {
        ++io.tx_bad_peer;
        continue;
      }
      io.items[k++] =
          detail::TxItem{p.header, p.header_len, p.payload, p.payload_len, socket_for(p, now), p.peer, p.ect};
    }
    // The payload pointers stay valid until the next engine call other than poll_tx: send now.
    if (k > 0) io.last_io_ns = now;
    if (k > 0) {
      const uint64_t errors_before = io.sender.counters().error_retries;
      io.sender.send(std::span(io.items.data(), k), io.sockets, io.peers.addresses(), io.gso);
      // A send that failed may have failed on a queued ICMP error (a peer's closed port): the next
      // round reports it.
      if (io.sender.counters().error_retries != errors_before) {
        for (const detail::UdpSocket& s : io.sockets) detail::read_port_unreachable(s.fd, io.unreachable);
      }
    }
    if (n < config_.batch) {
      more_tx_ = false;
      return;
    }
    if (read_clock) now = UdpWire::now();
  }
  more_tx_ = true;
}

uint32_t UdpWire::socket_for(const engine::TxPacket& p, TimeNs now) {
  // Packets without a lane (SYN, endpoint RSTs) leave from socket 0, the address peers know: the
  // receiving engine matches them by (peer, connection id of ours).
  return p.path_id == engine::kHomePathId ? 0 : io_->paths.socket_for(p.path_id, p.conn_id, p.lane, now);
}

void UdpWire::transmit_to_threads_locked(TimeNs now, bool read_clock) {
  Io& io = *io_;
  const size_t n_threads = io.threads.size();
  std::vector<detail::TxBatch*>& open = io.tx_open;
  // Threads that stalled (UdpConfig::stall_ns) get nothing new: their sockets' packets go to the others.
  // If all did, the one that came round last is taken as the one most likely back first.
  // One bit per thread (validate_udp_config allows at most 64).
  uint64_t stalled = 0;
  if (config_.stall_ns > 0 && n_threads > 1) {
    const TimeNs t_now = UdpWire::now();
    size_t latest = 0;
    for (size_t t = 0; t < n_threads; ++t) {
      if (io.threads[t]->stalled(t_now, config_.stall_ns)) stalled |= uint64_t{1} << t;
      if (io.threads[t]->heartbeat() > io.threads[latest]->heartbeat()) latest = t;
    }
    // All of them (a host this busy): the one seen last takes everything.
    if (std::popcount(stalled) == static_cast<int>(n_threads)) stalled &= ~(uint64_t{1} << latest);
  }
  for (int round = 0; round < kTxRoundsPerProgress; ++round) {
    // A batch per thread must be free before polling: a packet taken from the engine has to go somewhere.
    for (size_t t = 0; t < n_threads; ++t) {
      if ((stalled >> t) & 1) {
        open[t] = nullptr;
        continue;
      }
      open[t] = io.threads[t]->tx().producer_slot();
      if (open[t] == nullptr) {
        more_tx_ = true;  // that thread is behind; try again next round
        return;
      }
      open[t]->count = 0;
      open[t]->peers.clear();
      open[t]->peer_ids.clear();
      open[t]->polled_ns = now;
    }
    size_t polled = 0;
    bool full = false;
    while (!full) {
      // Poll into a scratch packet, then copy it to its thread's batch (headers are small).
      engine::TxPacket& p = io.tx[0];
      if (!endpoint_->poll_tx(now, p)) break;
      ++polled;
      if (!io.peers.contains(p.peer)) {
        ++io.tx_bad_peer;
        continue;
      }
      const uint32_t socket = socket_for(p, now);
      size_t t = socket % n_threads;
      if (open[t] == nullptr) {
        // Its thread stalled: the next one that did not (any thread may send on any socket).
        do t = (t + 1) % n_threads;
        while (open[t] == nullptr);
        ++io.tx_rerouted;
      }
      detail::TxBatch& b = *open[t];
      // The open batch is the next one published: the send's fence on this thread.
      if (p.request != 0) io.tx_marks.set(p.conn_id, p.request, t, io.threads[t]->tx().published() + 1);
      uint32_t local_peer = 0;
      while (local_peer < b.peer_ids.size() && b.peer_ids[local_peer] != p.peer) ++local_peer;
      if (local_peer == b.peer_ids.size()) {
        b.peer_ids.push_back(p.peer);
        b.peers.push_back(io.peers.address(p.peer));
      }
      engine::TxPacket& kept = b.packets[b.count];
      kept = p;
      b.items[b.count] = detail::TxItem{kept.header, kept.header_len, kept.payload, kept.payload_len,
                                        socket,      local_peer,      kept.ect};
      ++b.count;
      full = b.count == config_.batch;
    }
    if (polled > 0) io.last_io_ns = now;
    for (size_t t = 0; t < n_threads; ++t) {
      if (open[t] == nullptr || open[t]->count == 0) continue;
      io.threads[t]->tx().publish();
      io.threads[t]->wake();
    }
    if (!full) {
      more_tx_ = false;
      return;
    }
    if (read_clock) now = UdpWire::now();
  }
  more_tx_ = true;
}

TimeNs UdpWire::next_deadline() const {
  std::lock_guard<WireMutex> lock(mu_);
  return next_deadline_locked();
}

TimeNs UdpWire::next_deadline_locked() const {
  if (more_tx_) return 0;
  TimeNs t = endpoint_->next_deadline();
  if (io_->fault) t = std::min(t, io_->fault->next_deadline());
  return t;
}

uint64_t UdpWire::datagrams_moved() const {
  std::lock_guard<WireMutex> lock(mu_);
  const Io& io = *io_;
  uint64_t n = io.sender.counters().datagrams + io.datagrams_received;
  for (const auto& t : io.threads) n += t->counters().tx_datagrams.load(std::memory_order_relaxed);
  return n;
}

engine::EndpointStats UdpWire::endpoint_stats() const {
  std::lock_guard<WireMutex> lock(mu_);
  return endpoint_->stats();
}

UdpWireStats UdpWire::stats() const {
  std::lock_guard<WireMutex> lock(mu_);
  const Io& io = *io_;
  UdpWireStats s;
  const detail::SendCounters& tx = io.sender.counters();
  s.datagrams_sent = tx.datagrams;
  s.bytes_sent = tx.bytes;
  s.send_messages = tx.messages;
  s.gso_messages = tx.gso_messages;
  s.send_syscalls = tx.syscalls;
  s.send_dropped_full = tx.dropped_full;
  s.send_dropped_error = tx.dropped_error + io.tx_bad_peer;
  s.send_error_retries = tx.error_retries;
  s.gso_fallbacks = tx.gso_fallbacks;
  s.datagrams_per_port = io.sender.per_socket();
  s.datagrams_per_port.resize(io.sockets.size(), 0);
  for (const auto& t : io.threads) {
    // Each I/O thread's sends and receives (this thread's own counters above stay zero then).
    const detail::IoThreadCounters& c = t->counters();
    auto get = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
    s.datagrams_sent += get(c.tx_datagrams);
    s.bytes_sent += get(c.tx_bytes);
    s.send_messages += get(c.tx_messages);
    s.gso_messages += get(c.tx_gso_messages);
    s.send_syscalls += get(c.tx_syscalls);
    s.send_dropped_full += get(c.tx_dropped_full);
    s.send_dropped_error += get(c.tx_dropped_error);
    s.send_error_retries += get(c.tx_error_retries);
    s.gso_fallbacks += get(c.tx_gso_fallbacks);
    s.recv_messages += get(c.rx_messages);
    s.gro_messages += get(c.rx_gro_messages);
    s.recv_syscalls += get(c.rx_syscalls);
    s.recv_truncated += get(c.rx_truncated);
    s.recv_errors += get(c.rx_errors);
    s.io_thread_sleeps += get(c.sleeps);
    s.io_awake_ns += get(c.awake_ns);
    s.io_busy_ns += get(c.busy_ns);
    s.rx_stolen += get(c.rx_stolen);
    s.tx_stolen += get(c.tx_stolen);
    s.recv_messages_per_io_thread.push_back(get(c.rx_messages));
    const std::vector<uint64_t> per = t->per_socket();
    for (size_t i = 0; i < per.size() && i < s.datagrams_per_port.size(); ++i)
      s.datagrams_per_port[i] += per[i];
  }
  const detail::ReceiveCounters& rx = io.receiver.counters();
  s.datagrams_received = io.datagrams_received;
  s.bytes_received = io.bytes_received;
  s.recv_messages += rx.messages;
  s.gro_messages += rx.gro_messages;
  s.recv_syscalls += rx.syscalls;
  s.recv_truncated += rx.truncated;
  s.recv_errors += io.recv_errors;
  s.port_unreachable = io.port_unreachable;
  s.ce_received = io.ce_received;
  s.rx_timestamped = io.rx_timestamped;
  s.rx_timestamps_rejected = io.rx_timestamps_rejected;
  s.peer_table_full = io.peer_table_full;
  s.progress_calls = io.progress_calls;
  s.tx_deferred = io.tx_deferred;
  s.tx_rerouted = io.tx_rerouted;
  s.sleeps = io.sleeps;
  if (io.fault) s.fault = io.fault->counters();
  return s;
}

}  // namespace megascale::wire
