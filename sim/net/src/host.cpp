#include "megascale/sim/host.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace megascale::sim {

uint16_t source_port_for_path(uint32_t path_id) {
  if (path_id == engine::kHomePathId) return kSimUdpPort;
  return static_cast<uint16_t>(49152 + path_id % 16384);
}

Host::Host(Simulation& sim, PacketPool& pool, uint32_t address, std::unique_ptr<engine::Endpoint> endpoint)
    : sim_(sim), pool_(pool), address_(address), endpoint_(std::move(endpoint)) {}

void Host::attach_nic(OutputQueue* nic) {
  nic_ = nic;
  nic_->set_idle_listener(this);
}

void Host::receive(Packet* pkt) {
  ++frames_received_;
  const TimeNs now = ns_from_ps(sim_.now());
  endpoint_->on_packet_header_only(now, pkt->flow.src_addr, pkt->header, pkt->header_len, pkt->payload_len,
                                   pkt->ce);
  pool_.release(pkt);
  service(true);
  if (listener_ != nullptr) listener_->on_host_activity(*this);
}

void Host::on_event() {
  // Events fire in time order, so the one firing is the earliest armed.
  if (!armed_.empty()) armed_.pop_back();
  service(true);
  if (listener_ != nullptr) listener_->on_host_activity(*this);
}

void Host::on_queue_idle(OutputQueue& /*queue*/) {
  service();
}

void Host::service(bool activity_follows) {
  serve_engine();
  // Every engine call on this host is followed by a service() (receive, timers, kicks after posting),
  // so completions are noticed here, in the same event as the call that made them.
  const engine::EndpointStats& st = endpoint_->stats();
  const uint64_t completions = st.sends_completed + st.receives_completed;
  if (completions == completions_seen_) return;
  completions_seen_ = completions;
  if (listener_ != nullptr) listener_->on_requests_completed(*this, activity_follows);
}

void Host::serve_engine() {
  const TimeNs now = ns_from_ps(sim_.now());
  engine::Endpoint& ep = *endpoint_;
  if (ep.next_deadline() <= now) ep.on_timer(now);
  if (nic_->idle()) {
    engine::TxPacket tx;
    if (ep.poll_tx(now, tx)) send(tx);
  }
  TimeNs deadline = ep.next_deadline();
  if (deadline == kNever) return;
  if (deadline <= now) {
    // Work is ready but the NIC is busy: its idle signal brings us back. If the NIC is free and the
    // engine still had nothing, look again one nanosecond on rather than spin at this instant.
    if (!nic_->idle()) return;
    deadline = now + 1;
  }
  arm(ps_from_ns(deadline));
}

void Host::arm(TimePs at_ps) {
  if (!armed_.empty() && armed_.back() <= at_ps) return;  // an event at or before it is pending
  armed_.push_back(at_ps);
  sim_.schedule_at(at_ps, this);
}

void Host::send(const engine::TxPacket& tx) {
  Packet* p = pool_.alloc();
  p->flow = FiveTuple{.src_addr = address_,
                      .dst_addr = tx.peer,
                      .src_port = source_port_for_path(tx.path_id),
                      .dst_port = kSimUdpPort,
                      .protocol = 17};
  p->header_len = tx.header_len;
  std::memcpy(p->header, tx.header, tx.header_len);
  p->payload_len = tx.payload_len;
  p->wire_bytes = tx.header_len + tx.payload_len + kFrameOverheadBytes;
  p->ect = tx.ect;
  p->ce = false;
  p->priority = tx.payload_len > 0 ? kPriorityData : kPriorityControl;
  ++frames_sent_;
  nic_->receive(p);
}

}  // namespace megascale::sim
