// The UDP wire: creation, and the progress round (receive -> engine -> timers -> send).
#include "megascale/wire/udp.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>

#include <algorithm>
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
  if (c.dscp > 63) return bad("dscp=" + std::to_string(c.dscp) + ": a DSCP code point is 0..63");
  if (c.batch < 1 || c.batch > 1024) return bad("batch=" + std::to_string(c.batch) + ": must be 1..1024");
  if (c.socket_buffer_bytes <= 0) {
    return bad("socket_buffer_bytes=" + std::to_string(c.socket_buffer_bytes) + ": must be > 0");
  }
  if (c.max_peers < 1) return bad("max_peers must be >= 1");
  if (c.spin_ns < 0) return bad("spin_ns=" + std::to_string(c.spin_ns) + ": must be >= 0");
  if (c.idle_poll_ns < 0) return bad("idle_poll_ns=" + std::to_string(c.idle_poll_ns) + ": must be >= 0");
  if (Status s = validate_fault_config(c.fault, "udp config"); !s) return s;
  return {};
}

std::string UdpCapabilities::describe() const {
  std::string ports_text;
  for (size_t i = 0; i < ports.size(); ++i) {
    if (i > 0) ports_text.push_back(',');
    ports_text.append(std::to_string(ports[i]));
  }
  return std::string("udp ") + (ipv6 ? "ipv6" : "ipv4") + ", ports " + ports_text + ", gso " +
         (gso ? "on" : "off") + ", gro " + (gro ? "on" : "off") + ", ecn send " + (ecn_send ? "on" : "off") +
         " recv " + (ecn_recv ? "on" : "off") + ", sndbuf " + std::to_string(sndbuf_bytes) + " B, rcvbuf " +
         std::to_string(rcvbuf_bytes) + " B";
}

UdpWire::UdpWire(const UdpConfig& config, std::unique_ptr<engine::Endpoint> endpoint, std::unique_ptr<Io> io)
    : config_(config), endpoint_(std::move(endpoint)), io_(std::move(io)) {}

UdpWire::~UdpWire() {
  stop();
}

Result<std::unique_ptr<UdpWire>> UdpWire::create(const UdpConfig& config) {
  if (Status s = validate_udp_config(config); !s) return s.error();
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
  opts.buffer_bytes = config.socket_buffer_bytes;
  const uint32_t n_sockets = config.sockets ? config.sockets : std::max(1u, config.engine.lanes);
  UdpCapabilities caps;
  caps.ipv6 = io->family == AF_INET6;
  caps.gso = caps.gro = caps.ecn_send = caps.ecn_recv = true;
  for (uint32_t i = 0; i < n_sockets; ++i) {
    detail::SockAddr a = *bind_addr;
    const uint16_t port = config.bind_port ? static_cast<uint16_t>(config.bind_port + i) : 0;
    if (a.family() == AF_INET) {
      reinterpret_cast<sockaddr_in*>(&a.storage)->sin_port = htons(port);
    } else {
      reinterpret_cast<sockaddr_in6*>(&a.storage)->sin6_port = htons(port);
    }
    auto sock = detail::open_udp_socket(a, opts);
    if (!sock) return make_error("udp wire: socket " + std::to_string(i) + ": " + sock.error().message);
    caps.gso &= sock->gso;
    caps.gro &= sock->gro;
    caps.ecn_send &= sock->ect;
    caps.ecn_recv &= sock->recv_tos;
    caps.sndbuf_bytes = sock->sndbuf_bytes;
    caps.rcvbuf_bytes = sock->rcvbuf_bytes;
    caps.ports.push_back(sock->local.port());
    io->sockets.push_back(*sock);
  }
  io->gso = caps.gso;
  io->paths = detail::PathMap(static_cast<uint32_t>(io->sockets.size()));

  io->epfd = epoll_create1(EPOLL_CLOEXEC);
  io->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (io->epfd < 0 || io->wakefd < 0)
    return make_error(std::string("udp wire: epoll/eventfd: ") + strerror(errno));
  for (uint32_t i = 0; i < io->sockets.size(); ++i) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = i;
    if (epoll_ctl(io->epfd, EPOLL_CTL_ADD, io->sockets[i].fd, &ev) != 0) {
      return make_error(std::string("udp wire: epoll_ctl: ") + strerror(errno));
    }
  }
  epoll_event wake{};
  wake.events = EPOLLIN;
  wake.data.u32 = kWakeToken;
  epoll_ctl(io->epfd, EPOLL_CTL_ADD, io->wakefd, &wake);
  if (io->events.size() < io->sockets.size() + 1) io->events.resize(io->sockets.size() + 1);
  if (config.fault.enabled()) io->fault.emplace(config.fault);

  std::unique_ptr<UdpWire> wire(new UdpWire(config, std::move(*endpoint), std::move(io)));
  wire->caps_ = std::move(caps);
  return wire;
}

