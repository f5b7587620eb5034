// The RC re-connect message: what one end tells the other when it re-creates a lane's QP
// (rc_recovery.h, RecoveryAction::kRecreate / kReply), sent over the home UD QP beside the engine's
// packets. Its magic differs from the engine's (packet.h) in its first four bytes, so the wire tells
// the two apart before decoding either.
//
//   uint8_t buf[kReconnectBytes];
//   encode_reconnect({.conn_id = peer_conn, .lane = 1, .epoch = 3, .qpn = qp->qpn(), .psn = psn}, buf);
//   if (is_reconnect(data, len)) { Result<ReconnectMsg> m = decode_reconnect(data, len); ... }
//   else endpoint->on_packet(now, peer, data, len, ce);
//
// Layout (little-endian): 0 u32 magic "MSRC" | 4 u8 version (1) | 5 u8 lane (< 64) | 6 u16 epoch |
// 8 u64 conn_id (the receiver's engine connection id) | 16 u32 qpn (24 bits, >= 2) | 20 u32 psn
// (24 bits) | 24 u32 CRC32C of bytes 0..24.
#pragma once

#include <cstddef>
#include <cstdint>

#include "megascale/common/result.h"

namespace megascale::wire::verbs {

inline constexpr uint32_t kReconnectMagic = 0x4352534D;  // "MSRC" in memory order
inline constexpr uint8_t kReconnectVersion = 1;
inline constexpr size_t kReconnectBytes = 28;

struct ReconnectMsg {
  uint64_t conn_id = 0;  // the receiving end's engine connection id
  uint8_t lane = 0;
  uint16_t epoch = 0;  // the new QP's incarnation
  uint32_t qpn = 0;    // the sender's new QP
  uint32_t psn = 0;    // its initial send PSN
};

// True when data starts with the re-connect magic (and so is not an engine packet).
bool is_reconnect(const uint8_t* data, size_t len);
// Writes kReconnectBytes. Errors: lane >= 64, a QPN outside 2..2^24-1, a PSN above 24 bits.
Status encode_reconnect(const ReconnectMsg& m, uint8_t* out);
// Errors name what is wrong: length, magic, version, CRC (damaged), lane, QPN, PSN.
Result<ReconnectMsg> decode_reconnect(const uint8_t* data, size_t len);

}  // namespace megascale::wire::verbs
