// The verbs wire: packet ports (../../../../udp/include/megascale/wire/packet_port.h) on an RDMA device,
// under the same wire and engine as UDP. Two modes:
//  - verbs-ud: each engine packet is one UD datagram; one UD QP per slot (slot 0 the home QP peers
//    address); ECN read from the receive's GRH; reliability and congestion control in the engine.
//  - verbs-rc: each engine packet is an RDMA write with immediate into the peer's receive ring, on one
//    RC QP per (peer, slot), connected over the home UD QP; the NIC retransmits, a QP that errors is
//    re-created (rc_recovery.h).
//
//   VerbsPortConfig pc;  pc.mode = PortMode::kUd;  pc.slots = cfg.engine.lanes;
//   auto wire = create_verbs_wire(cfg, pc);            // Result<std::unique_ptr<UdpWire>>
//   auto conn = (*wire)->connect(peer_local_address);  // "[::ffff:10.0.0.2]/0x000011"
//
// A port's address text is "[GID]/QPN": the GID in inet_ntop form and the home QP number in hex.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "megascale/common/result.h"
#include "megascale/common/units.h"
#include "megascale/wire/packet_port.h"
#include "megascale/wire/udp.h"
#include "megascale/wire/verbs/gid.h"

namespace megascale::wire::verbs {

enum class PortMode : uint8_t { kUd, kRc };
std::string_view to_string(PortMode m);  // "verbs-ud", "verbs-rc"

struct VerbsPortConfig {
  PortMode mode = PortMode::kUd;
  std::string device;  // "" = the first device with an ACTIVE RoCE port
  uint32_t port = 0;   // 1-based; 0 = the device's first ACTIVE Ethernet port
  GidSelector gid;     // gid_selector_from_env(std::getenv) for the MEGASCALE_IB_* settings
  std::string sysfs_root = "/sys/class/infiniband";
  uint32_t slots = 4;          // QPs per peer side: one per engine lane
  uint8_t traffic_class = 0;   // the TOS byte (DSCP << 2); UD adds ECT(0)
  uint32_t send_depth = 256;   // per QP
  uint32_t recv_depth = 512;   // per receiving QP
  uint32_t max_peers = 65536;  // peer table limit
  // RC: the receive ring each (peer, slot) writes into: `ring_slots` slots of the largest packet.
  uint32_t ring_slots = 64;
  // RC: the bytes of data writes a lane keeps posted to the NIC and not yet completed (one write is
  // always allowed); more data waits in the port, where packets without payload (ACKs, credits) go
  // ahead of it. A NIC sends a QP's writes in order, so this bounds how long an ACK waits behind data:
  // with the whole ring posted (64 writes of 64 KB) a slow NIC held ACKs long enough to fire the
  // peer's retransmission timer (Soft-RoCE: 0.2-0.5 s round trips at 4 MiB messages).
  uint32_t rc_queue_bytes = 256 * 1024;
  // RC: the NIC's local ACK timeout and retry count come from these (derive_nic_retry); the engine's.
  TimeNs initial_rto_ns = kNsPerMs;
  TimeNs retry_budget_ns = 10 * kNsPerSec;
  // The largest engine segment payload the port must carry (RC ring slot size; UD: checked against
  // the MTU, ud_max_segment_bytes; 0 = not checked, the caller fits the segment to max_packet_bytes()).
  uint32_t segment_bytes = 4096;
  // RC: set-up messages wait while the port is not ACTIVE (a send then would error the home QP). Off
  // only in tests that make the home QP error on purpose, to exercise its re-creation.
  bool rc_setup_waits_for_port = true;
  // RC: a home QP that errored is reset to RTS keeping its QPN (peers reach it as before), and only
  // re-created with a new QPN when the reset fails. False: always re-created (tests of that path).
  bool rc_home_reset = true;
};

// Opens the port `config.mode` asks for. Errors name the device, port or GID problem (no device, no
// ACTIVE RoCE port, no GID matching the selector, a segment larger than UD's MTU allows).
Result<std::unique_ptr<PacketPort>> open_port(const VerbsPortConfig& config);
Result<std::unique_ptr<PacketPort>> open_ud_port(const VerbsPortConfig& config);
Result<std::unique_ptr<PacketPort>> open_rc_port(const VerbsPortConfig& config);

// The wire on verbs: `port.slots` from the engine's lanes, `port.segment_bytes` from the engine's
// segment, the NIC's retry from the engine's RTO and retry budget; for UD with `fit_segment`, an
// engine segment larger than the MTU allows is lowered to fit (otherwise refused).
Result<std::unique_ptr<UdpWire>> create_verbs_wire(UdpConfig config, VerbsPortConfig port,
                                                   bool fit_segment = true);

// "[GID]/QPN" parsed and formatted (QPN in hex, 24 bits); errors name the text.
struct PortAddress {
  Gid gid{};
  uint32_t qpn = 0;
};
std::string format_port_address(const PortAddress& a);
Result<PortAddress> parse_port_address(std::string_view text);

}  // namespace megascale::wire::verbs
