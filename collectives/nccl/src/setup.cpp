// Init/finalize, devices and properties, and connection setup: listen, connect, accept, close.
#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstring>
#include <random>
#include <thread>

#include "log.h"
#include "megascale/engine/endpoint.h"
#include "net_result.h"
#include "plugin.h"
#include "registry.h"

namespace megascale::nccl::core {
namespace {

// close_comm's wait for requests NCCL already saw done.
constexpr TimeNs kCloseReapNs = 100 * kNsPerMs;

Context* as_context(void* p) {
  auto* c = static_cast<Context*>(p);
  return (c != nullptr && c->magic == kContextMagic) ? c : nullptr;
}

bool valid_dev(int dev) {
  return dev >= 0 && static_cast<size_t>(dev) < Registry::get().devices().size();
}

NetResult not_ready(const char* call) {
  MS_WARN("%s called before a successful init", call);
  return abi::kNetInternalError;
}

uint64_t random_nonzero() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  uint64_t v = 0;
  while (v == 0) v = rng();
  return v;
}

double ms_since(TimeNs t) {
  return static_cast<double>(wire::UdpWire::now() - t) / 1e6;
}

// The peer's address as the wire knows it (the host it connected from and its port).
std::string peer_of(DeviceWire& w, engine::ConnId conn) {
  uint32_t peer = 0;
  bool found = false;
  w.udp().with_endpoint([&](engine::Endpoint& ep) {
    if (const engine::Connection* c = ep.connection(conn)) {
      peer = c->peer();
      found = true;
    }
  });
  return found ? w.udp().peer_address(peer) : std::string("(gone)");
}

// Whether any request is still posted in the engine for this connection.
uint64_t engine_pending(DeviceWire& w, engine::ConnId conn) {
  uint64_t n = 0;
  w.udp().with_endpoint([&](engine::Endpoint& ep) {
    if (const engine::Connection* c = ep.connection(conn)) n = c->pending_requests();
  });
  return n;
}

// Opens one stripe's connection and sends its hello (leg.hello, which the engine reads until the send
// completes); on failure nothing of it is left.
Status open_leg(PendingConnect::Leg& leg, const std::string& address) {
  auto conn = leg.stripe.wire->udp().connect(address);
  if (!conn) return conn.error();
  leg.stripe.conn = *conn;
  auto req = leg.stripe.wire->udp().post_send(leg.stripe.conn, &leg.hello, sizeof leg.hello, kHelloTag);
  if (!req) {
    leg.stripe.wire->retire(leg.stripe.conn, /*abortive=*/true);
    return req.error();
  }
  leg.hello_req = *req;
  return {};
}

// Resets every connection a connect() opened so far (it failed, or its context goes).
void retire_legs(const PendingConnect& pc) {
  for (const auto& leg : pc.legs) leg->stripe.wire->retire(leg->stripe.conn, /*abortive=*/true);
}

NetResult close_comm(void* p, uint32_t magic, const char* what) {
  auto* comm = static_cast<CommBase*>(p);
  if (comm == nullptr) return abi::kNetSuccess;
  if (comm->magic != magic) {
    MS_WARN("%s: %p is not a %s comm", what, p, magic == kSendMagic ? "send" : "recv");
    return abi::kNetInvalidArgument;
  }
  // Requests NCCL saw done may still wait for empty parts or an optional receive's end, which come
  // within moments: give them that (a bounded wait) rather than reset the connections under them.
  const TimeNs reap_until = wire::UdpWire::now() + kCloseReapNs;
  while (comm->failed == abi::kNetSuccess && reap_deferred(comm) == abi::kNetSuccess &&
         !comm->deferred.empty() && comm->requests_in_use() == comm->deferred.size() &&
         wire::UdpWire::now() < reap_until) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  const uint32_t in_use = comm->requests_in_use();
  uint64_t pending = 0;
  for (const Stripe& st : comm->stripes) pending += engine_pending(*st.wire, st.conn);
  // NCCL frees its buffers once close returns: with anything still posted the engine must let go of
  // them now (release: the peer gets an RST), otherwise a clean close finishes in the wire's thread.
  const bool abortive = in_use > 0 || pending > 0;
  Registry& reg = Registry::get();
  reg.stats().remove(comm);
  for (const Stripe& st : comm->stripes) st.wire->retire(st.conn, abortive);
  if (comm->copier) {
    // Copies still queued write into shadows or NCCL's GPU buffers, which go once close returns.
    if (Status s = comm->copier->drain(); !s) MS_WARN("%s: %s", what, s.error().message.c_str());
    for (void* shadow : comm->orphan_shadows) comm->copier->free_shadow(shadow);
  }
  MS_INFO(abi::kSubsysNet, "%s: %s %s, %u request(s) outstanding, %" PRIu64 " completed", what,
          comm->peer.c_str(), abortive ? "reset" : "closed", in_use, comm->counters_copy().completed);
  comm->magic = 0;
  delete comm;
  reg.comm_closed();
  return abi::kNetSuccess;
}

}  // namespace

