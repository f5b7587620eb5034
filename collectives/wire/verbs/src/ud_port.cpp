// verbs-ud's port (port.h): every engine packet one UD datagram.
//
// One CQ for every QP (its completion channel is the wire's wait fd); `slots` UD QPs, slot 0 the home
// QP that peers address. Receive buffers (GRH + MTU each) are registered once and posted again as soon
// as the wire has taken the packet. Peers send every lane to the home QP, so it holds `recv_depth`
// receives; the other QPs hold kLaneRecvs each, only for what answers a lane's own source (an RST about
// a connection the peer does not know goes to the source it came from, as on UDP): without any, such a
// datagram would vanish and the connection would wait for its retry budget instead of failing at once.
// Sends are copied into registered bounce buffers, a fixed pool per QP of send_depth (so the send
// queue never overflows), freed by their (always signalled) completions; a packet finding its QP's pool
// empty is dropped and counted, and the engine recovers it as a loss.
#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <tuple>

#include "megascale/wire/verbs/completion.h"
#include "megascale/wire/verbs/ib_device.h"
#include "megascale/wire/verbs/port.h"
#include "megascale/wire/verbs/work_request.h"

namespace megascale::wire::verbs {
namespace {

constexpr uint32_t kQkey = 0x4D53;
constexpr uint32_t kLaneRecvs = 16;
constexpr uint32_t kPollBatch = 64;

struct Peer {
  Gid gid{};
  uint32_t qpn = 0;
};

struct Qp {
  std::unique_ptr<IbUdQp> qp;
  uint32_t recv_first = 0;  // its receive buffers: [recv_first, recv_first + recv_count)
  uint32_t recv_count = 0;
  uint32_t send_first = 0;  // its send buffers
  std::vector<uint32_t> send_free;
};

class UdPort final : public PacketPort {
 public:
  UdPort(const VerbsPortConfig& config, std::unique_ptr<IbDevice> dev, GidEntry gid)
      : config_(config), dev_(std::move(dev)), gid_(std::move(gid)), mtu_(dev_->active_mtu_bytes()) {
    ctx_.mode = WireMode::kUd;
    ctx_.grh_ipv4 = gid_is_ipv4(gid_.gid);
  }

  ~UdPort() override {
    qps_.clear();  // QPs, then the CQ, then the device (its destructor deregisters the buffers)
    cq_.reset();
    dev_.reset();
  }

  Status open() {
    const uint32_t slots = std::max<uint32_t>(config_.slots, 1);
    const uint32_t recvs = config_.recv_depth + (slots - 1) * kLaneRecvs;
    Result<std::unique_ptr<IbCq>> cq = dev_->create_cq(recvs + slots * config_.send_depth);
    if (!cq) return cq.error();
    cq_ = std::move(*cq);
    recv_stride_ = kGrhBytes + mtu_;
    recv_buf_.assign(static_cast<size_t>(recvs) * recv_stride_, 0);
    send_buf_.assign(static_cast<size_t>(slots) * config_.send_depth * mtu_, 0);
    Result<MrKeys> rk =
        dev_->mr_cache().find_or_register(reinterpret_cast<uint64_t>(recv_buf_.data()), recv_buf_.size());
    if (!rk) return rk.error();
    Result<MrKeys> sk =
        dev_->mr_cache().find_or_register(reinterpret_cast<uint64_t>(send_buf_.data()), send_buf_.size());
    if (!sk) return sk.error();
    recv_lkey_ = rk->lkey;
    send_lkey_ = sk->lkey;
    uint32_t next_recv = 0;
    for (uint32_t s = 0; s < slots; ++s) {
      Qp q;
      const uint32_t rdepth = s == 0 ? config_.recv_depth : kLaneRecvs;
      Result<std::unique_ptr<IbUdQp>> qp = dev_->create_ud_qp(
          *cq_, {.qkey = kQkey, .send_depth = config_.send_depth, .recv_depth = rdepth, .psn = 0});
      if (!qp) return qp.error();
      q.qp = std::move(*qp);
      q.recv_first = next_recv;
      q.recv_count = rdepth;
      next_recv += rdepth;
      q.send_first = s * config_.send_depth;
      for (uint32_t i = config_.send_depth; i > 0; --i) q.send_free.push_back(q.send_first + i - 1);
      slot_of_qpn_[q.qp->qpn()] = s;
      qps_.push_back(std::move(q));
      for (uint32_t i = 0; i < rdepth; ++i) {
        if (Status st = post_recv(s, qps_[s].recv_first + i); !st) return st;
      }
    }
    stats_.extra = {{"send_slots_full", 0},  {"ah_created", 0}, {"recv_reposted", 0},
                    {"send_completions", 0}, {"flushed", 0},    {"malformed", 0}};
    return {};
  }

