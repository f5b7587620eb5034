// verbs-rc's set-up message (rc_setup.h).
#include "megascale/wire/verbs/rc_setup.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "bytes.h"
#include "megascale/engine/crc32c.h"
#include "megascale/engine/packet.h"

namespace megascale::wire::verbs {
namespace {

using detail::get;
using detail::put;

Error bad(const std::string& what) {
  return make_error(ErrorCode::kRemote, "RC set-up message: " + what);
}

bool qpn_ok(uint32_t q) {
  return q >= 2 && q <= 0xFFFFFF;
}

Status check_fields(const RcSetupMsg& m) {
  if (m.kind != RcSetupKind::kRequest && m.kind != RcSetupKind::kAnswer) {
    return bad("kind " + std::to_string(static_cast<int>(m.kind)) + " (1 request, 2 answer)");
  }
  if (m.ring_lanes == 0 || m.ring_lanes > 64)
    return bad("ring lanes " + std::to_string(m.ring_lanes) + " (1..64)");
  if (m.lane >= m.ring_lanes) {
    return bad("lane " + std::to_string(m.lane) + " beyond the ring's " + std::to_string(m.ring_lanes));
  }
  if (!qpn_ok(m.home_qpn)) return bad("home qpn " + std::to_string(m.home_qpn));
  if (!qpn_ok(m.qpn)) return bad("qpn " + std::to_string(m.qpn));
  if (m.psn > 0xFFFFFF) return bad("psn " + std::to_string(m.psn) + " > 24 bits");
  const uint32_t mtu = m.mtu_bytes;
  if (mtu < 256 || mtu > 4096 || (mtu & (mtu - 1)) != 0) return bad("mtu " + std::to_string(mtu));
  if (m.ring.slots == 0 || m.ring.slots > kMaxImmValue)
    return bad("ring slots " + std::to_string(m.ring.slots));
  if (m.ring.slot_bytes == 0 || m.ring.slot_bytes > (1u << 20)) {
    return bad("ring slot bytes " + std::to_string(m.ring.slot_bytes) + " (1..1 MiB)");
  }
  if (m.port_id == 0) return bad("port id 0");
  const uint64_t span = uint64_t{m.ring_lanes} * m.ring.slots * m.ring.slot_bytes;
  if (m.ring.addr + span < m.ring.addr) return bad("ring wraps the address space");
  return {};
}

}  // namespace

uint32_t rc_slot_bytes(uint32_t segment_bytes) {
  const uint64_t need =
      std::max<uint64_t>(uint64_t{segment_bytes} + engine::kSegHeaderBytes, engine::kMaxHeaderBytes);
  return static_cast<uint32_t>((need + 63) / 64 * 64);
}

Status check_peer_slots(uint32_t own_slot_bytes, uint32_t peer_slot_bytes) {
  if (peer_slot_bytes < engine::kMaxHeaderBytes) {
    return make_error(ErrorCode::kRemote, "the peer's ring slots of " + std::to_string(peer_slot_bytes) +
                                              " bytes cannot hold an engine header of up to " +
                                              std::to_string(engine::kMaxHeaderBytes) +
                                              " bytes (this port's slots: " + std::to_string(own_slot_bytes) +
                                              " bytes)");
  }
  return {};
}

uint32_t rc_write_limit(uint32_t own_slot_bytes, uint32_t peer_slot_bytes) {
  return std::min(own_slot_bytes, peer_slot_bytes);
}

bool is_rc_setup(const uint8_t* data, size_t len) {
  return len >= 4 && get<uint32_t>(data) == kRcSetupMagic;
}

Status encode_rc_setup(const RcSetupMsg& m, uint8_t* out) {
  if (Status s = check_fields(m); !s) return make_error(ErrorCode::kInternal, s.error().message);
  std::memset(out, 0, kRcSetupBytes);
  put<uint32_t>(out, kRcSetupMagic);
  out[4] = kRcSetupVersion;
  out[5] = static_cast<uint8_t>(m.kind);
  out[6] = m.lane;
  put<uint16_t>(out + 8, m.epoch);
  std::memcpy(out + 12, m.home_gid.data(), 16);
  put<uint32_t>(out + 28, m.home_qpn);
  put<uint32_t>(out + 32, m.qpn);
  put<uint32_t>(out + 36, m.psn);
  put<uint32_t>(out + 40, m.mtu_bytes);
  put<uint64_t>(out + 44, m.ring.addr);
  put<uint32_t>(out + 52, m.ring.rkey);
  put<uint32_t>(out + 56, m.ring.slots);
  put<uint32_t>(out + 60, m.ring.slot_bytes);
  put<uint32_t>(out + 64, m.ring_lanes);
  put<uint64_t>(out + 68, m.port_id);
  put<uint32_t>(out + 76, engine::crc32c(out, 76));
  return {};
}

Result<RcSetupMsg> decode_rc_setup(const uint8_t* data, size_t len) {
  // Magic and version first: an older build's message (version 1, 72 bytes) is named as such, not as
  // a bad length.
  if (!is_rc_setup(data, len)) return bad("not one (magic)");
  if (len < 5) return bad(std::to_string(len) + " bytes, not " + std::to_string(kRcSetupBytes));
  if (data[4] != kRcSetupVersion) {
    return bad("version " + std::to_string(data[4]) + "; this build reads version " +
               std::to_string(kRcSetupVersion) + " (both ends need builds that speak the same one)");
  }
  if (len != kRcSetupBytes) return bad(std::to_string(len) + " bytes, not " + std::to_string(kRcSetupBytes));
  if (get<uint32_t>(data + 76) != engine::crc32c(data, 76)) return bad("CRC mismatch (damaged bytes)");
  if (data[7] != 0 || get<uint16_t>(data + 10) != 0) return bad("reserved bytes not zero");
  RcSetupMsg m;
  m.kind = static_cast<RcSetupKind>(data[5]);
  m.lane = data[6];
  m.epoch = get<uint16_t>(data + 8);
  std::memcpy(m.home_gid.data(), data + 12, 16);
  m.home_qpn = get<uint32_t>(data + 28);
  m.qpn = get<uint32_t>(data + 32);
  m.psn = get<uint32_t>(data + 36);
  m.mtu_bytes = get<uint32_t>(data + 40);
  m.ring.addr = get<uint64_t>(data + 44);
  m.ring.rkey = get<uint32_t>(data + 52);
  m.ring.slots = get<uint32_t>(data + 56);
  m.ring.slot_bytes = get<uint32_t>(data + 60);
  m.ring_lanes = get<uint32_t>(data + 64);
  m.port_id = get<uint64_t>(data + 68);
  if (Status s = check_fields(m); !s) return s.error();
  return m;
}

}  // namespace megascale::wire::verbs
