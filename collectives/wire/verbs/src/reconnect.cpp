// The RC re-connect message (reconnect.h).
#include "megascale/wire/verbs/reconnect.h"

#include <cstring>
#include <string>

#include "bytes.h"
#include "megascale/engine/crc32c.h"

namespace megascale::wire::verbs {
namespace {

using detail::get;
using detail::put;

Error bad(const std::string& what) {
  return make_error(ErrorCode::kRemote, "RC re-connect message: " + what);
}

Status check_fields(const ReconnectMsg& m) {
  if (m.lane >= 64) return bad("lane " + std::to_string(m.lane) + " (0..63)");
  if (m.qpn < 2 || m.qpn > 0xFFFFFF) return bad("qpn " + std::to_string(m.qpn));
  if (m.psn > 0xFFFFFF) return bad("psn " + std::to_string(m.psn) + " > 24 bits");
  return {};
}

}  // namespace

bool is_reconnect(const uint8_t* data, size_t len) {
  return len >= 4 && get<uint32_t>(data) == kReconnectMagic;
}

Status encode_reconnect(const ReconnectMsg& m, uint8_t* out) {
  if (Status s = check_fields(m); !s) return make_error(ErrorCode::kInternal, s.error().message);
  put<uint32_t>(out, kReconnectMagic);
  out[4] = kReconnectVersion;
  out[5] = m.lane;
  put<uint16_t>(out + 6, m.epoch);
  put<uint64_t>(out + 8, m.conn_id);
  put<uint32_t>(out + 16, m.qpn);
  put<uint32_t>(out + 20, m.psn);
  put<uint32_t>(out + 24, engine::crc32c(out, 24));
  return {};
}

Result<ReconnectMsg> decode_reconnect(const uint8_t* data, size_t len) {
  if (len != kReconnectBytes) {
    return bad(std::to_string(len) + " bytes, not " + std::to_string(kReconnectBytes));
  }
  if (!is_reconnect(data, len)) return bad("not one (magic)");
  if (data[4] != kReconnectVersion) {
    return bad("version " + std::to_string(data[4]) + "; this build reads version " +
               std::to_string(kReconnectVersion));
  }
  if (get<uint32_t>(data + 24) != engine::crc32c(data, 24)) return bad("CRC mismatch (damaged bytes)");
  ReconnectMsg m{.conn_id = get<uint64_t>(data + 8),
                 .lane = data[5],
                 .epoch = get<uint16_t>(data + 6),
                 .qpn = get<uint32_t>(data + 16),
                 .psn = get<uint32_t>(data + 20)};
  if (Status s = check_fields(m); !s) return s.error();
  return m;
}

}  // namespace megascale::wire::verbs
