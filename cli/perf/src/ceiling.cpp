// The kernel's own loopback ceiling, UDP and TCP (see ceiling.h).
#include "megascale/perf/ceiling.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "megascale/engine/crc32c.h"
#include "megascale/perf/pattern.h"

namespace megascale::perf {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxUdpPayload = 65507;  // IPv4's limit; IPv6 allows 65,527 on lo
constexpr size_t kMinBytes = 16;          // the sequence number and the CRC
constexpr size_t kCrcOffset = 8;
constexpr size_t kCopyRingBytes = 4u << 20;  // NCCL's default buffer per connection
constexpr auto kRecvTimeout = std::chrono::milliseconds(50);
constexpr auto kDrainQuiet = std::chrono::milliseconds(300);  // UDP: no datagram for this long ends the drain

double thread_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  auto s = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
  };
  return s(u.ru_utime) + s(u.ru_stime);
}

// Busy CPU-seconds of all CPUs since boot (/proc/stat's first line), or -1.
double host_busy_seconds() {
  std::FILE* f = std::fopen("/proc/stat", "r");
  if (f == nullptr) return -1;
  unsigned long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0;
  const int n = std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu", &user, &nice, &system, &idle,
                            &iowait, &irq, &softirq);
  std::fclose(f);
  if (n != 7) return -1;
  return static_cast<double>(user + nice + system + irq + softirq) /
         static_cast<double>(sysconf(_SC_CLK_TCK));
}

std::string sys_error(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

// Writes the message's sequence number and, with `crc`, its CRC32C (taken with the CRC field zero).
void stamp(uint8_t* p, size_t n, uint64_t seq, bool crc) {
  std::memcpy(p, &seq, sizeof seq);
  if (!crc) return;
  std::memset(p + kCrcOffset, 0, 4);
  const uint32_t c = engine::crc32c(p, n);
  std::memcpy(p + kCrcOffset, &c, 4);
}

// mmsghdrs for `batch` slots of `bytes` each in `buf`, one iovec per slot: built once, since neither
// sendmmsg nor recvmmsg (no addresses, no control data) changes what they point to.
void point_batch(std::vector<uint8_t>& buf, size_t bytes, std::vector<mmsghdr>& msgs,
                 std::vector<iovec>& iov) {
  for (size_t i = 0; i < msgs.size(); ++i) {
    iov[i] = {buf.data() + i * bytes, bytes};
    msgs[i] = {};
    msgs[i].msg_hdr.msg_iov = &iov[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
  }
}

// What a receiver checks and keeps of each message.
struct RxCheck {
  bool crc = false;
  bool copy = false;
  uint64_t expected = 0;
  uint64_t out_of_order = 0;
  uint64_t crc_errors = 0;
  std::vector<uint8_t> ring;
  size_t ring_at = 0;

  void take(uint8_t* p, size_t n) {
    uint64_t seq = 0;
    std::memcpy(&seq, p, sizeof seq);
    if (seq != expected) ++out_of_order;
    expected = seq + 1;
    if (crc) {
      uint32_t got = 0;
      std::memcpy(&got, p + kCrcOffset, 4);
      std::memset(p + kCrcOffset, 0, 4);
      if (engine::crc32c(p, n) != got) ++crc_errors;
    }
    if (copy) {
      if (ring_at + n > ring.size()) ring_at = 0;
      std::memcpy(ring.data() + ring_at, p, n);
      ring_at += n;
    }
  }
};

// One sender/receiver pair's sockets, flow control and counters.
struct Pair {
  int tx = -1, rx = -1, listener = -1;
  // UDP flow control: the receiver's count, read by the sender through memory.
  std::atomic<uint64_t> received{0};
  std::atomic<bool> sender_waiting{false};
  std::mutex m;
  std::condition_variable cv;
  // Results.
  std::atomic<bool> sender_done{false};
  std::atomic<uint64_t> sent_final{0};
  uint64_t bytes_sent = 0, bytes_received = 0, messages_received = 0, lost = 0;
  RxCheck check;
  double tx_cpu = 0, rx_cpu = 0;
  Clock::time_point last_rx{};
  std::string tx_error, rx_error;  // each written by its own thread only

  ~Pair() {
    for (int fd : {tx, rx, listener}) {
      if (fd >= 0) ::close(fd);
    }
  }
};

sockaddr_storage loopback(bool v6, socklen_t& len) {
  sockaddr_storage s{};
  if (v6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&s);
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_loopback;
    len = sizeof *a;
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&s);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    len = sizeof *a;
  }
  return s;
}

