// libnccl-net-null.so (NCCL name "Null"): a net that moves no bytes, for measuring what NCCL itself can
// do over a host-memory net on this host: its ring pipeline, its proxy thread, the GPU's reads and
// writes of pinned host memory. Not a transport: receive buffers keep whatever they held, so every
// collective's result is WRONG (run nccl_check with --no-check). It says so at init. Only NCCL's Simple
// protocol runs on it (NCCL_PROTO=Simple): LL and LL128 carry their flags inside the data, which never
// arrives, so a GPU waiting on them would wait forever.
//
// A connection is one page of shared memory between the two processes (named in the 128-byte handle;
// both sides are on one host). A send completes at once, as on a net that buffers the bytes (Socket's
// kernel buffers), up to kAhead messages beyond the receives the peer has posted
// (MEGASCALE_NULL_AHEAD); a receive completes once the matching send has been posted, with the sent
// size. No real net completes either sooner. Sends and receives are matched in order, one buffer per
// receive (maxRecvs 1). The properties are the MegaScale plugin's for an interface without a known
// speed (no PCI path, 100 Gbps), so that NCCL builds the same rings and channels for both;
// MEGASCALE_NULL_SPEED_MBPS changes the speed. A peer that closes or exits fails the other side's
// requests with ncclRemoteError.
//
// MEGASCALE_NULL_PTR_CUDA=1 also takes NCCL's GPU buffers (ptrSupport NCCL_PTR_HOST | NCCL_PTR_CUDA, as a
// GPUDirect RDMA NIC's plugin): where NCCL allows GPUDirect (NCCL_NET_GDR_LEVEL=SYS, since there is no
// PCI path), its Simple buffers stay in GPU memory and its kernels no longer read and write pinned host
// memory across PCIe. What NCCL reaches then is its ceiling over a net that takes GPU buffers, to set
// beside the host-memory ceiling (figures in docs/PERFORMANCE.md).
//
// A model of a net that takes time, for asking what a net's message time costs under NCCL (all 0, the
// default, is the net that takes none). A message starts once both its send and its receive are posted.
//   MEGASCALE_NULL_RECV_US  its receive completes this long after the start;
//   MEGASCALE_NULL_GBPS     and no sooner than the connection's previous receive plus size / rate (one
//                           serial pipe a connection; 0: no such bound);
//   MEGASCALE_NULL_SEND_US  its send completes this long after the start (0: at once, run-ahead as above;
//                           set, a send waits for its receive to be posted, as a net without buffers);
//   MEGASCALE_NULL_SLOW_PERMILLE, MEGASCALE_NULL_SLOW_US
//                           that many messages in 1000 (drawn per connection by a hash of the message's
//                           index) take this much longer to receive: a tail, as a thread that loses its
//                           CPU makes one.
// Times are CLOCK_MONOTONIC, which both processes on one host share.
//
// Uses the project's own v8 ABI header (collectives/nccl/include/megascale/nccl/abi/net_v8.h; NCCL
// 2.20 .. 2.28 load v8).
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "megascale/nccl/abi/net_v8.h"

