// The verbs wire's common entry points (port.h): the mode's name, the port dispatch, the wire over a
// verbs port with the engine's settings carried over, and the "[GID]/QPN" address text.
#include "megascale/wire/verbs/port.h"

#include <arpa/inet.h>

#include <charconv>
#include <cstdio>
#include <cstring>

#include "megascale/wire/verbs/rc_recovery.h"
#include "megascale/wire/verbs/work_request.h"

namespace megascale::wire::verbs {

std::string_view to_string(PortMode m) {
  switch (m) {
    case PortMode::kUd:
      return "verbs-ud";
    case PortMode::kRc:
      return "verbs-rc";
  }
  return "verbs-?";
}

Result<std::unique_ptr<PacketPort>> open_port(const VerbsPortConfig& config) {
  switch (config.mode) {
    case PortMode::kUd:
      return open_ud_port(config);
    case PortMode::kRc:
      return open_rc_port(config);
  }
  return make_error(ErrorCode::kInvalidArgument,
                    "verbs port: unknown mode " + std::to_string(static_cast<int>(config.mode)));
}

Result<std::unique_ptr<UdpWire>> create_verbs_wire(UdpConfig config, VerbsPortConfig port, bool fit_segment) {
  port.slots = config.engine.lanes;
  port.segment_bytes = config.engine.segment_bytes;
  port.initial_rto_ns = config.engine.cc.rto.initial_rto_ns;
  port.retry_budget_ns = config.engine.cc.rto.retry_budget_ns;
  port.max_peers = config.max_peers;
  if (port.traffic_class == 0) port.traffic_class = static_cast<uint8_t>((config.dscp & 0x3F) << 2);
  // RC: the NIC owns loss (its timeout comes from the engine's initial RTO, set above); the engine
  // times out only what the NIC gave up on. A budget the NIC does not fit is refused by open_port.
  if (port.mode == PortMode::kRc) {
    if (Result<NicRetry> nic = derive_nic_retry(config.engine.cc.rto); nic) {
      raise_rto_above_nic(config.engine.cc.rto, *nic);
    }
  }
  // UD: the segment that fits is known once the port knows its MTU; open without the check and lower
  // the engine's segment after.
  const bool fit = port.mode == PortMode::kUd && fit_segment;
  if (fit) port.segment_bytes = 0;
  Result<std::unique_ptr<PacketPort>> opened = open_port(port);
  if (!opened) return opened.error();
  if (fit) {
    const uint32_t most = ud_max_segment_bytes(static_cast<uint32_t>((*opened)->max_packet_bytes()));
    if (most == 0) {
      return make_error(ErrorCode::kUnsupported,
                        (*opened)->describe() + ": the MTU leaves no room for a segment");
    }
    if (config.engine.segment_bytes > most) config.engine.segment_bytes = most;
  }
  return UdpWire::create(config, std::move(*opened));
}

std::string format_port_address(const PortAddress& a) {
  char qpn[16];
  std::snprintf(qpn, sizeof(qpn), "0x%06x", a.qpn & 0xFFFFFFu);
  std::string out = "[";
  out += gid_to_string(a.gid);
  out += "]/";
  out += qpn;
  return out;
}

Result<PortAddress> parse_port_address(std::string_view text) {
  const auto bad = [&](std::string_view why) {
    return make_error(ErrorCode::kInvalidArgument,
                      "verbs address \"" + std::string(text) + "\": " + std::string(why) +
                          " (expected \"[GID]/QPN\", e.g. \"[::ffff:10.0.0.2]/0x000011\")");
  };
  if (text.empty() || text.front() != '[') return bad("does not start with '['");
  const size_t close = text.find(']');
  if (close == std::string_view::npos) return bad("no ']' after the GID");
  const std::string gid_text(text.substr(1, close - 1));
  PortAddress out;
  if (gid_text.empty() || inet_pton(AF_INET6, gid_text.c_str(), out.gid.data()) != 1) {
    return bad("\"" + gid_text + "\" is not a GID (an IPv6 address)");
  }
  if (close + 1 >= text.size() || text[close + 1] != '/') return bad("no '/' and QPN after the GID");
  std::string_view qpn = text.substr(close + 2);
  if (qpn.size() >= 2 && qpn[0] == '0' && (qpn[1] == 'x' || qpn[1] == 'X')) qpn.remove_prefix(2);
  if (qpn.empty()) return bad("no QPN after '/'");
  if (qpn.size() > 6) return bad("the QPN has more than 24 bits");
  uint32_t value = 0;
  const auto [end, ec] = std::from_chars(qpn.data(), qpn.data() + qpn.size(), value, 16);
  if (ec != std::errc() || end != qpn.data() + qpn.size()) return bad("the QPN is not a hex number");
  out.qpn = value;
  return out;
}

}  // namespace megascale::wire::verbs
