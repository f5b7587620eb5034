// Port and GID selection (gid.h): the MEGASCALE_IB_* variables, CIDR ranges and the preference order.
#include <arpa/inet.h>

#include <charconv>
#include <cstring>
#include <string>

#include "megascale/wire/verbs/gid.h"

namespace megascale::wire::verbs {
namespace {

bool in_range(const Gid& gid, const GidSelector& sel) {
  uint32_t bits = sel.range_prefix_len;
  for (size_t i = 0; i < 16 && bits > 0; ++i) {
    const uint32_t n = bits >= 8 ? 8 : bits;
    const uint8_t mask = static_cast<uint8_t>(0xff00 >> n);
    if ((gid[i] & mask) != (sel.range_addr[i] & mask)) return false;
    bits -= n;
  }
  return true;
}

std::string where(const DeviceInfo& dev, const PortInfo& port) {
  return dev.name + " port " + std::to_string(port.port);
}

}  // namespace

Result<GidSelector> with_addr_range(GidSelector sel, std::string_view cidr) {
  const size_t slash = cidr.find('/');
  if (slash == std::string_view::npos) {
    return make_error("MEGASCALE_IB_ADDR_RANGE=" + std::string(cidr) +
                      ": expected address/prefix, e.g. 10.0.0.0/8");
  }
  const std::string addr(cidr.substr(0, slash));
  const std::string_view len_text = cidr.substr(slash + 1);
  uint32_t len = 0;
  auto [end, err] = std::from_chars(len_text.data(), len_text.data() + len_text.size(), len);
  const bool len_ok = err == std::errc() && end == len_text.data() + len_text.size() && !len_text.empty();
  Gid g{};
  in_addr v4{};
  if (inet_pton(AF_INET, addr.c_str(), &v4) == 1) {
    if (!len_ok || len > 32) {
      return make_error("MEGASCALE_IB_ADDR_RANGE=" + std::string(cidr) + ": an IPv4 prefix length is 0..32");
    }
    if (sel.ipv6) {
      return make_error("MEGASCALE_IB_ADDR_RANGE=" + std::string(cidr) +
                        ": an IPv4 range with MEGASCALE_IB_ADDR_FAMILY=AF_INET6");
    }
    g[10] = g[11] = 0xff;
    std::memcpy(&g[12], &v4, 4);
    sel.range_addr = g;
    sel.range_prefix_len = len == 0 ? 0 : 96 + len;
    return sel;
  }
  if (inet_pton(AF_INET6, addr.c_str(), g.data()) == 1) {
    if (!len_ok || len > 128) {
      return make_error("MEGASCALE_IB_ADDR_RANGE=" + std::string(cidr) + ": an IPv6 prefix length is 0..128");
    }
    if (!sel.ipv6) {
      return make_error("MEGASCALE_IB_ADDR_RANGE=" + std::string(cidr) +
                        ": an IPv6 range needs MEGASCALE_IB_ADDR_FAMILY=AF_INET6");
    }
    sel.range_addr = g;
    sel.range_prefix_len = len;
    return sel;
  }
  return make_error("MEGASCALE_IB_ADDR_RANGE=" + std::string(cidr) + ": \"" + addr +
                    "\" is not an IP address");
}

Result<GidSelector> gid_selector_from_env(const EnvLookup& getenv) {
  GidSelector sel;
  if (const char* v = getenv("MEGASCALE_IB_GID_INDEX"); v != nullptr && *v != '\0') {
    const std::string_view s(v);
    int64_t idx = 0;
    auto [end, err] = std::from_chars(s.data(), s.data() + s.size(), idx);
    if (err != std::errc() || end != s.data() + s.size() || idx < -1 || idx > 65535) {
      return make_error("MEGASCALE_IB_GID_INDEX=" + std::string(s) +
                        ": expected a GID index 0..65535, or -1 for auto");
    }
    if (idx >= 0) sel.index = static_cast<uint32_t>(idx);
  }
  if (const char* v = getenv("MEGASCALE_IB_ADDR_FAMILY"); v != nullptr && *v != '\0') {
    const std::string_view s(v);
    if (s == "AF_INET") {
      sel.ipv6 = false;
    } else if (s == "AF_INET6") {
      sel.ipv6 = true;
    } else {
      return make_error("MEGASCALE_IB_ADDR_FAMILY=" + std::string(s) + ": expected AF_INET or AF_INET6");
    }
  }
  if (const char* v = getenv("MEGASCALE_IB_ROCE_VERSION_NUM"); v != nullptr && *v != '\0') {
    const std::string_view s(v);
    if (s == "2") {
      sel.roce_version = GidType::kRoceV2;
    } else if (s == "1") {
      sel.roce_version = GidType::kRoceV1;
    } else {
      return make_error("MEGASCALE_IB_ROCE_VERSION_NUM=" + std::string(s) + ": expected 1 or 2");
    }
  }
  if (const char* v = getenv("MEGASCALE_IB_ADDR_RANGE"); v != nullptr && *v != '\0') {
    return with_addr_range(sel, v);
  }
  return sel;
}

Result<const PortInfo*> select_port(const DeviceInfo& dev, uint32_t port) {
  if (port != 0) {
    for (const PortInfo& p : dev.ports) {
      if (p.port != port) continue;
      if (!p.active) {
        return make_error(ErrorCode::kSystem, dev.name + " port " + std::to_string(port) + ": state \"" +
                                                  p.state + "\", not ACTIVE (is the link up?)");
      }
      if (p.link_layer != "Ethernet") {
        return make_error(ErrorCode::kUnsupported, dev.name + " port " + std::to_string(port) +
                                                       ": link layer \"" + p.link_layer +
                                                       "\": the verbs wire speaks RoCE (Ethernet) only");
      }
      return &p;
    }
    return make_error(dev.name + " has no port " + std::to_string(port));
  }
  std::string why;
  for (const PortInfo& p : dev.ports) {
    if (p.active && p.link_layer == "Ethernet") return &p;
    why += "; port " + std::to_string(p.port) + ": " +
           (!p.active ? "state \"" + p.state + "\"" : "link layer \"" + p.link_layer + "\", not Ethernet");
  }
  if (dev.ports.empty()) why = "; it has no ports";
  return make_error(ErrorCode::kSystem, dev.name + ": no ACTIVE Ethernet (RoCE) port" + why);
}

Result<GidEntry> select_gid(const DeviceInfo& dev, const PortInfo& port, const GidSelector& sel) {
  if (sel.index) {
    for (const GidEntry& e : port.gids) {
      if (e.index == *sel.index) return e;
    }
    return make_error(where(dev, port) + ": MEGASCALE_IB_GID_INDEX=" + std::to_string(*sel.index) +
                      " names an empty GID entry (non-empty: " +
                      [&] {
                        std::string s;
                        for (const GidEntry& e : port.gids)
                          s += (s.empty() ? "" : ", ") + std::to_string(e.index);
                        return s.empty() ? std::string("none") : s;
                      }() +
                      ")");
  }
  // Rank: wanted version before the other, global before link-local, then lowest index.
  const GidEntry* best = nullptr;
  int best_rank = 0;
  std::string passed_over;
  for (const GidEntry& e : port.gids) {
    std::string why;
    if (e.type == GidType::kUnknown) {
      why = "unknown type";
    } else if (gid_is_ipv4(e.gid) == sel.ipv6) {
      why = sel.ipv6 ? "IPv4, not AF_INET6" : "IPv6, not AF_INET";
    } else if (!in_range(e.gid, sel)) {
      why = "outside MEGASCALE_IB_ADDR_RANGE";
    }
    if (!why.empty()) {
      passed_over += "; " + std::to_string(e.index) + " " + gid_to_string(e.gid) + ": " + why;
      continue;
    }
    const int rank = (e.type == sel.roce_version ? 0 : 2) + (gid_is_link_local(e.gid) ? 1 : 0);
    if (best == nullptr || rank < best_rank) {
      best = &e;
      best_rank = rank;
    }
  }
  if (best != nullptr) return *best;
  if (port.gids.empty()) passed_over = "; the GID table is empty (no IP address on the netdev yet?)";
  return make_error(ErrorCode::kSystem, where(dev, port) + ": no usable GID for " +
                                            (sel.ipv6 ? "AF_INET6" : "AF_INET") + passed_over);
}

}  // namespace megascale::wire::verbs