NetResult init(void** ctx, uint64_t comm_id, int traffic_class, abi::NetDebugLogger logger) {
  set_logger(logger);
  if (ctx == nullptr) {
    MS_WARN("init: ctx is NULL");
    return abi::kNetInvalidArgument;
  }
  *ctx = nullptr;
  Registry& reg = Registry::get();
  if (Status s = reg.ensure_ready(); !s) {
    MS_WARN("init failed: %s", s.error().message.c_str());
    return to_net_result(s.error().code);
  }
  if (traffic_class != abi::kTrafficClassUndef && (traffic_class < 0 || traffic_class > 255)) {
    MS_WARN("init: ncclConfig_t trafficClass=%d: must be an IP traffic class byte 0..255 (or unset)",
            traffic_class);
    return abi::kNetInvalidArgument;
  }
  auto* c = new Context;
  c->comm_id = comm_id;
  const int env_tc = reg.config().traffic_class;
  c->traffic_class = env_tc >= 0 ? env_tc : traffic_class >= 0 ? traffic_class : 0;
  reg.add_context(c);
  MS_INFO(abi::kSubsysInit | abi::kSubsysNet, "init comm %016" PRIx64 ": traffic class %d (DSCP %d)", comm_id,
          c->traffic_class, c->traffic_class >> 2);
  *ctx = c;
  return abi::kNetSuccess;
}

NetResult finalize(void* ctx) {
  if (ctx == nullptr) return abi::kNetSuccess;
  Context* c = as_context(ctx);
  if (c == nullptr) {
    MS_WARN("finalize: %p is not a context", ctx);
    return abi::kNetInvalidArgument;
  }
  {
    std::lock_guard<std::mutex> lock(c->mu);
    for (auto& [token, pc] : c->connects) retire_legs(*pc);
    c->connects.clear();
  }
  const uint64_t comm_id = c->comm_id;
  if (!Registry::get().remove_context(c)) {
    MS_WARN("finalize: context %p was already finalized", ctx);
    return abi::kNetInvalidArgument;
  }
  c->magic = 0;
  delete c;
  MS_INFO(abi::kSubsysInit | abi::kSubsysNet, "finalized comm %016" PRIx64, comm_id);
  return abi::kNetSuccess;
}

NetResult legacy_init(abi::NetDebugLogger logger) {
  set_logger(logger);
  Registry& reg = Registry::get();
  if (Status s = reg.ensure_ready(); !s) {
    MS_WARN("init failed: %s", s.error().message.c_str());
    return to_net_result(s.error().code);
  }
  reg.make_legacy_context();
  return abi::kNetSuccess;
}

void* legacy_context() {
  return Registry::get().legacy_context();
}

NetResult devices(int* ndev) {
  if (ndev == nullptr) return abi::kNetInvalidArgument;
  if (!Registry::get().ready()) return not_ready("devices");
  *ndev = static_cast<int>(Registry::get().devices().size());
  return abi::kNetSuccess;
}

