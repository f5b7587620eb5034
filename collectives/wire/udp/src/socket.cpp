// Opening the wire's UDP sockets and probing GSO, GRO and ECN support.
#include "socket.h"

#include <arpa/inet.h>
#include <linux/errqueue.h>
#include <linux/filter.h>
#include <netdb.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <functional>
#include <string>

namespace megascale::wire::detail {
namespace {

std::string errno_text(int err) {
  return std::string(std::strerror(err));
}

bool set_int(int fd, int level, int name, int value) {
  return setsockopt(fd, level, name, &value, sizeof value) == 0;
}

int get_int(int fd, int level, int name) {
  int value = 0;
  socklen_t len = sizeof value;
  if (getsockopt(fd, level, name, &value, &len) != 0) return -1;
  return value;
}

}  // namespace

uint16_t SockAddr::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  return 0;
}

bool SockAddr::operator==(const SockAddr& other) const {
  if (family() != other.family()) return false;
  if (family() == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&storage);
    const auto* b = reinterpret_cast<const sockaddr_in*>(&other.storage);
    return a->sin_port == b->sin_port && a->sin_addr.s_addr == b->sin_addr.s_addr;
  }
  if (family() == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&storage);
    const auto* b = reinterpret_cast<const sockaddr_in6*>(&other.storage);
    return a->sin6_port == b->sin6_port && a->sin6_scope_id == b->sin6_scope_id &&
           std::memcmp(&a->sin6_addr, &b->sin6_addr, sizeof a->sin6_addr) == 0;
  }
  return false;
}

size_t hash_address(const SockAddr& a) {
  // FNV-1a over the bytes that operator== compares.
  uint64_t h = 1469598103934665603ULL;
  auto mix = [&h](const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ULL;
  };
  const int family = a.family();
  mix(&family, sizeof family);
  if (family == AF_INET) {
    const auto* s = reinterpret_cast<const sockaddr_in*>(&a.storage);
    mix(&s->sin_port, sizeof s->sin_port);
    mix(&s->sin_addr, sizeof s->sin_addr);
  } else if (family == AF_INET6) {
    const auto* s = reinterpret_cast<const sockaddr_in6*>(&a.storage);
    mix(&s->sin6_port, sizeof s->sin6_port);
    mix(&s->sin6_addr, sizeof s->sin6_addr);
    mix(&s->sin6_scope_id, sizeof s->sin6_scope_id);
  }
  return static_cast<size_t>(h);
}

Result<SockAddr> resolve_address(std::string_view host, uint16_t port, int family) {
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_protocol = IPPROTO_UDP;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* list = nullptr;
  const std::string host_text(host);
  const std::string port_text = std::to_string(port);
  const int rc = getaddrinfo(host_text.c_str(), port_text.c_str(), &hints, &list);
  if (rc != 0) return make_error("resolve '" + host_text + "': " + gai_strerror(rc));
  SockAddr out;
  for (addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    if ((ai->ai_family == AF_INET || ai->ai_family == AF_INET6) && ai->ai_addrlen <= sizeof out.storage) {
      std::memcpy(&out.storage, ai->ai_addr, ai->ai_addrlen);
      out.len = ai->ai_addrlen;
      break;
    }
  }
  freeaddrinfo(list);
  if (out.len == 0) return make_error("resolve '" + host_text + "': no IPv4 or IPv6 address");
  return out;
}

Result<std::pair<std::string, uint16_t>> split_host_port(std::string_view text) {
  std::string quoted(1, '"');  // built by appending: GCC 12 warns falsely on "\"" + string + "\""
  quoted.append(text).push_back('"');
  std::string_view host;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return make_error(ErrorCode::kInvalidUsage, "address " + quoted + ": expected [IPv6 address]:port");
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos)
      return make_error(ErrorCode::kInvalidUsage, "address " + quoted + ": expected host:port");
    if (text.find(':') != colon)
      return make_error(ErrorCode::kInvalidUsage,
                        "address " + quoted + ": an IPv6 address goes in brackets, [addr]:port");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  uint32_t value = 0;
  bool ok = !port.empty() && port.size() <= 5 && !host.empty();
  for (const char c : port) {
    ok = ok && c >= '0' && c <= '9';
    value = value * 10 + static_cast<uint32_t>(c - '0');
  }
  if (!ok || value == 0 || value > 65535)
    return make_error(ErrorCode::kInvalidUsage, "address " + quoted + ": the port must be 1..65535");
  return std::make_pair(std::string(host), static_cast<uint16_t>(value));
}

