// What the parts of one connection share: the request slab (request_table.h), the addresses its
// packets carry, and the header fields every packet of it fills in the same way.
//
//   ConnAddress addr{.peer = 3, .id = 0x1234};   // remote_id and version: set at the handshake
//   fill_common(out, addr, lane, path_id);       // then the caller sets payload, ect, request
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "megascale/common/units.h"
#include "megascale/engine/config.h"
#include "megascale/engine/connection.h"
#include "megascale/engine/endpoint.h"
#include "megascale/engine/packet.h"

namespace megascale::engine::detail {

inline constexpr uint32_t kNoRequest = 0xFFFFFFFF;

// A duration for an error message in the unit that shows it: "2.5 s", "1.2 ms", "350 us" (a budget of a
// millisecond, as the simulator uses, must not read "0.0 s").
std::string duration_text(TimeNs ns);

// Entries an array of `full` entries starts with (EngineConfig::grow_connection_state: 16, then doubled).
inline uint32_t initial_entries(const EngineConfig& cfg, uint32_t full) {
  constexpr uint32_t kGrowFrom = 16;
  return cfg.grow_connection_state ? std::min(full, kGrowFrom) : full;
}

// Where a connection's packets go and the ids and version they carry. The handshake sets remote_id
// and version; ConnectionCore owns it, the send and receive halves read it.
struct ConnAddress {
  uint32_t peer = 0;       // the wire's handle for the peer's address
  ConnId id = 0;           // our connection id
  uint64_t remote_id = 0;  // the peer's connection id (0 until the handshake names it)
  uint16_t version = kVersion;
};

inline CommonHeader common_header(const ConnAddress& a, PacketType type, uint8_t lane, uint8_t flags) {
  return CommonHeader{.version = static_cast<uint8_t>(a.version),
                      .type = type,
                      .lane = lane,
                      .flags = flags,
                      .dst_conn_id = a.remote_id};
}

// The fields of `out` besides its header that every packet sets: destination, lane and path, and no
// payload (a SEG sets its payload afterwards).
inline void fill_common(TxPacket& out, const ConnAddress& a, uint8_t lane, uint32_t path_id) {
  out.lane = lane;
  out.path_id = path_id;
  out.peer = a.peer;
  out.conn_id = a.id;
  out.ect = false;
  out.payload = nullptr;
  out.payload_len = 0;
  out.payload_crc_pending = false;
  out.request = 0;
}

}  // namespace megascale::engine::detail