void set_timeout(int fd) {
  timeval tv{};
  tv.tv_usec = std::chrono::duration_cast<std::chrono::microseconds>(kRecvTimeout).count();
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

// Opens a pair's sockets: UDP, a bound receiver and a sender connected to it; TCP, a connection.
std::string open_pair(const CeilingOptions& o, Pair& p, uint32_t& rcvbuf) {
  const int family = o.ipv6 ? AF_INET6 : AF_INET;
  socklen_t len = 0;
  sockaddr_storage a = loopback(o.ipv6, len);
  auto* sa = reinterpret_cast<sockaddr*>(&a);
  if (o.proto == CeilingProto::kUdp) {
    p.rx = ::socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    p.tx = ::socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (p.rx < 0 || p.tx < 0) return sys_error("socket(SOCK_DGRAM)");
    // Room for the window twice over (the kernel charges a datagram's whole buffer, not its payload).
    const int want = static_cast<int>(std::min<size_t>(size_t{2} * o.window * (o.bytes + 1024), 1u << 30));
    if (::setsockopt(p.rx, SOL_SOCKET, SO_RCVBUFFORCE, &want, sizeof want) != 0) {
      ::setsockopt(p.rx, SOL_SOCKET, SO_RCVBUF, &want, sizeof want);  // not root: capped at rmem_max
    }
    int got = 0;
    socklen_t gl = sizeof got;
    ::getsockopt(p.rx, SOL_SOCKET, SO_RCVBUF, &got, &gl);
    rcvbuf = static_cast<uint32_t>(got);
    if (::bind(p.rx, sa, len) != 0) return sys_error("bind(udp)");
    if (::getsockname(p.rx, sa, &len) != 0) return sys_error("getsockname");
    if (::connect(p.tx, sa, len) != 0) return sys_error("connect(udp)");
    set_timeout(p.rx);
    return {};
  }
  p.listener = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  p.tx = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (p.listener < 0 || p.tx < 0) return sys_error("socket(SOCK_STREAM)");
  if (::bind(p.listener, sa, len) != 0 || ::listen(p.listener, 1) != 0) return sys_error("bind/listen(tcp)");
  if (::getsockname(p.listener, sa, &len) != 0) return sys_error("getsockname");
  if (::connect(p.tx, sa, len) != 0) return sys_error("connect(tcp)");
  p.rx = ::accept4(p.listener, nullptr, nullptr, SOCK_CLOEXEC);
  if (p.rx < 0) return sys_error("accept");
  set_timeout(p.rx);
  return {};
}

void udp_sender(const CeilingOptions& o, Pair& p, const std::atomic<bool>& stop) {
  std::vector<uint8_t> buf(size_t{o.batch} * o.bytes);
  fill_pattern(buf.data(), buf.size(), 0);
  std::vector<mmsghdr> msgs(o.batch);
  std::vector<iovec> iov(o.batch);
  point_batch(buf, o.bytes, msgs, iov);
  uint64_t seq = 0;
  while (!stop.load(std::memory_order_relaxed)) {
    const uint64_t in_flight = seq - p.received.load(std::memory_order_seq_cst);
    const uint64_t room = o.window > in_flight ? o.window - in_flight : 0;
    if (room == 0) {
      std::unique_lock lock(p.m);
      p.sender_waiting.store(true, std::memory_order_seq_cst);
      p.cv.wait_for(lock, kRecvTimeout, [&] {
        return stop.load(std::memory_order_relaxed) ||
               seq - p.received.load(std::memory_order_seq_cst) < o.window;
      });
      p.sender_waiting.store(false, std::memory_order_relaxed);
      continue;
    }
    const auto n = static_cast<unsigned>(std::min<uint64_t>(room, o.batch));
    for (unsigned i = 0; i < n; ++i) stamp(buf.data() + size_t{i} * o.bytes, o.bytes, seq + i, o.crc);
    const int sent = ::sendmmsg(p.tx, msgs.data(), n, 0);
    if (sent < 0) {
      if (errno == EINTR || errno == ENOBUFS || errno == EAGAIN) continue;
      p.tx_error = sys_error("sendmmsg");
      break;
    }
    seq += static_cast<uint64_t>(sent);
    p.bytes_sent += static_cast<uint64_t>(sent) * o.bytes;
  }
  p.tx_cpu = thread_cpu_seconds();
  p.sent_final.store(seq, std::memory_order_release);
  p.sender_done.store(true, std::memory_order_release);
}

void udp_receiver(const CeilingOptions& o, Pair& p) {
  std::vector<uint8_t> buf(size_t{o.batch} * o.bytes);
  std::vector<mmsghdr> msgs(o.batch);
  std::vector<iovec> iov(o.batch);
  point_batch(buf, o.bytes, msgs, iov);
  Clock::time_point quiet_since{};
  while (true) {
    if (p.sender_done.load(std::memory_order_acquire)) {
      const uint64_t sent = p.sent_final.load(std::memory_order_acquire);
      if (p.messages_received >= sent) break;
      if (quiet_since != Clock::time_point{} && Clock::now() - quiet_since > kDrainQuiet) {
        p.lost = sent - p.messages_received;
        break;
      }
    }
    // Blocks for the first datagram (up to kRecvTimeout), then takes whatever else is queued.
    const int n = ::recvmmsg(p.rx, msgs.data(), o.batch, MSG_WAITFORONE, nullptr);
    if (n <= 0) {
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        p.rx_error = sys_error("recvmmsg");
        break;
      }
      // The drain's clock starts once the sender has stopped: before that a quiet spell is the sender's.
      if (quiet_since == Clock::time_point{} && p.sender_done.load(std::memory_order_acquire)) {
        quiet_since = Clock::now();
      }
      continue;
    }
    quiet_since = {};
    p.last_rx = Clock::now();
    for (int i = 0; i < n; ++i) {
      const size_t len = msgs[static_cast<size_t>(i)].msg_len;
      p.check.take(buf.data() + static_cast<size_t>(i) * o.bytes, len);
      p.bytes_received += len;
    }
    p.messages_received += static_cast<uint64_t>(n);
    p.received.store(p.messages_received, std::memory_order_seq_cst);
    if (p.sender_waiting.load(std::memory_order_seq_cst)) {
      std::lock_guard lock(p.m);
      p.cv.notify_one();
    }
  }
  p.rx_cpu = thread_cpu_seconds();
}

