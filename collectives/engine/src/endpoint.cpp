// Endpoint: connection table, demultiplexing, SYN handling and endpoint-level RSTs.
#include "megascale/engine/endpoint.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <string>
#include <utility>

#include "conn_schedule.h"
#include "conn_table.h"
#include "connection_core.h"
#include "megascale/engine/crc32c.h"
#include "ring.h"

namespace megascale::engine {

using detail::ConnectionCore;

namespace {

struct PendingRst {
  uint32_t peer = 0;
  uint64_t dst_conn_id = 0;
  uint64_t ref_conn_id = 0;
  RstReason reason = RstReason::kUnknownConnection;
  uint16_t text_len = 0;
  char text[kMaxRstText] = {};
};

constexpr uint32_t kRstQueue = 64;

}  // namespace

struct Endpoint::Impl {
  struct Entry {
    std::unique_ptr<Connection> conn;
    ConnectionCore* core = nullptr;
  };

  EngineConfig cfg;
  uint64_t rng = 0;
  std::vector<Entry> conns;  // creation order
  detail::ConnTable<Entry> table;
  std::deque<ConnId> accept_queue;
  detail::Ring<PendingRst> rsts{kRstQueue};
  bool sent_unknown_rst = false;
  TimeNs last_unknown_rst_ns = 0;
  size_t rr = 0;  // poll_tx serves the first ready connection at or after this index
  // Ready set and deadline heap over the connections' indices (conn_schedule.h): every call costs
  // O(log n) per connection with work, not a scan of all n.
  detail::Schedule schedule;
  std::vector<uint32_t> due;  // on_timer's scratch: the indices whose deadline came
  // Up to kScheduleFrom connections a scan is cheaper than keeping the schedule (the engine benchmark,
  // one connection: the heap updates cost 8-16%); beyond it the schedule is built and kept. Both serve
  // connections in the same order, so the packets do not depend on which one runs.
  static constexpr size_t kScheduleFrom = 16;
  bool scheduled = false;
  EndpointStats stats;
  Packet scratch;  // decode target, reused: a Packet is ~400 bytes
  PayloadCopier* copier = nullptr;

  ConnId new_id() {
    for (;;) {
      const uint64_t id = detail::splitmix64(rng);
      if (id != 0 && id != ~uint64_t{0} && table.find(id) == nullptr) return id;
    }
  }

  Entry* find(ConnId id) const { return table.find(id); }

  void queue_rst(uint32_t peer, uint64_t dst, uint64_t ref, RstReason reason, const std::string& text) {
    // grow_connection_state: the queue starts at one entry and doubles up to kRstQueue.
    if (rsts.full() && rsts.capacity() < kRstQueue) rsts.grow();
    if (rsts.full()) {
      ++stats.rsts_rate_limited;
      return;
    }
    PendingRst r;
    r.peer = peer;
    r.dst_conn_id = dst;
    r.ref_conn_id = ref;
    r.reason = reason;
    r.text_len = static_cast<uint16_t>(std::min(text.size(), kMaxRstText));
    std::memcpy(r.text, text.data(), r.text_len);
    rsts.push(r);
  }

  // The caller touches the new entry once its core is set up (it has a SYN or SYN_ACK to send).
  void add_entry(std::unique_ptr<Connection> conn, ConnectionCore* core) {
    const bool moves = conns.size() == conns.capacity();
    conns.push_back({std::move(conn), core});
    if (moves) {
      reindex();
    } else {
      table.insert(core->id(), &conns.back());
    }
    if (scheduled) {
      if (moves) schedule.resize(conns.capacity());
      core->attach_schedule(&schedule, static_cast<uint32_t>(conns.size() - 1));
    } else if (conns.size() > kScheduleFrom) {
      rebuild_schedule();
    }
  }

  size_t index_of(const Entry* e) const { return static_cast<size_t>(e - conns.data()); }

  // Connection i may have something to send and its deadline may have moved.
  void touch(size_t i) {
    if (scheduled) schedule.touch(static_cast<uint32_t>(i), conns[i].core->next_deadline());
  }

