// EngineConfig: every knob of the transport engine, with units in the names and documented defaults.
//
//   EngineConfig cfg;
//   cfg.cc = *cc::builtin_cc_config("hybrid");   // congestion control preset (congestion/config.h)
//   cfg.lanes = 4;
//   cfg.segment_bytes = 4096;
//   cfg.seed = 42;                               // connection ids and path ids derive from it
//   if (Status s = validate_engine_config(cfg); !s) { report(s.error().message); }
//   auto ep = Endpoint::create(cfg);
#pragma once

#include <cstdint>

#include "megascale/common/result.h"
#include "megascale/common/units.h"
#include "megascale/congestion/params.h"
#include "megascale/engine/packet.h"

namespace megascale::engine {

inline constexpr uint32_t kMaxLanes = 64;

struct EngineConfig {
  // Congestion control of every lane (controller kind and parameters), the RTO parameters (cc.rto:
  // floor, ceiling, backoff, retry budget) and the pacer burst. cc.flow.mss_bytes is overridden by
  // the negotiated segment size; cc.flow.line_rate_bps is the NIC rate each lane may reach.
  cc::CcConfig cc;

  uint32_t segment_bytes = 4096;     // payload bytes per DATA segment (<= kMaxSegmentPayload); the
                                     // smaller of both peers' values is used
  uint32_t lanes = 4;                // lanes per connection, 1..kMaxLanes, each with its own controller
  uint32_t window_segments = 4096;   // most unacknowledged segments per connection, and the receiver's
                                     // reorder window; power of two; the smaller of both peers' is used
  uint32_t max_posted_recvs = 256;   // receives outstanding at once per connection (credit slots)
  uint32_t max_posted_sends = 1024;  // sends outstanding at once per connection

  // Loss detection.
  uint32_t dupthresh = 3;  // a hole is lost once a segment this many seqs above it is SACKed
  TimeNs reo_wnd_ns = 0;   // RACK reordering window; 0 = min RTT / 4
  // Tail-loss probe (RACK-TLP, RFC 8985 §7). When the last segments of a flight are lost, no later
  // segment reveals the hole and only the RTO would, and a wire's RTO floor (the UDP wire's plugin
  // uses 5 ms against host stalls) makes that slow. With this on, a connection that has segments
  // unacknowledged and has had no ACK of new data for the probe timeout, PTO = 2 * SRTT + ack_delay_ns
  // (when that comes before the RTO), sends a probe: the newest unacknowledged segment of each lane
  // again, on that lane, ignoring window and pacer, with no congestion response, once until an ACK
  // makes progress. Its ACK echoes the probe's send time, and RACK takes a delivery whose echo names
  // the latest copy of a retransmitted segment as that copy's, on its lane (without this, retransmitted
  // copies never advance RACK): the segments sent on that lane before it and still missing are lost
  // and fast-retransmitted. Off by default: the simulator's published results predate it.
  bool tail_probe = false;
  // The probe timeout is at least this (a host whose ACKs stall for a few SRTTs at a time would
  // otherwise probe at every stall, each probe a duplicate). 0: 2 * SRTT + ack_delay_ns alone.
  TimeNs tail_probe_min_ns = 0;
  // A lane takes a new path id at every this-many-th consecutive RTO on it (0 = never) ...
  uint32_t repath_rto_threshold = 3;
  // ... or after its RTT stayed above its controller's delay target, with ECN marks, for this many
  // consecutive RTTs (0 = never).
  uint32_t repath_delay_rtts = 32;
  // A lane whose controller stays at its floor (Controller::at_floor: Swift's min_cwnd, DCQCN's
  // min_rate) for this long while ACKs keep arriving is starved, not congested: counted once per such
  // stay in ConnectionStats::floor_stalls (the plugin WARNs on it). 0 = never counted.
  TimeNs floor_stall_ns = 3'000'000'000;

  // ACKs: one per ack_every_segments received segments, and no segment waits longer than
  // ack_delay_ns for its ACK. Out-of-order, duplicate and last-of-message segments are acked at once.
  uint32_t ack_every_segments = 1;
  TimeNs ack_delay_ns = 0;

  // Liveness: a connection with pending requests that has heard nothing from its peer for this long
  // (and has nothing unacknowledged, which the RTO covers) sends a keepalive probe, retried on the RTO
  // schedule; when cc.rto's retry budget is spent the connection fails ("peer unreachable"), so a
  // receive waiting on a vanished peer errors out instead of hanging.
  TimeNs keepalive_interval_ns = 1'000'000'000;

