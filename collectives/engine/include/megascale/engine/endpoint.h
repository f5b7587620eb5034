// Endpoint: the engine's front door. It owns connections, demultiplexes arriving packets by connection
// id, runs the handshake (SYN / SYN_ACK / RST), and hands out packets to transmit and the next timer
// deadline. It never reads a clock, touches a socket or starts a thread: the caller (a wire in real
// time, the simulator in virtual time) passes `now` into every call.
//
//   auto ep = *Endpoint::create(cfg);                 // Result<std::unique_ptr<Endpoint>>
//   ConnId id = *ep->connect(now, /*peer=*/3);        // `peer`: the wire's handle for an address
//   Connection* c = ep->connection(id);
//   c->post_send(data, n, /*tag=*/0);
//   // the driving loop:
//   ep->on_packet(now, peer, bytes, len, ce_marked);  // every datagram that arrives
//   if (now >= ep->next_deadline()) ep->on_timer(now);
//   TxPacket pkt;
//   while (ep->poll_tx(now, pkt)) wire_send(pkt);      // after every call above, and after posts
//   sleep_until(min(ep->next_deadline(), next_arrival));
//   // the other side:
//   if (std::optional<ConnId> a = ep->accept()) serve(ep->connection(*a));
//
// Lifetimes: a TxPacket's payload points into an application send buffer; it stays valid until the
// next call into the engine other than poll_tx (so a batch of poll_tx calls may be sent at once, as
// sendmmsg does). Connections live until release().
//
// Peers and demultiplexing: a packet that names one of our connection ids (everything but a SYN and an
// RST about an unknown connection) goes to that connection whatever peer id it came from, because the
// remote sends each lane from its own source address (and moves it on repathing); replies always go to
// the connection's own peer. A SYN and an RST about an unknown connection name no id of ours: they
// are matched by (peer, remote connection id), so they leave with path id kHomePathId, which a wire
// must send from the address its peers connect to.

#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "megascale/common/result.h"
#include "megascale/common/units.h"
#include "megascale/engine/config.h"
#include "megascale/engine/connection.h"
#include "megascale/engine/packet.h"
#include "megascale/engine/stats.h"

namespace megascale::engine {

// The path id of packets without a lane (SYN, RSTs from the endpoint): send them from the wire's home
// address, the one peers connect to. Lane path ids are never 0.
inline constexpr uint32_t kHomePathId = 0;

// on_packet's rx_time_ns when the caller has no receive timestamp: the packet arrived `now`.
inline constexpr TimeNs kRxTimeNow = kNever;

// Where an arriving SEG's payload is copied into its posted receive buffer. By default the engine
// copies with memcpy inside on_packet. A wire may instead hand copies to other threads (the UDP wire's
// I/O threads do, so the copies of several lanes run in parallel), on two conditions: every copy is
// finished before the application can look at the engine again (test(), completions, posts: a wire
// finishes them before its progress call returns, or holds the receive back until its own copies are
// done), and the source bytes stay valid until then. `conn` and `request` name the receive the copy
// fills (its connection's id and the id post_recv returned).
class PayloadCopier {
 public:
  virtual ~PayloadCopier() = default;
  virtual void copy(uint8_t* dst, const uint8_t* src, size_t n, ConnId conn, RequestId request) = 0;
};

// One packet to transmit: header bytes (owned here) followed by payload (borrowed, may be empty).
struct TxPacket {
  alignas(8) uint8_t header[kMaxHeaderBytes];
  uint16_t header_len = 0;
  const uint8_t* payload = nullptr;  // see "Lifetimes" above
  uint32_t payload_len = 0;
  uint8_t lane = 0;      // the lane it belongs to (0 for control packets without a lane)
  uint32_t path_id = 0;  // the lane's path entropy: map it to a UDP source port / flow label;
                         // kHomePathId: no lane, send from the home address
  uint32_t peer = 0;     // where to send it
  bool ect = false;      // send ECN-capable (ECT(0)): true for SEG packets
  uint64_t conn_id = 0;  // local connection id it belongs to (0 for endpoint RSTs)
  // EngineConfig::wire_seals_payload_crc: the payload CRC is still 0; call seal_seg_payload_crc(*this)
  // before sending.
  bool payload_crc_pending = false;
  // A SEG whose payload is a send's bytes: that send's id (Connection::post_send), for a wire that
  // sends from other threads and must know when it no longer reads that send's buffer. 0 otherwise.
  RequestId request = 0;
};

// Fills in a SEG's payload CRC (and so its header CRC) from its payload; for TxPackets with
// payload_crc_pending (EngineConfig::wire_seals_payload_crc). Clears the flag.
void seal_seg_payload_crc(TxPacket& packet);

// For a wire that sends `packet` `waited_ns` after the poll_tx that produced it (a hand-over to another
// thread): an ACK's remote delay then grows by that much (add_ack_remote_delay, packet.h), so the
// peer's delay-based controller does not read this host's queueing as fabric delay. Other packets
// are left alone.
void add_tx_wait(TxPacket& packet, TimeNs waited_ns);

class Endpoint {
 public:
  // Validates `config` (validate_engine_config) and creates an endpoint with no connections.
  static Result<std::unique_ptr<Endpoint>> create(const EngineConfig& config);
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  // Starts a connection to `peer`: picks a random id, queues a SYN. The connection is usable at once
  // (posts queue until the handshake ends); it fails ("connect to peer N: no answer ..." or the
  // peer's refusal, e.g. a version mismatch) if the handshake does not complete within
  // config.connect_timeout_ns. Errors: too many connections.
  Result<ConnId> connect(TimeNs now, uint32_t peer);

