// The verbs wire's connection handle: everything a peer needs to reach this end's queue pairs, in at
// most 128 bytes (NCCL_NET_HANDLE_MAXSIZE), versioned and checked, so it travels in the plugin's
// listen handle.
//
//   ConnHandle h{.mode = WireMode::kUd, .mtu_bytes = 1024, .gid = gid, .qkey = 0x4D53, .lanes = {...}};
//   uint8_t buf[kMaxHandleBytes];
//   Result<size_t> n = encode_handle(h, buf);            // fails on values the layout cannot hold
//   Result<ConnHandle> back = decode_handle(buf, *n);    // fails naming what is wrong
//
// Layout (little-endian; offsets in bytes):
//   0 u16 magic 0x564D ("MV") | 2 u8 version (1) | 3 u8 mode (1 UD, 2 RC) | 4 u8 lanes (1..10) |
//   5 u8 mtu (IB MTU code: 1 = 256 .. 5 = 4096) | 6 u16 ring_slots (RC: per lane; UD: 0) |
//   8 gid[16] | 24 u32 qkey (UD; RC: 0) | 28 u32 rkey (RC; UD: 0) | 32 u64 ring_addr (RC; UD: 0) |
//   40 u32 slot_bytes (RC; UD: 0) |
//   44 lanes x u64: bits 0-23 qpn, 24-47 psn (RC's initial PSN; UD: 0), 48-63 sport (the lane's UDP
//      source port, ECMP entropy) |
//   44 + 8 * lanes: u32 CRC32C of every byte before it.
// The length is therefore 48 + 8 * lanes, at most 128.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "megascale/common/result.h"
#include "megascale/wire/verbs/gid.h"

namespace megascale::wire::verbs {

inline constexpr size_t kMaxHandleBytes = 128;
inline constexpr uint16_t kHandleMagic = 0x564D;
inline constexpr uint8_t kHandleVersion = 1;
inline constexpr uint32_t kMaxHandleLanes = 10;  // (128 - 48) / 8

enum class WireMode : uint8_t {
  kUd = 1,  // segments as UD datagrams; reliability and congestion control in software
  kRc = 2,  // segments as RDMA writes with immediate into the peer's receive ring
};
std::string_view to_string(WireMode m);

struct HandleLane {
  uint32_t qpn = 0;    // the lane's queue pair number (24 bits; 0 and 1 are special QPs)
  uint32_t psn = 0;    // RC: the initial packet sequence number of this end's sends (24 bits)
  uint16_t sport = 0;  // the UDP source port this end's lane sends from (0 = the NIC chooses)
};

struct ConnHandle {
  WireMode mode = WireMode::kUd;
  uint32_t mtu_bytes = 1024;  // the port's active MTU: 256, 512, 1024, 2048 or 4096
  Gid gid{};                  // this end's GID (gid.h)
  uint32_t qkey = 0;          // UD: the QKey receives are posted with (bit 31 clear: not privileged)
  // RC: the receive ring, one region per lane of ring_slots slots of slot_bytes each, registered with
  // remote write access under rkey at ring_addr (rc_ring.h).
  uint32_t rkey = 0;
  uint64_t ring_addr = 0;
  uint16_t ring_slots = 0;
  uint32_t slot_bytes = 0;
  uint32_t lane_count = 0;  // 1..kMaxHandleLanes
  std::array<HandleLane, kMaxHandleLanes> lanes{};
};

// The bytes encode_handle writes for `h`: 48 + 8 * lane_count.
size_t handle_bytes(const ConnHandle& h);

// Writes `h` to out[0..handle_bytes(h)) (out holds at least kMaxHandleBytes). Errors: a value the
// layout or the mode cannot hold (names the field and the value).
Result<size_t> encode_handle(const ConnHandle& h, uint8_t* out);

// Reads a handle from data[0..len). Refuses, naming what is wrong: too short, a foreign magic, another
// version, no or too many lanes, a length other than the lane count implies, a CRC mismatch (checked
// next, so damaged bytes say "damaged" rather than naming a field), an unknown mode, a bad MTU code,
// a reserved QPN, a QKey with bit 31 set, a UD handle with RC fields or an RC handle without its ring.
Result<ConnHandle> decode_handle(const uint8_t* data, size_t len);

}  // namespace megascale::wire::verbs
