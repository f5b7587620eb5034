// The plugin's objects behind NCCL's opaque pointers: per-communicator contexts, listen/send/recv comms,
// requests and memory handles, and DeviceWire, the UDP wire (collectives/wire/udp) of one device that
// every comm on that device shares.
//
// Threading (README.md, "Threading"): each DeviceWire runs its UdpWire in threaded mode, so the
// protocol (ACKs, retransmissions, keepalives, pacing) advances whether or not NCCL calls in. NCCL's
// proxy threads only post and test, through the wire's locked calls. A comm is used by one NCCL thread
// at a time (NCCL's contract: the service thread sets it up, the progress thread moves data), so comms
// need no lock of their own; what comms share (a DeviceWire's acceptor, the registry) has its lock.
#pragma once

#include <atomic>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gpu_copy.h"
#include "handle.h"
#include "megascale/engine/connection.h"
#include "megascale/engine/stats.h"
#include "megascale/nccl/abi/common.h"
#include "megascale/wire/udp.h"
#include "stall_watch.h"

namespace megascale::nccl {

using abi::NetResult;

// A connection or comm id as the stats files and the request timeline write it: 16 hex digits.
inline std::string id_hex(uint64_t v) {
  char text[24];
  std::snprintf(text, sizeof text, "%016" PRIx64, v);
  return text;
}

inline constexpr int kMaxRecvs = 8;               // buffers per grouped irecv (props.maxRecvs)
inline constexpr uint32_t kRecvPoolSize = 48;     // requests per recv comm: 32 for NCCL + deferred ones
inline constexpr uint32_t kSendPoolSize = 320;    // requests per send comm: 32 x maxRecvs + slack
inline constexpr uint32_t kEngineMaxRecvs = 512;  // engine receives per connection (> 48 x 8 subs)

inline constexpr uint32_t kContextMagic = 0x5854434D;  // "MCTX"
inline constexpr uint32_t kListenMagic = 0x4E534C4D;   // "MLSN"
inline constexpr uint32_t kSendMagic = 0x444E534D;     // "MSND"
inline constexpr uint32_t kRecvMagic = 0x5643524D;     // "MRCV"
inline constexpr uint32_t kRequestMagic = 0x5145524D;  // "MREQ"
inline constexpr uint32_t kMrMagic = 0x524D4D4D;       // "MMMR"

class DeviceWire;
struct CommBase;

// One of the connections a comm runs over (MEGASCALE_LAYOUT stripes; handle.h) and the wire it is on.
struct Stripe {
  DeviceWire* wire = nullptr;
  engine::ConnId conn = 0;
};

// A connect() in progress: an engine connection and its hello send per stripe (the engine reads `hello`
// until the send completes, so it lives here).
struct PendingConnect {
  struct Leg {
    Stripe stripe;
    engine::RequestId hello_req = 0;
    Hello hello{};
    bool done = false;
  };
  std::vector<std::unique_ptr<Leg>> legs;  // stripe order; pointers: the engine reads each hello in place
  int dev = 0;
  uint64_t token = 0;
  uint64_t stripe_bytes = 0;  // the listener's (the handle's)
  std::string peer;           // "addr:port (ifname)" for messages
  TimeNs started_ns = 0;
};

// One per communicator (v11 init) or one for the whole process (v8..v10).
struct Context {
  uint32_t magic = kContextMagic;
  uint64_t comm_id = 0;   // NCCL's commHash (0 for the legacy context)
  int traffic_class = 0;  // resolved: MEGASCALE_TC, else NCCL's config, else 0
  std::mutex mu;          // guards `connects` (NCCL may connect from several threads in tests)
  std::unordered_map<uint64_t, std::unique_ptr<PendingConnect>> connects;  // by connect token
};

struct ListenComm {
  uint32_t magic = kListenMagic;
  // Per stripe: its wire, which holds the listen under listen_id, and the connection accepted there
  // (conn 0: none yet).
  std::vector<Stripe> stripes;
  uint64_t listen_id = 0;
  uint64_t comm_id = 0;
  int dev = 0;
  TimeNs accept_started_ns = 0;  // the first accept() call for the connection not yet accepted
};

enum class Role : uint8_t { kSend, kRecv };

// One isend, or one grouped irecv of n buffers.
struct Request {
  uint32_t magic = kRequestMagic;
  CommBase* comm = nullptr;
  bool in_use = false;
  bool optional = false;  // irecv with NCCL_NET_OPTIONAL_RECV_COMPLETION: done at the first test
  bool reported = false;  // NCCL was told done; the engine request may still be pending (optional)
  uint8_t n = 0;
  uint8_t parts = 0;         // engine requests: n x the comm's stripes
  uint64_t done_mask = 0;    // parts the engine reported done
  uint64_t needed_mask = 0;  // a send's parts that carry bytes (and part 0): what NCCL waits for
  TimeNs posted_ns = 0;      // when isend/irecv posted it
  // One engine request per buffer and stripe (buffer j's part on stripe i is tickets[j * stripes + i]),
  // posted and finished through the wires without their locks (wire::UdpWire::submit): NCCL's proxy
  // thread never waits out a wire's round. Sized by the comm (CommBase's constructor).
  std::unique_ptr<wire::UdpWire::Ticket[]> tickets;
  uint64_t bytes[kMaxRecvs] = {};  // per buffer: its parts' bytes added
  // GPU buffers (MEGASCALE_GDR_COPY; gpu_copy.h), a part at a time so that a message's first part goes
  // (or lands) while the copy engine still moves the rest. A send whose parts are on their way to its
  // shadow (kToHost), or queued behind one (kQueued: sends reach the wire in the order posted), has its
  // tickets set; pump_staged submits part i once the copier passes part_mark[i] (0: nothing to copy),
  // in part order (submitted). A receive into shadows (staged_recv; gpu[j] non-null: buffer j's GPU
  // address, its parts landing in the shadow) queues each part's copy to the GPU as the part arrives
  // (copy_queued) and is done when its parts are in and copy_mark, after the last of those copies, passes.
  enum Stage : uint8_t { kNoStage, kToHost, kQueued };
  Stage stage = kNoStage;
  bool staged_recv = false;
  uint8_t submitted = 0;     // a staged send's parts handed to the wire
  uint64_t copy_queued = 0;  // a staged receive's parts whose copy is queued
  uint64_t copy_mark = 0;    // a staged receive's last queued copy
  uint64_t part_mark[kMaxStripes] = {};
  void* gpu[kMaxRecvs] = {};
  const char* shadow[kMaxRecvs] = {};
  uint8_t trace_lane[kMaxRecvs] = {};  // each sub's lane on its comm's track (MEGASCALE_TRACE_FILE)
};

struct CommBase {
  uint32_t magic = 0;
  Role role = Role::kSend;
  // Every connection the comm runs over, stripe 0 first. A message of S bytes goes as one part per
  // stripe: stripe i (but the last) carries bytes [i x stripe_bytes, (i + 1) x stripe_bytes) of it, the
  // last stripe the rest; parts beyond S are empty. The receiver places stripe i's part at i x
  // stripe_bytes of the posted buffer, so the parts land contiguous whatever S is, and the size NCCL is
  // told is the parts' sum. A message no longer than stripe_bytes has its bytes on stripe 0, whose wire
  // is then the one its receiver waits for (empty parts are waited for by no one: complete()).
  std::vector<Stripe> stripes;
  uint64_t stripe_bytes = 0;
  int dev = 0;
  uint64_t comm_id = 0;
  std::string ifname;  // the device's interface
  std::string peer;    // "addr:port"
  TimeNs opened_ns = 0;
  std::vector<Request> requests;
  std::vector<uint32_t> free_requests;
  // Requests NCCL saw done whose engine requests are not all finished: optional receives, and requests
  // whose empty parts (stripes) are still on their way.
  std::vector<uint32_t> deferred;
  // GPU buffers (MEGASCALE_GDR_COPY): the comm's copier, made at its first NCCL_PTR_CUDA regMr; its
  // sends waiting for their copies, in post order (indices into `requests`); and shadows deregistered
  // while requests were out, freed when the comm closes.
  std::unique_ptr<Copier> copier;
  std::deque<uint32_t> staged;
  std::vector<void*> orphan_shadows;
  bool copies_settled = false;  // a failed comm's queued copies were waited for (once: test() reports it)
  // The first failure; every later call on the comm returns it again.
  NetResult failed = abi::kNetSuccess;
  std::string failed_error;
  // The request latency's parts, from the engine's times (engine::Completion) and ours, for requests
  // that ended well (MEGASCALE_STATS_DIR's "phases"). A send: kWait, isend to its first segment
  // released (the peer's credit, earlier sends on the connection, the window); kTransfer, first to last
  // segment released; kAck, the last released to the ACK that finished it; kReport, that to test()
  // saying done (the TX fence and NCCL's next test()). A receive: kWait, irecv to its first segment
  // placed (the sender); kTransfer, first to last placed; kReport. The parts of one request add up to
  // its request_latency.
  enum Phase : uint8_t { kWait, kTransfer, kAck, kReport, kPhases };
  static constexpr const char* kPhaseNames[kPhases] = {"wait", "transfer", "ack", "report"};
  // Plugin-side counters (the engine keeps the transport's own). NCCL's thread for the comm writes them;
  // a stats snapshot, taken from whichever comm's call found one due, reads them: under counters_mu
  // (update(), counters_copy()).
  struct Counters {
    uint64_t posted = 0;          // isends, or irecv calls
    uint64_t posted_buffers = 0;  // isends, or irecv buffers
    uint64_t completed = 0;       // requests reported done to NCCL
    uint64_t retry_later = 0;     // isend/irecv answered with request = NULL (no free request)
    uint64_t bytes_done = 0;      // bytes of completed requests
    // Post to done as NCCL sees it (isend/irecv until test() says done): a send's includes its
    // acknowledgment, a receive's the wait for the peer's send. The figure to look at when bandwidth is
    // low and the transport's own counters (RTT, retransmissions) look healthy.
    engine::RttHistogram request_latency;
    engine::RttHistogram phases[kPhases];
  };
  template <class Fn>
  void update(Fn&& fn) {
    std::lock_guard<std::mutex> lock(counters_mu);
    fn(counters);
  }
  Counters counters_copy() const {
    std::lock_guard<std::mutex> lock(counters_mu);
    return counters;
  }
  // Time NCCL's proxy thread spent inside this comm's isend/irecv and test() calls, and the test() calls:
  // that thread serves every channel, so time it waits here (for the wire's lock) delays them all. One
  // writer (the comm's thread); atomics so that a snapshot may read them.
  std::atomic<uint64_t> post_call_ns{0};
  std::atomic<uint64_t> test_call_ns{0};
  std::atomic<uint64_t> test_calls{0};
  std::atomic<uint32_t> in_use{0};  // requests allocated and not freed (requests_in_use())
  // Its track in MEGASCALE_TRACE_FILE's timeline (TraceWriter; 0 = none), and the track's lanes in use:
  // a request posted takes the lowest free lane per sub and gives it back when freed, so requests in
  // flight together sit side by side and a comm uses as many lanes as it had in flight (the last lane
  // is shared beyond 64).
  uint32_t trace_id = 0;
  uint64_t trace_lanes_busy = 0;
  uint8_t take_trace_lane();