  uint32_t slots() const override { return static_cast<uint32_t>(qps_.size()); }
  size_t max_packet_bytes() const override { return mtu_; }

  std::string describe() const override {
    return std::string(to_string(PortMode::kUd)) + " " + dev_->name() + " port " +
           std::to_string(dev_->port()) + " gid " + std::to_string(gid_.index) + " (" +
           gid_to_string(gid_.gid) + ", " + std::string(to_string(gid_.type)) + ") mtu " +
           std::to_string(mtu_) + ", " + std::to_string(qps_.size()) + " QPs";
  }

  std::string local_address() const override {
    return format_port_address({.gid = gid_.gid, .qpn = qps_.at(0).qp->qpn()});
  }

  Result<uint32_t> add_peer(std::string_view address) override {
    Result<PortAddress> a = parse_port_address(address);
    if (!a) return a.error();
    std::optional<uint32_t> id = intern(a->gid, a->qpn);
    if (!id) {
      return make_error(ErrorCode::kInvalidUsage, describe() + ": the peer table is full (" +
                                                      std::to_string(config_.max_peers) + " peers)");
    }
    return *id;
  }
  bool has_peer(uint32_t peer) const override { return peer < peers_.size(); }
  std::string peer_address(uint32_t peer) const override {
    if (peer >= peers_.size()) return {};
    return format_port_address({.gid = peers_[peer].gid, .qpn = peers_[peer].qpn});
  }

  Status send(std::span<const PortPacket> packets) override {
    if (!failed_.empty()) return make_error(ErrorCode::kSystem, failed_);
    for (const PortPacket& p : packets) {
      if (p.peer >= peers_.size() || p.slot >= qps_.size()) {
        ++stats_.send_dropped;
        continue;
      }
      const uint32_t total = p.header_len + p.payload_len;
      if (total > mtu_) {
        ++stats_.send_dropped;
        continue;
      }
      Qp& q = qps_[p.slot];
      if (q.send_free.empty()) {
        // Completions may be waiting: take them (receives stay queued for receive()).
        if (Status st = take_completions(); !st) return st;
      }
      if (q.send_free.empty()) {
        ++stats_.send_dropped;
        ++extra(kSendSlotsFull);
        continue;
      }
      Result<uint32_t> ah = address_handle(peers_[p.peer].gid, p.slot, p.ect);
      if (!ah) return ah.error();
      const uint32_t buf = q.send_free.back();
      uint8_t* dst = send_buf_.data() + static_cast<size_t>(buf) * mtu_;
      std::memcpy(dst, p.header, p.header_len);
      if (p.payload_len > 0) std::memcpy(dst + p.header_len, p.payload, p.payload_len);
      Result<SendWr> wr = make_ud_send({.tag = {WrKind::kUdSend, static_cast<uint8_t>(p.slot), 0, buf},
                                        .header = {reinterpret_cast<uint64_t>(dst), total, send_lkey_},
                                        .payload = {},
                                        .ah = *ah,
                                        .remote_qpn = peers_[p.peer].qpn,
                                        .qkey = kQkey,
                                        .mtu_bytes = mtu_,
                                        .signaled = true});
      if (!wr) return wr.error();
      if (Status st = q.qp->post_send(*wr, dev_->ah(*ah)); !st) {
        ++stats_.send_errors;
        return fail(describe() + ": QP " + qpn_text(p.slot) + ": " + st.error().message);
      }
      q.send_free.pop_back();
      ++stats_.packets_sent;
      stats_.bytes_sent += total;
    }
    return {};
  }

