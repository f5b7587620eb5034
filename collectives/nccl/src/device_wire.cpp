// DeviceWire: a device's UDP wire and its acceptor (hello routing, background closes); CommBase's
// request pool; failure classification.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "log.h"
#include "megascale/engine/endpoint.h"
#include "transport.h"

namespace megascale::nccl {

CommBase::CommBase(uint32_t m, Role r, uint32_t pool_size, std::vector<Stripe> s, uint64_t stripe_bytes_)
    : magic(m), role(r), stripes(std::move(s)), stripe_bytes(stripe_bytes_), requests(pool_size) {
  if (stripes.empty()) throw std::invalid_argument("a comm needs at least one stripe");
  const uint32_t k = static_cast<uint32_t>(stripes.size());
  const uint32_t per_request = (r == Role::kRecv ? kMaxRecvs : 1) * k;
  free_requests.reserve(pool_size);
  for (uint32_t i = pool_size; i > 0; --i) {
    requests[i - 1].comm = this;
    requests[i - 1].tickets = std::make_unique<wire::UdpWire::Ticket[]>(per_request);
    free_requests.push_back(i - 1);
  }
}

std::pair<uint64_t, uint64_t> CommBase::part(uint32_t i, uint64_t size) const {
  const uint32_t k = stripe_count();
  if (k == 1) return {0, size};
  const uint64_t off = std::min<uint64_t>(size, uint64_t{i} * stripe_bytes);
  const uint64_t len = i + 1 == k ? size - off : std::min<uint64_t>(size - off, stripe_bytes);
  return {off, len};
}

Request* CommBase::alloc_request() {
  if (free_requests.empty()) return nullptr;
  Request* r = &requests[free_requests.back()];
  free_requests.pop_back();
  in_use.store(in_use.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  r->in_use = true;
  r->optional = false;
  r->reported = false;
  r->n = 0;
  r->parts = 0;
  r->done_mask = 0;
  r->needed_mask = 0;
  r->stage = Request::kNoStage;
  r->staged_recv = false;
  r->submitted = 0;
  r->copy_queued = 0;
  r->copy_mark = 0;
  for (int j = 0; j < kMaxRecvs; ++j) {
    r->gpu[j] = nullptr;
    r->shadow[j] = nullptr;
  }
  return r;
}

void CommBase::free_request(Request* r) {
  if (trace_id != 0) {
    for (int i = 0; i < r->n; ++i) trace_lanes_busy &= ~(uint64_t{1} << r->trace_lane[i]);
  }
  r->in_use = false;
  free_requests.push_back(static_cast<uint32_t>(r - requests.data()));
  in_use.store(in_use.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
}

uint8_t CommBase::take_trace_lane() {
  const uint8_t lane =
      trace_lanes_busy == ~uint64_t{0} ? 63 : static_cast<uint8_t>(std::countr_one(trace_lanes_busy));
  trace_lanes_busy |= uint64_t{1} << lane;
  return lane;
}

DeviceWire::DeviceWire(int dev, uint8_t dscp, uint32_t index, std::unique_ptr<wire::UdpWire> udp,
                       TimeNs close_budget_ns, TimeNs late_ack_window_ns)
    : dev_(dev),
      dscp_(dscp),
      index_(index),
      close_budget_ns_(close_budget_ns),
      udp_(std::move(udp)),
      stalls_(late_ack_window_ns) {}

DeviceWire::~DeviceWire() {
  // Whatever is left goes now: peers get an RST (sent by one last progress round) instead of waiting
  // out their retry budget.
  udp_->with_endpoint([](engine::Endpoint& ep) {
    for (engine::ConnId id : ep.connection_ids()) ep.release(id);
  });
  // UdpWire::stop() can miss its wakeup: if the stop lands while the thread is in a progress round, the
  // round's receive drains the wake eventfd and the thread then sleeps with no deadline without looking
  // at the stop flag again. Keep touching the wire (with_endpoint wakes a sleeping thread) until stop()
  // has joined it. (Reported to the wire's owner; harmless once fixed there.)
  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    udp_->stop();
    stopped.store(true, std::memory_order_release);
  });
  while (!stopped.load(std::memory_order_acquire)) {
    udp_->with_endpoint([](engine::Endpoint&) {});
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  stopper.join();
  (void)udp_->progress();
}

bool DeviceWire::add_listen(uint64_t listen_id) {
  std::lock_guard<std::mutex> lock(mu_);
  return routed_.try_emplace(listen_id).second;
}

void DeviceWire::remove_listen(uint64_t listen_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = routed_.find(listen_id);
  if (it == routed_.end()) return;
  for (const Routed& r : it->second) udp_->close(r.conn, /*release=*/true);
  routed_.erase(it);
}

void DeviceWire::take_new_connections_locked() {
  while (std::optional<engine::ConnId> id = udp_->accept()) {
    auto h = std::make_unique<PendingHello>();
    h->conn = *id;
    auto req = udp_->post_recv(*id, &h->hello, sizeof(Hello), kHelloTag);
    if (!req) {
      MS_INFO(abi::kSubsysNet, "dropping an incoming connection: %s", req.error().message.c_str());
      udp_->close(*id, /*release=*/true);
      continue;
    }
    h->req = *req;
    hellos_.push_back(std::move(h));
  }
  for (size_t i = 0; i < hellos_.size();) {
    PendingHello& h = *hellos_[i];
    const engine::Completion c = udp_->test(h.conn, h.req);
    if (!c.done) {
      ++i;
      continue;
    }
    const bool valid =
        c.ok && c.bytes == sizeof(Hello) && h.hello.magic == kHelloMagic && h.hello.version == kHandleVersion;
    auto it = valid ? routed_.find(h.hello.listen_id) : routed_.end();
    if (it != routed_.end()) {
      it->second.push_back(Routed{h.conn, h.hello.stripe});
    } else {
      // A listen closed before its connection arrived, or a connection that failed during the hello.
      MS_INFO(abi::kSubsysNet, "dropping an incoming connection (%s)",
              !c.ok   ? c.error.c_str()
              : valid ? "its listen is closed"
                      : "no valid hello");
      udp_->close(h.conn, /*release=*/true);
    }
    hellos_.erase(hellos_.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

std::optional<engine::ConnId> DeviceWire::accept_for(uint64_t listen_id, uint16_t stripe) {
  std::lock_guard<std::mutex> lock(mu_);
  take_new_connections_locked();
  auto it = routed_.find(listen_id);
  if (it == routed_.end()) return std::nullopt;
  std::vector<Routed>& conns = it->second;
  for (size_t i = 0; i < conns.size(); ++i) {
    if (conns[i].stripe != stripe) continue;
    const engine::ConnId conn = conns[i].conn;
    conns.erase(conns.begin() + static_cast<std::ptrdiff_t>(i));
    return conn;
  }
  return std::nullopt;
}

void DeviceWire::retire(engine::ConnId conn, bool abortive) {
  if (abortive) {
    udp_->close(conn, /*release=*/true);
    return;
  }
  udp_->close(conn, /*release=*/false);
  std::lock_guard<std::mutex> lock(mu_);
  closing_.push_back(Closing{conn, wire::UdpWire::now() + close_budget_ns_});
}

void DeviceWire::reap_closing(TimeNs now) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < closing_.size();) {
    const engine::ConnectionState st = udp_->state(closing_[i].conn);
    if (st == engine::ConnectionState::kClosed || st == engine::ConnectionState::kFailed ||
        now >= closing_[i].deadline_ns) {
      udp_->close(closing_[i].conn, /*release=*/true);
      closing_[i] = closing_.back();
      closing_.pop_back();
    } else {
      ++i;
    }
  }
}

namespace {

// The host's steal so far (/proc/stat's first line); nullopt where it cannot be read.
std::optional<HostCpu> read_host_cpu() {
  const int fd = ::open("/proc/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[1024];  // the "cpu " line comes first; the rest of the file is not needed
  const ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  return parse_host_cpu(std::string_view(buf, static_cast<size_t>(n)), sysconf(_SC_CLK_TCK));
}

}  // namespace

std::optional<std::string> DeviceWire::late_acks(TimeNs now, bool last) {
  std::lock_guard<std::mutex> lock(mu_);
  if (last ? !stalls_.open() : !stalls_.due(now)) return std::nullopt;
  const engine::EndpointStats s = udp_->endpoint_stats();
  return stalls_.look(now, s.segments_received, s.duplicates_dropped, read_host_cpu());
}

std::optional<std::string> DeviceWire::floor_stalls() {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t stalls = udp_->endpoint_stats().floor_stalls;
  if (stalls <= floor_stalls_warned_) return std::nullopt;
  const uint64_t fresh = stalls - floor_stalls_warned_;
  floor_stalls_warned_ = stalls;
  return std::to_string(fresh) +
         " lane(s) stayed at the congestion controller's floor (its least window or rate) for over " +
         std::to_string(engine::EngineConfig{}.floor_stall_ns / kNsPerMs) +
         " ms (the plugin keeps the engine's default) while ACKs kept arriving: the connection crawls but "
         "never times out (" +
         std::to_string(stalls) +
         " so far; floor_stalls in MEGASCALE_STATS_DIR). A delay-based controller (MEGASCALE_CC) on a host "
         "too busy to send and answer promptly reads its own scheduling as fabric delay";
}

Error classify_failure(DeviceWire& wire, engine::ConnId conn) {
  const std::string thread_error = wire.udp().thread_error();
  if (!thread_error.empty())
    return make_error(ErrorCode::kSystem, "the UDP wire's thread stopped: " + thread_error);
  const std::string error = wire.udp().connection_error(conn);
  return make_error(ErrorCode::kRemote, "connection " +
                                            std::string(engine::to_string(wire.udp().state(conn))) +
                                            (error.empty() ? "" : ": " + error));
}

NetResult fail_comm(CommBase* comm, NetResult code, const std::string& message) {
  if (comm->failed == abi::kNetSuccess) {
    comm->failed = code;
    comm->failed_error = message;
    MS_WARN("%s comm %s <-> %s failed: %s", comm->role == Role::kSend ? "send" : "recv", comm->ifname.c_str(),
            comm->peer.c_str(), message.c_str());
  }
  return comm->failed;
}

}  // namespace megascale::nccl