NetResult get_properties(int dev, abi::NetPropertiesV12* props) {
  if (!Registry::get().ready()) return not_ready("getProperties");
  if (props == nullptr || !valid_dev(dev)) {
    MS_WARN("getProperties: bad device %d or NULL props", dev);
    return abi::kNetInvalidArgument;
  }
  const Device& d = Registry::get().devices()[static_cast<size_t>(dev)];
  std::memset(props, 0, sizeof *props);
  // The strings live as long as the registry (the library): NCCL keeps these pointers.
  props->name = const_cast<char*>(d.iface.name.c_str());
  props->pciPath = d.iface.pci_path.empty() ? nullptr : const_cast<char*>(d.iface.pci_path.c_str());
  props->guid = static_cast<uint64_t>(dev);  // every interface is its own port
  // GPU buffers only where the plugin copies them itself (MEGASCALE_GDR_COPY, on UDP and verbs devices
  // alike; Device::ptr_reason): NCCL uses them where NCCL_NET_GDR_LEVEL allows (a device without a PCI
  // path, like lo or rxe, hangs off the CPU: PHB).
  props->ptrSupport = d.ptr_support;
  props->regIsGlobal = 0;
  props->forceFlush = 0;
  props->speed = d.iface.speed_mbps > 0 ? d.iface.speed_mbps : 100000;
  props->port = 0;
  props->latency = 0;
  props->maxComms = 65536;
  props->maxRecvs = kMaxRecvs;
  props->netDeviceType = abi::kNetDeviceHost;
  props->netDeviceVersion = abi::kNetDeviceInvalidVersion;
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = dev;
  props->maxP2pBytes = abi::kMaxNetSizeBytes;
  props->maxCollBytes = abi::kMaxNetSizeBytes;
  props->maxMultiRequestSize = 1;
  props->railId = d.rail_id;
  props->planeId = d.plane_id;
  return abi::kNetSuccess;
}

NetResult listen(void* ctx, int dev, void* handle, void** listen_comm) {
  if (listen_comm != nullptr) *listen_comm = nullptr;  // on every failure too
  Context* c = as_context(ctx);
  if (c == nullptr || handle == nullptr || listen_comm == nullptr || !valid_dev(dev)) {
    MS_WARN("listen: bad arguments (ctx %p, dev %d, handle %p)", ctx, dev, handle);
    return abi::kNetInvalidArgument;
  }
  Registry& reg = Registry::get();
  const uint32_t k = reg.config().layout.stripes;
  auto w = reg.wires_for(dev, static_cast<uint8_t>(c->traffic_class >> 2), k);
  if (!w) {
    MS_WARN("listen: %s", w.error().message.c_str());
    return to_net_result(w.error().code);
  }
  const Device& d = reg.devices()[static_cast<size_t>(dev)];
  auto* l = new ListenComm;
  l->comm_id = c->comm_id;
  l->dev = dev;
  for (DeviceWire* wire : *w) l->stripes.push_back(Stripe{wire, 0});
  // One id for the listen on every stripe's wire (the handle carries it once): a random one that none
  // of them holds yet. Stripes beyond MEGASCALE_LAYOUT's wires share wires; a wire holds the listen once.
  std::vector<DeviceWire*> distinct = *w;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  for (bool taken = true; taken;) {
    l->listen_id = random_nonzero();
    taken = false;
    for (size_t i = 0; i < distinct.size() && !taken; ++i) {
      if (distinct[i]->add_listen(l->listen_id)) continue;
      taken = true;
      for (size_t j = 0; j < i; ++j) distinct[j]->remove_listen(l->listen_id);
    }
  }
  ListenHandle h{};
  h.magic = kHandleMagic;
  h.version = kHandleVersion;
  h.dscp = l->stripes[0].wire->dscp();
  h.stripes = static_cast<uint8_t>(k);
  h.stripe_bytes = static_cast<uint32_t>(reg.config().layout.stripe_bytes);
  h.listen_id = l->listen_id;
  std::snprintf(h.ifname, sizeof h.ifname, "%s", d.iface.name.c_str());
  if (is_verbs(d.wire)) {
    h.wire = static_cast<uint8_t>(d.wire == WireKind::kVerbsRc ? HandleWire::kVerbsRc : HandleWire::kVerbsUd);
    h.family = 6;
    for (uint32_t i = 0; i < k; ++i) {
      if (Status st = put_verbs_address(h, i, l->stripes[i].wire->udp().local_address()); !st) {
        MS_WARN("listen: %s", st.error().message.c_str());
        for (DeviceWire* wire : distinct) wire->remove_listen(l->listen_id);
        delete l;
        return abi::kNetInternalError;
      }
    }
  } else {
    h.wire = static_cast<uint8_t>(HandleWire::kUdp);
    h.family = d.iface.family == AF_INET6 ? 6 : 4;
    h.port = l->stripes[0].wire->udp().local_port();
    inet_pton(d.iface.family, d.iface.address.c_str(), h.addr);
    for (uint32_t i = 1; i < k; ++i) h.stripe_ports[i - 1] = l->stripes[i].wire->udp().local_port();
  }
  seal_handle(h);
  std::memcpy(handle, &h, sizeof h);
  reg.listen_opened();
  *listen_comm = l;
  MS_INFO(abi::kSubsysNet, "listening on %s %s (listen %016" PRIx64 ", %u stripe(s))", d.iface.name.c_str(),
          stripe_address(h, 0).c_str(), h.listen_id, k);
  return abi::kNetSuccess;
}