std::string format_address(const SockAddr& a) {
  char text[INET6_ADDRSTRLEN] = {};
  if (a.family() == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&a.storage)->sin_addr, text, sizeof text);
    return std::string(text) + ":" + std::to_string(a.port());
  }
  if (a.family() == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&a.storage)->sin6_addr, text, sizeof text);
    std::string out = "[";
    out.append(text).append("]:").append(std::to_string(a.port()));
    return out;
  }
  return "(no address)";
}

Result<UdpSocket> open_udp_socket(const SockAddr& bind_addr, const SocketOptions& options) {
  UdpSocket s;
  const int family = bind_addr.family();
  s.fd = socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_UDP);
  if (s.fd < 0)
    return make_error(ErrorCode::kSystem, "socket(" + format_address(bind_addr) + "): " + errno_text(errno));

  // One family per socket: a wire bound to IPv6 talks to IPv6 peers only, so addresses stay unmapped.
  if (family == AF_INET6) set_int(s.fd, IPPROTO_IPV6, IPV6_V6ONLY, 1);
  // The kernel caps SO_*BUF at net.core.{w,r}mem_max; with CAP_NET_ADMIN the FORCE variants go
  // beyond it. What was granted is read back below.
  if (!set_int(s.fd, SOL_SOCKET, SO_SNDBUFFORCE, options.buffer_bytes)) {
    set_int(s.fd, SOL_SOCKET, SO_SNDBUF, options.buffer_bytes);
  }
  if (!set_int(s.fd, SOL_SOCKET, SO_RCVBUFFORCE, options.buffer_bytes)) {
    set_int(s.fd, SOL_SOCKET, SO_RCVBUF, options.buffer_bytes);
  }

  if (options.reuseport && !set_int(s.fd, SOL_SOCKET, SO_REUSEPORT, 1)) {
    const int err = errno;
    close_udp_socket(s);
    return make_error(ErrorCode::kSystem,
                      "SO_REUSEPORT on " + format_address(bind_addr) + ": " + errno_text(err));
  }
  if (::bind(s.fd, bind_addr.addr(), bind_addr.len) != 0) {
    const int err = errno;
    close_udp_socket(s);
    return make_error(ErrorCode::kSystem, "bind " + format_address(bind_addr) + ": " + errno_text(err));
  }
  s.local.len = sizeof s.local.storage;
  getsockname(s.fd, s.local.addr(), &s.local.len);
  s.sndbuf_bytes = get_int(s.fd, SOL_SOCKET, SO_SNDBUF);
  s.rcvbuf_bytes = get_int(s.fd, SOL_SOCKET, SO_RCVBUF);

  // ECN: ECT(0) with the DSCP in the upper six bits; a packet the engine marks not-ECT overrides it
  // per message. Reading the byte back on receive gives the CE mark.
  const int tos = tos_byte(options.dscp, options.ecn ? kEcnEct0 : 0);
  s.tos = tos;
  // ICMP errors to the error queue: a peer whose port closed is then known at once (read_port_unreachable).
  // Best effort: where the kernel refuses it, the error queue stays empty and the retry budget alone
  // fails a vanished peer.
  if (family == AF_INET) {
    set_int(s.fd, IPPROTO_IP, IP_RECVERR, 1);
  } else {
    set_int(s.fd, IPPROTO_IPV6, IPV6_RECVERR, 1);
  }
  if (family == AF_INET) {
    const bool tos_ok = set_int(s.fd, IPPROTO_IP, IP_TOS, tos);
    s.ect = options.ecn && tos_ok;
    s.recv_tos = set_int(s.fd, IPPROTO_IP, IP_RECVTOS, 1);
  } else {
    const bool tos_ok = set_int(s.fd, IPPROTO_IPV6, IPV6_TCLASS, tos);
    s.ect = options.ecn && tos_ok;
    s.recv_tos = set_int(s.fd, IPPROTO_IPV6, IPV6_RECVTCLASS, 1);
  }

  // GSO: the segment size is given per message (cmsg); accepting a socket-level value proves the
  // kernel knows UDP_SEGMENT. Zero turns the socket-level default off again.
  if (options.gso && set_int(s.fd, SOL_UDP, UDP_SEGMENT, 1200)) {
    s.gso = set_int(s.fd, SOL_UDP, UDP_SEGMENT, 0);
  }
  if (options.gro) s.gro = set_int(s.fd, SOL_UDP, UDP_GRO, 1);
  // Software receive timestamps: the kernel stamps each datagram as it enters the stack (a GRO
  // aggregate once), so delay-based control sees the path and not how late this process reads it.
  if (options.rx_timestamps) s.rx_timestamps = set_int(s.fd, SOL_SOCKET, SO_TIMESTAMPNS, 1);
  return s;
}

