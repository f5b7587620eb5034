// The listen handle's check and addresses (see handle.h).
#include "handle.h"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace megascale::nccl {

const char* to_string(HandleWire w) {
  switch (w) {
    case HandleWire::kUdp:
      return "udp";
    case HandleWire::kVerbsUd:
      return "verbs-ud";
    case HandleWire::kVerbsRc:
      return "verbs-rc";
  }
  return "unknown";
}

uint32_t handle_check(const ListenHandle& h) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(&h);
  uint32_t v = 2166136261u;
  for (size_t i = 0; i < sizeof h; ++i) {
    if (i >= offsetof(ListenHandle, connect_token) && i < offsetof(ListenHandle, connect_token) + 8) continue;
    if (i >= offsetof(ListenHandle, check) && i < offsetof(ListenHandle, check) + 4) continue;
    v = (v ^ bytes[i]) * 16777619u;
  }
  return v;
}

Status check_listen_handle(const ListenHandle& h) {
  char text[160];
  if (h.magic != kHandleMagic || h.version != kHandleVersion) {
    std::snprintf(text, sizeof text,
                  "not a MegaScale listen handle of version %u (magic 0x%08x, version %u): another plugin "
                  "build on the peer, or the handle is damaged",
                  kHandleVersion, h.magic, h.version);
    return make_error(text);
  }
  if (h.stripes < 1 || h.stripes > kMaxStripes || (h.stripes > 1 && h.stripe_bytes < kMinStripeBytes)) {
    std::snprintf(text, sizeof text,
                  "the handle names %u stripes of %u bytes (1..%u stripes, of %u bytes or more): damaged",
                  h.stripes, h.stripe_bytes, kMaxStripes, kMinStripeBytes);
    return make_error(text);
  }
  if (h.check != handle_check(h)) {
    std::snprintf(text, sizeof text, "the handle is damaged: its check is 0x%08x, its bytes give 0x%08x",
                  h.check, handle_check(h));
    return make_error(text);
  }
  const auto wire = static_cast<HandleWire>(h.wire);
  if (wire == HandleWire::kUdp) {
    if (h.family != 4 && h.family != 6) {
      std::snprintf(text, sizeof text, "the handle is damaged: address family %u (4 or 6)", h.family);
      return make_error(text);
    }
    for (uint32_t i = 0; i < h.stripes; ++i) {
      if ((i == 0 ? h.port : h.stripe_ports[i - 1]) == 0) {
        std::snprintf(text, sizeof text, "the handle is damaged: stripe %u has UDP port 0", i);
        return make_error(text);
      }
    }
    return {};
  }
  if (wire != HandleWire::kVerbsUd && wire != HandleWire::kVerbsRc) {
    std::snprintf(text, sizeof text, "the handle is damaged: wire kind %u (0 udp, 1 verbs-ud, 2 verbs-rc)",
                  h.wire);
    return make_error(text);
  }
  for (uint32_t i = 0; i < h.stripes; ++i) {
    if (h.stripe_qpns[i] == 0 || h.stripe_qpns[i] > 0xFFFFFFu) {
      std::snprintf(text, sizeof text, "the handle is damaged: stripe %u has QP number 0x%x (1..0xffffff)", i,
                    h.stripe_qpns[i]);
      return make_error(text);
    }
  }
  return {};
}

std::string stripe_address(const ListenHandle& h, uint32_t i) {
  char ip[INET6_ADDRSTRLEN] = {};
  char text[INET6_ADDRSTRLEN + 16];
  if (static_cast<HandleWire>(h.wire) == HandleWire::kUdp) {
    inet_ntop(h.family == 6 ? AF_INET6 : AF_INET, h.addr, ip, sizeof ip);
    const unsigned port = i == 0 ? h.port : h.stripe_ports[i - 1];
    std::snprintf(text, sizeof text, h.family == 6 ? "[%s]:%u" : "%s:%u", ip, port);
    return text;
  }
  inet_ntop(AF_INET6, h.addr, ip, sizeof ip);
  std::snprintf(text, sizeof text, "[%s]/0x%06x", ip, h.stripe_qpns[i]);
  return text;
}

Status put_verbs_address(ListenHandle& h, uint32_t i, std::string_view address) {
  auto bad = [&](const std::string& why) {
    return make_error("verbs port address \"" + std::string(address) + "\": " + why +
                      " (expected \"[GID]/0xQPN\")");
  };
  if (i >= kMaxStripes) return bad("stripe " + std::to_string(i) + " beyond " + std::to_string(kMaxStripes));
  const size_t close = address.find("]/");
  if (address.size() < 4 || address[0] != '[' || close == std::string_view::npos) return bad("not that form");
  const std::string gid_text(address.substr(1, close - 1));
  uint8_t gid[16];
  if (inet_pton(AF_INET6, gid_text.c_str(), gid) != 1) return bad("the GID is not an IPv6-form address");
  const std::string qpn_text(address.substr(close + 2));
  char* end = nullptr;
  const unsigned long qpn = std::strtoul(qpn_text.c_str(), &end, 16);
  if (qpn_text.empty() || *end != '\0' || qpn == 0 || qpn > 0xFFFFFFul) {
    return bad("the QP number is not a hex number in 0x1..0xffffff");
  }
  if (i > 0 && std::memcmp(h.addr, gid, sizeof gid) != 0) return bad("its GID differs from stripe 0's");
  std::memcpy(h.addr, gid, sizeof gid);
  h.stripe_qpns[i] = static_cast<uint32_t>(qpn);
  return {};
}

}  // namespace megascale::nccl