  Result<size_t> receive(size_t max, const Deliver& deliver) override {
    if (!failed_.empty()) return make_error(ErrorCode::kSystem, failed_);
    size_t delivered = 0;
    while (delivered < max) {
      if (pending_.empty()) {
        if (Status st = take_completions(); !st) return st.error();
        if (pending_.empty()) break;
      }
      std::vector<WorkCompletion> batch;
      batch.swap(pending_);
      size_t i = 0;
      for (; i < batch.size() && delivered < max; ++i) {
        Result<bool> got = on_receive(batch[i], deliver);
        if (!got) {
          pending_.insert(pending_.end(), batch.begin() + static_cast<std::ptrdiff_t>(i) + 1, batch.end());
          return got.error();
        }
        delivered += *got ? 1 : 0;
      }
      pending_.insert(pending_.begin(), batch.begin() + static_cast<std::ptrdiff_t>(i), batch.end());
    }
    return delivered;
  }

  int wait_fd() const override { return cq_->event_fd(); }

  bool arm() override {
    if (!pending_.empty() || !failed_.empty()) return false;
    cq_->drain_events();
    if (Status st = cq_->arm(); !st) return false;  // the wire polls instead
    if (Status st = take_completions(); !st) return false;
    return pending_.empty();
  }

  PortStats stats() const override { return stats_; }

 private:
  enum Extra : size_t {
    kSendSlotsFull,
    kAhCreated,
    kRecvReposted,
    kSendCompletions,
    kFlushedCount,
    kMalformed
  };
  uint64_t& extra(Extra e) { return stats_.extra[e].second; }

  std::string qpn_text(uint32_t slot) const {
    char b[24];
    std::snprintf(b, sizeof(b), "0x%06x (slot %u)", qps_[slot].qp->qpn(), slot);
    return b;
  }

  Error fail(std::string message) {
    failed_ = std::move(message);
    return make_error(ErrorCode::kSystem, failed_);
  }

  std::optional<uint32_t> intern(const Gid& gid, uint32_t qpn) {
    const auto key = std::make_pair(gid, qpn);
    if (auto it = peer_ids_.find(key); it != peer_ids_.end()) return it->second;
    if (peers_.size() >= config_.max_peers) return std::nullopt;
    const auto id = static_cast<uint32_t>(peers_.size());
    peers_.push_back({gid, qpn});
    peer_ids_.emplace(key, id);
    return id;
  }

  // An address handle per (peer GID, slot, ECN-capable): the slot's flow label picks its UDP source
  // port (distinct per QP, as the QP numbers are), the traffic class carries the DSCP and ECT(0).
  Result<uint32_t> address_handle(const Gid& gid, uint32_t slot, bool ect) {
    const auto key = std::make_tuple(gid, slot, ect);
    if (auto it = ahs_.find(key); it != ahs_.end()) return it->second;
    Result<uint8_t> tc = traffic_class(config_.traffic_class >> 2, ect);
    if (!tc) return tc.error();
    const auto sport = static_cast<uint16_t>(0xC000u | (qps_[slot].qp->qpn() & 0x3FFFu));
    Result<uint32_t> label = flow_label_for_sport(sport);
    if (!label) return label.error();
    Result<uint32_t> ah = dev_->create_ah({.dgid = gid,
                                           .sgid_index = static_cast<uint8_t>(gid_.index),
                                           .traffic_class = *tc,
                                           .hop_limit = 64,
                                           .flow_label = *label,
                                           .port_num = static_cast<uint8_t>(dev_->port())});
    if (!ah) return ah.error();
    ++extra(kAhCreated);
    ahs_.emplace(key, *ah);
    return *ah;
  }