size_t read_port_unreachable(int fd, std::vector<SockAddr>& out) {
  size_t errors = 0;
  for (;;) {
    SockAddr dest;
    uint8_t data[64];  // the start of the datagram that failed; not needed
    alignas(cmsghdr) uint8_t control[512];
    iovec iov{data, sizeof data};
    msghdr m{};
    m.msg_name = dest.addr();
    m.msg_namelen = sizeof dest.storage;
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = control;
    m.msg_controllen = sizeof control;
    if (::recvmsg(fd, &m, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) {
      if (errno == EINTR) continue;
      return errors;  // EAGAIN: the queue is empty
    }
    ++errors;
    dest.len = m.msg_namelen;
    for (cmsghdr* c = CMSG_FIRSTHDR(&m); c != nullptr; c = CMSG_NXTHDR(&m, c)) {
      const bool v4 = c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_RECVERR;
      const bool v6 = c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_RECVERR;
      if (!v4 && !v6) continue;
      sock_extended_err e;
      std::memcpy(&e, CMSG_DATA(c), sizeof e);
      const bool port_closed = (v4 && e.ee_origin == SO_EE_ORIGIN_ICMP && e.ee_type == 3 && e.ee_code == 3) ||
                               (v6 && e.ee_origin == SO_EE_ORIGIN_ICMP6 && e.ee_type == 1 && e.ee_code == 4);
      if (port_closed && m.msg_namelen > 0) out.push_back(dest);
    }
  }
}

void close_udp_socket(UdpSocket& s) {
  if (s.fd >= 0) ::close(s.fd);
  s.fd = -1;
}

Status attach_lane_spread(int fd, uint32_t members) {
  if (members == 0) return make_error("attach_lane_spread: a group has at least one member");
  // Absolute loads are relative to the UDP payload here; see socket.h. A = (lane + conn byte) % members.
  sock_filter code[] = {
      {BPF_LD | BPF_B | BPF_ABS, 0, 0, 6},         // A = lane
      {BPF_MISC | BPF_TAX, 0, 0, 0},               // X = A
      {BPF_LD | BPF_B | BPF_ABS, 0, 0, 8},         // A = low byte of dst_conn_id (little-endian)
      {BPF_ALU | BPF_ADD | BPF_X, 0, 0, 0},        // A += X
      {BPF_ALU | BPF_MOD | BPF_K, 0, 0, members},  // A %= members
      {BPF_RET | BPF_A, 0, 0, 0},
  };
  sock_fprog prog{static_cast<unsigned short>(sizeof code / sizeof code[0]), code};
  if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog, sizeof prog) != 0) {
    return make_error(ErrorCode::kSystem, std::string("SO_ATTACH_REUSEPORT_CBPF: ") + errno_text(errno));
  }
  return {};
}

PortClaim& PortClaim::operator=(PortClaim&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

PortClaim::~PortClaim() {
  if (fd_ >= 0) ::close(fd_);
}

Result<PortClaim> claim_port(int family, uint16_t port) {
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return make_error(ErrorCode::kSystem, std::string("port claim: socket(AF_UNIX): ") + errno_text(errno));
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  // Abstract namespace: sun_path[0] == 0; the name is the bytes after it (no terminator counted).
  const std::string name =
      "megascale-udp-" + std::to_string(family == AF_INET6 ? 6 : 4) + "-" + std::to_string(port);
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&a), len) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EADDRINUSE)
      return make_error(ErrorCode::kSystem,
                        "UDP port " + std::to_string(port) + " is held by another megascale wire");
    return make_error(ErrorCode::kSystem,
                      "port claim for UDP port " + std::to_string(port) + ": " + errno_text(err));
  }
  return PortClaim(fd);
}

Result<uint16_t> pick_free_port(const SockAddr& bind_addr) {
  const int fd = socket(bind_addr.family(), SOCK_DGRAM | SOCK_CLOEXEC, IPPROTO_UDP);
  if (fd < 0)
    return make_error(ErrorCode::kSystem, "socket(" + format_address(bind_addr) + "): " + errno_text(errno));
  if (bind_addr.family() == AF_INET6) set_int(fd, IPPROTO_IPV6, IPV6_V6ONLY, 1);
  if (::bind(fd, bind_addr.addr(), bind_addr.len) != 0) {
    const int err = errno;
    ::close(fd);
    return make_error(ErrorCode::kSystem, "bind " + format_address(bind_addr) + ": " + errno_text(err));
  }
  SockAddr local;
  local.len = sizeof local.storage;
  getsockname(fd, local.addr(), &local.len);
  ::close(fd);
  return local.port();
}

}  // namespace megascale::wire::detail