namespace {

using namespace megascale::nccl::abi;

constexpr uint64_t kMagic = 0x4d534e554c4c3031ULL;  // "MSNULL01"
constexpr uint32_t kRing = 64;                      // sizes of posted sends, read by the receiver
constexpr uint32_t kMaxRequests = kNetMaxRequests;  // outstanding per comm (NCCL's bound)
// Sends that may complete before their receive is posted (NCCL keeps at most 8 in flight a comm). Send
// k writes sizes[k % kRing] once receive k - kAhead is posted; with at most kMaxRequests receives
// outstanding, receive k - kRing, the slot's last reader, has completed by then.
// MEGASCALE_NULL_AHEAD (0 .. kAhead) lowers it; 0 makes every send wait for its receive (rendezvous).
constexpr uint32_t kAhead = 16;
static_assert(kAhead + kMaxRequests <= kRing);
constexpr int kDefaultSpeedMbps = 100000;

NetDebugLogger g_log = nullptr;
int g_speed_mbps = kDefaultSpeedMbps;
int g_ptr_support = kPtrHost;  // MEGASCALE_NULL_PTR_CUDA=1 adds kPtrCuda
uint32_t g_ahead = kAhead;
// The timing model (see the top): nanoseconds, and bytes per nanosecond (0: unbounded).
int64_t g_recv_ns = 0;
int64_t g_send_ns = 0;
double g_bytes_per_ns = 0;
uint32_t g_slow_permille = 0;
int64_t g_slow_ns = 0;
char g_dev_name[] = "null";

#define NULLNET_LOG_TO(level, subsys, ...) \
  do {                                     \
    if (g_log != nullptr) g_log(level, subsys, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define NULLNET_WARN(...) NULLNET_LOG_TO(kLogWarn, kSubsysNet, __VA_ARGS__)

// One connection's shared page. std::atomic of 4 and 8 bytes is lock-free and address-free on the
// hosts NCCL runs on, so it works between processes.
struct Shared {
  uint64_t magic;
  std::atomic<int32_t> sender_pid;
  std::atomic<int32_t> receiver_pid;
  std::atomic<uint32_t> send_closed;
  std::atomic<uint32_t> recv_closed;
  alignas(64) std::atomic<uint64_t> sends_posted;  // written by the sender only
  alignas(64) std::atomic<uint64_t> recvs_posted;  // written by the receiver only
  alignas(64) uint64_t sizes[kRing];               // sizes[k % kRing]: the k-th send's size
  int64_t send_ns[kRing];                          // when the k-th send was posted (timing model)
  int64_t recv_ns[kRing];                          // when the k-th receive was posted (timing model)
};
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<int32_t>::is_always_lock_free);

struct Handle {  // what listen writes into NCCL's 128-byte handle
  uint64_t magic;
  char shm_name[64];
};
static_assert(sizeof(Handle) <= kNetHandleMaxBytes);

struct Comm;
struct Request {
  Comm* comm = nullptr;
  bool in_use = false;
  bool send = false;
  uint64_t index = 0;  // the k-th send or receive of the comm
  uint64_t capacity = 0;  // a receive's buffer size; a send's size
  int64_t done_ns = -1;   // timing model: when it completes (-1: not known yet)
};

struct Comm {
  Shared* shared = nullptr;
  bool sender = false;
  bool accepted = false;  // a listen comm whose peer connected
  char shm_name[64] = {};
  uint64_t posted = 0;    // sends or receives this side posted
  uint64_t polls = 0;     // test() calls that found nothing, for the liveness check's rate
  uint64_t salt = 0;         // timing model: which of this connection's messages are slow (its serial)
  uint64_t scheduled = 0;    // timing model, receive side: receives given their completion time
  int64_t last_done_ns = 0;  // and when the last of them completes
  Request requests[kMaxRequests];
};

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

bool timed() { return g_recv_ns > 0 || g_send_ns > 0 || g_bytes_per_ns > 0 || g_slow_ns > 0; }

// Whether the timing model makes message `index` of a connection slow (MEGASCALE_NULL_SLOW_PERMILLE):
// a hash of the index and the connection's `salt` (splitmix64's finalizer), so the draws look random
// and differ between connections.
bool slow_message(uint64_t index, uint64_t salt) {
  if (g_slow_ns == 0) return false;  // init leaves it 0 unless some messages are slow
  uint64_t z = index + salt * 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return z % 1000 < g_slow_permille;
}

Shared* map_shared(int fd) {
  void* p = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<Shared*>(p);
}

// True while the other side has neither closed its comm nor exited.
bool peer_alive(const Comm& c) {
  const Shared& s = *c.shared;
  if ((c.sender ? s.recv_closed : s.send_closed).load(std::memory_order_acquire) != 0) return false;
  const int32_t pid = (c.sender ? s.receiver_pid : s.sender_pid).load(std::memory_order_acquire);
  return pid <= 0 || kill(pid, 0) == 0 || errno != ESRCH;
}

Request* take_request(Comm* c, bool send, uint64_t index, uint64_t capacity) {
  for (Request& r : c->requests) {
    if (!r.in_use) {
      r = Request{c, true, send, index, capacity};
      return &r;
    }
  }
  return nullptr;
}

// The integer in `name` if it is set, within [lo, hi]; false, with a WARN naming it, if not a number there.
bool read_env(const char* name, long lo, long hi, const char* what, long& value) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return true;
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v, &end, 10);
  if (*end != '\0' || errno != 0 || x < lo || x > hi) {
    NULLNET_WARN("Null net: %s=%s is not %s (%ld .. %ld)", name, v, what, lo, hi);
    return false;
  }
  value = x;
  return true;
}

