// Endpoint: connection table, demultiplexing, SYN handling and endpoint-level RSTs.
#include "megascale/engine/endpoint.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <string>
#include <utility>

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
  size_t rr = 0;
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

  void add_entry(std::unique_ptr<Connection> conn, ConnectionCore* core) {
    const bool moves = conns.size() == conns.capacity();
    conns.push_back({std::move(conn), core});
    if (moves) {
      reindex();
    } else {
      table.insert(core->id(), &conns.back());
    }
  }

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
        return;
      }
    }
    const uint16_t lo = std::max(hs.version_min, im.cfg.version_min);
    const uint16_t hi = std::min(hs.version_max, im.cfg.version_max);
    if (lo > hi || hi != kVersion) {
      ++im.stats.version_mismatches;
      const std::string text =
          lo > hi ? "version mismatch: acceptor speaks " + std::to_string(im.cfg.version_min) + ".." +
                        std::to_string(im.cfg.version_max) + ", initiator speaks " +
                        std::to_string(hs.version_min) + ".." + std::to_string(hs.version_max)
                  : "version mismatch: the highest common version " + std::to_string(hi) +
                        " is not implemented (this engine implements " + std::to_string(kVersion) + ")";
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
    im.accept_queue.push_back(id);
    ++im.stats.connections_accepted;
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
      e->core->set_payload_copier(im.copier);
      e->core->on_packet(now, rx_time_ns, pkt, ce, r);
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
  const size_t n = im.conns.size();
  for (size_t k = 0; k < n; ++k) {
    size_t i = im.rr + k;
    if (i >= n) i -= n;
    if (im.conns[i].core->poll_tx(now, out)) {
      im.rr = i + 1 >= n ? 0 : i + 1;
      ++im.stats.packets_sent;
      return true;
    }
  }
  return false;
}

TimeNs Endpoint::next_deadline() const {
  TimeNs t = kNever;
  for (const Impl::Entry& e : impl_->conns) t = std::min(t, e.core->next_deadline());
  return t;
}

void Endpoint::on_timer(TimeNs now) {
  for (Impl::Entry& e : impl_->conns) {
    if (e.core->next_deadline() <= now) e.core->on_timer(now);
  }
}

Connection* Endpoint::connection(ConnId id) {
  Impl::Entry* e = impl_->find(id);
  return e == nullptr ? nullptr : e->conn.get();
}

const Connection* Endpoint::connection(ConnId id) const {
  const Impl::Entry* e = impl_->find(id);
  return e == nullptr ? nullptr : e->conn.get();
}

void Endpoint::release(ConnId id) {
  Impl& im = *impl_;
  Impl::Entry* e = im.find(id);
  if (e == nullptr) return;
  ConnectionCore& core = *e->core;
  if (core.is_open()) {
    if (core.remote_id() != 0) {
      im.queue_rst(core.peer(), core.remote_id(), id, RstReason::kAborted,
                   "peer released the connection while open");
    }
    core.fail("connection released while open");
  }
  const auto pos = static_cast<size_t>(e - im.conns.data());
  im.conns.erase(im.conns.begin() + static_cast<std::ptrdiff_t>(pos));
  im.reindex();
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