  CommBase(uint32_t m, Role r, uint32_t pool_size, std::vector<Stripe> s, uint64_t stripe_bytes_);
  uint32_t stripe_count() const { return static_cast<uint32_t>(stripes.size()); }
  // Stripe 0's wire and connection: the ones the stats, the timeline and the log lines name.
  DeviceWire* wire() const { return stripes[0].wire; }
  engine::ConnId conn() const { return stripes[0].conn; }
  // Stripe i's part of a message of `size` bytes (or of a receive buffer of that capacity): its offset
  // and length.
  std::pair<uint64_t, uint64_t> part(uint32_t i, uint64_t size) const;
  Request* alloc_request();
  void free_request(Request* r);
  uint32_t requests_in_use() const { return in_use.load(std::memory_order_relaxed); }

 private:
  mutable std::mutex counters_mu;
  Counters counters;
};

// Adds `d` to a counter that only the calling thread writes (others may read it).
inline void add_owned(std::atomic<uint64_t>& counter, uint64_t d) {
  counter.store(counter.load(std::memory_order_relaxed) + d, std::memory_order_relaxed);
}

// What regMr returns: host memory needs no registration with a UDP datapath; the handle records the
// range for checks and messages. GPU memory (MEGASCALE_GDR_COPY) gets a host shadow of the same size,
// which the wire reads and writes in its place: a GPU address a maps to shadow + (a - data).
struct MemHandle {
  uint32_t magic = kMrMagic;
  void* comm = nullptr;
  void* data = nullptr;
  size_t size = 0;
  int type = 0;
  char* shadow = nullptr;
};

// One UDP wire of one device (for one DSCP) with its acceptor: connections that arrive are held until
// their hello names the listen they are for, then handed to that listen's accept(). Closed connections
// finish their close handshake in the wire's thread and are released later (reap).
class DeviceWire {
 public:
  // `late_ack_window_ns`: StallWatch's window (0: no late-ACK warnings).
  DeviceWire(int dev, uint8_t dscp, uint32_t index, std::unique_ptr<wire::UdpWire> udp,
             TimeNs close_budget_ns, TimeNs late_ack_window_ns);
  ~DeviceWire();  // releases every connection left and stops the wire's thread
  DeviceWire(const DeviceWire&) = delete;
  DeviceWire& operator=(const DeviceWire&) = delete;