  // The next connection a peer opened to us, in arrival order; nullopt if none is waiting. With
  // config.confirm_handshake (version 3) a connection comes out only once the initiator has answered
  // our SYN_ACK, so a replayed or forged SYN never does.
  std::optional<ConnId> accept();

  // One arriving datagram from `peer`, with the IP header's CE mark. Bytes are read during the call
  // only (payload is copied into receive buffers). Malformed packets are counted and dropped. A packet
  // for a known connection id is accepted from any peer (see "Peers and demultiplexing" above); one
  // for an unknown id is answered with an RST to `peer` (at most one per rst_interval_ns).
  // `rx_time_ns`: when the datagram arrived (e.g. the kernel's receive timestamp, in the clock domain
  // of `now`); values after `now` count as `now`. It is the ACK's arrival for RTT samples and the
  // segment's arrival for the delay the receiver echoes, so that fabric delay (RTT - remote delay)
  // leaves out how late either host got round to a packet. The RTO still learns from processing time.
  void on_packet(TimeNs now, uint32_t peer, const uint8_t* data, size_t len, bool ce,
                 TimeNs rx_time_ns = kRxTimeNow);

  // As on_packet, for a datagram whose payload CRC the caller has already checked: it passed
  // decode_packet(data, len, ..., verify_payload_crc = true) with kOk, on these very bytes, on another
  // thread (a wire's I/O thread checks CRCs so the thread driving the engine only copies). The header is
  // decoded and checked again; the payload is not read twice. Bytes changed after the check (fault
  // injection) must go through on_packet instead.
  void on_verified_packet(TimeNs now, uint32_t peer, const uint8_t* data, size_t len, bool ce,
                          TimeNs rx_time_ns = kRxTimeNow);

  // Datagrams sent to `peer` met a closed port: its host answered ICMP port unreachable, so nothing
  // listens at that address any more (the peer process exited or was killed). The connections whose
  // peer it is fail once such reports have kept coming for config.port_closed_fail_ns with nothing
  // heard from the peer since the first (EngineConfig). A wire reports nothing else: host and network
  // unreachable (a link that flaps, a route that moves) are left to the retry budget.
  void on_port_unreachable(TimeNs now, uint32_t peer);

  // The copier for payload of the packets that follow (nullptr: memcpy during on_packet; see
  // PayloadCopier for the caller's obligations).
  void set_payload_copier(PayloadCopier* copier);

  // Virtual payload (config.virtual_payload, for simulation): one arriving datagram of which only the
  // header, header[0..header_len), exists; a SEG's payload of `absent_payload_bytes` bytes is absent
  // (decode_packet_header_only). Otherwise as on_packet: the receive completes with the message's size
  // and nothing is written to its buffer. With virtual_payload false the packet counts as malformed and
  // is dropped (a real receive buffer would be left unfilled).
  void on_packet_header_only(TimeNs now, uint32_t peer, const uint8_t* header, size_t header_len,
                             uint32_t absent_payload_bytes, bool ce, TimeNs rx_time_ns = kRxTimeNow);

  // Fills `out` with the next packet to send at `now`, control packets first, data as lane windows
  // and pacers allow; false when nothing may leave at `now` (next_deadline() says when to look again).
  bool poll_tx(TimeNs now, TxPacket& out);

  // The earliest time on_timer (and then poll_tx) has work: a retransmission timeout, a pacer release,
  // a delayed ACK, a SYN/FIN retransmission. kNever when idle. May be <= now: call on_timer then.
  TimeNs next_deadline() const;

  // Processes every timer due at `now` (calling it early or late is harmless).
  void on_timer(TimeNs now);

  // The connection with local id `id`; nullptr if unknown or released. Stable until release(id).
  Connection* connection(ConnId id);
  const Connection* connection(ConnId id) const;

  // Forgets a connection. If it was still open, its pending requests fail ("released while open") and
  // the peer gets an RST. Its id then answers as unknown.
  void release(ConnId id);
  // As release, for a connection this side will not serve (a server busy with another client): the
  // peer's connection fails with "connection refused by peer N: <why>" (an RST of reason kRefused).
  void refuse(ConnId id, std::string_view why);

  // Ids of all connections not yet released, in creation order.
  std::vector<ConnId> connection_ids() const;
  size_t connection_count() const;

  const EndpointStats& stats() const;
  const EngineConfig& config() const;
  // Requests posted on any connection and not yet completed (ok or failed; failing a connection or
  // releasing it completes its requests). A wire polls rather than sleeps while this is non-zero.
  uint64_t requests_pending() const {
    const EndpointStats& s = stats();
    return s.requests_posted - s.sends_completed - s.receives_completed;
  }

 private:
  struct Impl;
  explicit Endpoint(std::unique_ptr<Impl> impl);
  // Hands the packet decoded into Impl::scratch (with result r) to the endpoint or its connection.
  void dispatch(TimeNs now, uint32_t peer, DecodeResult r, bool ce, TimeNs rx_time_ns);
  // Releases the connections whose handshake failed unconfirmed (Impl::settle collected them).
  void drop_unconfirmed();
  void release_with(ConnId id, RstReason reason, std::string_view rst_text, const std::string& local);
  std::unique_ptr<Impl> impl_;
};

}  // namespace megascale::engine
