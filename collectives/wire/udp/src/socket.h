// UDP sockets for the wire: addresses, opening a socket with the options the wire needs (ECN/DSCP on
// send, TOS/traffic class, GRO and receive timestamps on receive), and probing what the kernel grants.
//
//   SocketOptions opts;  opts.dscp = 26;  opts.ecn = true;
//   auto bind = resolve_address("127.0.0.1", 0);
//   auto sock = open_udp_socket(*bind, opts);   // sock->gso / sock->gro say what the kernel allowed
//
// Internal to collectives/wire/udp.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "megascale/common/result.h"

namespace megascale::wire::detail {

// An IPv4 or IPv6 socket address.
struct SockAddr {
  sockaddr_storage storage{};
  socklen_t len = 0;

  int family() const { return storage.ss_family; }
  uint16_t port() const;
  const sockaddr* addr() const { return reinterpret_cast<const sockaddr*>(&storage); }
  sockaddr* addr() { return reinterpret_cast<sockaddr*>(&storage); }
  // Equal family, address and port (IPv6 scope id included).
  bool operator==(const SockAddr& other) const;
};

// A numeric address ("127.0.0.1", "::1") or a host name, with a port. `family` AF_UNSPEC takes the
// first result.
Result<SockAddr> resolve_address(std::string_view host, uint16_t port, int family = AF_UNSPEC);

// "127.0.0.1:5000" or "[::1]:5000".
std::string format_address(const SockAddr& a);
// "host:port" or "[v6 address]:port" split into host and port; the error names what is wrong.
Result<std::pair<std::string, uint16_t>> split_host_port(std::string_view text);

// A hash of address and port, for the peer table.
size_t hash_address(const SockAddr& a);

struct SocketOptions {
  uint8_t dscp = 0;            // DSCP code point, upper six bits of the TOS / traffic class byte
  bool ecn = true;             // send with ECT(0)
  bool gso = true;             // try UDP_SEGMENT
  bool gro = true;             // try UDP_GRO
  bool rx_timestamps = true;   // try SO_TIMESTAMPNS (kernel software receive timestamps)
  int buffer_bytes = 4 << 20;  // SO_SNDBUF and SO_RCVBUF wished for (the kernel caps them)
  bool reuseport = false;      // SO_REUSEPORT before bind: the socket joins a receive group (see below)
};

// An open, bound, non-blocking UDP socket and what the kernel granted it.
struct UdpSocket {
  int fd = -1;
  SockAddr local;              // the bound address with the real port
  bool gso = false;            // UDP_SEGMENT accepted
  bool gro = false;            // UDP_GRO accepted
  bool recv_tos = false;       // IP_RECVTOS / IPV6_RECVTCLASS accepted
  bool rx_timestamps = false;  // SO_TIMESTAMPNS accepted: every message carries its arrival time
  bool ect = false;            // ECT(0) set in the socket's TOS / traffic class
  int tos = 0;                 // the TOS / traffic class byte the socket sends with
  int sndbuf_bytes = 0;        // as the kernel reports them
  int rcvbuf_bytes = 0;
};

// The TOS / traffic class byte for a DSCP code point and an ECN codepoint (0 Not-ECT, 2 ECT(0)).
constexpr int tos_byte(uint8_t dscp, int ecn_bits) {
  return (dscp << 2) | (ecn_bits & 3);
}
inline constexpr int kEcnMask = 3;
inline constexpr int kEcnCe = 3;
inline constexpr int kEcnEct0 = 2;

// Opens a socket bound to `bind` (port 0: ephemeral) with `options`. ECN, GSO and GRO are best effort
// (see the flags in UdpSocket); only failing to create or bind is an error.
Result<UdpSocket> open_udp_socket(const SockAddr& bind, const SocketOptions& options);

void close_udp_socket(UdpSocket& s);

// ICMP errors (IP_RECVERR / IPV6_RECVERR, which open_udp_socket turns on): each one the kernel queues
// also fails the socket's next send or receive once (ECONNREFUSED for a closed port; a failed send loses
// its datagram). Reads the socket's error queue to the end, without blocking, and appends to `out` the
// destination of every datagram that met ICMP port unreachable (v4 type 3 code 3, v6 type 1 code 4):
// its host is up and nothing listens on that port. Other errors (host or network unreachable, a link or
// route that comes and goes) are read and dropped. Returns how many errors it read.
size_t read_port_unreachable(int fd, std::vector<SockAddr>& out);

// Receive groups. A wire's peers send every lane to one port (the pool's socket 0), so one socket, and
// one I/O thread, would receive everything. With I/O threads the wire opens that port as an
// SO_REUSEPORT group of one socket per thread and attaches a classic BPF program that picks the member
// from the packet itself: (lane + low byte of the destination connection id) % members, both read from
// the engine's common header (packet.h: byte 6 and byte 8), so each lane of a connection lands on one
// member, lanes of one connection on different members, and a lane's datagrams stay in order. The
// kernel runs the program with the UDP payload at offset 0 (net/core/sock_reuseport.c, run_bpf_filter),
// for IPv4 and IPv6 alike; a datagram too short to read returns 0, member 0.
//
// Attaches that program to `fd` (any member; it applies to the group). Fails on kernels without
// SO_ATTACH_REUSEPORT_CBPF (before 4.5); the group then falls back to the kernel's 4-tuple hash.
Status attach_lane_spread(int fd, uint32_t members);

// SO_REUSEPORT lets any socket of the same user join a port, so two wires that each bound port 0
// could end up sharing one. A wire therefore claims its port before forming the group: it holds an
// abstract Unix socket named "megascale-udp-<family>-<port>" (unique within the network namespace)
// for as long as the group lives, and a second wire's claim of the same port fails.
class PortClaim {
 public:
  PortClaim() = default;
  explicit PortClaim(int fd) : fd_(fd) {}
  PortClaim(PortClaim&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  PortClaim& operator=(PortClaim&& o) noexcept;
  PortClaim(const PortClaim&) = delete;
  PortClaim& operator=(const PortClaim&) = delete;
  ~PortClaim();
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// Claims `port` of `family` for this process (see PortClaim); an error names the port if another wire
// holds it.
Result<PortClaim> claim_port(int family, uint16_t port);

// A free port for `bind` (its port 0): the kernel's choice for a socket bound without SO_REUSEPORT,
// released again, so that no other socket of the namespace holds it at that moment.
Result<uint16_t> pick_free_port(const SockAddr& bind);

}  // namespace megascale::wire::detail