Status UdpWire::progress() {
  std::lock_guard<WireMutex> lock(mu_);
  return progress_locked(now(), true);
}

Status UdpWire::progress(TimeNs now) {
  std::lock_guard<WireMutex> lock(mu_);
  return progress_locked(now, false);
}

Status UdpWire::progress_locked(TimeNs now, bool read_clock) {
  ++io_->progress_calls;
  receive_locked(now);
  if (io_->fault) {
    HeldDatagram held;
    while (io_->fault->pop_ready(now, held)) {
      endpoint_->on_packet(now, held.peer, held.bytes.data(), held.bytes.size(), held.ce);
    }
  }
  if (read_clock) now = UdpWire::now();
  if (endpoint_->next_deadline() <= now) endpoint_->on_timer(now);
  transmit_locked(now, read_clock);
  if (now - io_->last_sweep_ns > kPathSweepIntervalNs) {
    io_->paths.sweep(now, kPathIdleNs);
    io_->last_sweep_ns = now;
  }
  return {};
}

void UdpWire::deliver_locked(TimeNs now, uint32_t peer, uint8_t* data, size_t len, bool ce) {
  ++io_->datagrams_received;
  io_->bytes_received += len;
  io_->ce_received += ce ? 1 : 0;
  if (!io_->fault) {
    endpoint_->on_packet(now, peer, data, len, ce);
    return;
  }
  bool marked = ce;
  const FaultInjector::Verdict v = io_->fault->apply(now, peer, std::span<uint8_t>(data, len), marked);
  if (v.action != FaultInjector::Action::kDeliver) return;
  for (int i = 0; i < v.copies; ++i) endpoint_->on_packet(now, peer, data, len, marked);
}

// The engine accepts a connection's packets only from the connection's peer id, but the remote sends
// each lane from its own source port. So a packet for one of our connections that comes from the same
// host as the connection's peer is handed over under the connection's peer id, without a peer-table
// entry for its source port (lanes repath to new ports all the time). The header is only peeked at
// (magic, type, connection ids at the fixed offsets of packet.h); the engine still validates it all.
std::optional<uint32_t> UdpWire::connection_peer_locked(const detail::SockAddr& from, const uint8_t* d,
                                                        size_t len) const {
  if (len < engine::kCommonHeaderBytes) return std::nullopt;
  uint32_t magic = 0;
  uint64_t dst = 0;
  std::memcpy(&magic, d, sizeof magic);
  std::memcpy(&dst, d + 8, sizeof dst);
  if (magic != engine::kMagic) return std::nullopt;
  auto owner_of = [&](const engine::Connection* c) -> std::optional<uint32_t> {
    if (c == nullptr || !io_->peers.contains(c->peer())) return std::nullopt;
    if (!detail::same_host(io_->peers.address(c->peer()), from)) return std::nullopt;
    return c->peer();
  };
  if (dst != 0) return owner_of(endpoint_->connection(dst));
  // No destination id: a SYN (names its sender's id at offset 24) or an RST for an unknown connection
  // (names the id it was sent to, our remote id, at offset 32). A SYN for a new connection matches
  // nothing and takes its source address as the peer. Rare: a scan is fine.
  const auto type = static_cast<engine::PacketType>(d[5]);
  size_t at = 0;
  if (type == engine::PacketType::kSyn) at = 24;
  if (type == engine::PacketType::kRst) at = 32;
  if (at == 0 || len < at + 8) return std::nullopt;
  uint64_t remote = 0;
  std::memcpy(&remote, d + at, sizeof remote);
  for (engine::ConnId id : endpoint_->connection_ids()) {
    const engine::Connection* c = endpoint_->connection(id);
    if (c != nullptr && c->remote_id() == remote) {
      if (std::optional<uint32_t> owner = owner_of(c)) return owner;
    }
  }
  return std::nullopt;
}