  wire::UdpWire& udp() { return *udp_; }
  int dev() const { return dev_; }
  uint8_t dscp() const { return dscp_; }
  uint32_t index() const { return index_; }

  // Registers a listen under `listen_id` (nonzero); false if this wire has one of that id already.
  bool add_listen(uint64_t listen_id);
  // Forgets a listen and releases connections that were routed to it but never accepted.
  void remove_listen(uint64_t listen_id);
  // Takes in new connections, reads their hellos, and returns the one routed to `listen_id` as stripe
  // `stripe` if it has arrived.
  std::optional<engine::ConnId> accept_for(uint64_t listen_id, uint16_t stripe);

  // Ends a connection the plugin no longer uses. abortive: release now (the peer gets an RST and its
  // pending requests fail); otherwise a clean close that the wire finishes in the background.
  void retire(engine::ConnId conn, bool abortive);
  // Releases connections whose close finished or ran out of time.
  void reap_closing(TimeNs now);
  // Every StallWatch window: what to warn of if many segments arrived twice (late ACKs). `last`: the
  // wire stops, the window open now ends here.
  std::optional<std::string> late_acks(TimeNs now, bool last);
  // What to warn of when lanes of this wire's connections stayed at their controller's floor while
  // ACKs arrived (engine::EndpointStats::floor_stalls) since the last call that returned one.
  std::optional<std::string> floor_stalls();

