// UdpWire, the public face of the UDP wire: creation, and the calls applications make. Each takes the
// progress loop's lock for what it touches and wakes the loop when it gave it work
// (progress_loop.h); waits sleep until a round changes what they wait for.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>

#include "io.h"
#include "megascale/wire/udp.h"
#include "progress_loop.h"

namespace megascale::wire {
namespace {

std::string seconds_text(TimeNs ns) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f s", static_cast<double>(ns) / 1e9);
  return text;
}

}  // namespace

Result<std::unique_ptr<UdpWire>> UdpWire::create(const UdpConfig& given) {
  if (Status s = validate_udp_config(given); !s) return s.error();
  const UdpConfig config = detail::with_software_floors(given);
  auto endpoint = engine::Endpoint::create(config.engine);
  if (!endpoint) return endpoint.error();
  UdpCapabilities caps;
  auto io = detail::open_io(config, caps);
  if (!io) return io.error();
  return std::unique_ptr<UdpWire>(new UdpWire(
      std::make_unique<detail::ProgressLoop>(config, std::move(caps), std::move(*endpoint), std::move(*io))));
}

Result<std::unique_ptr<UdpWire>> UdpWire::create(const UdpConfig& given, std::unique_ptr<PacketPort> port) {
  if (Status s = validate_udp_config(given); !s) return s.error();
  const UdpConfig config = detail::with_software_floors(given);
  auto endpoint = engine::Endpoint::create(config.engine);
  if (!endpoint) return endpoint.error();
  auto io = detail::open_port_io(config, std::move(port));
  if (!io) return io.error();
  UdpCapabilities caps;
  caps.gso = caps.gro = caps.rx_timestamps = false;
  caps.ecn_send = caps.ecn_recv = true;  // the port carries the ECN bits (packet_port.h)
  return std::unique_ptr<UdpWire>(new UdpWire(
      std::make_unique<detail::ProgressLoop>(config, std::move(caps), std::move(*endpoint), std::move(*io))));
}

UdpWire::UdpWire(std::unique_ptr<detail::ProgressLoop> loop) : loop_(std::move(loop)) {}

UdpWire::~UdpWire() = default;

const UdpCapabilities& UdpWire::capabilities() const {
  return loop_->caps();
}

uint16_t UdpWire::local_port() const {
  const UdpCapabilities& caps = loop_->caps();
  return caps.ports.empty() ? 0 : caps.ports[0];
}

std::string UdpWire::local_address() const {
  std::lock_guard<detail::WireMutex> lock(loop_->mutex());
  const detail::Io& io = loop_->io();
  if (io.port) return io.port->local_address();
  if (io.sockets.empty()) return {};
  return detail::format_address(io.sockets[0].local);
}

std::string UdpWire::describe() const {
  std::lock_guard<detail::WireMutex> lock(loop_->mutex());
  const detail::Io& io = loop_->io();
  return io.port ? io.port->describe() : loop_->caps().describe();
}

bool UdpWire::over_port() const {
  return loop_->io().port != nullptr;  // fixed once created
}

const UdpConfig& UdpWire::config() const {
  return loop_->config();
}

engine::Endpoint& UdpWire::endpoint() {
  return loop_->endpoint();
}

bool UdpWire::running() const {
  return loop_->running();
}

UdpWire::EndpointAccess::EndpointAccess(detail::ProgressLoop& loop) : loop_(loop) {
  loop_.mutex().lock();
}

UdpWire::EndpointAccess::~EndpointAccess() {
  loop_.wake();
  loop_.mutex().unlock();
}

engine::Endpoint& UdpWire::EndpointAccess::endpoint() const {
  return loop_.endpoint();
}

Status UdpWire::progress() {
  std::lock_guard<detail::WireMutex> lock(loop_->mutex());
  return loop_->round(loop_->clock(), true, false);
}

Status UdpWire::progress(TimeNs now) {
  std::lock_guard<detail::WireMutex> lock(loop_->mutex());
  return loop_->round(now, false, false);
}

TimeNs UdpWire::next_deadline() const {
  std::lock_guard<detail::WireMutex> lock(loop_->mutex());
  return loop_->next_deadline();
}