void tcp_sender(const CeilingOptions& o, Pair& p, const std::atomic<bool>& stop) {
  std::vector<uint8_t> buf(o.bytes);
  fill_pattern(buf.data(), buf.size(), 0);
  uint64_t seq = 0;
  while (!stop.load(std::memory_order_relaxed) && p.tx_error.empty()) {
    stamp(buf.data(), o.bytes, seq, o.crc);
    for (size_t off = 0; off < o.bytes;) {
      const ssize_t k = ::send(p.tx, buf.data() + off, o.bytes - off, MSG_NOSIGNAL);
      if (k < 0) {
        if (errno == EINTR) continue;
        p.tx_error = sys_error("send(tcp)");
        break;
      }
      off += static_cast<size_t>(k);
    }
    if (!p.tx_error.empty()) break;
    ++seq;
    p.bytes_sent += o.bytes;
  }
  ::shutdown(p.tx, SHUT_WR);  // the receiver reads to the end of the stream
  p.tx_cpu = thread_cpu_seconds();
  p.sent_final.store(seq, std::memory_order_release);
  p.sender_done.store(true, std::memory_order_release);
}

void tcp_receiver(const CeilingOptions& o, Pair& p) {
  std::vector<uint8_t> buf(o.bytes);
  size_t have = 0;
  while (true) {
    const ssize_t k = ::recv(p.rx, buf.data() + have, o.bytes - have, 0);
    if (k == 0) break;  // end of stream
    if (k < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
      p.rx_error = sys_error("recv(tcp)");
      ::shutdown(p.rx, SHUT_RDWR);  // a sender blocked on a full socket buffer then fails instead of hanging
      break;
    }
    have += static_cast<size_t>(k);
    p.bytes_received += static_cast<uint64_t>(k);
    p.last_rx = Clock::now();
    if (have == o.bytes) {
      p.check.take(buf.data(), o.bytes);
      ++p.messages_received;
      have = 0;
    }
  }
  p.rx_cpu = thread_cpu_seconds();
}

}  // namespace