NetResult init(NetDebugLogger logger) {
  g_log = logger;
  long speed = kDefaultSpeedMbps;
  long ahead = kAhead;
  long recv_us = 0;
  long send_us = 0;
  long gbps = 0;
  long slow_permille = 0;
  long slow_us = 0;
  long ptr_cuda = 0;
  if (!read_env("MEGASCALE_NULL_PTR_CUDA", 0, 1, "0 or 1", ptr_cuda) ||
      !read_env("MEGASCALE_NULL_SPEED_MBPS", 1, 100000000, "a speed in Mbps", speed) ||
      !read_env("MEGASCALE_NULL_AHEAD", 0, kAhead, "a count of sends", ahead) ||
      !read_env("MEGASCALE_NULL_RECV_US", 0, 10000000, "a time in microseconds", recv_us) ||
      !read_env("MEGASCALE_NULL_SEND_US", 0, 10000000, "a time in microseconds", send_us) ||
      !read_env("MEGASCALE_NULL_GBPS", 0, 100000, "a rate in Gb/s", gbps) ||
      !read_env("MEGASCALE_NULL_SLOW_PERMILLE", 0, 1000, "a count of messages in 1000", slow_permille) ||
      !read_env("MEGASCALE_NULL_SLOW_US", 0, 10000000, "a time in microseconds", slow_us)) {
    return kNetInvalidArgument;
  }
  g_speed_mbps = static_cast<int>(speed);
  g_ptr_support = ptr_cuda != 0 ? (kPtrHost | kPtrCuda) : kPtrHost;
  g_ahead = static_cast<uint32_t>(ahead);
  g_recv_ns = recv_us * 1000;
  g_send_ns = send_us * 1000;
  g_bytes_per_ns = static_cast<double>(gbps) / 8.0;
  g_slow_permille = static_cast<uint32_t>(slow_permille);
  g_slow_ns = slow_permille > 0 ? slow_us * 1000 : 0;
  NULLNET_LOG_TO(kLogInfo, kSubsysInit | kSubsysNet,
              "Null net: moves NO bytes (results are wrong); measures NCCL's own ceiling over a host-memory "
              "net; speed %d Mbps, sends complete up to %u ahead of the peer's receives; %s",
              g_speed_mbps, g_send_ns > 0 ? 0 : g_ahead,
              ptr_cuda != 0 ? "host and GPU buffers (MEGASCALE_NULL_PTR_CUDA=1)" : "host buffers");
  if (timed()) {
    NULLNET_LOG_TO(kLogInfo, kSubsysInit | kSubsysNet,
                "Null net: timing model: a receive completes %ld us after its message starts, no sooner "
                "than the previous one plus size at %ld Gb/s (0: unbounded); a send %ld us after the start; "
                "%ld messages in 1000 take %ld us longer",
                recv_us, gbps, send_us, g_slow_ns > 0 ? slow_permille : 0L, g_slow_ns > 0 ? slow_us : 0L);
  }
  return kNetSuccess;
}

