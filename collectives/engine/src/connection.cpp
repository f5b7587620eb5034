// Connection: the application's handle, forwarding to the protocol core.
#include "megascale/engine/connection.h"

#include <utility>

#include "connection_core.h"

namespace megascale::engine {

std::string_view to_string(ConnectionState s) {
  switch (s) {
    case ConnectionState::kConnecting:
      return "connecting";
    case ConnectionState::kEstablished:
      return "established";
    case ConnectionState::kClosing:
      return "closing";
    case ConnectionState::kClosed:
      return "closed";
    case ConnectionState::kFailed:
      return "failed";
  }
  return "?";
}

Connection::Connection(std::unique_ptr<detail::ConnectionCore> core) : core_(std::move(core)) {}
Connection::~Connection() = default;

// Posts and close may give the connection something to send (a credit, a segment, a FIN) or move its
// deadline: the endpoint hears of it (conn_schedule.h). test() changes neither.
Result<RequestId> Connection::post_send(const void* data, uint64_t size_bytes, int32_t tag) {
  Result<SendRequest> request = SendRequest::make(data, size_bytes, tag, core_->virtual_payload());
  if (!request) return request.error();
  return post_send(*request);
}
Result<RequestId> Connection::post_send(const SendRequest& request) {
  Result<RequestId> r = core_->post_send(request.data(), request.size_bytes(), request.tag());
  core_->notify_schedule();
  return r;
}
Result<RequestId> Connection::post_recv(void* buf, uint64_t capacity_bytes, int32_t tag) {
  Result<RequestId> r = core_->post_recv(buf, capacity_bytes, tag);
  core_->notify_schedule();
  return r;
}
Completion Connection::test(RequestId id) {
  return core_->test(id);
}
void Connection::close(TimeNs now) {
  core_->close(now);
  core_->notify_schedule();
}
ConnectionState Connection::state() const {
  return core_->state();
}
const std::string& Connection::error() const {
  return core_->error();
}
const CloseReport& Connection::close_report() const {
  return core_->close_report();
}
ConnId Connection::id() const {
  return core_->id();
}
uint64_t Connection::remote_id() const {
  return core_->remote_id();
}
uint32_t Connection::peer() const {
  return core_->peer();
}
uint32_t Connection::segment_bytes() const {
  return core_->segment_bytes();
}
uint32_t Connection::lanes() const {
  return core_->lanes();
}
const ConnectionStats& Connection::stats() const {
  return core_->stats();
}
const LaneStats& Connection::lane_stats(uint32_t lane) const {
  return core_->lane_stats(lane);
}
uint64_t Connection::pending_requests() const {
  return core_->pending_requests();
}

}  // namespace megascale::engine
