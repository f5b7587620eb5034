// What receiving a datagram straight into its final buffer would cost on the UDP wire, against what the
// wire does today. The destination of a datagram is in its header, so a receive "into the posted
// buffer" needs the header first: a MSG_PEEK of it, then a recvmsg whose second iovec is the
// destination. Today an I/O thread takes up to 16 datagrams per recvmmsg into its own batch, and the
// payload is then copied into the posted buffer. Side by side, per 32 KiB datagram (the plugin's
// segment on lo), over loopback, receive side only (each round's datagrams are sent with the timer
// paused; on loopback they are queued on the socket before sendmmsg returns):
//
//   BatchThenCopy   recvmmsg of 16 into a staging batch, then memcpy of each payload (today)
//   PeekThenPlace   per datagram: recv(MSG_PEEK) of the header, recvmsg into header + destination
//   BatchOnly       recvmmsg of 16, no copy: the floor; BatchThenCopy minus this is the copy's cost
//   BatchIntoPlace  recvmmsg of 16, each into header + its destination, as if the destinations were
//                   known before the datagrams arrived (they are not: the bound of any guessing scheme)
//
// The destination cycles through 4 MiB, NCCL's default buffer per connection.
//
//   build/bench/megascale_micro_bench --benchmark_filter=UdpRx
#include <benchmark/benchmark.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace {

constexpr size_t kHeader = 64;
constexpr size_t kPayload = 32 * 1024;
constexpr size_t kDatagram = kHeader + kPayload;
constexpr unsigned kBatch = 16;
constexpr size_t kDestBytes = 4u << 20;

struct Loopback {
  int rx = -1;
  int tx = -1;
  bool ok = false;
  Loopback() {
    rx = ::socket(AF_INET, SOCK_DGRAM, 0);
    tx = ::socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    const int buf = 8 << 20;
    ::setsockopt(rx, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
    ::setsockopt(rx, SOL_SOCKET, SO_RCVBUFFORCE, &buf, sizeof buf);  // root: past rmem_max
    ok = rx >= 0 && tx >= 0 && ::bind(rx, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
         ::getsockname(rx, reinterpret_cast<sockaddr*>(&a), &len) == 0 &&
         ::connect(tx, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~Loopback() {
    if (rx >= 0) ::close(rx);
    if (tx >= 0) ::close(tx);
  }
};

// Sends kBatch datagrams whose headers carry their destination offsets, from *next on; false on error.
bool send_round(int fd, std::vector<uint8_t>& datagrams, uint64_t& next) {
  mmsghdr msgs[kBatch]{};
  iovec iov[kBatch];
  for (unsigned i = 0; i < kBatch; ++i) {
    uint8_t* d = datagrams.data() + i * kDatagram;
    const uint64_t offset = next % kDestBytes;
    next += kPayload;
    std::memcpy(d, &offset, sizeof offset);
    iov[i] = {d, kDatagram};
    msgs[i].msg_hdr.msg_iov = &iov[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
  }
  return ::sendmmsg(fd, msgs, kBatch, 0) == static_cast<int>(kBatch);
}

enum Mode : int { kBatchThenCopy, kPeekThenPlace, kBatchOnly, kBatchIntoPlace };

void BM_UdpRx(benchmark::State& state) {
  const auto mode = static_cast<Mode>(state.range(0));
  Loopback lo;
  if (!lo.ok) {
    state.SkipWithError("no loopback UDP socket pair");
    return;
  }
  std::vector<uint8_t> datagrams(kBatch * kDatagram, 0x5a);
  std::vector<uint8_t> staging(kBatch * kDatagram);
  std::vector<uint8_t> dest(kDestBytes);
  uint64_t next = 0;
  uint64_t received = 0;
  for (auto _ : state) {
    state.PauseTiming();
    const bool sent = send_round(lo.tx, datagrams, next);
    state.ResumeTiming();
    if (!sent) {
      state.SkipWithError("sendmmsg failed");
      return;
    }
    if (mode == kPeekThenPlace) {
      for (unsigned i = 0; i < kBatch; ++i) {
        uint8_t header[kHeader];
        if (::recv(lo.rx, header, kHeader, MSG_PEEK) != static_cast<ssize_t>(kHeader)) {
          state.SkipWithError("recv(MSG_PEEK) failed");
          return;
        }
        uint64_t offset = 0;
        std::memcpy(&offset, header, sizeof offset);
        iovec iov[2] = {{header, kHeader}, {dest.data() + offset, kPayload}};
        msghdr m{};
        m.msg_iov = iov;
        m.msg_iovlen = 2;
        if (::recvmsg(lo.rx, &m, 0) != static_cast<ssize_t>(kDatagram)) {
          state.SkipWithError("recvmsg failed");
          return;
        }
        ++received;
      }
    } else {
      mmsghdr msgs[kBatch]{};
      iovec iov[kBatch][2];
      for (unsigned i = 0; i < kBatch; ++i) {
        uint8_t* d = staging.data() + i * kDatagram;
        if (mode == kBatchIntoPlace) {
          // The offsets the sender wrote, known here only because this benchmark sent them.
          const uint64_t offset = (next - (kBatch - i) * kPayload) % kDestBytes;
          iov[i][0] = {d, kHeader};
          iov[i][1] = {dest.data() + offset, kPayload};
          msgs[i].msg_hdr.msg_iovlen = 2;
        } else {
          iov[i][0] = {d, kDatagram};
          msgs[i].msg_hdr.msg_iovlen = 1;
        }
        msgs[i].msg_hdr.msg_iov = iov[i];
      }
      unsigned got = 0;
      while (got < kBatch) {
        const int n = ::recvmmsg(lo.rx, msgs + got, kBatch - got, 0, nullptr);
        if (n <= 0) {
          state.SkipWithError("recvmmsg failed");
          return;
        }
        got += static_cast<unsigned>(n);
      }
      for (unsigned i = 0; i < kBatch; ++i) {
        const uint8_t* d = staging.data() + i * kDatagram;
        uint64_t offset = 0;
        std::memcpy(&offset, d, sizeof offset);
        if (mode == kBatchThenCopy) std::memcpy(dest.data() + offset, d + kHeader, kPayload);
        benchmark::DoNotOptimize(offset);
      }
      received += kBatch;
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(received));
  state.SetBytesProcessed(static_cast<int64_t>(received * kPayload));
  state.SetLabel(mode == kBatchThenCopy   ? "recvmmsg x16 + copy (today)"
                 : mode == kPeekThenPlace ? "peek + recvmsg into place"
                 : mode == kBatchOnly     ? "recvmmsg x16, no copy (floor)"
                                          : "recvmmsg x16 into known places (bound)");
}
BENCHMARK(BM_UdpRx)->DenseRange(kBatchThenCopy, kBatchIntoPlace)->UseRealTime();

}  // namespace