  Status post_recv(uint32_t slot, uint32_t buf) {
    uint8_t* p = recv_buf_.data() + static_cast<size_t>(buf) * recv_stride_;
    Result<RecvWr> wr = make_ud_recv({WrKind::kUdRecv, static_cast<uint8_t>(slot), 0, buf},
                                     {reinterpret_cast<uint64_t>(p), recv_stride_, recv_lkey_}, mtu_);
    if (!wr) return wr.error();
    if (Status st = qps_[slot].qp->post_recv(*wr); !st) {
      return fail(describe() + ": QP " + qpn_text(slot) + ": " + st.error().message);
    }
    return {};
  }

  // Polls the CQ: send completions free their buffers at once, receives wait in pending_ for
  // receive(). A completion in error other than a flush fails the port.
  Status take_completions() {
    std::vector<WorkCompletion> wcs;
    Result<uint32_t> n = cq_->poll(wcs, kPollBatch);
    if (!n) return fail(describe() + ": " + n.error().message);
    for (const WorkCompletion& wc : wcs) {
      const std::optional<WrTag> tag = decode_wr_id(wc.wr_id);
      if (tag && tag->kind == WrKind::kUdRecv && wc.status == WcStatus::kSuccess) {
        pending_.push_back(wc);
        continue;
      }
      const CompletionEvent ev = translate_completion(wc, ctx_, nullptr);
      switch (ev.kind) {
        case EventKind::kSendDone:
          ++extra(kSendCompletions);
          free_send(ev.tag);
          break;
        case EventKind::kFlushed:
          ++extra(kFlushedCount);
          if (ev.tag.kind == WrKind::kUdSend) free_send(ev.tag);
          break;
        case EventKind::kQpError: {
          const auto it = slot_of_qpn_.find(wc.qp_num);
          const uint32_t slot = it != slot_of_qpn_.end() ? it->second : ev.tag.lane;
          if (ev.tag.kind == WrKind::kUdSend)
            ++stats_.send_errors;
          else
            ++stats_.recv_errors;
          return fail(describe() + ": QP " +
                      (slot < qps_.size() ? qpn_text(slot) : std::to_string(wc.qp_num)) +
                      " failed: " + (ev.tag.kind == WrKind::kUdSend ? "a send" : "a receive") +
                      " completed with " + to_string(ev.status));
        }
        default:
          ++extra(kMalformed);
          break;
      }
    }
    return {};
  }

  void free_send(const WrTag& tag) {
    if (tag.lane < qps_.size()) qps_[tag.lane].send_free.push_back(tag.slot);
  }

  // One receive completion: the packet to the wire (true), or counted as malformed; the buffer is
  // posted again either way.
  Result<bool> on_receive(const WorkCompletion& wc, const Deliver& deliver) {
    const std::optional<WrTag> tag = decode_wr_id(wc.wr_id);
    const uint32_t slot = tag->lane;
    const uint32_t buf = tag->slot;
    uint8_t* p = recv_buf_.data() + static_cast<size_t>(buf) * recv_stride_;
    const CompletionEvent ev = translate_completion(wc, ctx_, p);
    bool delivered = false;
    if (ev.kind == EventKind::kPacket) {
      const std::optional<uint32_t> peer = intern(source_gid(p), wc.src_qp);
      if (!peer) {
        ++stats_.peer_table_full;
      } else {
        ++stats_.packets_received;
        stats_.bytes_received += ev.length;
        stats_.ce_received += ev.ce ? 1 : 0;
        deliver(*peer, p + ev.offset, ev.length, ev.ce);
        delivered = true;
      }
    } else {
      ++stats_.recv_errors;
      ++extra(kMalformed);
    }
    if (Status st = post_recv(slot, buf); !st) return st.error();
    ++extra(kRecvReposted);
    return delivered;
  }

  // The sender's GID from the GRH: RoCE v2 over IPv4 puts the IPv4 header in the GRH's last 20 bytes
  // (its source address at bytes 32..35, given back as ::ffff:a.b.c.d); otherwise the GRH is the IPv6
  // header (or InfiniBand's GRH), the source GID at bytes 8..23.
  Gid source_gid(const uint8_t* grh) const {
    Gid g{};
    if (ctx_.grh_ipv4) {
      g[10] = 0xFF;
      g[11] = 0xFF;
      std::memcpy(g.data() + 12, grh + 32, 4);
    } else {
      std::memcpy(g.data(), grh + 8, 16);
    }
    return g;
  }