TimeNs UdpWire::progress_time() const {
  std::lock_guard<detail::WireMutex> lock(loop_->mutex());
  return loop_->round_time();
}

void UdpWire::wait_for_io(TimeNs until) {
  if (over_port()) {
    std::lock_guard<detail::WireMutex> lock(loop_->mutex());
    if (!loop_->arm_port()) return;
  }
  loop_->wait_for_io(until);
}

Status UdpWire::start() {
  return loop_->start();
}

void UdpWire::stop() {
  loop_->stop();
}

std::string UdpWire::thread_error() const {
  std::lock_guard<detail::WireMutex> lock(loop_->mutex());
  return loop_->thread_error();
}

Result<uint32_t> UdpWire::add_peer(std::string_view host, uint16_t port) {
  if (over_port())
    return make_error(ErrorCode::kInvalidUsage,
                      "wire: a packet port's peers are given as address text, not host and port");
  auto addr = detail::resolve_address(host, port, loop_->io().family);
  if (!addr) {
    return make_error(addr.error().message + " (the wire is " + (loop_->caps().ipv6 ? "IPv6" : "IPv4") +
                      ", bound to " + loop_->config().bind_host + ")");
  }
  std::lock_guard<detail::WireMutex> lock(loop_->mutex());
  const std::optional<uint32_t> id = loop_->io().peers.intern(*addr);
  if (!id)
    return make_error(ErrorCode::kInvalidUsage,
                      "udp wire: peer table full (" + std::to_string(loop_->config().max_peers) + " peers)");
  return *id;
}

Result<uint32_t> UdpWire::add_peer(std::string_view address) {
  if (over_port()) {
    std::lock_guard<detail::WireMutex> lock(loop_->mutex());
    return loop_->io().port->add_peer(address);
  }
  auto split = detail::split_host_port(address);
  if (!split) return split.error();
  return add_peer(split->first, split->second);
}

std::string UdpWire::peer_address(uint32_t peer) const {
  std::lock_guard<detail::WireMutex> lock(loop_->mutex());
  if (loop_->io().port) return loop_->io().port->peer_address(peer);
  if (!loop_->io().peers.contains(peer)) return "(unknown peer " + std::to_string(peer) + ")";
  return detail::format_address(loop_->io().peers.address(peer));
}

Result<engine::ConnId> UdpWire::connect(std::string_view host, uint16_t port) {
  auto peer = add_peer(host, port);
  if (!peer) return peer.error();
  return connect(*peer);
}

Result<engine::ConnId> UdpWire::connect(std::string_view address) {
  auto peer = add_peer(address);
  if (!peer) return peer.error();
  return connect(*peer);
}

Result<engine::ConnId> UdpWire::connect(uint32_t peer) {
  std::lock_guard<detail::WireMutex> lock(loop_->mutex());
  if (!loop_->io().has_peer(peer))
    return make_error("udp wire: connect to unknown peer " + std::to_string(peer));
  auto id = loop_->endpoint().connect(now(), peer);
  loop_->wake();
  return id;
}

std::optional<engine::ConnId> UdpWire::accept() {
  std::lock_guard<detail::WireMutex> lock(loop_->mutex());
  return loop_->endpoint().accept();
}

Result<engine::RequestId> UdpWire::post_send(engine::ConnId conn, const void* data, uint64_t size_bytes,
                                             int32_t tag) {
  // Checked before the lock; an unknown connection is still the first error named.
  Result<engine::SendRequest> request =
      engine::SendRequest::make(data, size_bytes, tag, loop_->config().engine.virtual_payload);
  if (!request) {
    std::lock_guard<detail::WireMutex> lock(loop_->mutex());
    if (loop_->endpoint().connection(conn) == nullptr) {
      return make_error("udp wire: unknown connection " + std::to_string(conn));
    }
    return request.error();
  }
  return post_send(conn, *request);
}