  // After release() moved the entries: indices change, so the schedule is rebuilt with every connection
  // ready (one poll_tx finds out which have nothing to send).
  void rebuild_schedule() {
    scheduled = conns.size() > kScheduleFrom;
    if (!scheduled) {
      for (Entry& e : conns) e.core->attach_schedule(nullptr, 0);
      return;
    }
    schedule.deadlines.clear();
    schedule.resize(conns.capacity());
    schedule.ready.set_all(conns.size());
    for (size_t i = 0; i < conns.size(); ++i) {
      conns[i].core->attach_schedule(&schedule, static_cast<uint32_t>(i));
      schedule.deadlines.update(static_cast<uint32_t>(i), conns[i].core->next_deadline());
    }
  }

  // After a packet or timer on connection `e`: a handshake just confirmed hands it to accept(); one that
  // failed before it was confirmed (never seen by the application) is dropped.
  void settle(Entry* e) {
    ConnectionCore& core = *e->core;
    if (core.take_confirmed()) {
      accept_queue.push_back(core.id());
      ++stats.connections_accepted;
    } else if (core.awaiting_confirm() && core.state() == ConnectionState::kFailed) {
      drop.push_back(core.id());
    }
  }
  std::vector<ConnId> drop;  // settle()'s output: connections to release