NetResult devices(int* ndev) {
  if (ndev == nullptr) return kNetInvalidArgument;
  *ndev = 1;
  return kNetSuccess;
}

NetResult get_properties(int dev, NetPropertiesV8* props) {
  if (dev != 0 || props == nullptr) return kNetInvalidArgument;
  std::memset(props, 0, sizeof *props);
  props->name = g_dev_name;
  props->pciPath = nullptr;
  props->guid = 0;
  props->ptrSupport = g_ptr_support;
  props->speed = g_speed_mbps;
  props->maxComms = 65536;
  props->maxRecvs = 1;
  props->netDeviceType = kNetDeviceHost;
  props->netDeviceVersion = kNetDeviceInvalidVersion;
  return kNetSuccess;
}

NetResult listen(int dev, void* handle, void** listen_comm) {
  if (dev != 0 || handle == nullptr || listen_comm == nullptr) return kNetInvalidArgument;
  static std::atomic<uint64_t> serial{0};
  auto* c = new Comm;
  c->salt = serial.fetch_add(1);
  std::snprintf(c->shm_name, sizeof c->shm_name, "/megascale-null.%d.%llu", static_cast<int>(getpid()),
                static_cast<unsigned long long>(c->salt));
  const int fd = shm_open(c->shm_name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0 || ftruncate(fd, sizeof(Shared)) != 0 || (c->shared = map_shared(fd)) == nullptr) {
    NULLNET_WARN("Null net: listen: shared memory %s: %s", c->shm_name, strerror(errno));
    if (fd >= 0) {
      close(fd);
      shm_unlink(c->shm_name);
    }
    delete c;
    return kNetSystemError;
  }
  close(fd);
  c->shared->receiver_pid.store(static_cast<int32_t>(getpid()));
  c->shared->magic = kMagic;  // ftruncate zeroed the rest
  Handle h{};
  h.magic = kMagic;
  std::memcpy(h.shm_name, c->shm_name, sizeof h.shm_name);
  std::memset(handle, 0, kNetHandleMaxBytes);
  std::memcpy(handle, &h, sizeof h);
  *listen_comm = c;
  return kNetSuccess;
}

NetResult connect(int dev, void* handle, void** send_comm, NetDeviceHandle** dev_comm) {
  if (dev != 0 || handle == nullptr || send_comm == nullptr) return kNetInvalidArgument;
  *send_comm = nullptr;
  if (dev_comm != nullptr) *dev_comm = nullptr;
  Handle h{};
  std::memcpy(&h, handle, sizeof h);
  if (h.magic != kMagic || std::memchr(h.shm_name, '\0', sizeof h.shm_name) == nullptr) {
    NULLNET_WARN("Null net: connect: the handle is not a Null net handle");
    return kNetInvalidArgument;
  }
  const int fd = shm_open(h.shm_name, O_RDWR, 0);
  Shared* s = fd >= 0 ? map_shared(fd) : nullptr;
  if (fd >= 0) close(fd);
  if (s == nullptr || s->magic != kMagic) {
    NULLNET_WARN("Null net: connect: shared memory %s: %s (the peer must be on this host)", h.shm_name,
                 s == nullptr ? strerror(errno) : "not a Null net connection");
    if (s != nullptr) munmap(s, sizeof(Shared));
    return kNetRemoteError;
  }
  auto* c = new Comm;
  c->shared = s;
  c->sender = true;
  s->sender_pid.store(static_cast<int32_t>(getpid()), std::memory_order_release);
  *send_comm = c;
  return kNetSuccess;
}