Result<engine::RequestId> UdpWire::post_send(engine::ConnId conn, const engine::SendRequest& request) {
  std::lock_guard<detail::WireMutex> lock(loop_->mutex());
  engine::Connection* c = loop_->endpoint().connection(conn);
  if (c == nullptr) return make_error("udp wire: unknown connection " + std::to_string(conn));
  auto r = c->post_send(request);
  loop_->wake();
  return r;
}

Result<engine::RequestId> UdpWire::post_recv(engine::ConnId conn, void* buf, uint64_t capacity_bytes,
                                             int32_t tag) {
  std::lock_guard<detail::WireMutex> lock(loop_->mutex());
  engine::Connection* c = loop_->endpoint().connection(conn);
  if (c == nullptr) return make_error("udp wire: unknown connection " + std::to_string(conn));
  auto r = c->post_recv(buf, capacity_bytes, tag);
  loop_->wake();
  return r;
}

engine::Completion UdpWire::test(engine::ConnId conn, engine::RequestId req) {
  std::lock_guard<detail::WireMutex> lock(loop_->mutex());
  return loop_->test(conn, req);
}

void UdpWire::submit(Ticket& t) {
  loop_->submit(t);
}

bool UdpWire::help(TimeNs now) {
  return loop_->help(now);
}

void UdpWire::close(engine::ConnId conn, bool release) {
  std::unique_lock<detail::WireMutex> lock(loop_->mutex());
  loop_->tickets().forget(conn);
  if (release) {
    loop_->release(conn);  // its held-back requests go with it (the fences below cover their payloads)
  } else if (engine::Connection* c = loop_->endpoint().connection(conn)) {
    c->close(now());
  }
  loop_->wake();
  if (!loop_->io().threads.empty()) {
    // The caller may free its buffers once this returns: no I/O thread may still read one (a send) or
    // write one (a payload copy for a receive).
    const std::vector<uint64_t> sent = loop_->fence(detail::Fence::kTx);
    const std::vector<uint64_t> copied = loop_->fence(detail::Fence::kCopies);
    lock.unlock();
    loop_->wait_fence(detail::Fence::kTx, sent);
    loop_->wait_fence(detail::Fence::kCopies, copied);
  }
}

engine::ConnectionState UdpWire::state(engine::ConnId conn) {
  std::lock_guard<detail::WireMutex> lock(loop_->mutex());
  const engine::Connection* c = loop_->endpoint().connection(conn);
  return c ? c->state() : engine::ConnectionState::kClosed;
}

std::string UdpWire::connection_error(engine::ConnId conn) {
  std::lock_guard<detail::WireMutex> lock(loop_->mutex());
  const engine::Connection* c = loop_->endpoint().connection(conn);
  return c ? c->error() : "unknown connection";
}

engine::Completion UdpWire::wait(engine::ConnId conn, engine::RequestId req, TimeNs timeout_ns) {
  const TimeNs deadline = timeout_ns >= kNever - now() ? kNever : now() + timeout_ns;
  std::unique_lock<detail::WireMutex> lock(loop_->mutex());
  // A finished request whose fence does not pass by the deadline (an I/O thread that lost its CPU still
  // holds its packets or copies, and no sibling took them over) is held back again for a later test()
  // or wait(), and this wait times out: it does not block past its deadline.
  auto fence_or_hold = [&](detail::Held held) {
    lock.unlock();
    if (loop_->wait_fence(held.kind, held.fence, deadline)) return held.completion;
    lock.lock();
    loop_->hold_back(conn, req, std::move(held));
    return engine::Completion{false, false, 0, 0,
                              "timed out after " + seconds_text(timeout_ns) +
                                  ": done, but an I/O thread has not finished with its buffer"};
  };
  if (std::optional<detail::Held> held = loop_->take_held(conn, req)) {
    // An earlier test() saw it finish and holds it back for its fence: wait for that fence.
    return fence_or_hold(std::move(*held));
  }
  engine::Completion result;
  const bool done = loop_->wait_until(
      lock, timeout_ns,
      [&] {
        engine::Connection* c = loop_->endpoint().connection(conn);
        result = c ? c->test(req) : engine::Completion{true, false, 0, 0, "unknown connection"};
        return result.done;
      },
      [this, conn] { return loop_->completion_signature(conn); });
  if (!done) {
    result.done = false;
    result.error = loop_->thread_error().empty() ? "timed out after " + seconds_text(timeout_ns)
                                                 : "progress thread stopped: " + loop_->thread_error();
  } else if (!result.ok) {
    result.error += loop_->peer_suffix(conn);
  }
  if (result.done && !loop_->io().threads.empty()) {
    // The fence for its payload: out of the buffer (a send) or in it (a receive's copies).
    const detail::Fence kind = result.send ? detail::Fence::kTx : detail::Fence::kCopies;
    std::vector<uint64_t> fence = loop_->request_fence(conn, req, result);
    return fence_or_hold(detail::Held{kind, std::move(fence), std::move(result)});
  }
  return result;
}

