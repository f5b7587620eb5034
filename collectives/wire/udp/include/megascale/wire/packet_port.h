// A packet port: what a wire sends the engine's packets through and receives them from, in place of its
// own pool of UDP sockets. The verbs wire's UD and RC modes are ports (collectives/wire/verbs); a port
// gets the whole of the wire above it unchanged (the progress loop and its thread, tickets, waits, the
// peer ids the engine knows), so the transport's behaviour is the same engine's on every wire.
//
//   auto port = verbs::open_ud_port(cfg);              // Result<std::unique_ptr<PacketPort>>
//   auto wire = UdpWire::create(udp_cfg, std::move(*port));
//   auto conn = (*wire)->connect(remote_port_address); // the address text the remote port's
//                                                      // local_address() gave
//
// Contract (every call comes from the wire's progress round, under the wire's lock, on one thread at a
// time; none may block):
//  - Slots are a port's sources, as sockets are the UDP pool's: slot 0 is the home, what peers address;
//    the wire assigns each lane path to a slot (lane i of every connection to slot i % slots()), so
//    lanes leave from distinct sources (distinct UDP source ports on RoCE v2) while there are enough.
//  - Peers: the port maps its own addresses to dense u32 ids (0, 1, ...; never reused); the engine
//    names peers only by id. A packet from an unknown source gets a new id when delivered.
//  - send(): the bytes of every packet are readable only during the call. A port that cannot take a
//    packet now (no send slot, no credit) drops it and counts it: the engine recovers a loss as on UDP.
//  - receive(): hands each waiting packet to `deliver`, its bytes valid during that call only.
//  - Sleeping: the wire sleeps in epoll on wait_fd() (when not -1) after arm() returned true; arm()
//    returns false when work arrived while arming, and the wire then runs another round instead.
//    receive() runs every round, sleep or not: a port reads wait_fd()'s events (a completion
//    channel's) in arm(), before the next sleep, rather than with a system call every round.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "megascale/common/result.h"
#include "megascale/common/units.h"

namespace megascale::wire {

struct PortPacket {
  const uint8_t* header = nullptr;  // the engine's header bytes
  uint32_t header_len = 0;
  const uint8_t* payload = nullptr;  // payload bytes (may be null with payload_len 0)
  uint32_t payload_len = 0;
  uint32_t peer = 0;  // the port's peer id
  uint32_t slot = 0;  // the source slot (0 = home)
  uint32_t lane = 0;  // the engine's lane (slot = the lane's path mapped onto slots)
  bool ect = true;    // ECN-capable transport
};

// Counters every port keeps; `extra` holds what is particular to the port (name, value), in a fixed order.
struct PortStats {
  uint64_t packets_sent = 0;
  uint64_t bytes_sent = 0;
  uint64_t send_dropped = 0;  // packets the port could not take (no slot, no credit, not connected)
  uint64_t send_errors = 0;   // sends that failed in the device
  uint64_t packets_received = 0;
  uint64_t bytes_received = 0;
  uint64_t ce_received = 0;  // packets that arrived CE-marked
  uint64_t recv_errors = 0;  // receive completions in error, malformed arrivals
  uint64_t peer_table_full = 0;
  std::vector<std::pair<std::string, uint64_t>> extra;
};

class PacketPort {
 public:
  using Deliver = std::function<void(uint32_t peer, uint8_t* data, size_t len, bool ce)>;

  virtual ~PacketPort() = default;

  // Source slots (at least 1).
  virtual uint32_t slots() const = 0;
  // The largest packet (header + payload) the port carries; the wire refuses an engine segment size
  // that would not fit.
  virtual size_t max_packet_bytes() const = 0;
  // One line for logs: "verbs-ud rxe0 port 1 gid 1 (::ffff:10.0.2.15, RoCE v2) mtu 1024, 4 QPs".
  virtual std::string describe() const = 0;
  // What a peer passes to add_peer() to reach this port (the home slot).
  virtual std::string local_address() const = 0;
  // The id of a peer given in the port's address text, added when new. The error names what is wrong.
  virtual Result<uint32_t> add_peer(std::string_view address) = 0;
  virtual bool has_peer(uint32_t peer) const = 0;
  virtual std::string peer_address(uint32_t peer) const = 0;

  // Sends the packets in order. An error is a device failure that makes the port unusable.
  virtual Status send(std::span<const PortPacket> packets) = 0;
  // Delivers up to `max` waiting packets; returns how many. An error makes the port unusable.
  virtual Result<size_t> receive(size_t max, const Deliver& deliver) = 0;

  // A file descriptor that becomes readable when receive() may have work; -1: none (the wire polls).
  virtual int wait_fd() const { return -1; }
  // Called before the wire sleeps on wait_fd(); false: work arrived meanwhile, do not sleep.
  virtual bool arm() { return true; }
  // The port's own timer work (re-connects, backoffs) at `now`, and when it next has some.
  virtual void on_timer(TimeNs /*now*/) {}
  virtual TimeNs next_deadline() const { return kNever; }

  virtual PortStats stats() const = 0;
};

}  // namespace megascale::wire