NetResult accept(void* listen_comm, void** recv_comm, NetDeviceHandle** dev_comm) {
  if (listen_comm == nullptr || recv_comm == nullptr) return kNetInvalidArgument;
  if (dev_comm != nullptr) *dev_comm = nullptr;
  auto* l = static_cast<Comm*>(listen_comm);
  *recv_comm = nullptr;
  if (l->accepted) {
    NULLNET_WARN("Null net: accept: one connection per listen");
    return kNetInvalidUsage;
  }
  if (l->shared->sender_pid.load(std::memory_order_acquire) == 0) return kNetSuccess;  // not yet
  shm_unlink(l->shm_name);  // both sides have it mapped
  auto* c = new Comm;
  c->shared = l->shared;
  c->salt = l->salt;
  l->accepted = true;  // the mapping now belongs to the receive comm
  *recv_comm = c;
  return kNetSuccess;
}

NetResult reg_mr(void* comm, void*, size_t, int type, void** mhandle) {
  if (comm == nullptr || mhandle == nullptr || (type & g_ptr_support) == 0) return kNetInvalidArgument;
  *mhandle = comm;
  return kNetSuccess;
}

NetResult dereg_mr(void* comm, void*) {
  return comm == nullptr ? kNetInvalidArgument : kNetSuccess;
}

NetResult isend(void* send_comm, void*, int size, int, void*, void** request) {
  auto* c = static_cast<Comm*>(send_comm);
  if (c == nullptr || !c->sender || size < 0 || request == nullptr) return kNetInvalidArgument;
  *request = nullptr;
  const uint32_t ahead = g_send_ns > 0 ? 0 : g_ahead;  // a timed send waits for its receive
  if (c->posted >= c->shared->recvs_posted.load(std::memory_order_acquire) + ahead) {  // too far ahead
    if (++c->polls % 4096 == 0 && !peer_alive(*c)) return kNetRemoteError;
    return kNetSuccess;
  }
  Request* r = take_request(c, true, c->posted, static_cast<uint64_t>(size));
  if (r == nullptr) return kNetSuccess;  // NCCL's request bound reached: try again later
  c->shared->sizes[c->posted % kRing] = static_cast<uint64_t>(size);
  if (timed()) {
    const int64_t now = now_ns();
    c->shared->send_ns[c->posted % kRing] = now;
    // Receive `posted` is posted (ahead is 0): its time is in the ring and stays until this send ends.
    if (g_send_ns > 0) r->done_ns = std::max(now, c->shared->recv_ns[c->posted % kRing]) + g_send_ns;
  }
  c->shared->sends_posted.store(++c->posted, std::memory_order_release);
  *request = r;
  return kNetSuccess;
}

NetResult irecv(void* recv_comm, int n, void**, int* sizes, int*, void**, void** request) {
  auto* c = static_cast<Comm*>(recv_comm);
  if (c == nullptr || c->sender || request == nullptr || sizes == nullptr) return kNetInvalidArgument;
  if (n != 1) {
    NULLNET_WARN("Null net: irecv of %d buffers; maxRecvs is 1", n);
    return kNetInvalidArgument;
  }
  if (sizes[0] < 0) return kNetInvalidArgument;
  // At most kMaxRequests receives outstanding: the sender's kAhead run-ahead relies on it (kRing).
  Request* r = take_request(c, false, c->posted, static_cast<uint64_t>(sizes[0]));
  if (r == nullptr) {
    NULLNET_WARN("Null net: more than %u receives outstanding on one comm", kMaxRequests);
    return kNetInvalidUsage;
  }
  if (timed()) c->shared->recv_ns[c->posted % kRing] = now_ns();
  c->shared->recvs_posted.store(++c->posted, std::memory_order_release);
  *request = r;
  return kNetSuccess;
}

NetResult iflush(void*, int, void**, int*, void**, void** request) {
  if (request != nullptr) *request = nullptr;  // host memory: nothing to flush
  return kNetSuccess;
}

