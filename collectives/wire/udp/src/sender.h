// Sends a batch of datagrams with as few system calls as the kernel allows: one sendmmsg per socket, and
// within it one UDP GSO message per run of equal-size datagrams to the same peer.
//
//   UdpSender sender(256);
//   sender.send(items, sockets, peers);   // items: header + payload pointers, socket and peer index
//
// No payload is copied: each datagram is the iovec pair [header, payload], and a GSO message is the
// concatenation of such pairs; the kernel cuts it every gso_size bytes, so every datagram of a run but
// the last must have the same total size. Internal to collectives/wire/udp.
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <cstdint>
#include <span>
#include <vector>

#include "socket.h"

namespace megascale::wire::detail {

// One datagram to send. `header` must stay valid until send() returns; so must `payload`.
struct TxItem {
  const uint8_t* header = nullptr;
  uint32_t header_len = 0;
  const uint8_t* payload = nullptr;
  uint32_t payload_len = 0;
  uint32_t socket = 0;  // index into the socket pool
  uint32_t peer = 0;    // index into the peer address table
  bool ect = true;      // false: send this one Not-ECT (overrides the socket's ECT(0))

  uint32_t size() const { return header_len + payload_len; }
};

struct SendCounters {
  uint64_t datagrams = 0;      // datagrams handed to the kernel
  uint64_t bytes = 0;          // their bytes (UDP payload)
  uint64_t messages = 0;       // msghdrs handed to the kernel (a GSO message counts once)
  uint64_t gso_messages = 0;   // of which carried UDP_SEGMENT
  uint64_t syscalls = 0;       // sendmmsg calls
  uint64_t dropped_full = 0;   // datagrams dropped because the socket was full (EAGAIN, ENOBUFS)
  uint64_t dropped_error = 0;  // datagrams dropped on another error (EMSGSIZE, ...)
  // Messages sent again after a send failed: a socket's pending error (an ICMP message about an earlier
  // datagram, possibly to another peer, which the kernel reports once on the next send) fails that
  // send without sending it, so a failed message gets one retry before it is dropped.
  uint64_t error_retries = 0;
  uint64_t gso_fallbacks = 0;  // times the kernel refused a GSO send and GSO was turned off
};

// Largest UDP payload of one GSO message (IPv4 total length 65535 minus IP and UDP headers, rounded down)
// and the kernel's limit on segments per message (UDP_MAX_SEGMENTS on kernels before 6.x).
inline constexpr uint32_t kGsoMaxBytes = 65000;
inline constexpr uint32_t kGsoMaxSegments = 64;

class UdpSender {
 public:
  explicit UdpSender(size_t max_batch);

  // Sends `items` (at most max_batch). Datagrams to one socket keep their order; across sockets they
  // may interleave differently. `gso` is read and, if the kernel refuses a GSO send, cleared (the rest
  // goes out one datagram per message).
  void send(std::span<const TxItem> items, std::span<const UdpSocket> sockets,
            std::span<const SockAddr> peers, bool& gso);

  const SendCounters& counters() const { return counters_; }
  // Datagrams handed to the kernel per socket index (sized by the highest index seen).
  const std::vector<uint64_t>& per_socket() const { return per_socket_; }
  size_t max_batch() const { return max_batch_; }

 private:
  // Builds the messages for items order_[first, last) of one socket, starting at message 0.
  size_t build(size_t first, size_t last, std::span<const TxItem> items, std::span<const SockAddr> peers,
               const UdpSocket& socket, bool gso);
  void send_socket(size_t first, size_t last, std::span<const TxItem> items, const UdpSocket& socket,
                   uint32_t socket_index, std::span<const SockAddr> peers, bool& gso);

  struct MessageInfo {
    size_t first_item = 0;  // index into order_
    uint32_t datagrams = 0;
    uint32_t bytes = 0;
    bool gso = false;
  };

  size_t max_batch_;
  std::vector<uint32_t> order_;  // item indices grouped by socket
  std::vector<mmsghdr> msgs_;
  std::vector<iovec> iovs_;
  std::vector<MessageInfo> info_;
  std::vector<unsigned char> control_;  // kControlBytes per message
  SendCounters counters_;
  std::vector<uint64_t> per_socket_;
};

}  // namespace megascale::wire::detail
