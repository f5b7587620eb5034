// The ticket queue (tickets.h) and the tickets themselves (UdpWire::Ticket).
#include "tickets.h"

#include <algorithm>
#include <string>

namespace megascale::wire {

void UdpWire::Ticket::reset(bool send, engine::ConnId conn) {
  conn_ = conn;
  send_ = send;
  refused_ = false;
  id_ = 0;
  completion_ = engine::Completion{};
  done_.store(false, std::memory_order_relaxed);
}

void UdpWire::Ticket::refuse(const char* what, const void* buf, uint64_t size_bytes, int32_t tag) {
  refused_ = true;
  completion_ = engine::Completion{
      .done = true,
      .ok = false,
      .error = std::string(what) + ": bad arguments (tag " + std::to_string(tag) + ", " +
               (buf == nullptr ? "null buffer" : "buffer") + " of " + std::to_string(size_bytes) + " bytes)",
      .send = send_};
}

void UdpWire::Ticket::set_send(engine::ConnId conn, const engine::SendRequest& request) {
  reset(true, conn);
  request_ = request;
}

void UdpWire::Ticket::set_send(engine::ConnId conn, const void* data, uint64_t size_bytes, int32_t tag) {
  Result<engine::SendRequest> request = engine::SendRequest::make(data, size_bytes, tag);
  if (request) return set_send(conn, *request);
  reset(true, conn);
  refuse("post_send", data, size_bytes, tag);
}

void UdpWire::Ticket::set_recv(engine::ConnId conn, void* buf, uint64_t capacity_bytes, int32_t tag) {
  reset(false, conn);
  buf_ = buf;
  capacity_ = capacity_bytes;
  recv_tag_ = tag;
  if (tag < -1 || (buf == nullptr && capacity_bytes > 0)) refuse("post_recv", buf, capacity_bytes, tag);
}

namespace detail {

void TicketQueue::submit(Ticket& t) {
  if (t.refused_) {
    t.done_.store(true, std::memory_order_release);
    return;
  }
  std::lock_guard<std::mutex> lock(submit_mu_);
  submitted_.push_back(&t);
  has_submitted_.store(true, std::memory_order_seq_cst);
}

void TicketQueue::finish_ticket(Ticket& t, engine::Completion c) {
  t.completion_ = std::move(c);
  t.done_.store(true, std::memory_order_release);
}

void TicketQueue::post(engine::Endpoint& endpoint) {
  if (has_submitted_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(submit_mu_);
    queued_.insert(queued_.end(), submitted_.begin(), submitted_.end());
    submitted_.clear();
    has_submitted_.store(false, std::memory_order_relaxed);
  }
  if (queued_.empty()) return;
  // In order; a connection whose ticket met a limit posts nothing more this round (its later tickets
  // must not overtake it: a receive's tag order, a send's byte order).
  std::vector<engine::ConnId> blocked;
  size_t kept = 0;
  for (Ticket* t : queued_) {
    const auto failed = [&](std::string why, ErrorCode code = ErrorCode::kInvalidArgument) {
      finish_ticket(*t, engine::Completion{
                            .done = true, .ok = false, .error = std::move(why), .send = t->send_, .code = code});
    };
    if (std::find(blocked.begin(), blocked.end(), t->conn_) != blocked.end()) {
      queued_[kept++] = t;
      continue;
    }
    engine::Connection* c = endpoint.connection(t->conn_);
    if (c == nullptr) {
      failed("udp wire: unknown connection " + std::to_string(t->conn_));
      continue;
    }
    // The arguments were checked when the ticket was set (refused ones never get here), so a refusal on
    // a usable connection below can only be a limit.
    auto id = t->send_ ? c->post_send(t->request_) : c->post_recv(t->buf_, t->capacity_, t->recv_tag_);
    if (id) {
      t->id_ = *id;
      posted_.push_back(t);
      continue;
    }
    const engine::ConnectionState st = c->state();
    if (st == engine::ConnectionState::kConnecting || st == engine::ConnectionState::kEstablished) {
      blocked.push_back(t->conn_);  // a limit (requests outstanding, the receive ring): a later round
      queued_[kept++] = t;
    } else {
      failed(id.error().message, id.error().code);
    }
  }
  queued_.resize(kept);
}

void TicketQueue::forget(engine::ConnId conn) {
  const auto of_conn = [conn](const Ticket* t) { return t->conn_ == conn; };
  {
    std::lock_guard<std::mutex> lock(submit_mu_);
    std::erase_if(submitted_, of_conn);
  }
  std::erase_if(queued_, of_conn);
  std::erase_if(posted_, of_conn);
}

}  // namespace detail
}  // namespace megascale::wire
