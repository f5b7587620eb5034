// Opening the UDP wire's sockets, receive group, epoll set and I/O threads (open_io), and gathering
// its counters (collect_stats).
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "io.h"
#include "megascale/engine/packet.h"

namespace megascale::wire::detail {

Result<std::unique_ptr<Io>> open_io(const UdpConfig& config, UdpCapabilities& caps) {
  auto io = std::make_unique<Io>(config);
  auto bind_addr = resolve_address(config.bind_host, config.bind_port);
  if (!bind_addr) return bind_addr.error();
  io->family = bind_addr->family();

  SocketOptions opts;
  opts.dscp = config.dscp;
  opts.ecn = config.ecn;
  opts.gso = config.gso;
  opts.gro = config.gro;
  opts.rx_timestamps = config.rx_timestamps;
  opts.buffer_bytes = config.socket_buffer_bytes;
  const uint32_t n_sockets = !config.source_ports.empty() ? static_cast<uint32_t>(config.source_ports.size())
                             : config.sockets             ? config.sockets
                                                          : std::max(1u, config.engine.lanes);
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
        auto free_port = pick_free_port(*bind_addr);
        if (!free_port)
          return make_error(free_port.error().code, "udp wire: receive group: " + free_port.error().message);
        group_port = *free_port;
      }
      auto claim = claim_port(io->family, group_port);
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
    SockAddr a = *bind_addr;
    const uint16_t port = i == 0 && group > 0            ? group_port
                          : !config.source_ports.empty() ? config.source_ports[i]
                          : config.bind_port             ? static_cast<uint16_t>(config.bind_port + i)
                                                         : 0;
    if (a.family() == AF_INET) {
      reinterpret_cast<sockaddr_in*>(&a.storage)->sin_port = htons(port);
    } else {
      reinterpret_cast<sockaddr_in6*>(&a.storage)->sin6_port = htons(port);
    }
    SocketOptions sock_opts = opts;
    sock_opts.reuseport = i == 0 && group > 0;
    auto sock = open_udp_socket(a, sock_opts);
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
    SocketOptions member_opts = opts;
    member_opts.reuseport = true;
    for (uint32_t m = 1; m < group; ++m) {
      auto sock = open_udp_socket(io->sockets[0].local, member_opts);
      if (!sock)
        return make_error(sock.error().code, "udp wire: receive group member " + std::to_string(m) + ": " +
                                                 sock.error().message);
      caps.gro &= sock->gro;
      caps.ecn_recv &= sock->recv_tos;
      caps.rx_timestamps &= sock->rx_timestamps;
      io->rx_group.push_back(*sock);
    }
    caps.rx_group = group;
    caps.rx_spread = attach_lane_spread(io->sockets[0].fd, group) ? "lane" : "hash";
  }
  io->gso = caps.gso;
  io->paths = PathMap(static_cast<uint32_t>(io->sockets.size()));

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
      io->threads.push_back(std::make_unique<IoThread>(
          t, n, io->sockets, group_fd, config.batch, std::min<size_t>(config.batch, kIoThreadRxBatch),
          kIoThreadSlots, io->gso, PollPolicy{config.busy_poll, config.idle_poll_ns, config.pending_poll_ns},
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

  return io;
}

Result<std::unique_ptr<Io>> open_port_io(const UdpConfig& config, std::unique_ptr<PacketPort> port) {
  if (port == nullptr) return make_error(ErrorCode::kInvalidUsage, "wire: no packet port given");
  if (config.io_threads != 0)
    return make_error(ErrorCode::kInvalidUsage, "wire: io_threads must be 0 over a packet port (" +
                                                    port->describe() +
                                                    "): the port's calls are made by the "
                                                    "engine's thread");
  const size_t largest =
      std::max<size_t>(engine::kSegHeaderBytes + config.engine.segment_bytes, engine::kMaxHeaderBytes);
  if (largest > port->max_packet_bytes())
    return make_error(ErrorCode::kInvalidUsage,
                      "wire: engine segment_bytes " + std::to_string(config.engine.segment_bytes) +
                          " does not fit " + port->describe() + ": it carries packets of at most " +
                          std::to_string(port->max_packet_bytes()) + " bytes, a segment's header is " +
                          std::to_string(engine::kSegHeaderBytes) + " bytes");
  auto io = std::make_unique<Io>(config);
  io->port = std::move(port);
  io->port_tx.resize(config.batch);
  io->paths = PathMap(std::max(1u, io->port->slots()));
  io->epfd = epoll_create1(EPOLL_CLOEXEC);
  io->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (io->epfd < 0 || io->wakefd < 0)
    return make_error(ErrorCode::kSystem, std::string("wire: epoll/eventfd: ") + strerror(errno));
  if (const int fd = io->port->wait_fd(); fd >= 0) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = kPortToken;
    if (epoll_ctl(io->epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
      return make_error(ErrorCode::kSystem,
                        std::string("wire: epoll_ctl on the port's fd: ") + strerror(errno));
  }
  epoll_event wake{};
  wake.events = EPOLLIN;
  wake.data.u32 = kWakeToken;
  epoll_ctl(io->epfd, EPOLL_CTL_ADD, io->wakefd, &wake);
  if (config.fault.enabled()) io->fault.emplace(config.fault);
  return io;
}

UdpWireStats collect_stats(const Io& io) {
  UdpWireStats s;
  if (io.port) {
    const PortStats p = io.port->stats();
    s.datagrams_sent = p.packets_sent;
    s.bytes_sent = p.bytes_sent;
    s.send_dropped_full = p.send_dropped;
    s.send_dropped_error = p.send_errors + io.tx_bad_peer;
    s.datagrams_received = io.datagrams_received;
    s.bytes_received = io.bytes_received;
    s.recv_errors = p.recv_errors;
    s.ce_received = io.ce_received;
    s.peer_table_full = p.peer_table_full;
    s.progress_calls = io.progress_calls;
    s.tx_deferred = io.tx_deferred;
    s.sleeps = io.sleeps;
    s.help_rounds = io.help_rounds;
    s.clock_reads = io.clock_reads;
    s.wake_reads = io.wake_reads.load(std::memory_order_relaxed);
    s.port = p.extra;
    if (io.fault) s.fault = io.fault->counters();
    return s;
  }
  const SendCounters& tx = io.sender.counters();
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
    const IoThreadCounters& c = t->counters();
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
  const ReceiveCounters& rx = io.receiver.counters();
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
  s.help_rounds = io.help_rounds;
  s.clock_reads = io.clock_reads;
  s.wake_reads = io.wake_reads.load(std::memory_order_relaxed);
  if (io.fault) s.fault = io.fault->counters();
  return s;
}

}  // namespace megascale::wire::detail