NetResult connect(void* ctx, int dev, int traffic_class, void* handle, void** send_comm) {
  if (send_comm != nullptr) *send_comm = nullptr;  // on every failure too
  Context* c = as_context(ctx);
  if (c == nullptr || handle == nullptr || send_comm == nullptr || !valid_dev(dev)) {
    MS_WARN("connect: bad arguments (ctx %p, dev %d, handle %p)", ctx, dev, handle);
    return abi::kNetInvalidArgument;
  }
  Registry& reg = Registry::get();
  reg.tick(wire::UdpWire::now());
  ListenHandle h;
  std::memcpy(&h, handle, sizeof h);
  if (Status st = check_listen_handle(h); !st) {
    MS_WARN("connect: %s", st.error().message.c_str());
    return abi::kNetInvalidArgument;
  }
  std::lock_guard<std::mutex> lock(c->mu);
  PendingConnect* pc = nullptr;
  if (h.connect_token != 0) {
    auto it = c->connects.find(h.connect_token);
    if (it == c->connects.end()) {
      MS_WARN("connect: the handle's connect already finished or belongs to another context");
      return abi::kNetInvalidUsage;
    }
    pc = it->second.get();
  } else {
    const Device& d = reg.devices()[static_cast<size_t>(dev)];
    const HandleWire mine = d.wire == WireKind::kVerbsUd   ? HandleWire::kVerbsUd
                            : d.wire == WireKind::kVerbsRc ? HandleWire::kVerbsRc
                                                           : HandleWire::kUdp;
    if (static_cast<HandleWire>(h.wire) != mine) {
      MS_WARN(
          "connect: the peer listens on the %s wire but device %d (%s) is on %s: set the same "
          "MEGASCALE_WIRE on every rank",
          to_string(static_cast<HandleWire>(h.wire)), dev, d.iface.name.c_str(), to_string(mine));
      return abi::kNetInvalidArgument;
    }
    if (mine == HandleWire::kUdp && (h.family == 6) != (d.iface.family == AF_INET6)) {
      MS_WARN("connect: the peer listens on IPv%u but device %d (%s) is IPv%d", h.family, dev,
              d.iface.name.c_str(), d.iface.family == AF_INET6 ? 6 : 4);
      return abi::kNetInvalidArgument;
    }
    const int env_tc = reg.config().traffic_class;
    const int tc = env_tc >= 0                                  ? env_tc
                   : traffic_class >= 0 && traffic_class <= 255 ? traffic_class
                                                                : c->traffic_class;
    auto w = reg.wires_for(dev, static_cast<uint8_t>(tc >> 2), h.stripes);
    if (!w) {
      MS_WARN("connect: %s", w.error().message.c_str());
      return to_net_result(w.error().code);
    }
    auto p = std::make_unique<PendingConnect>();
    p->dev = dev;
    p->started_ns = wire::UdpWire::now();
    p->peer = stripe_address(h, 0) + " (" + std::string(h.ifname, strnlen(h.ifname, 16)) + ")";
    uint64_t token = random_nonzero();
    while (c->connects.count(token) != 0) token = random_nonzero();
    p->token = token;
    p->stripe_bytes = h.stripe_bytes;
    for (uint32_t i = 0; i < h.stripes; ++i) {
      const std::string address = stripe_address(h, i);
      auto leg = std::make_unique<PendingConnect::Leg>();
      leg->stripe.wire = (*w)[i];
      leg->hello = Hello{kHelloMagic, kHandleVersion, static_cast<uint16_t>(i), h.listen_id, token};
      if (Status st = open_leg(*leg, address); !st) {
        MS_WARN("connect to %s (stripe %u, %s): %s", p->peer.c_str(), i, address.c_str(),
                st.error().message.c_str());
        retire_legs(*p);
        return to_net_result(st.error().code);
      }
      p->legs.push_back(std::move(leg));
    }
    // NCCL calls again with this same buffer: the token finds this state.
    std::memcpy(static_cast<uint8_t*>(handle) + offsetof(ListenHandle, connect_token), &token, sizeof token);
    pc = p.get();
    c->connects.emplace(token, std::move(p));
  }

  bool all_done = true;
  for (size_t i = 0; i < pc->legs.size(); ++i) {
    PendingConnect::Leg& leg = *pc->legs[i];
    if (leg.done) continue;
    const engine::Completion done = leg.stripe.wire->udp().test(leg.stripe.conn, leg.hello_req);
    if (!done.done) {
      all_done = false;
      continue;
    }
    if (!done.ok) {
      MS_WARN("connect to %s failed after %.1f ms (stripe %zu): %s", pc->peer.c_str(),
              ms_since(pc->started_ns), i, done.error.c_str());
      retire_legs(*pc);
      c->connects.erase(pc->token);
      return to_net_result(done.code);
    }
    leg.done = true;
  }
  if (!all_done) return abi::kNetSuccess;  // NCCL calls again
  std::vector<Stripe> stripes;
  for (auto& leg : pc->legs) stripes.push_back(leg->stripe);
  // The listener's cut (the handle's), not ours: its receives place the parts.
  auto* s = new CommBase(kSendMagic, Role::kSend, kSendPoolSize, std::move(stripes), pc->stripe_bytes);
  s->dev = pc->dev;
  s->comm_id = c->comm_id;
  s->ifname = reg.devices()[static_cast<size_t>(pc->dev)].iface.name;
  s->peer = pc->peer;
  s->opened_ns = wire::UdpWire::now();
  MS_INFO(abi::kSubsysNet, "connected %s -> %s in %.1f ms (wire %u, conn %016" PRIx64 ", %u stripe(s))",
          s->ifname.c_str(), s->peer.c_str(), ms_since(pc->started_ns), s->wire()->index(), s->conn(),
          s->stripe_count());
  c->connects.erase(pc->token);
  reg.comm_opened(s);
  *send_comm = s;
  return abi::kNetSuccess;
}

