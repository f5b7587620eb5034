// Batching datagrams into sendmmsg and UDP GSO messages (see sender.h).
#include "sender.h"

#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/udp.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace megascale::wire::detail {
namespace {

// Room for UDP_SEGMENT (u16) and IP_TOS / IPV6_TCLASS (int), each in its own aligned cmsg.
constexpr size_t kControlBytes = CMSG_SPACE(sizeof(uint16_t)) + CMSG_SPACE(sizeof(int));

bool is_full_error(int err) {
  return err == EAGAIN || err == EWOULDBLOCK || err == ENOBUFS;
}

}  // namespace

UdpSender::UdpSender(size_t max_batch)
    : max_batch_(max_batch),
      order_(max_batch),
      msgs_(max_batch),
      iovs_(2 * max_batch),
      info_(max_batch),
      control_(kControlBytes * max_batch) {}

size_t UdpSender::build(size_t first, size_t last, std::span<const TxItem> items,
                        std::span<const SockAddr> peers, const UdpSocket& socket, bool gso) {
  size_t n_msgs = 0;
  size_t n_iov = 0;
  size_t i = first;
  while (i < last) {
    const TxItem& head = items[order_[i]];
    const uint32_t seg_size = head.size();
    MessageInfo& info = info_[n_msgs];
    info = MessageInfo{i, 0, 0, false};
    iovec* iov_begin = &iovs_[n_iov];
    // A run: same peer, same ECN marking, every datagram seg_size bytes except a shorter last one.
    size_t j = i;
    while (j < last) {
      const TxItem& it = items[order_[j]];
      if (j > i) {
        if (!gso || it.peer != head.peer || it.ect != head.ect || it.size() > seg_size ||
            info.datagrams >= kGsoMaxSegments || info.bytes + it.size() > kGsoMaxBytes) {
          break;
        }
      }
      iovs_[n_iov++] = iovec{const_cast<uint8_t*>(it.header), it.header_len};
      if (it.payload_len > 0) iovs_[n_iov++] = iovec{const_cast<uint8_t*>(it.payload), it.payload_len};
      info.datagrams += 1;
      info.bytes += it.size();
      ++j;
      if (it.size() < seg_size) break;  // a shorter datagram ends the run
    }
    info.gso = info.datagrams > 1;

    mmsghdr& m = msgs_[n_msgs];
    m = mmsghdr{};
    const SockAddr& to = peers[head.peer];
    m.msg_hdr.msg_name = const_cast<sockaddr*>(to.addr());
    m.msg_hdr.msg_namelen = to.len;
    m.msg_hdr.msg_iov = iov_begin;
    m.msg_hdr.msg_iovlen = static_cast<size_t>(&iovs_[n_iov] - iov_begin);
    unsigned char* control = &control_[kControlBytes * n_msgs];
    std::memset(control, 0, kControlBytes);
    m.msg_hdr.msg_control = control;
    m.msg_hdr.msg_controllen = kControlBytes;
    size_t used = 0;
    cmsghdr* c = CMSG_FIRSTHDR(&m.msg_hdr);
    if (info.gso) {
      c->cmsg_level = SOL_UDP;
      c->cmsg_type = UDP_SEGMENT;
      c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
      const auto size16 = static_cast<uint16_t>(seg_size);
      std::memcpy(CMSG_DATA(c), &size16, sizeof size16);
      used += CMSG_SPACE(sizeof(uint16_t));
      c = CMSG_NXTHDR(&m.msg_hdr, c);
    }
    if (socket.ect && !head.ect) {
      // Not-ECT for this message: the socket's TOS byte without its ECN bits.
      const int family = to.family();
      c->cmsg_level = family == AF_INET ? IPPROTO_IP : IPPROTO_IPV6;
      c->cmsg_type = family == AF_INET ? IP_TOS : IPV6_TCLASS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      const int tos = socket.tos & ~kEcnMask;
      std::memcpy(CMSG_DATA(c), &tos, sizeof tos);
      used += CMSG_SPACE(sizeof(int));
    }
    m.msg_hdr.msg_controllen = used;
    if (used == 0) m.msg_hdr.msg_control = nullptr;
    ++n_msgs;
    i = j;
  }
  return n_msgs;
}

void UdpSender::send_socket(size_t first, size_t last, std::span<const TxItem> items, const UdpSocket& socket,
                            uint32_t socket_index, std::span<const SockAddr> peers, bool& gso) {
  size_t n_msgs = build(first, last, items, peers, socket, gso);
  size_t k = 0;
  size_t retried = SIZE_MAX;  // the message last retried after an error
  while (k < n_msgs) {
    const int rc = sendmmsg(socket.fd, &msgs_[k], static_cast<unsigned>(n_msgs - k), MSG_DONTWAIT);
    ++counters_.syscalls;
    if (rc > 0) {
      for (size_t m = k; m < k + static_cast<size_t>(rc); ++m) {
        per_socket_[socket_index] += info_[m].datagrams;
        counters_.datagrams += info_[m].datagrams;
        counters_.bytes += info_[m].bytes;
        counters_.messages += 1;
        counters_.gso_messages += info_[m].gso ? 1 : 0;
      }
      k += static_cast<size_t>(rc);
      continue;
    }
    const int err = errno;
    if (err == EINTR) continue;
    if (is_full_error(err)) {
      // The socket is full: drop the rest like a full NIC queue would; the engine recovers them.
      for (size_t m = k; m < n_msgs; ++m) counters_.dropped_full += info_[m].datagrams;
      return;
    }
    if (info_[k].gso && gso && (err == EIO || err == EINVAL || err == EOPNOTSUPP)) {
      // The kernel or device refused segmentation offload: turn GSO off for good and send the rest of
      // this socket's datagrams one per message.
      gso = false;
      ++counters_.gso_fallbacks;
      const size_t rest_first = info_[k].first_item;
      n_msgs = build(rest_first, last, items, peers, socket, false);
      k = 0;
      retried = SIZE_MAX;
      continue;
    }
    if (retried != k) {
      // Maybe the socket's pending error (an ICMP port unreachable from another peer, say), which this
      // call reported and cleared without sending anything: once more.
      retried = k;
      ++counters_.error_retries;
      continue;
    }
    // Failed twice (EMSGSIZE, an unreachable destination): this message only is lost.
    counters_.dropped_error += info_[k].datagrams;
    ++k;
  }
}

void UdpSender::send(std::span<const TxItem> items, std::span<const UdpSocket> sockets,
                     std::span<const SockAddr> peers, bool& gso) {
  const size_t n = std::min(items.size(), max_batch_);
  for (size_t i = 0; i < n; ++i) order_[i] = static_cast<uint32_t>(i);
  std::stable_sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(n),
                   [&](uint32_t a, uint32_t b) { return items[a].socket < items[b].socket; });
  size_t first = 0;
  while (first < n) {
    size_t last = first + 1;
    const uint32_t sock = items[order_[first]].socket;
    while (last < n && items[order_[last]].socket == sock) ++last;
    if (per_socket_.size() <= sock) per_socket_.resize(sock + 1, 0);
    send_socket(first, last, items, sockets[sock], sock, peers, gso);
    first = last;
  }
}

}  // namespace megascale::wire::detail
