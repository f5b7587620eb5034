// Receives datagrams in batches with recvmmsg, reading the ECN bits (IP_TOS / IPV6_TCLASS), the GRO
// segment size (UDP_GRO) and the kernel's receive timestamp (SO_TIMESTAMPNS) each message carries.
//
//   UdpReceiver rx(64);
//   int n = rx.receive(fd);
//   for (int i = 0; i < n; ++i) {
//     RxMessage m = rx.message(i);
//     for (size_t off = 0; off < m.bytes.size(); off += m.segment_size) { ...one datagram... }
//   }
//
// A GRO message is several datagrams of segment_size bytes back to back (the last may be shorter); a
// plain message is one datagram and segment_size is its length. Internal to collectives/wire/udp.
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <cstdint>
#include <span>
#include <vector>

#include "megascale/common/units.h"
#include "socket.h"

namespace megascale::wire::detail {

struct RxMessage {
  std::span<uint8_t> bytes;  // the received bytes (receive buffer; valid until the next receive)
  size_t segment_size = 0;   // datagram size within `bytes`
  const SockAddr* from = nullptr;
  uint8_t tos = 0;            // the TOS / traffic class byte (DSCP << 2 | ECN)
  uint8_t ecn = 0;            // its ECN field: 0 Not-ECT, 2 ECT(0), 1 ECT(1), 3 CE
  bool ce = false;            // ecn == CE
  bool truncated = false;     // the buffer was too small (MSG_TRUNC): drop it
  TimeNs rx_realtime_ns = 0;  // kernel receive timestamp, CLOCK_REALTIME ns (0: none); one per
                              // message, so every datagram of a GRO aggregate shares it
};

struct ReceiveCounters {
  uint64_t messages = 0;      // recvmmsg messages
  uint64_t gro_messages = 0;  // of which carried more than one datagram
  uint64_t syscalls = 0;
  uint64_t truncated = 0;
  uint64_t ce = 0;           // messages that arrived CE-marked
  uint64_t timestamped = 0;  // messages that carried a receive timestamp
};

// Receive buffer per message: the largest UDP payload, which is also the largest GRO aggregate.
inline constexpr size_t kRxSlotBytes = 65536;

class UdpReceiver {
 public:
  explicit UdpReceiver(size_t batch);

  // Receives up to `batch` messages from `fd` without blocking. Returns how many (0 when nothing was
  // waiting), or -errno on an error other than EAGAIN.
  int receive(int fd);

  RxMessage message(int i);

  const ReceiveCounters& counters() const { return counters_; }

 private:
  size_t batch_;
  std::vector<uint8_t> buffers_;  // batch × kRxSlotBytes
  std::vector<unsigned char> control_;
  std::vector<mmsghdr> msgs_;
  std::vector<iovec> iovs_;
  std::vector<SockAddr> from_;
  ReceiveCounters counters_;
};

}  // namespace megascale::wire::detail