NetResult accept(void* listen_comm, void** recv_comm) {
  if (recv_comm != nullptr) *recv_comm = nullptr;  // on every failure too
  auto* l = static_cast<ListenComm*>(listen_comm);
  if (l == nullptr || l->magic != kListenMagic || recv_comm == nullptr) {
    MS_WARN("accept: %p is not a listen comm", listen_comm);
    return abi::kNetInvalidArgument;
  }
  Registry& reg = Registry::get();
  const TimeNs now = wire::UdpWire::now();
  reg.tick(now);
  if (l->accept_started_ns == 0) l->accept_started_ns = now;
  bool all_accepted = true;
  for (size_t i = 0; i < l->stripes.size(); ++i) {
    Stripe& st = l->stripes[i];
    if (st.conn != 0) continue;
    const std::optional<engine::ConnId> conn = st.wire->accept_for(l->listen_id, static_cast<uint16_t>(i));
    if (conn) {
      st.conn = *conn;
    } else {
      all_accepted = false;
    }
  }
  if (!all_accepted) return abi::kNetSuccess;  // NCCL calls again
  auto* r =
      new CommBase(kRecvMagic, Role::kRecv, kRecvPoolSize, l->stripes, reg.config().layout.stripe_bytes);
  for (Stripe& st : l->stripes) st.conn = 0;  // the comm has them; the listen waits for the next
  r->dev = l->dev;
  r->comm_id = l->comm_id;
  r->ifname = reg.devices()[static_cast<size_t>(l->dev)].iface.name;
  r->peer = peer_of(*r->wire(), r->conn());
  r->opened_ns = wire::UdpWire::now();
  MS_INFO(abi::kSubsysNet, "accepted %s <- %s in %.1f ms (wire %u, conn %016" PRIx64 ", %u stripe(s))",
          r->ifname.c_str(), r->peer.c_str(), ms_since(l->accept_started_ns), r->wire()->index(), r->conn(),
          r->stripe_count());
  l->accept_started_ns = 0;  // the next accept() on this listen times its own connection
  reg.comm_opened(r);
  *recv_comm = r;
  return abi::kNetSuccess;
}

