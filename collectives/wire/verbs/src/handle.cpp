// The connection handle's encoding (handle.h).
#include "megascale/wire/verbs/handle.h"

#include <cstdio>
#include <cstring>
#include <string>

#include "bytes.h"
#include "megascale/engine/crc32c.h"

namespace megascale::wire::verbs {
namespace {

constexpr size_t kFixedBytes = 44;  // everything before the lanes

using detail::get;
using detail::put;

// IB MTU codes (enum ibv_mtu): 1 = 256 ... 5 = 4096.
uint8_t mtu_code(uint32_t bytes) {
  for (uint8_t c = 1; c <= 5; ++c) {
    if (bytes == (128u << c)) return c;
  }
  return 0;
}

Error bad(const std::string& what) {
  return make_error("verbs connection handle: " + what);
}

}  // namespace

std::string_view to_string(WireMode m) {
  switch (m) {
    case WireMode::kUd:
      return "verbs-ud";
    case WireMode::kRc:
      return "verbs-rc";
  }
  return "unknown";
}

size_t handle_bytes(const ConnHandle& h) {
  return kFixedBytes + 8 * static_cast<size_t>(h.lane_count) + 4;
}

Result<size_t> encode_handle(const ConnHandle& h, uint8_t* out) {
  if (h.lane_count == 0 || h.lane_count > kMaxHandleLanes) {
    return bad("lanes " + std::to_string(h.lane_count) + " (1.." + std::to_string(kMaxHandleLanes) +
               " fit in 128 bytes)");
  }
  const uint8_t mtu = mtu_code(h.mtu_bytes);
  if (mtu == 0) return bad("mtu " + std::to_string(h.mtu_bytes) + " is not an IB MTU (256..4096)");
  if (h.mode != WireMode::kUd && h.mode != WireMode::kRc) return bad("unknown mode");
  if (h.qkey & 0x80000000u) return bad("qkey has bit 31 set (a privileged QKey)");
  if (h.mode == WireMode::kRc && (h.ring_slots == 0 || h.slot_bytes == 0 || h.ring_addr == 0)) {
    return bad("an RC handle needs its receive ring (ring_addr, ring_slots, slot_bytes)");
  }
  for (uint32_t i = 0; i < h.lane_count; ++i) {
    const HandleLane& l = h.lanes[i];
    if (l.qpn < 2 || l.qpn > 0xFFFFFF)
      return bad("lane " + std::to_string(i) + ": qpn " + std::to_string(l.qpn));
    if (l.psn > 0xFFFFFF)
      return bad("lane " + std::to_string(i) + ": psn " + std::to_string(l.psn) + " > 24 bits");
  }
  const bool rc = h.mode == WireMode::kRc;
  put<uint16_t>(out + 0, kHandleMagic);
  out[2] = kHandleVersion;
  out[3] = static_cast<uint8_t>(h.mode);
  out[4] = static_cast<uint8_t>(h.lane_count);
  out[5] = mtu;
  put<uint16_t>(out + 6, rc ? h.ring_slots : 0);
  std::memcpy(out + 8, h.gid.data(), 16);
  put<uint32_t>(out + 24, rc ? 0 : h.qkey);
  put<uint32_t>(out + 28, rc ? h.rkey : 0);
  put<uint64_t>(out + 32, rc ? h.ring_addr : 0);
  put<uint32_t>(out + 40, rc ? h.slot_bytes : 0);
  for (uint32_t i = 0; i < h.lane_count; ++i) {
    const HandleLane& l = h.lanes[i];
    const uint64_t v = uint64_t{l.qpn} | (uint64_t{rc ? l.psn : 0} << 24) | (uint64_t{l.sport} << 48);
    put<uint64_t>(out + kFixedBytes + 8 * i, v);
  }
  const size_t body = kFixedBytes + 8 * size_t{h.lane_count};
  put<uint32_t>(out + body, engine::crc32c(out, body));
  return body + 4;
}

Result<ConnHandle> decode_handle(const uint8_t* data, size_t len) {
  if (len < kFixedBytes + 8 + 4) {
    return bad(std::to_string(len) + " bytes, shorter than the smallest handle (" +
               std::to_string(kFixedBytes + 12) + ")");
  }
  if (const uint16_t magic = get<uint16_t>(data); magic != kHandleMagic) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "%04x", magic);
    return bad(std::string("magic 0x") + hex + ", not a verbs handle (0x564d)");
  }
  if (data[2] != kHandleVersion) {
    return bad("version " + std::to_string(data[2]) + "; this build reads version " +
               std::to_string(kHandleVersion) + " (both ends must run the same megascale)");
  }
  ConnHandle h;
  h.lane_count = data[4];
  if (h.lane_count == 0 || h.lane_count > kMaxHandleLanes) {
    return bad("lanes " + std::to_string(h.lane_count) + " (1.." + std::to_string(kMaxHandleLanes) + ")");
  }
  const size_t body = kFixedBytes + 8 * size_t{h.lane_count};
  if (len != body + 4) {
    return bad(std::to_string(len) + " bytes, but " + std::to_string(h.lane_count) + " lanes make " +
               std::to_string(body + 4));
  }
  if (get<uint32_t>(data + body) != engine::crc32c(data, body)) return bad("CRC mismatch (damaged bytes)");
  if (data[3] != static_cast<uint8_t>(WireMode::kUd) && data[3] != static_cast<uint8_t>(WireMode::kRc)) {
    return bad("mode " + std::to_string(data[3]) + " (1 UD, 2 RC)");
  }
  h.mode = static_cast<WireMode>(data[3]);
  if (data[5] < 1 || data[5] > 5) return bad("mtu code " + std::to_string(data[5]) + " (1..5: 256..4096)");
  h.mtu_bytes = 128u << data[5];
  h.ring_slots = get<uint16_t>(data + 6);
  std::memcpy(h.gid.data(), data + 8, 16);
  h.qkey = get<uint32_t>(data + 24);
  h.rkey = get<uint32_t>(data + 28);
  h.ring_addr = get<uint64_t>(data + 32);
  h.slot_bytes = get<uint32_t>(data + 40);
  if (h.qkey & 0x80000000u) return bad("qkey has bit 31 set (a privileged QKey)");
  if (h.mode == WireMode::kUd &&
      (h.ring_slots != 0 || h.rkey != 0 || h.ring_addr != 0 || h.slot_bytes != 0)) {
    return bad("a UD handle carries RC ring fields");
  }
  if (h.mode == WireMode::kRc && (h.ring_slots == 0 || h.slot_bytes == 0 || h.ring_addr == 0)) {
    return bad("an RC handle without its receive ring (ring_addr, ring_slots, slot_bytes)");
  }
  if (h.mode == WireMode::kRc && h.qkey != 0) return bad("an RC handle carries a QKey");
  for (uint32_t i = 0; i < h.lane_count; ++i) {
    const uint64_t v = get<uint64_t>(data + kFixedBytes + 8 * i);
    HandleLane& l = h.lanes[i];
    l.qpn = static_cast<uint32_t>(v & 0xFFFFFF);
    l.psn = static_cast<uint32_t>((v >> 24) & 0xFFFFFF);
    l.sport = static_cast<uint16_t>(v >> 48);
    if (l.qpn < 2)
      return bad("lane " + std::to_string(i) + ": qpn " + std::to_string(l.qpn) + " is a special QP");
    if (h.mode == WireMode::kUd && l.psn != 0)
      return bad("lane " + std::to_string(i) + ": a UD lane carries a PSN");
  }
  return h;
}

}  // namespace megascale::wire::verbs
