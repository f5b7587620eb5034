// verbs-rc's set-up message: what one port sends another over the home UD QPs to connect (or, with a
// higher epoch, re-connect) the RC QP of one (peer, slot) lane. It carries everything the receiver
// needs to bring its own QP of that lane to RTS and to write into the sender's receive ring: the
// sender's port id (random, drawn when the port opens: how a receiver recognises the port even after
// its home QP was re-created with another QPN), its home address (where to answer, and how a port
// learns a peer that connects to it), the lane's QP number and initial PSN, the sender's MTU and its
// ring's address, key and shape. A request asks for an answer; an answer carries the answering QP. Its
// magic differs from the engine's packets and from the re-connect message (reconnect.h), and a CRC32C
// seals it: damaged bytes are refused, never acted on; so is another version (both ends need it).
//
//   uint8_t buf[kRcSetupBytes];
//   encode_rc_setup(msg, buf);                             // Status: fields out of range are refused
//   if (is_rc_setup(data, len)) { Result<RcSetupMsg> m = decode_rc_setup(data, len); ... }
//
// Layout (little-endian): 0 u32 magic "MSRS" | 4 u8 version (2) | 5 u8 kind (1 request, 2 answer) |
// 6 u8 lane (< 64) | 7 u8 zero | 8 u16 epoch | 10 u16 zero | 12 gid[16] the sender's home GID |
// 28 u32 the sender's home QPN | 32 u32 qpn | 36 u32 psn | 40 u32 mtu | 44 u64 ring addr |
// 52 u32 ring rkey | 56 u32 ring slots per lane | 60 u32 slot bytes | 64 u32 ring lanes |
// 68 u64 the sender's port id (not zero) | 76 u32 CRC32C of bytes 0..76.
// Version 1 (72 bytes) had no port id.
#pragma once

#include <cstddef>
#include <cstdint>

#include "megascale/common/result.h"
#include "megascale/wire/verbs/gid.h"
#include "megascale/wire/verbs/work_request.h"

namespace megascale::wire::verbs {

inline constexpr uint32_t kRcSetupMagic = 0x5352534D;  // "MSRS" in memory order
inline constexpr uint8_t kRcSetupVersion = 2;
inline constexpr size_t kRcSetupBytes = 80;

enum class RcSetupKind : uint8_t { kRequest = 1, kAnswer = 2 };

struct RcSetupMsg {
  RcSetupKind kind = RcSetupKind::kRequest;
  uint8_t lane = 0;         // the (peer, slot) lane's slot, < 64
  uint16_t epoch = 0;       // the QP's incarnation: a higher one replaces the lane's QP
  Gid home_gid{};           // the sender's home address ...
  uint32_t home_qpn = 0;    // ... (its port's local_address())
  uint32_t qpn = 0;         // the sender's QP of this lane (24 bits, >= 2)
  uint32_t psn = 0;         // its initial send PSN (24 bits)
  uint32_t mtu_bytes = 0;   // the sender's active MTU: 256, 512, 1024, 2048 or 4096
  RemoteRing ring;          // the sender's receive ring: `ring_lanes` lanes of ring.slots slots
  uint32_t ring_lanes = 0;  // 1..64, more than `lane`
  uint64_t port_id = 0;     // the sending port's id (not zero): peers are known by it
};

// The ring slot a port sizes for its engine's segment_bytes: a segment and its header, at least the
// largest engine header, in whole 64-byte lines.
uint32_t rc_slot_bytes(uint32_t segment_bytes);
// Whether a peer's ring, as its set-up message gives it, can be written to: its slots must hold the
// largest engine header (ACKs and control packets carry no segment). They may be smaller than this
// port's: the ends may be opened with different segment_bytes (perf's server opens with the largest
// and lets each client choose), and the engine's handshake gives each connection the smaller segment
// of its ends, so that connection's packets fit both rings. The error names both sizes.
Status check_peer_slots(uint32_t own_slot_bytes, uint32_t peer_slot_bytes);
// The largest packet a port writes into a peer's ring: the smaller of both slots. A larger packet is
// dropped and counted, never written past the peer's slot.
uint32_t rc_write_limit(uint32_t own_slot_bytes, uint32_t peer_slot_bytes);

// True when data starts with the set-up magic.
bool is_rc_setup(const uint8_t* data, size_t len);
// Writes kRcSetupBytes. Errors name the field out of range (as decode_rc_setup checks them).
Status encode_rc_setup(const RcSetupMsg& m, uint8_t* out);
// Errors name what is wrong: magic, version (an older build's message says so), length, CRC (damaged bytes),
// kind, lane, QPNs, PSN, MTU, ring shape.
Result<RcSetupMsg> decode_rc_setup(const uint8_t* data, size_t len);

}  // namespace megascale::wire::verbs