void UdpWire::receive_locked(TimeNs now) {
  Io& io = *io_;
  const int n_ready = epoll_wait(io.epfd, io.events.data(), static_cast<int>(io.events.size()), 0);
  for (int e = 0; e < n_ready; ++e) {
    const uint32_t token = io.events[static_cast<size_t>(e)].data.u32;
    if (token == kWakeToken) {
      eventfd_t drained = 0;
      eventfd_read(io.wakefd, &drained);
      continue;
    }
    const int fd = io.sockets[token].fd;
    for (int round = 0; round < kRxRoundsPerSocket; ++round) {
      const int n = io.receiver.receive(fd);
      if (n < 0) {
        ++io.recv_errors;  // e.g. an ICMP error queued on the socket; the next call reads on
        continue;
      }
      if (n > 0) io.last_io_ns = now;
      for (int i = 0; i < n; ++i) {
        detail::RxMessage m = io.receiver.message(i);
        if (m.truncated || m.segment_size == 0) continue;
        for (size_t off = 0; off < m.bytes.size(); off += m.segment_size) {
          const size_t len = std::min(m.segment_size, m.bytes.size() - off);
          uint8_t* datagram = m.bytes.data() + off;
          std::optional<uint32_t> peer = connection_peer_locked(*m.from, datagram, len);
          if (!peer) peer = io.peers.intern(*m.from);  // new peer, handshake, or not ours at all
          if (!peer) {
            ++io.peer_table_full;
            continue;
          }
          deliver_locked(now, *peer, datagram, len, m.ce);
        }
      }
      if (static_cast<size_t>(n) < config_.batch) break;  // drained
    }
  }
}

void UdpWire::transmit_locked(TimeNs now, bool read_clock) {
  Io& io = *io_;
  for (int round = 0; round < kTxRoundsPerProgress; ++round) {
    size_t n = 0;
    while (n < config_.batch && endpoint_->poll_tx(now, io.tx[n])) ++n;
    size_t k = 0;
    for (size_t i = 0; i < n; ++i) {
      const engine::TxPacket& p = io.tx[i];
      if (!io.peers.contains(p.peer)) {
        ++io.tx_bad_peer;
        continue;
      }
      const uint32_t socket = io.paths.socket_for(p.path_id, now);
      io.items[k++] = detail::TxItem{p.header, p.header_len, p.payload, p.payload_len, socket, p.peer, p.ect};
    }
    // The payload pointers stay valid until the next engine call other than poll_tx: send now.
    if (k > 0) io.last_io_ns = now;
    if (k > 0) io.sender.send(std::span(io.items.data(), k), io.sockets, io.peers.addresses(), io.gso);
    if (n < config_.batch) {
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
  s.gso_fallbacks = tx.gso_fallbacks;
  s.datagrams_per_port = io.sender.per_socket();
  s.datagrams_per_port.resize(io.sockets.size(), 0);
  const detail::ReceiveCounters& rx = io.receiver.counters();
  s.datagrams_received = io.datagrams_received;
  s.bytes_received = io.bytes_received;
  s.recv_messages = rx.messages;
  s.gro_messages = rx.gro_messages;
  s.recv_syscalls = rx.syscalls;
  s.recv_truncated = rx.truncated;
  s.recv_errors = io.recv_errors;
  s.ce_received = io.ce_received;
  s.peer_table_full = io.peer_table_full;
  s.progress_calls = io.progress_calls;
  s.sleeps = io.sleeps;
  if (io.fault) s.fault = io.fault->counters();
  return s;
}

}  // namespace megascale::wire