  VerbsPortConfig config_;
  std::unique_ptr<IbDevice> dev_;
  GidEntry gid_;
  uint32_t mtu_;
  CompletionContext ctx_;
  std::unique_ptr<IbCq> cq_;
  std::vector<Qp> qps_;
  std::map<uint32_t, uint32_t> slot_of_qpn_;
  uint32_t recv_stride_ = 0;
  std::vector<uint8_t> recv_buf_;
  std::vector<uint8_t> send_buf_;
  uint32_t recv_lkey_ = 0;
  uint32_t send_lkey_ = 0;
  std::vector<Peer> peers_;
  std::map<std::pair<Gid, uint32_t>, uint32_t> peer_ids_;
  std::map<std::tuple<Gid, uint32_t, bool>, uint32_t> ahs_;
  std::vector<WorkCompletion> pending_;  // successful receives polled and not yet delivered
  std::string failed_;                   // set once the port failed: every later call returns it
  PortStats stats_;
};

}  // namespace

Result<std::unique_ptr<PacketPort>> open_ud_port(const VerbsPortConfig& config) {
  const std::string what = std::string(to_string(PortMode::kUd));
  if (config.slots == 0 || config.send_depth == 0 || config.recv_depth == 0 || config.max_peers == 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      what + ": slots, send_depth, recv_depth and max_peers must be at least 1");
  }
  if (config.slots > 255) {
    return make_error(ErrorCode::kInvalidArgument,
                      what + ": " + std::to_string(config.slots) + " slots; at most 255 QPs per port");
  }
  Result<std::vector<DeviceInfo>> devs = discover_devices(config.sysfs_root);
  if (!devs) return make_error(ErrorCode::kSystem, what + ": " + devs.error().message);
  if (devs->empty()) {
    return make_error(ErrorCode::kUnsupported, what + ": no RDMA device under " + config.sysfs_root);
  }
  const DeviceInfo* dev = nullptr;
  const PortInfo* port = nullptr;
  std::string why;
  for (const DeviceInfo& d : *devs) {
    if (!config.device.empty() && d.name != config.device) continue;
    Result<const PortInfo*> p = select_port(d, config.port);
    if (p) {
      dev = &d;
      port = *p;
      break;
    }
    why += (why.empty() ? "" : "; ") + p.error().message;
  }
  if (dev == nullptr) {
    if (why.empty()) {
      std::string names;
      for (const DeviceInfo& d : *devs) names += (names.empty() ? "" : ", ") + d.name;
      return make_error(ErrorCode::kInvalidArgument,
                        what + ": no RDMA device named " + config.device + " (there are: " + names + ")");
    }
    return make_error(ErrorCode::kUnsupported, what + ": no ACTIVE RoCE port: " + why);
  }
  Result<GidEntry> gid = select_gid(*dev, *port, config.gid);
  if (!gid) return make_error(ErrorCode::kInvalidArgument, what + ": " + gid.error().message);
  Result<std::unique_ptr<IbDevice>> ib = IbDevice::open(dev->name, port->port);
  if (!ib) return make_error(ib.error().code, what + ": " + ib.error().message);
  const uint32_t mtu = (*ib)->active_mtu_bytes();
  if (config.segment_bytes != 0 && config.segment_bytes > ud_max_segment_bytes(mtu)) {
    return make_error(ErrorCode::kInvalidArgument,
                      what + " " + dev->name + " port " + std::to_string(port->port) + ": segment_bytes " +
                          std::to_string(config.segment_bytes) + " does not fit a UD datagram at MTU " +
                          std::to_string(mtu) + " (at most " + std::to_string(ud_max_segment_bytes(mtu)) +
                          ")");
  }
  auto out = std::make_unique<UdPort>(config, std::move(*ib), *gid);
  if (Status st = out->open(); !st) return st.error();
  return std::unique_ptr<PacketPort>(std::move(out));
}

}  // namespace megascale::wire::verbs