  // Rebuilds the table after the vector of entries moved (insertions may reallocate it).
  void reindex() {
    table = detail::ConnTable<Entry>{};
    for (Entry& e : conns) table.insert(e.core->id(), &e);
  }
};

Result<std::unique_ptr<Endpoint>> Endpoint::create(const EngineConfig& config) {
  if (Status s = validate_engine_config(config); !s) return s.error();
  auto impl = std::make_unique<Impl>();
  impl->cfg = config;
  impl->rng = config.seed;
  impl->conns.reserve(64);
  if (config.grow_connection_state) impl->rsts = detail::Ring<PendingRst>(1);  // 10 KB whole otherwise
  return std::unique_ptr<Endpoint>(new Endpoint(std::move(impl)));
}

void seal_seg_payload_crc(TxPacket& packet) {
  if (!packet.payload_crc_pending) return;
  set_seg_payload_crc(packet.header, crc32c(packet.payload, packet.payload_len));
  packet.payload_crc_pending = false;
}

void add_tx_wait(TxPacket& packet, TimeNs waited_ns) {
  if (waited_ns <= 0) return;
  add_ack_remote_delay(packet.header, packet.header_len,
                       static_cast<uint32_t>(std::min<TimeNs>(waited_ns, 0xFFFFFFFFLL)));
}

Endpoint::Endpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Endpoint::~Endpoint() = default;

Result<ConnId> Endpoint::connect(TimeNs now, uint32_t peer) {
  Impl& im = *impl_;
  if (im.conns.size() >= im.cfg.max_connections) {
    return make_error("connect: " + std::to_string(im.conns.size()) + " connections open (max_connections)");
  }
  const ConnId id = im.new_id();
  auto core =
      std::make_unique<ConnectionCore>(im.cfg, id, peer, detail::splitmix64(im.rng), true, now, &im.stats);
  ConnectionCore* raw = core.get();
  im.add_entry(std::unique_ptr<Connection>(new Connection(std::move(core))), raw);
  im.touch(im.conns.size() - 1);  // its SYN
  ++im.stats.connections_initiated;
  return id;
}

std::optional<ConnId> Endpoint::accept() {
  Impl& im = *impl_;
  while (!im.accept_queue.empty()) {
    const ConnId id = im.accept_queue.front();
    im.accept_queue.pop_front();
    if (im.find(id) != nullptr) return id;  // skip connections released before being accepted
  }
  return std::nullopt;
}

void Endpoint::on_packet(TimeNs now, uint32_t peer, const uint8_t* data, size_t len, bool ce,
                         TimeNs rx_time_ns) {
  Impl& im = *impl_;
  ++im.stats.packets_received;
  Packet& pkt = im.scratch;
  // Virtual payload: payload bytes, if any came, are not the sender's (it computed no CRC).
  const DecodeResult r = decode_packet(data, len, pkt, !im.cfg.virtual_payload);
  if (r != DecodeResult::kOk && r != DecodeResult::kBadPayloadCrc) {
    ++im.stats.malformed_dropped;
    return;
  }
  dispatch(now, peer, r, ce, rx_time_ns);
}

void Endpoint::set_payload_copier(PayloadCopier* copier) {
  impl_->copier = copier;
}

void Endpoint::on_verified_packet(TimeNs now, uint32_t peer, const uint8_t* data, size_t len, bool ce,
                                  TimeNs rx_time_ns) {
  Impl& im = *impl_;
  ++im.stats.packets_received;
  Packet& pkt = im.scratch;
  const DecodeResult r = decode_packet(data, len, pkt, false);
  if (r != DecodeResult::kOk) {
    ++im.stats.malformed_dropped;
    return;
  }
  dispatch(now, peer, r, ce, rx_time_ns);
}

void Endpoint::on_packet_header_only(TimeNs now, uint32_t peer, const uint8_t* header, size_t header_len,
                                     uint32_t absent_payload_bytes, bool ce, TimeNs rx_time_ns) {
  Impl& im = *impl_;
  ++im.stats.packets_received;
  if (!im.cfg.virtual_payload) {  // a real receive buffer would be left unfilled
    ++im.stats.malformed_dropped;
    return;
  }
  const DecodeResult r = decode_packet_header_only(header, header_len, absent_payload_bytes, im.scratch);
  if (r != DecodeResult::kOk) {
    ++im.stats.malformed_dropped;
    return;
  }
  dispatch(now, peer, r, ce, rx_time_ns);
}

void Endpoint::dispatch(TimeNs now, uint32_t peer, DecodeResult r, bool ce, TimeNs rx_time_ns) {
  Impl& im = *impl_;
  const Packet& pkt = im.scratch;
  const PacketType type = pkt.hdr.type;
  if (type == PacketType::kSyn) {
    ++im.stats.syns_received;
    const HandshakeBody& hs = pkt.handshake;
    for (Impl::Entry& e : im.conns) {
      if (!e.core->initiator() && e.core->peer() == peer && e.core->remote_id() == hs.src_conn_id) {
        e.core->resend_syn_ack();  // our SYN_ACK was lost
        im.touch(im.index_of(&e));
        return;
      }
    }
    const uint16_t lo = std::max(hs.version_min, im.cfg.version_min);
    const uint16_t hi = std::min(hs.version_max, im.cfg.version_max);
    if (lo > hi || !version_implemented(hi)) {
      ++im.stats.version_mismatches;
      const std::string text =
          lo > hi ? "version mismatch: acceptor speaks " + std::to_string(im.cfg.version_min) + ".." +
                        std::to_string(im.cfg.version_max) + ", initiator speaks " +
                        std::to_string(hs.version_min) + ".." + std::to_string(hs.version_max)
                  : "version mismatch: the highest common version " + std::to_string(hi) +
                        " is not implemented (this engine implements " + std::to_string(kVersionMin) + ".." +
                        std::to_string(kVersion) + ")";
      im.queue_rst(peer, hs.src_conn_id, hs.src_conn_id, RstReason::kVersionMismatch, text);
      return;
    }
    if (Status s = ConnectionCore::validate_handshake(hs); !s) {
      im.queue_rst(peer, hs.src_conn_id, hs.src_conn_id, RstReason::kProtocolError, s.error().message);
      return;
    }
    if (!im.cfg.accept_connections || im.conns.size() >= im.cfg.max_connections) {
      im.queue_rst(peer, hs.src_conn_id, hs.src_conn_id, RstReason::kRefused,
                   im.cfg.accept_connections ? "too many connections" : "not accepting connections");
      return;
    }
    const ConnId id = im.new_id();
    auto core =
        std::make_unique<ConnectionCore>(im.cfg, id, peer, detail::splitmix64(im.rng), false, now, &im.stats);
    ConnectionCore* raw = core.get();
    im.add_entry(std::unique_ptr<Connection>(new Connection(std::move(core))), raw);
    raw->accept_syn(now, hs, hi);
    im.touch(im.conns.size() - 1);   // its SYN_ACK
    if (!raw->awaiting_confirm()) {  // else at the confirmation (settle)
      im.accept_queue.push_back(id);
      ++im.stats.connections_accepted;
    }
    return;
  }

  // Every other packet names our connection id, and that id alone selects the connection: the peer
  // sends each lane from its own source address (a path id is a UDP source port), so one connection's
  // packets come from several peer ids, which change when a lane repaths. The 64-bit random id is the
  // demultiplexing key (as QUIC's connection id is); replies still go to the connection's own peer.
  Impl::Entry* e = nullptr;
  if (type == PacketType::kRst) {
    ++im.stats.rsts_received;
    if (pkt.hdr.dst_conn_id != 0) {
      e = im.find(pkt.hdr.dst_conn_id);
    } else {
      // "Unknown connection": it names the id we sent to, our remote id, and not ours, so it is matched
      // by (peer, remote id); the peer sends it without a lane (path id 0), from the address we know.
      for (Impl::Entry& c : im.conns) {
        if (c.core->peer() == peer && c.core->remote_id() == pkt.rst.ref_conn_id) e = &c;
      }
    }
    if (e != nullptr) {
      e->core->set_payload_copier(im.copier);
      e->core->on_packet(now, rx_time_ns, pkt, ce, r);
      im.touch(im.index_of(e));
      im.settle(e);
      drop_unconfirmed();
    }
    return;  // never answer an RST with an RST
  }
  e = im.find(pkt.hdr.dst_conn_id);
  if (e == nullptr) {
    ++im.stats.unknown_connection;
    if (im.sent_unknown_rst && now - im.last_unknown_rst_ns < im.cfg.rst_interval_ns) {
      ++im.stats.rsts_rate_limited;
      return;
    }
    im.sent_unknown_rst = true;
    im.last_unknown_rst_ns = now;
    im.queue_rst(peer, 0, pkt.hdr.dst_conn_id, RstReason::kUnknownConnection, "unknown connection");
    return;
  }
  e->core->set_payload_copier(im.copier);
  e->core->on_packet(now, rx_time_ns, pkt, ce, r);
  im.touch(im.index_of(e));
  im.settle(e);
  drop_unconfirmed();
}

void Endpoint::drop_unconfirmed() {
  Impl& im = *impl_;
  if (im.drop.empty()) return;
  // release() moves entries: take the ids first.
  std::vector<ConnId> ids;
  ids.swap(im.drop);
  for (const ConnId id : ids) release(id);
  ids.clear();
  ids.swap(im.drop);  // keep the capacity
}

bool Endpoint::poll_tx(TimeNs now, TxPacket& out) {
  Impl& im = *impl_;
  if (!im.rsts.empty()) {
    const PendingRst& r = im.rsts.front();
    RstBody body;
    body.reason = r.reason;
    body.ref_conn_id = r.ref_conn_id;
    body.text = r.text;
    body.text_len = r.text_len;
    out.header_len =
        static_cast<uint16_t>(encode_rst(CommonHeader{.version = static_cast<uint8_t>(im.cfg.version_max),
                                                      .type = PacketType::kRst,
                                                      .lane = 0,
                                                      .flags = 0,
                                                      .dst_conn_id = r.dst_conn_id},
                                         body, out.header));
    out.payload = nullptr;
    out.payload_len = 0;
    out.payload_crc_pending = false;
    out.lane = 0;
    out.path_id = kHomePathId;
    out.peer = r.peer;
    out.ect = false;
    out.conn_id = 0;
    im.rsts.pop();
    ++im.stats.rsts_sent;
    ++im.stats.packets_sent;
    return true;
  }
  if (!im.scheduled) {
    const size_t n = im.conns.size();
    for (size_t k = 0; k < n; ++k) {
      size_t i = im.rr + k;
      if (i >= n) i -= n;
      ++im.stats.connections_polled;
      if (im.conns[i].core->poll_tx(now, out)) {
        im.rr = i + 1 >= n ? 0 : i + 1;
        ++im.stats.packets_sent;
        return true;
      }
    }
    return false;
  }
  // A connection whose deadline has come but whose on_timer has not run yet may have a packet due at
  // `now` (a delayed ACK, a pacer release): it is a candidate too, as when every connection was polled.
  detail::Schedule& sched = im.schedule;
  sched.deadlines.for_each_due(now, [&](uint32_t i) { sched.ready.set(i); });
  // Round-robin in creation order from rr among the ready connections: the order in which a scan of all
  // connections from rr would have found them. A connection with nothing to send leaves the set until
  // something happens to it.
  // One pass over [rr, n) then [0, rr); a connection that asks to be polled again (poll_again) stays.
  const size_t n = im.conns.size();
  size_t cursor = im.rr;
  bool wrapped = false;
  for (;;) {
    const size_t i = sched.ready.find_from(cursor);
    if (i == detail::ReadySet::kNone || (wrapped && i >= im.rr)) {
      if (wrapped || im.rr == 0) return false;
      wrapped = true;
      cursor = 0;
      continue;
    }
    ConnectionCore& core = *im.conns[i].core;
    ++im.stats.connections_polled;
    const bool sent = core.poll_tx(now, out);
    sched.deadlines.update(static_cast<uint32_t>(i), core.next_deadline());  // sending arms timers
    if (sent) {
      im.rr = i + 1 >= n ? 0 : i + 1;
      ++im.stats.packets_sent;
      return true;
    }
    if (!core.poll_again()) sched.ready.clear(i);
    cursor = i + 1;
  }
}

TimeNs Endpoint::next_deadline() const {
  if (!impl_->scheduled) {
    TimeNs t = kNever;
    for (const Impl::Entry& e : impl_->conns) t = std::min(t, e.core->next_deadline());
    return t;
  }
  return impl_->schedule.deadlines.top_time();
}

void Endpoint::on_timer(TimeNs now) {
  Impl& im = *impl_;
  if (!im.scheduled) {
    for (Impl::Entry& e : im.conns) {
      if (e.core->next_deadline() <= now) {
        e.core->on_timer(now);
        im.settle(&e);
      }
    }
    drop_unconfirmed();
    return;
  }
  detail::DeadlineHeap& heap = im.schedule.deadlines;
  im.due.clear();
  while (!heap.empty() && heap.top_time() <= now) {
    im.due.push_back(heap.top_index());
    heap.pop();
  }
  // In creation order, as a scan did (connections do not affect each other's timers; this keeps the
  // order of anything they count on the endpoint).
  std::sort(im.due.begin(), im.due.end());
  for (const uint32_t i : im.due) {
    im.conns[i].core->on_timer(now);
    im.touch(i);
    im.settle(&im.conns[i]);
  }
  drop_unconfirmed();
}

Connection* Endpoint::connection(ConnId id) {
  Impl::Entry* e = impl_->find(id);
  return e == nullptr ? nullptr : e->conn.get();
}

const Connection* Endpoint::connection(ConnId id) const {
  const Impl::Entry* e = impl_->find(id);
  return e == nullptr ? nullptr : e->conn.get();
}

void Endpoint::on_port_unreachable(TimeNs now, uint32_t peer) {
  Impl& im = *impl_;
  ++im.stats.port_unreachable_reports;
  // Rare (one per datagram sent to a closed port): a scan of the connections is fine.
  for (size_t i = 0; i < im.conns.size(); ++i) {
    ConnectionCore& core = *im.conns[i].core;
    if (core.peer() != peer || !core.is_open()) continue;
    core.on_port_unreachable(now);
    im.touch(i);
  }
}

void Endpoint::release(ConnId id) {
  release_with(id, RstReason::kAborted, "peer released the connection while open",
               "connection released while open");
}

void Endpoint::refuse(ConnId id, std::string_view why) {
  release_with(id, RstReason::kRefused, why, "connection refused here: " + std::string(why));
}

void Endpoint::release_with(ConnId id, RstReason reason, std::string_view rst_text,
                            const std::string& local) {
  Impl& im = *impl_;
  Impl::Entry* e = im.find(id);
  if (e == nullptr) return;
  ConnectionCore& core = *e->core;
  if (core.is_open()) {
    if (core.remote_id() != 0) im.queue_rst(core.peer(), core.remote_id(), id, reason, std::string(rst_text));
    core.fail(local, ErrorCode::kInvalidUsage);  // the application let it go with requests pending
  }
  const auto pos = static_cast<size_t>(e - im.conns.data());
  im.conns.erase(im.conns.begin() + static_cast<std::ptrdiff_t>(pos));
  im.reindex();
  im.rebuild_schedule();
  if (im.rr >= im.conns.size()) im.rr = 0;
}

std::vector<ConnId> Endpoint::connection_ids() const {
  std::vector<ConnId> ids;
  ids.reserve(impl_->conns.size());
  for (const Impl::Entry& e : impl_->conns) ids.push_back(e.core->id());
  return ids;
}

size_t Endpoint::connection_count() const {
  return impl_->conns.size();
}
const EndpointStats& Endpoint::stats() const {
  return impl_->stats;
}
const EngineConfig& Endpoint::config() const {
  return impl_->cfg;
}

}  // namespace megascale::engine
