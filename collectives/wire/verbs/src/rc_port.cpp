// verbs-rc's port (port.h): every engine packet is an RDMA write with immediate into the peer's receive
// ring, on one RC QP per (peer, slot) lane. The home UD QP carries only the set-up messages
// (rc_setup.h) that connect a lane: the first packet for a lane creates its QP and sends the peer a
// request; the peer creates its QP of the lane, brings it to RTS and answers; the answer brings ours
// to RTS. Packets for a lane still connecting wait in a bounded queue (copied), and so do packets for
// a lane out of ring credit; beyond the bound they are dropped and counted (the engine recovers them).
// Every packet, the engine's handshake included, goes over RC: the UD QP never carries engine bytes.
//
// A QP that fails (retry exceeded: a link flap, a peer gone) is re-created with its epoch + 1 and
// re-connected over UD; the writes it had not completed are not posted again (the engine retransmits
// what it misses). An outage longer than the retry budget fails the lane: its packets are dropped
// from then on, so the engine's own retry budget expires and its connection fails with its timeout;
// the reason is counted (rc_lane_failures) and printed once to stderr naming peer, lane, QP errors,
// the last status and the budget.
#include "rc_port.h"

#include <arpa/inet.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace megascale::wire::verbs {
namespace rc_detail {

// "[GID]/QPN(hex)", the port's address text (port.h).
std::string format_address(const Gid& gid, uint32_t qpn) {
  return format_port_address(PortAddress{gid, qpn});
}

Result<std::pair<Gid, uint32_t>> parse_address(std::string_view text) {
  Result<PortAddress> a = parse_port_address(text);
  if (!a) return a.error();
  return std::make_pair(a->gid, a->qpn);
}

Result<std::unique_ptr<PacketPort>> RcPort::open(const VerbsPortConfig& c) {
  if (c.slots == 0 || c.slots > 64) {
    return make_error(ErrorCode::kInvalidArgument, "verbs-rc: slots " + std::to_string(c.slots) + " (1..64)");
  }
  if (c.ring_slots < 2 || c.ring_slots > 4096) {
    return make_error(ErrorCode::kInvalidUsage,
                      "verbs-rc: ring_slots " + std::to_string(c.ring_slots) + " (2..4096)");
  }
  if (c.segment_bytes == 0 || c.segment_bytes > engine::kMaxSegmentPayload) {
    return make_error(ErrorCode::kInvalidUsage, "verbs-rc: segment_bytes " + std::to_string(c.segment_bytes) +
                                                    " (1.." + std::to_string(engine::kMaxSegmentPayload) +
                                                    ")");
  }
  cc::RtoParams rto;
  rto.initial_rto_ns = c.initial_rto_ns;
  rto.retry_budget_ns = c.retry_budget_ns;
  Result<NicRetry> nic = derive_nic_retry(rto);
  if (!nic) return make_error(ErrorCode::kInvalidUsage, "verbs-rc: " + nic.error().message);

  Result<std::vector<DeviceInfo>> devs = discover_devices(c.sysfs_root);
  if (!devs) return devs.error();
  const DeviceInfo* dev = nullptr;
  const PortInfo* port = nullptr;
  std::string why = "no RDMA device under " + c.sysfs_root;
  for (const DeviceInfo& d : *devs) {
    if (!c.device.empty() && d.name != c.device) continue;
    Result<const PortInfo*> p = select_port(d, c.port);
    if (p) {
      dev = &d;
      port = *p;
      break;
    }
    why = p.error().message;
  }
  if (dev == nullptr && !c.device.empty() && why.rfind("no RDMA device", 0) == 0) {
    why = "no RDMA device '" + c.device + "' under " + c.sysfs_root;
  }
  if (dev == nullptr) return make_error(ErrorCode::kUnsupported, "verbs-rc: " + why);
  Result<GidEntry> gid = select_gid(*dev, *port, c.gid);
  if (!gid) return gid.error();

  Result<std::unique_ptr<IbDevice>> ib = IbDevice::open(dev->name, port->port);
  if (!ib) return ib.error();
  return make(c, std::move(*ib), *gid);
}

Result<std::unique_ptr<PacketPort>> RcPort::make(const VerbsPortConfig& c, std::unique_ptr<IbDevice> dev,
                                                 const GidEntry& gid) {
  cc::RtoParams rto;
  rto.initial_rto_ns = c.initial_rto_ns;
  rto.retry_budget_ns = c.retry_budget_ns;
  Result<NicRetry> nic = derive_nic_retry(rto);
  if (!nic) return make_error(ErrorCode::kInvalidUsage, "verbs-rc: " + nic.error().message);
  if (c.rc_queue_bytes == 0) {
    return make_error(ErrorCode::kInvalidUsage,
                      "verbs-rc: rc_queue_bytes 0 (at least 1: one write is always allowed)");
  }
  auto self = std::unique_ptr<RcPort>(new RcPort());
  self->cfg_ = c;
  self->nic_ = *nic;
  self->gid_ = gid;
  self->dev_ = std::move(dev);
  while (self->port_id_ == 0) self->port_id_ = (uint64_t{self->rng_()} << 32) | self->rng_();
  self->mtu_ = self->dev_->active_mtu_bytes();
  self->slot_bytes_ = rc_slot_bytes(c.segment_bytes);
  // Writes are bounded by ring credit, credit returns by the writes consumed: twice the ring covers both.
  self->lane_send_depth_ = 2 * c.ring_slots + 8;
  self->lane_recv_depth_ = 2 * c.ring_slots + 8;
  Result<std::unique_ptr<IbCq>> cq = self->dev_->create_cq(kCqDepth);
  if (!cq) return cq.error();
  self->cq_ = std::move(*cq);
  Result<std::unique_ptr<IbUdQp>> home = self->dev_->create_ud_qp(
      *self->cq_, {.qkey = kQkey, .send_depth = kHomeSends, .recv_depth = kHomeRecvs});
  if (!home) return home.error();
  self->home_ = std::move(*home);
  self->cq_budget_ -= kHomeSends + kHomeRecvs;

  MrCache& mrs = self->dev_->mr_cache();
  self->home_recv_.resize(size_t{kHomeRecvs} * (kGrhBytes + self->mtu_));
  self->home_send_.resize(size_t{kHomeSends} * kRcSetupBytes);
  const uint32_t pool_slots = std::min<uint32_t>(c.slots * c.send_depth, 4096);
  self->pool_.resize(size_t{pool_slots} * self->slot_bytes_);
  Result<MrKeys> rk = mrs.find_or_register(addr_of(self->home_recv_.data()), self->home_recv_.size());
  Result<MrKeys> sk = mrs.find_or_register(addr_of(self->home_send_.data()), self->home_send_.size());
  Result<MrKeys> pk = mrs.find_or_register(addr_of(self->pool_.data()), self->pool_.size());
  if (!rk) return rk.error();
  if (!sk) return sk.error();
  if (!pk) return pk.error();
  self->home_recv_keys_ = *rk;
  self->home_send_keys_ = *sk;
  self->pool_keys_ = *pk;
  for (uint32_t i = kHomeSends; i-- > 0;) self->home_send_free_.push_back(i);
  for (uint32_t i = pool_slots; i-- > 0;) self->pool_free_.push_back(i);
  self->pool_data_bytes_.assign(pool_slots, 0);
  for (uint32_t i = 0; i < kHomeRecvs; ++i) {
    if (Status s = self->post_home_recv(i); !s) return s.error();
  }
  self->describe_ = "verbs-rc " + self->dev_->name() + " port " + std::to_string(self->dev_->port()) +
                    " gid " + std::to_string(gid.index) + " (" + gid_to_string(gid.gid) + ", " +
                    std::string(to_string(gid.type)) + ") mtu " + std::to_string(self->mtu_) + ", " +
                    std::to_string(c.slots) + " RC QPs per peer, ring " + std::to_string(c.ring_slots) +
                    " x " + std::to_string(self->slot_bytes_) + " B, NIC timeout 2^" +
                    std::to_string(nic->timeout_exp) + " retry " + std::to_string(nic->retry_cnt);
  return std::unique_ptr<PacketPort>(std::move(self));
}

Status RcPort::post_home_recv(uint32_t i) {
  const uint32_t len = kGrhBytes + mtu_;
  Result<RecvWr> wr =
      make_ud_recv({WrKind::kUdRecv, kHomeLane, home_gen_, i},
                   {addr_of(home_recv_.data() + size_t{i} * len), len, home_recv_keys_.lkey}, mtu_);
  if (!wr) return wr.error();
  return home_->post_recv(*wr);
}

Result<uint32_t> RcPort::make_ah(const Gid& gid) {
  return dev_->create_ah({.dgid = gid,
                          .sgid_index = static_cast<uint8_t>(gid_.index),
                          .traffic_class = cfg_.traffic_class,
                          .hop_limit = 64,
                          .flow_label = 0,
                          .port_num = static_cast<uint8_t>(dev_->port())});
}

Result<uint32_t> RcPort::intern(const Gid& gid, uint32_t qpn) {
  for (uint32_t i = 0; i < peers_.size(); ++i) {
    if (peers_[i]->gid == gid && peers_[i]->home_qpn == qpn) return i;
  }
  if (peers_.size() >= cfg_.max_peers) {
    ++stats_.peer_table_full;
    return make_error(ErrorCode::kInvalidUsage,
                      "verbs-rc: peer table full (" + std::to_string(cfg_.max_peers) + " peers)");
  }
  return add_new_peer(gid, qpn);
}

Result<uint32_t> RcPort::add_new_peer(const Gid& gid, uint32_t qpn) {
  auto p = std::make_unique<Peer>();
  p->gid = gid;
  p->home_qpn = qpn;
  p->text = format_address(gid, qpn);
  Result<uint32_t> ah = make_ah(gid);
  if (!ah) return ah.error();
  p->ah = *ah;
  p->ring.resize(size_t{cfg_.slots} * cfg_.ring_slots * slot_bytes_);
  Result<MrKeys> keys = dev_->register_ring(p->ring.data(), p->ring.size());
  if (!keys) return keys.error();
  p->ring_keys = *keys;
  p->lanes.resize(cfg_.slots);
  peers_.push_back(std::move(p));
  return static_cast<uint32_t>(peers_.size() - 1);
}

void RcPort::drop_qp(Lane& l) {
  if (l.qp) {
    by_qpn_.erase(l.qp->qpn());
    l.qp.reset();
    cq_budget_ += lane_send_depth_ + lane_recv_depth_;
  }
  for (uint32_t s : l.outstanding) pool_free_.push_back(s);
  l.outstanding.clear();
  l.posted_bytes = 0;
  l.credits_owed = 0;
}

Status RcPort::create_qp(uint32_t peer, uint32_t lane, uint16_t epoch) {
  Lane& l = peers_[peer]->lanes[lane];
  drop_qp(l);
  if (cq_budget_ < lane_send_depth_ + lane_recv_depth_) {
    return make_error(ErrorCode::kInvalidUsage,
                      "verbs-rc: the completion queue (" + std::to_string(kCqDepth) +
                          " entries) has no room for "
                          "another RC QP (peer " +
                          peers_[peer]->text + " lane " + std::to_string(lane) + ")");
  }
  Result<std::unique_ptr<IbRcQp>> qp = dev_->create_rc_qp(*cq_, lane_send_depth_, lane_recv_depth_);
  if (!qp) return qp.error();
  cq_budget_ -= lane_send_depth_ + lane_recv_depth_;
  l.qp = std::move(*qp);
  l.used = true;
  l.epoch = epoch;
  l.psn = rng_() & 0xFFFFFF;
  l.writer = RingWriter(cfg_.ring_slots);
  l.reader = RingReader(cfg_.ring_slots, std::max<uint32_t>(1, cfg_.ring_slots / 4));
  by_qpn_[l.qp->qpn()] = {peer, lane};
  for (uint32_t i = 0; i < lane_recv_depth_; ++i) {
    if (Status s = l.qp->post_recv(make_rc_recv({WrKind::kRcRecv, static_cast<uint8_t>(lane), epoch, i}));
        !s) {
      return s;
    }
  }
  return {};
}

Status RcPort::connect_qp(uint32_t peer, uint32_t lane, const RcSetupMsg& m) {
  Peer& p = *peers_[peer];
  Lane& l = p.lanes[lane];
  RcPeer to;
  to.path = {.dgid = p.gid,
             .sgid_index = static_cast<uint8_t>(gid_.index),
             .traffic_class = cfg_.traffic_class,
             .hop_limit = 64,
             .flow_label = 0,
             .port_num = static_cast<uint8_t>(dev_->port())};
  to.qpn = m.qpn;
  to.psn = m.psn;
  to.mtu_bytes = std::min(mtu_, m.mtu_bytes);
  if (Status s = l.qp->connect(to, nic_, l.psn); !s) return s;
  l.state = Lane::State::kUp;
  l.resend_at = kNever;
  ++lanes_connected_;
  flush_lane(peer, lane);
  return {};
}

void RcPort::start_connect(uint32_t peer, uint32_t lane, TimeNs now) {
  Lane& l = peers_[peer]->lanes[lane];
  const uint16_t epoch = l.used ? static_cast<uint16_t>(l.epoch + 1) : l.epoch;
  if (l.outage_start == kNever) l.outage_start = now;
  if (Status s = create_qp(peer, lane, epoch); !s) {
    fail_lane(peer, lane, now, s.error().message);
    return;
  }
  l.state = Lane::State::kConnecting;
  send_setup(peer, lane, RcSetupKind::kRequest);
  l.resend_at = now + kSetupResendNs;
}

void RcPort::recover_home(TimeNs now) {
  const uint32_t old_qpn = home_->qpn();
  Status reset = cfg_.rc_home_reset ? home_->reset() : Status(make_error("the port re-creates it"));
  if (reset) {
    ++home_resets_;
    std::fprintf(stderr, "verbs-rc: home QP reset to RTS (QPN 0x%x)\n", old_qpn);
  } else {
    Result<std::unique_ptr<IbUdQp>> q =
        dev_->create_ud_qp(*cq_, {.qkey = kQkey, .send_depth = kHomeSends, .recv_depth = kHomeRecvs});
    if (!q) {
      std::fprintf(stderr, "verbs-rc: home QP: reset: %s; re-creating: %s; trying again\n",
                   reset.error().message.c_str(), q.error().message.c_str());
      home_reset_at_ = now + 5 * kSetupResendNs;
      return;
    }
    // The old QP goes now: its WRs with it (completions of them still in the CQ carry the old
    // incarnation in their tags and are ignored).
    home_ = std::move(*q);
    ++home_recreated_;
    std::fprintf(stderr,
                 "verbs-rc: home QP re-created (reset: %s): QPN 0x%x -> 0x%x (peers learn it from set-up "
                 "messages)\n",
                 reset.error().message.c_str(), old_qpn, home_->qpn());
  }
  ++home_gen_;
  home_reset_at_ = kNever;
  path_stale_ = true;
  // While the link stays down the QP errors again at its first send: wait longer each time.
  home_backoff_ = std::min<TimeNs>(2 * home_backoff_, kNsPerSec);
  home_send_free_.clear();
  for (uint32_t i = kHomeSends; i-- > 0;) home_send_free_.push_back(i);
  for (uint32_t i = 0; i < kHomeRecvs; ++i) {
    if (Status s = post_home_recv(i); !s) ++stats_.recv_errors;
  }
}

bool RcPort::refresh_path() {
  Result<Gid> at = dev_->query_gid(gid_.index);
  if (!at || *at != gid_.gid) {
    // The GID left its index: find it again; until the kernel has re-added it, wait.
    bool found = false;
    if (Result<std::vector<DeviceInfo>> devs = discover_devices(cfg_.sysfs_root); devs) {
      for (const DeviceInfo& d : *devs) {
        if (d.name != dev_->name()) continue;
        for (const PortInfo& port : d.ports) {
          if (port.port != dev_->port()) continue;
          for (const GidEntry& g : port.gids) {
            if (g.gid != gid_.gid || found) continue;
            found = true;
            if (g.index != gid_.index) {
              std::fprintf(stderr, "verbs-rc: GID %s moved from index %u to %u\n",
                           gid_to_string(g.gid).c_str(), gid_.index, g.index);
              gid_.index = g.index;
            }
          }
        }
      }
    }
    if (!found) return false;
  }
  // Address handles made before may name the GID entry the kernel replaced: new ones for every peer.
  for (auto& p : peers_) {
    if (Result<uint32_t> ah = make_ah(p->gid); ah) p->ah = *ah;
  }
  path_stale_ = false;
  return true;
}

void RcPort::send_setup(uint32_t peer, uint32_t lane, RcSetupKind kind) {
  // Whatever is not sent now: the timer sends a request again, and a lost answer is asked again.
  if (home_send_free_.empty() || home_reset_at_ != kNever) return;
  // A send while the link is down would error the home QP as a whole (rxe): wait for the port.
  if (cfg_.rc_setup_waits_for_port && !dev_->port_active()) {
    path_stale_ = true;
    ++setups_deferred_;
    return;
  }
  if (path_stale_ && !refresh_path()) {
    ++setups_deferred_;
    return;
  }
  Peer& p = *peers_[peer];
  Lane& l = p.lanes[lane];
  const uint32_t i = home_send_free_.back();
  uint8_t* buf = home_send_.data() + size_t{i} * kRcSetupBytes;
  RcSetupMsg m;
  m.kind = kind;
  m.lane = static_cast<uint8_t>(lane);
  m.epoch = l.epoch;
  m.home_gid = gid_.gid;
  m.home_qpn = home_->qpn();
  m.qpn = l.qp->qpn();
  m.psn = l.psn;
  m.mtu_bytes = mtu_;
  m.ring = {.addr = addr_of(p.ring.data()),
            .rkey = p.ring_keys.rkey,
            .slots = cfg_.ring_slots,
            .slot_bytes = slot_bytes_};
  m.ring_lanes = cfg_.slots;
  m.port_id = port_id_;
  Status enc = encode_rc_setup(m, buf);
  Result<SendWr> wr = enc ? make_ud_send({.tag = {WrKind::kUdSend, kHomeLane, home_gen_, i},
                                          .header = {addr_of(buf), static_cast<uint32_t>(kRcSetupBytes),
                                                     home_send_keys_.lkey},
                                          .payload = {},
                                          .ah = p.ah,
                                          .remote_qpn = p.home_qpn,
                                          .qkey = kQkey,
                                          .mtu_bytes = mtu_,
                                          .signaled = true})
                          : Result<SendWr>(enc.error());
  Status posted = wr ? home_->post_send(*wr, dev_->ah(p.ah)) : Status(wr.error());
  if (!posted) {
    ++stats_.send_errors;
    std::fprintf(stderr, "verbs-rc: set-up message to %s lane %u: %s\n", p.text.c_str(), lane,
                 posted.error().message.c_str());
    return;
  }
  home_send_free_.pop_back();
  ++setups_sent_;
}

// The lane's epoch decides: a message of an older epoch is stale (and so is one of a failed lane's
// epoch); a newer one (or the first) makes this
// end create the lane's QP for it, connect it and answer; one of the current epoch connects a lane that
// is connecting (an answer, or a request crossing ours), and a repeated request (our answer was lost)
// is answered again.
Result<uint32_t> RcPort::peer_for_setup(const RcSetupMsg& m) {
  for (uint32_t i = 0; i < peers_.size(); ++i) {
    Peer& p = *peers_[i];
    if (p.port_id != m.port_id) continue;
    if (p.gid == m.home_gid && p.home_qpn == m.home_qpn) return i;
    const Lane& l = p.lanes[m.lane < p.lanes.size() ? m.lane : 0];
    if (l.used && m.epoch < l.epoch) return i;  // sent before the move: keep the newer address
    if (p.gid != m.home_gid) {
      Result<uint32_t> ah = make_ah(m.home_gid);
      if (!ah) return ah.error();
      p.ah = *ah;
      p.gid = m.home_gid;
    }
    ++peer_home_moved_;
    std::fprintf(stderr, "verbs-rc: peer %s now at %s (its home QP was re-created)\n", p.text.c_str(),
                 format_address(m.home_gid, m.home_qpn).c_str());
    p.home_qpn = m.home_qpn;
    return i;
  }
  for (uint32_t i = 0; i < peers_.size(); ++i) {
    Peer& p = *peers_[i];
    if (p.port_id == 0 && p.gid == m.home_gid && p.home_qpn == m.home_qpn) {
      p.port_id = m.port_id;
      return i;
    }
  }
  const size_t before = peers_.size();
  Result<uint32_t> id = intern(m.home_gid, m.home_qpn);
  // A new port at an address a peer had before (a restarted process): its own peer.
  if (id && peers_.size() == before) {
    if (peers_.size() >= cfg_.max_peers) {
      ++stats_.peer_table_full;
      return make_error(ErrorCode::kInvalidUsage,
                        "verbs-rc: peer table full (" + std::to_string(cfg_.max_peers) + " peers)");
    }
    id = add_new_peer(m.home_gid, m.home_qpn);
  }
  if (id) peers_[*id]->port_id = m.port_id;
  return id;
}

void RcPort::on_setup(const RcSetupMsg& m) {
  ++setups_received_;
  // The lane's QP is connected through this port's GID index and the answer goes through an address
  // handle: both as the port is now. Until the GID is back, the peer's next request is awaited.
  if (path_stale_ && !refresh_path()) {
    ++setups_deferred_;
    return;
  }
  Result<uint32_t> id = peer_for_setup(m);
  if (!id) {
    ++setups_refused_;
    return;
  }
  Peer& p = *peers_[*id];
  if (m.lane >= cfg_.slots) {
    ++setups_refused_;
    std::fprintf(stderr,
                 "verbs-rc: %s connects lane %u but this port has %u slots (both ends need the same)\n",
                 p.text.c_str(), m.lane, cfg_.slots);
    return;
  }
  if (Status fits = check_peer_slots(slot_bytes_, m.ring.slot_bytes); !fits) {
    ++setups_refused_;
    std::fprintf(stderr, "verbs-rc: %s: %s\n", p.text.c_str(), fits.error().message.c_str());
    return;
  }
  p.remote = m.ring;
  p.remote_mtu = m.mtu_bytes;
  p.remote_known = true;
  Lane& l = p.lanes[m.lane];
  const TimeNs now = UdpWire::now();
  if (l.used && m.epoch < l.epoch) return;  // stale
  // A failed lane comes back only when the peer starts a new epoch (it re-created its QP).
  if (l.state == Lane::State::kFailed && m.epoch <= l.epoch) return;
  Status s;
  if (!l.qp || m.epoch > l.epoch) {
    s = create_qp(*id, m.lane, m.epoch);
    if (s) s = connect_qp(*id, m.lane, m);
    if (s) send_setup(*id, m.lane, RcSetupKind::kAnswer);
  } else if (l.state == Lane::State::kConnecting) {
    s = connect_qp(*id, m.lane, m);
    if (s && m.kind == RcSetupKind::kRequest) send_setup(*id, m.lane, RcSetupKind::kAnswer);
  } else if (l.state == Lane::State::kUp && m.kind == RcSetupKind::kRequest) {
    send_setup(*id, m.lane, RcSetupKind::kAnswer);
  }
  if (!s) fail_lane(*id, m.lane, now, s.error().message);
}

void RcPort::on_qp_error(uint32_t peer, uint32_t lane, uint16_t epoch, WcStatus status, TimeNs now) {
  Lane& l = peers_[peer]->lanes[lane];
  if (epoch != l.epoch || l.state == Lane::State::kFailed) return;  // a QP already replaced
  ++qp_errors_;
  ++l.errors;
  l.last_status = status;
  if (l.outage_start == kNever) l.outage_start = now;
  // rxe completes a write it could not transmit (its netdev down: a link flap) as a local QP operation
  // error; the retry budget still bounds how long such a lane is re-created.
  if (!is_recoverable(status) && status != WcStatus::kLocQpOpErr) {
    fail_lane(peer, lane, now, to_string(status) + " cannot be recovered by re-creating the QP");
  } else if (now - l.outage_start >= cfg_.retry_budget_ns) {
    fail_lane(peer, lane, now, "");
  } else {
    ++qp_recreated_;
    std::fprintf(stderr, "verbs-rc: peer %s lane %u: QP error (%s), re-connecting as epoch %u\n",
                 peers_[peer]->text.c_str(), lane, to_string(status).c_str(), (l.epoch + 1) & 0xFFFF);
    start_connect(peer, lane, now);
  }
}

void RcPort::fail_lane(uint32_t peer, uint32_t lane, TimeNs now, const std::string& why) {
  Peer& p = *peers_[peer];
  Lane& l = p.lanes[lane];
  if (l.state == Lane::State::kFailed) return;
  drop_qp(l);
  l.state = Lane::State::kFailed;
  l.resend_at = kNever;
  stats_.send_dropped += l.pending.size() + l.pending_ctl.size();
  failed_dropped_ += l.pending.size() + l.pending_ctl.size();
  l.pending.clear();
  l.pending_ctl.clear();
  ++lane_failures_;
  const double out_ms = l.outage_start == kNever ? 0.0 : static_cast<double>(now - l.outage_start) / 1e6;
  std::fprintf(stderr,
               "verbs-rc: peer %s lane %u failed: %s%u QP errors (last: %s) and %.0f ms without progress, "
               "retry budget %.0f ms; its packets are dropped from now on, so the engine's connection "
               "times out\n",
               p.text.c_str(), lane, why.empty() ? "" : (why + "; ").c_str(), l.errors,
               to_string(l.last_status).c_str(), out_ms, static_cast<double>(cfg_.retry_budget_ns) / 1e6);
}

void RcPort::on_timer(TimeNs now) {
  if (home_reset_at_ <= now) recover_home(now);
  for (uint32_t i = 0; i < peers_.size(); ++i) {
    for (uint32_t j = 0; j < cfg_.slots; ++j) {
      Lane& l = peers_[i]->lanes[j];
      if (l.state != Lane::State::kConnecting) continue;
      if (now - l.outage_start >= cfg_.retry_budget_ns) {
        fail_lane(i, j, now, "the peer did not answer the set-up request");
      } else if (l.resend_at <= now) {
        send_setup(i, j, RcSetupKind::kRequest);
        l.resend_at = now + kSetupResendNs;
      }
    }
  }
}

TimeNs RcPort::next_deadline() const {
  TimeNs t = home_reset_at_;
  for (const auto& p : peers_) {
    for (const Lane& l : p->lanes) {
      if (l.state == Lane::State::kConnecting) t = std::min(t, l.resend_at);
    }
  }
  return t;
}

PortStats RcPort::stats() const {
  PortStats s = stats_;
  uint64_t pending = 0, outstanding = 0, credits = 0, up = 0, owed = 0;
  for (const auto& p : peers_) {
    for (const Lane& l : p->lanes) {
      owed += l.credits_owed;
      pending += l.pending.size() + l.pending_ctl.size();
      outstanding += l.outstanding.size();
      credits += l.state == Lane::State::kUp ? l.writer.credits() : 0;
      up += l.state == Lane::State::kUp ? 1 : 0;
    }
  }
  s.extra = {{"rc_setups_sent", setups_sent_},
             {"rc_setups_received", setups_received_},
             {"rc_setups_refused", setups_refused_},
             {"rc_lanes_connected", lanes_connected_},
             {"rc_qp_errors", qp_errors_},
             {"rc_qp_recreated", qp_recreated_},
             {"rc_lane_failures", lane_failures_},
             {"rc_queued", queued_},
             {"rc_queue_dropped", queue_dropped_},
             {"rc_peer_slot_dropped", peer_slot_dropped_},
             {"rc_failed_dropped", failed_dropped_},
             {"rc_credits_sent", credits_sent_},
             {"rc_queue_full_waits", queue_full_waits_},
             {"rc_control_first", control_first_},
             {"rc_lanes_up", up},
             {"rc_waiting", pending},
             {"rc_writes_outstanding", outstanding},
             {"rc_write_credits", credits},
             {"rc_credits_owed", owed},
             {"rc_home_resets", home_resets_},
             {"rc_home_recreated", home_recreated_},
             {"rc_setups_deferred", setups_deferred_},
             {"rc_peer_home_moved", peer_home_moved_},
             {"rc_bounce_free", pool_free_.size()},
             {"rc_setup_buffers_free", home_send_free_.size()}};
  return s;
}

}  // namespace rc_detail

Result<std::unique_ptr<PacketPort>> open_rc_port(const VerbsPortConfig& config) {
  return rc_detail::RcPort::open(config);
}

}  // namespace megascale::wire::verbs