Result<engine::ConnId> UdpWire::wait_accept(TimeNs timeout_ns) {
  std::unique_lock<detail::WireMutex> lock(loop_->mutex());
  std::optional<engine::ConnId> id;
  if (!loop_->wait_until(
          lock, timeout_ns, [&] { return (id = loop_->endpoint().accept()).has_value(); },
          [this] { return loop_->endpoint().stats().connections_accepted; })) {
    return make_error(ErrorCode::kTimeout,
                      "udp wire: no connection accepted within " + seconds_text(timeout_ns));
  }
  return *id;
}

Status UdpWire::wait_established(engine::ConnId conn, TimeNs timeout_ns) {
  std::unique_lock<detail::WireMutex> lock(loop_->mutex());
  engine::ConnectionState st = engine::ConnectionState::kConnecting;
  std::string error;
  loop_->wait_until(
      lock, timeout_ns,
      [&] {
        const engine::Connection* c = loop_->endpoint().connection(conn);
        if (c == nullptr) {
          st = engine::ConnectionState::kFailed;
          error = "unknown connection";
          return true;
        }
        st = c->state();
        error = c->error();
        return st != engine::ConnectionState::kConnecting;
      },
      [this, conn] { return loop_->completion_signature(conn); });
  if (st == engine::ConnectionState::kEstablished) return {};
  if (st == engine::ConnectionState::kConnecting) {
    return make_error(ErrorCode::kTimeout,
                      "udp wire: connection not established within " + seconds_text(timeout_ns));
  }
  return make_error(ErrorCode::kRemote, "udp wire: connection " + std::string(engine::to_string(st)) +
                                            (error.empty() ? "" : ": " + error) + loop_->peer_suffix(conn));
}

Status UdpWire::wait_closed(engine::ConnId conn, TimeNs timeout_ns) {
  std::unique_lock<detail::WireMutex> lock(loop_->mutex());
  const bool done = loop_->wait_until(
      lock, timeout_ns,
      [&] {
        const engine::Connection* c = loop_->endpoint().connection(conn);
        return c == nullptr || c->state() == engine::ConnectionState::kClosed ||
               c->state() == engine::ConnectionState::kFailed;
      },
      [this, conn] { return loop_->completion_signature(conn); });
  if (!done)
    return make_error(ErrorCode::kTimeout,
                      "udp wire: connection not closed within " + seconds_text(timeout_ns));
  return {};
}

UdpWireStats UdpWire::stats() const {
  std::lock_guard<detail::WireMutex> lock(loop_->mutex());
  return loop_->stats();
}

engine::EndpointStats UdpWire::endpoint_stats() const {
  std::lock_guard<detail::WireMutex> lock(loop_->mutex());
  return loop_->endpoint().stats();
}

uint64_t UdpWire::datagrams_moved() const {
  std::lock_guard<detail::WireMutex> lock(loop_->mutex());
  return loop_->datagrams_moved();
}

bool UdpWire::requests_held() const {
  std::lock_guard<detail::WireMutex> lock(loop_->mutex());
  return !loop_->io().held.empty();
}

bool UdpWire::pause_io_thread(uint32_t index, bool paused) {
  std::lock_guard<detail::WireMutex> lock(loop_->mutex());
  if (index >= loop_->io().threads.size()) return false;
  loop_->io().threads[index]->pause(paused);
  return true;
}

}  // namespace megascale::wire