 private:
  struct PendingHello {
    engine::ConnId conn = 0;
    engine::RequestId req = 0;
    Hello hello{};  // the engine writes the peer's hello here
  };
  struct Closing {
    engine::ConnId conn = 0;
    TimeNs deadline_ns = 0;
  };
  void take_new_connections_locked();

  const int dev_;
  const uint8_t dscp_;
  const uint32_t index_;
  const TimeNs close_budget_ns_;
  std::unique_ptr<wire::UdpWire> udp_;
  std::mutex mu_;  // guards everything below (taken before the wire's own lock, never after)
  struct Routed {
    engine::ConnId conn = 0;
    uint16_t stripe = 0;
  };
  std::unordered_map<uint64_t, std::vector<Routed>> routed_;  // listen id -> connections (keys = listens)
  std::vector<std::unique_ptr<PendingHello>> hellos_;
  std::vector<Closing> closing_;
  uint64_t floor_stalls_warned_ = 0;  // EndpointStats::floor_stalls already warned of
  StallWatch stalls_;
};

// What kind of failure a connection that is no longer usable had: a wire whose thread stopped on a
// socket error is kSystem; a peer that vanished, reset or closed, kRemote (to_net_result gives NCCL's
// code).
Error classify_failure(DeviceWire& wire, engine::ConnId conn);

// Records the comm's first failure (WARN once) and returns its code.
NetResult fail_comm(CommBase* comm, NetResult code, const std::string& message);

// Frees the requests NCCL already saw done (optional receives, empty parts) once the engine finishes
// them; returns the comm's failure if one of them failed.
NetResult reap_deferred(CommBase* comm);

}  // namespace megascale::nccl