std::string validate(const CeilingOptions& o) {
  if (o.pairs < 1 || o.pairs > 256) return "pairs must be 1..256 (got " + std::to_string(o.pairs) + ")";
  if (o.bytes < kMinBytes)
    return "message size must be at least 16 bytes (got " + std::to_string(o.bytes) + ")";
  if (o.proto == CeilingProto::kUdp && o.bytes > kMaxUdpPayload) {
    return "a UDP datagram carries at most 65507 bytes (got " + std::to_string(o.bytes) + ")";
  }
  if (o.proto == CeilingProto::kTcp && o.bytes > (64u << 20)) {
    return "TCP message size must be at most 64 MiB (got " + std::to_string(o.bytes) + ")";
  }
  if (!(o.seconds > 0 && o.seconds <= 3600)) return "duration must be in (0, 3600] seconds";
  if (o.batch < 1 || o.batch > 1024) return "batch must be 1..1024 (got " + std::to_string(o.batch) + ")";
  if (o.window < 1 || o.window > 65536)
    return "window must be 1..65536 (got " + std::to_string(o.window) + ")";
  return {};
}

CeilingResult run_ceiling(const CeilingOptions& o) {
  CeilingResult r;
  r.error = validate(o);
  if (!r.error.empty()) return r;
  std::vector<std::unique_ptr<Pair>> pairs;
  for (uint32_t i = 0; i < o.pairs; ++i) {
    auto p = std::make_unique<Pair>();
    p->check.crc = o.crc;
    p->check.copy = o.copy;
    if (o.copy) p->check.ring.assign(kCopyRingBytes + o.bytes, 0);
    r.error = open_pair(o, *p, r.rcvbuf_bytes);
    if (!r.error.empty()) return r;
    pairs.push_back(std::move(p));
  }
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  const double host_before = host_busy_seconds();
  const Clock::time_point start = Clock::now();
  for (auto& p : pairs) {
    Pair& q = *p;
    if (o.proto == CeilingProto::kUdp) {
      threads.emplace_back([&o, &q] { udp_receiver(o, q); });
      threads.emplace_back([&o, &q, &stop] { udp_sender(o, q, stop); });
    } else {
      threads.emplace_back([&o, &q] { tcp_receiver(o, q); });
      threads.emplace_back([&o, &q, &stop] { tcp_sender(o, q, stop); });
    }
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(o.seconds));
  stop.store(true);
  for (auto& p : pairs) {
    std::lock_guard lock(p->m);
    p->cv.notify_all();
  }
  for (auto& t : threads) t.join();
  const double host_after = host_busy_seconds();
  if (host_before >= 0 && host_after >= host_before) r.host_cpu_seconds = host_after - host_before;
  Clock::time_point last = start;
  for (const auto& p : pairs) {
    for (const std::string* e : {&p->tx_error, &p->rx_error}) {
      if (!e->empty() && r.error.empty()) r.error = *e;
    }
    r.messages_sent += p->sent_final.load();
    r.messages_received += p->messages_received;
    r.bytes_sent += p->bytes_sent;
    r.bytes_received += p->bytes_received;
    r.out_of_order += p->check.out_of_order;
    r.crc_errors += p->check.crc_errors;
    r.lost += p->lost;
    r.sender_cpu_seconds += p->tx_cpu;
    r.receiver_cpu_seconds += p->rx_cpu;
    last = std::max(last, p->last_rx);
  }
  r.seconds = std::chrono::duration<double>(last - start).count();
  return r;
}

std::string row_name(const CeilingOptions& o) {
  std::string s = o.proto == CeilingProto::kUdp ? "udp" : "tcp";
  if (o.copy) s += "+copy";
  if (o.crc) s += "+crc";
  return s;
}

std::string parse_row(const std::string& name, CeilingOptions& o) {
  std::stringstream in(name);
  std::string part;
  bool first = true;
  o.copy = o.crc = false;
  while (std::getline(in, part, '+')) {
    if (first) {
      if (part == "udp") {
        o.proto = CeilingProto::kUdp;
      } else if (part == "tcp") {
        o.proto = CeilingProto::kTcp;
      } else {
        return "row '" + name + "': must start with udp or tcp";
      }
      first = false;
    } else if (part == "copy") {
      o.copy = true;
    } else if (part == "crc") {
      o.crc = true;
    } else {
      return "row '" + name + "': unknown pass '" + part + "' (copy, crc)";
    }
  }
  if (first) return "empty row name";
  return {};
}

}  // namespace megascale::perf