  // A closed port: the wire reports that datagrams to a connection's peer met ICMP port unreachable
  // (Endpoint::on_port_unreachable): the peer's host is up and nothing listens at that address any
  // more, as when the peer process exited or was killed. When such reports keep coming for this long
  // with nothing heard from the peer since the first, the connection fails at once ("peer N gone: its
  // port is closed ...") instead of after the retry budget. One report alone never fails it (ICMP can
  // be forged, and a firewall's reject rule may come and go). When the grace after the first report
  // ends with nothing heard, the connection sends the peer a probe (an ACK asking for an answer), so
  // the confirming report comes then and not at a retransmission that backoff has put up to
  // cc.rto.max_rto_ns later. 0 = ignore the reports.
  TimeNs port_closed_fail_ns = 200'000'000;

  // Connection setup: SYN retransmitted with cc.rto's initial timeout and backoff until this budget
  // is spent, then connect fails ("connect to peer N: no answer ...").
  TimeNs connect_timeout_ns = 10'000'000'000;
  TimeNs rst_interval_ns = 1'000'000;  // at most one RST per interval for unknown connections
  bool accept_connections = true;      // answer SYNs (else RST "refused")
  uint32_t max_connections = 65536;

  // Protocol versions this endpoint advertises (packet.h: the engine implements kVersionMin..kVersion,
  // 1..3). A connection speaks the highest version in both ends' ranges; a handshake whose ranges do not
  // overlap fails with "version mismatch", and so does one that agrees on a version this engine does
  // not implement. version_max = 1 makes this end speak version 1 with everyone.
  uint16_t version_min = kVersionMin;
  uint16_t version_max = kVersion;

  // CRC32C over every SEG payload this end sends (the receiver checks it, and drops and does not
  // acknowledge a payload that fails). false: DATA segments leave flagged kFlagNoPayloadCrc, without the
  // CRC, on connections that speak version 2, saving a pass over every payload byte at each end (the
  // largest cost of the UDP wire's I/O threads above the kernel's; figures in docs/PERFORMANCE.md); the
  // header CRC still protects every header, and the network's own checks (UDP checksum, Ethernet FCS)
  // the payload.
  // On a version-1 connection payloads keep their CRC. The receiver checks whatever carries a CRC,
  // whatever its own setting, and counts the segments that came without (segments_unchecked).
  bool payload_crc = true;

  // Seeds the PRNG for connection ids, path ids and RTO jitter: same seed, same inputs -> same packets.
  // The engine reads no entropy itself: a driver on a real network passes a random seed per process
  // (wire::random_engine_seed(): getrandom mixed with pid and time), because connection ids are the
  // handshake's nonces (README, "Handshake"): a fixed seed gives every run the same ids, so datagrams
  // captured from one run are valid in the next. Fixed seeds are for the simulator and tests.
  uint64_t seed = 1;

  // Version 3 handshake (packet.h, kFlagConfirm): an accepted connection reaches accept() only once a
  // packet from the initiator names this side's new connection id, which the initiator learns from the
  // SYN_ACK alone; a SYN replayed from an earlier run (or sent with a forged source address) never gets
  // there. The SYN_ACK is retransmitted on the handshake's RTO schedule and the connection is dropped,
  // unseen by the application, after connect_timeout_ns (EndpointStats::handshakes_unconfirmed).
  // Off: accept() gets a connection at its SYN, as versions 1 and 2 do (the simulator, whose hosts
  // are no strangers, keeps its packets that way).
  bool confirm_handshake = true;

  // Simulation only: messages are byte counts without bytes (the packet-level simulator carries no
  // payload). post_send/post_recv accept a null buffer (the size still counts); DATA segments leave with
  // TxPacket::payload nullptr and payload CRC 0; the receiver neither copies nor CRC-checks payload and
  // takes header-only datagrams (Endpoint::on_packet_header_only). Both peers must agree. Never set it on
  // a wire: received data would not reach the buffer. Default false: the production path, unchanged.
  bool virtual_payload = false;

  // The wire computes each DATA segment's payload CRC just before it sends it (a wire that sends on
  // other threads does it there, off the engine's thread): poll_tx leaves the SEG's payload CRC 0 and sets
  // TxPacket::payload_crc_pending, and the wire must call seal_seg_payload_crc (packet.h) on every such
  // packet, or the receiver drops it as corrupt. Default false: the engine computes it.
  bool wire_seals_payload_crc = false;

  // Simulation (memory): a connection's arrays sized by window_segments, max_posted_sends and
  // max_posted_recvs (the outstanding-segment ring, the retransmission queue, the request slab and the
  // send/credit queues) start at 16 entries and double when full, up to those same limits, instead of
  // being allocated whole at connect (~0.55 MiB per connection with the defaults); so does the
  // endpoint's queue of RSTs to send (64 entries, 10 KB). The protocol and its
  // packets are unchanged: the limits, the handshake and every decision are the same (tests/unit/engine/
  // grow_state_test.cpp compares packet streams). The cost is an allocation each time an array doubles,
  // which a production wire's hot path should not take. Default false: allocated whole, as before.
  bool grow_connection_state = false;
};

// Checks every value's range; the message names the field and the value.
Status validate_engine_config(const EngineConfig& config);

}  // namespace megascale::engine