// Timing model, receive side: gives every receive up to `upto` (whose sends are posted) its completion
// time, in order, since each one's serial bound starts from the one before.
void schedule_receives(Comm& c, uint64_t upto) {
  for (; c.scheduled <= upto; ++c.scheduled) {
    Request* r = nullptr;
    for (Request& q : c.requests) {
      if (q.in_use && q.index == c.scheduled) r = &q;
    }
    if (r == nullptr) return;  // not posted yet (cannot happen below `upto`: receives are posted in order)
    const Shared& s = *c.shared;
    const int64_t start = std::max(s.send_ns[r->index % kRing], s.recv_ns[r->index % kRing]);
    int64_t done = start + g_recv_ns + (slow_message(r->index, c.salt) ? g_slow_ns : 0);
    if (g_bytes_per_ns > 0) {
      const auto wire_ns = static_cast<int64_t>(static_cast<double>(s.sizes[r->index % kRing]) / g_bytes_per_ns);
      done = std::max(done, std::max(start, c.last_done_ns) + wire_ns);
    }
    r->done_ns = c.last_done_ns = done;
  }
}

// A request that is not done yet; every 4096th such poll of a comm checks that the peer still lives.
NetResult not_yet(Comm& c, Request* r) {
  if (++c.polls % 4096 == 0 && !peer_alive(c)) {
    r->in_use = false;
    return kNetRemoteError;
  }
  return kNetSuccess;
}

NetResult test(void* request, int* done, int* sizes) {
  auto* r = static_cast<Request*>(request);
  if (r == nullptr || !r->in_use || done == nullptr) return kNetInvalidArgument;
  *done = 0;
  Comm& c = *r->comm;
  if (r->send) {
    if (r->done_ns >= 0 && now_ns() < r->done_ns) return not_yet(c, r);
    *done = 1;
    if (sizes != nullptr) sizes[0] = static_cast<int>(r->capacity);
    r->in_use = false;
    return kNetSuccess;
  }
  bool ready = c.shared->sends_posted.load(std::memory_order_acquire) > r->index;
  if (ready && timed()) {
    schedule_receives(c, r->index);
    ready = now_ns() >= r->done_ns;
  }
  if (!ready) return not_yet(c, r);
  const uint64_t sent = c.shared->sizes[r->index % kRing];
  r->in_use = false;
  if (sent > r->capacity) {
    NULLNET_WARN("Null net: a %llu-byte message for a %llu-byte receive",
                 static_cast<unsigned long long>(sent), static_cast<unsigned long long>(r->capacity));
    return kNetInvalidUsage;
  }
  *done = 1;
  if (sizes != nullptr) sizes[0] = static_cast<int>(sent);
  return kNetSuccess;
}

NetResult close_comm(void* comm) {
  auto* c = static_cast<Comm*>(comm);
  if (c == nullptr) return kNetInvalidArgument;
  (c->sender ? c->shared->send_closed : c->shared->recv_closed).store(1, std::memory_order_release);
  munmap(c->shared, sizeof(Shared));
  delete c;
  return kNetSuccess;
}

NetResult close_listen(void* comm) {
  auto* l = static_cast<Comm*>(comm);
  if (l == nullptr) return kNetInvalidArgument;
  if (!l->accepted) {  // nobody took the mapping over
    shm_unlink(l->shm_name);
    munmap(l->shared, sizeof(Shared));
  }
  delete l;
  return kNetSuccess;
}

NetResult irecv_consumed(void*, int, void*) {
  return kNetSuccess;
}

}  // namespace

extern "C" {
// The one exported symbol (null_net.map keeps every other symbol local).
__attribute__((visibility("default"))) NetV8 ncclNetPlugin_v8 = {
    "Null", init,     devices,   get_properties, listen,     connect,    accept,
    reg_mr, nullptr,  dereg_mr,  isend,          irecv,      iflush,     test,
    close_comm, close_comm, close_listen, nullptr, irecv_consumed,
};
}  // extern "C"
