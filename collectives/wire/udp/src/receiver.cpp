// Batched receive with ECN and GRO metadata (see receiver.h).
#include "receiver.h"

#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/udp.h>

#include <cerrno>
#include <cstring>
#include <ctime>

namespace megascale::wire::detail {
namespace {

// IP_TOS (1 byte) or IPV6_TCLASS (int), UDP_GRO (int) and SCM_TIMESTAMPNS (timespec): 64 bytes with
// their headers, and room to spare for anything else.
constexpr size_t kControlBytes = 128;

}  // namespace

UdpReceiver::UdpReceiver(size_t batch)
    : batch_(batch),
      buffers_(batch * kRxSlotBytes),
      control_(batch * kControlBytes),
      msgs_(batch),
      iovs_(batch),
      from_(batch) {}

int UdpReceiver::receive(int fd) {
  for (size_t i = 0; i < batch_; ++i) {
    iovs_[i] = iovec{&buffers_[i * kRxSlotBytes], kRxSlotBytes};
    msghdr& h = msgs_[i].msg_hdr;
    h = msghdr{};
    h.msg_name = from_[i].addr();
    h.msg_namelen = sizeof from_[i].storage;
    h.msg_iov = &iovs_[i];
    h.msg_iovlen = 1;
    h.msg_control = &control_[i * kControlBytes];
    h.msg_controllen = kControlBytes;
    msgs_[i].msg_len = 0;
  }
  int rc;
  do {
    rc = recvmmsg(fd, msgs_.data(), static_cast<unsigned>(batch_), MSG_DONTWAIT, nullptr);
    ++counters_.syscalls;
  } while (rc < 0 && errno == EINTR);
  if (rc < 0) return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -errno;
  counters_.messages += static_cast<uint64_t>(rc);
  return rc;
}

RxMessage UdpReceiver::message(int i) {
  const auto idx = static_cast<size_t>(i);
  msghdr& h = msgs_[idx].msg_hdr;
  from_[idx].len = h.msg_namelen;
  RxMessage m;
  m.bytes = std::span<uint8_t>(&buffers_[idx * kRxSlotBytes], msgs_[idx].msg_len);
  m.segment_size = msgs_[idx].msg_len;
  m.from = &from_[idx];
  m.truncated = (h.msg_flags & MSG_TRUNC) != 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(&h, c)) {
    if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS) {
      uint8_t tos = 0;
      std::memcpy(&tos, CMSG_DATA(c), sizeof tos);
      m.tos = tos;
    } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS) {
      int tclass = 0;
      std::memcpy(&tclass, CMSG_DATA(c), sizeof tclass);
      m.tos = static_cast<uint8_t>(tclass);
    } else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
      timespec ts{};
      std::memcpy(&ts, CMSG_DATA(c), sizeof ts);
      m.rx_realtime_ns = static_cast<TimeNs>(ts.tv_sec) * kNsPerSec + ts.tv_nsec;
      ++counters_.timestamped;
    } else if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
      int gso_size = 0;
      std::memcpy(&gso_size, CMSG_DATA(c), sizeof gso_size);
      if (gso_size > 0 && static_cast<size_t>(gso_size) < m.bytes.size()) {
        m.segment_size = static_cast<size_t>(gso_size);
        ++counters_.gro_messages;
      }
    }
  }
  m.ecn = static_cast<uint8_t>(m.tos & kEcnMask);
  m.ce = m.ecn == kEcnCe;
  if (m.truncated) ++counters_.truncated;
  if (m.ce) ++counters_.ce;
  return m;
}

}  // namespace megascale::wire::detail