NetResult close_send(void* send_comm) {
  return close_comm(send_comm, kSendMagic, "closeSend");
}
NetResult close_recv(void* recv_comm) {
  return close_comm(recv_comm, kRecvMagic, "closeRecv");
}

NetResult close_listen(void* listen_comm) {
  auto* l = static_cast<ListenComm*>(listen_comm);
  if (l == nullptr) return abi::kNetSuccess;
  if (l->magic != kListenMagic) {
    MS_WARN("closeListen: %p is not a listen comm", listen_comm);
    return abi::kNetInvalidArgument;
  }
  for (const Stripe& st : l->stripes) {
    // A stripe accepted while another had not arrived yet: no comm will take it.
    if (st.conn != 0) st.wire->retire(st.conn, /*abortive=*/true);
    st.wire->remove_listen(l->listen_id);
  }
  l->magic = 0;
  delete l;
  Registry::get().listen_closed();
  return abi::kNetSuccess;
}

NetResult set_net_attr(void* ctx, abi::NetAttrV12* attr) {
  if (as_context(ctx) == nullptr || attr == nullptr) {
    MS_WARN("setNetAttr: bad arguments (ctx %p, attr %p)", ctx, static_cast<void*>(attr));
    return abi::kNetInvalidArgument;
  }
  static std::atomic<bool> logged{false};
  if (!logged.exchange(true)) {
    MS_INFO(
        abi::kSubsysNet | abi::kSubsysTuning,
        "setNetAttr hints are ignored: every connection runs MEGASCALE_CC (%s) with MEGASCALE_LAYOUT's lanes "
        "whatever the peers/flows/op/algo/proto (first hint: send peers %d..%d flows %d..%d, op 0x%x)",
        Registry::get().config().cc.name.c_str(), attr->sendCommAttr.minConcurrentPeers,
        attr->sendCommAttr.maxConcurrentPeers, attr->sendCommAttr.minFlowsPerPeer,
        attr->sendCommAttr.maxFlowsPerPeer, attr->op);
  }
  return abi::kNetSuccess;
}

}  // namespace megascale::nccl::core
