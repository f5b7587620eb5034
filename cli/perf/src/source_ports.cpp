// The perf client's lane source ports (source_ports.h).
#include "megascale/perf/source_ports.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <sys/socket.h>

#include <string>

#include "megascale/topology/fabric.h"
#include "megascale/topology/ports.h"

namespace megascale::perf {
namespace {

std::string join(const std::vector<uint16_t>& ports) {
  std::string out;
  for (uint16_t p : ports) out += fmt::format("{}{}", out.empty() ? "" : ",", p);
  return out;
}

std::string ipv4_text(uint32_t host_order) {
  return fmt::format("{}.{}.{}.{}", host_order >> 24, (host_order >> 16) & 0xFF, (host_order >> 8) & 0xFF,
                     host_order & 0xFF);
}

// The IPv4 address (host byte order) `host` names: a literal, or the first A record.
Result<uint32_t> resolve_ipv4(std::string_view host) {
  in_addr a{};
  const std::string h(host);
  if (inet_pton(AF_INET, h.c_str(), &a) == 1) return ntohl(a.s_addr);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(h.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    return make_error(fmt::format("no IPv4 address for '{}' ({})", host, gai_strerror(rc)));
  }
  const uint32_t out = ntohl(reinterpret_cast<const sockaddr_in*>(res->ai_addr)->sin_addr.s_addr);
  freeaddrinfo(res);
  return out;
}

}  // namespace

Result<LanePorts> resolve_lane_ports(const PerfOptions& o, std::string_view server_host, uint16_t server_port,
                                     std::string_view bind_host) {
  LanePorts out;
  if (!o.source_ports.empty()) {
    out.ports = o.source_ports;
    out.describe = fmt::format("{} (--source-ports)", join(out.ports));
    return out;
  }
  if (o.fabric.empty()) return out;
  Result<topo::Fabric> fabric = topo::load_fabric(o.fabric);
  if (!fabric) return make_error(fmt::format("--fabric {}: {}", o.fabric, fabric.error().message));
  Result<topo::NodeId> src = topo::parse_endpoint(*fabric, o.from);
  if (!src) return make_error(fmt::format("--from {}: {}", o.from, src.error().message));
  Result<topo::NodeId> dst = topo::parse_endpoint(*fabric, o.to);
  if (!dst) return make_error(fmt::format("--to {}: {}", o.to, dst.error().message));
  if (*src == *dst) return make_error(fmt::format("--from {} and --to {}: the same NIC", o.from, o.to));
  topo::PortMappingRequest req;
  req.src_nic = *src;
  req.dst_nic = *dst;
  req.lanes = o.lanes;
  // The switches hash the datagrams' real 5-tuple: the server's address and port (every lane sends to
  // the server's socket 0, the address the connection was opened with).
  req.dport = server_port;
  Result<uint32_t> dst_ip = resolve_ipv4(server_host);
  if (!dst_ip) return make_error(fmt::format("--fabric: the server: {}", dst_ip.error().message));
  req.dst_ip = *dst_ip;
  in_addr bound{};
  const std::string bh(bind_host);
  const bool specific = inet_pton(AF_INET, bh.c_str(), &bound) == 1 && bound.s_addr != htonl(INADDR_ANY);
  if (specific) req.src_ip = ntohl(bound.s_addr);
  std::string hash_text = "no --hash: ports stepped evenly over 49152-65535, paths unknown";
  if (!o.hashes.empty()) {
    Result<topo::EcmpModel> m = topo::parse_ecmp_model(o.hashes);
    if (!m) return make_error(fmt::format("--hash: {}", m.error().message));
    req.ecmp = *m;
    hash_text = "hash " + topo::describe_ecmp_model(*fabric, *m);
  }
  Result<topo::PortMapping> mapping = topo::map_source_ports(*fabric, req);
  if (!mapping) return make_error(fmt::format("--fabric {}: {}", o.fabric, mapping.error().message));
  for (const topo::LanePort& lane : mapping->lanes) out.ports.push_back(lane.sport);
  out.path_count = mapping->path_count;
  out.distinct_paths = mapping->distinct_paths;
  const std::string src_text =
      specific ? ipv4_text(*req.src_ip)
               : fmt::format(
                     "{} (the model's address for {}: the client binds no specific IPv4 address; "
                     "--bind IP hashes the real one)",
                     ipv4_text(topo::nic_ipv4(*fabric, *src)), o.from);
  const std::string paths_text = req.ecmp ? fmt::format("{} lanes on {} distinct paths of {}", o.lanes,
                                                        mapping->distinct_paths, mapping->path_count)
                                          : fmt::format("{} equal-cost paths", mapping->path_count);
  out.describe = fmt::format("{} (--fabric {} {} -> {}: {}; {}; 5-tuple {} -> {}:{})", join(out.ports),
                             fabric->spec().name, o.from, o.to, paths_text, hash_text, src_text,
                             ipv4_text(*dst_ip), server_port);
  return out;
}

}  // namespace megascale::perf
