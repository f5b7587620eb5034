// verbs-rc's port, private to the library: rc_port.cpp opens it, connects lanes and runs their
// timers; rc_port_io.cpp moves packets and handles completions. What the port does is in rc_port.cpp.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>
#include <random>
#include <unordered_map>

#include "megascale/engine/packet.h"
#include "megascale/wire/udp.h"
#include "megascale/wire/verbs/ib_device.h"
#include "megascale/wire/verbs/port.h"
#include "megascale/wire/verbs/rc_ring.h"
#include "megascale/wire/verbs/rc_setup.h"

namespace megascale::wire::verbs::rc_detail {

constexpr uint32_t kQkey = 0x4D53;
constexpr uint32_t kHomeRecvs = 128;
constexpr uint32_t kHomeSends = 64;
constexpr uint32_t kCqDepth = 16384;
constexpr uint32_t kPendingMax = 512;  // packets waiting per lane
constexpr TimeNs kSetupResendNs = 20 * kNsPerMs;
constexpr uint8_t kHomeLane = 0xFF;  // wr_id lane of the home QP's WRs (RC lanes are < 64)

inline uint64_t addr_of(const void* p) {
  return reinterpret_cast<uint64_t>(p);
}

std::string format_address(const Gid& gid, uint32_t qpn);
// Errors name the text and what is wrong with it.
Result<std::pair<Gid, uint32_t>> parse_address(std::string_view text);

struct Lane {
  enum class State : uint8_t { kIdle, kConnecting, kUp, kFailed };
  State state = State::kIdle;
  std::unique_ptr<IbRcQp> qp;
  bool used = false;  // a QP has existed: the next one takes epoch + 1
  uint16_t epoch = 0;
  uint32_t psn = 0;
  RingWriter writer{1};
  RingReader reader{1, 1};
  std::deque<std::vector<uint8_t>> pending;      // data waiting for the QP, ring credit or queue room
  std::deque<std::vector<uint8_t>> pending_ctl;  // packets without payload: they go before waiting data
  std::deque<uint32_t> outstanding;              // send-pool slots of posted writes, in post order
  uint64_t posted_bytes = 0;                     // data bytes of those writes (rc_queue_bytes)
  uint32_t credits_owed = 0;                     // ring slots consumed, not yet returned
  TimeNs resend_at = kNever;                     // when to send the set-up request again
  TimeNs outage_start = kNever;                  // the first QP error since the lane last moved data
  uint32_t errors = 0;
  WcStatus last_status = WcStatus::kSuccess;
};

struct Peer {
  uint64_t port_id = 0;  // from its set-up messages; 0 while only its address is known (add_peer)
  Gid gid{};
  uint32_t home_qpn = 0;  // where set-up messages go: its latest home QP
  std::string text;       // the address it was first known by (the engine's name for it)
  uint32_t ah = 0;
  bool remote_known = false;
  RemoteRing remote;
  uint32_t remote_mtu = 0;
  std::vector<uint8_t> ring;  // this end's receive ring for the peer: lanes * ring_slots * slot_bytes
  MrKeys ring_keys;
  std::vector<Lane> lanes;
};

class RcPort final : public PacketPort {
 public:
  ~RcPort() override {
    // QPs before the CQ, the CQ before the device; buffers after the device (their MRs go with it).
    for (auto& p : peers_) {
      for (Lane& l : p->lanes) l.qp.reset();
    }
    home_.reset();
    cq_.reset();
    dev_.reset();
  }

  static Result<std::unique_ptr<PacketPort>> open(const VerbsPortConfig& c);
  // The port over an opened device (its port chosen and ACTIVE) with the GID `gid` of that port; for
  // open() and for tests that give it a fake device (tests/unit/wire/verbs/rc_port_fake_test.cpp).
  static Result<std::unique_ptr<PacketPort>> make(const VerbsPortConfig& c, std::unique_ptr<IbDevice> dev,
                                                  const GidEntry& gid);

  uint32_t slots() const override { return cfg_.slots; }
  size_t max_packet_bytes() const override { return slot_bytes_; }
  std::string describe() const override { return describe_; }
  std::string local_address() const override { return format_address(gid_.gid, home_->qpn()); }

  Result<uint32_t> add_peer(std::string_view address) override {
    Result<std::pair<Gid, uint32_t>> a = parse_address(address);
    if (!a) return a.error();
    return intern(a->first, a->second);
  }
  bool has_peer(uint32_t peer) const override { return peer < peers_.size(); }
  std::string peer_address(uint32_t peer) const override {
    return peer < peers_.size() ? peers_[peer]->text : std::string();
  }

  Status send(std::span<const PortPacket> packets) override;
  Result<size_t> receive(size_t max, const Deliver& deliver) override;
  int wait_fd() const override { return cq_->event_fd(); }
  bool arm() override;
  void on_timer(TimeNs now) override;
  TimeNs next_deadline() const override;
  PortStats stats() const override;

 private:
  Result<uint32_t> intern(const Gid& gid, uint32_t qpn);
  Result<uint32_t> add_new_peer(const Gid& gid, uint32_t qpn);
  // The peer a set-up message comes from: by its port id; else the peer known only by the address the
  // message names (it takes the id); else a new one. A known port whose home QP moved (re-created
  // after an error: a new QPN) keeps its peer id; its new home address is used from then on, unless
  // the message is stale for its lane (an older epoch, sent before the move).
  Result<uint32_t> peer_for_setup(const RcSetupMsg& m);
  // An address handle to the peer's GID (the device keeps it for its life).
  Result<uint32_t> make_ah(const Gid& gid);
  // Drops the lane's QP (if any) and creates one for `epoch` with its receives posted.
  Status create_qp(uint32_t peer, uint32_t lane, uint16_t epoch);
  // The lane's QP to RTS towards the QP `m` names; then up, and its waiting packets go.
  Status connect_qp(uint32_t peer, uint32_t lane, const RcSetupMsg& m);
  // A new QP (a fresh epoch) and a request to the peer; the lane is connecting.
  void start_connect(uint32_t peer, uint32_t lane, TimeNs now);
  void send_setup(uint32_t peer, uint32_t lane, RcSetupKind kind);
  void on_setup(const RcSetupMsg& m);
  // Posts one packet; false when it must wait (no ring credit, no bounce buffer or, for `data`, no
  // room under rc_queue_bytes).
  bool post_packet(uint32_t peer, uint32_t lane, const uint8_t* h, uint32_t hl, const uint8_t* p, uint32_t pl,
                   bool data);
  // Whether a data write of `len` bytes must wait for the lane's posted writes to complete.
  bool queue_full(const Lane& l, uint32_t len) const {
    return l.posted_bytes > 0 && l.posted_bytes + len > cfg_.rc_queue_bytes;
  }
  void flush_lane(uint32_t peer, uint32_t lane);
  // A packet of `len` bytes is larger than the peer's ring slots (known once its set-up message came):
  // it is counted as dropped (the engine's handshake keeps its connections' packets within both ends'
  // slots, so only a packet queued before that is ever this large).
  bool too_big_for_peer(const Peer& p, uint32_t len) {
    if (!p.remote_known || len <= rc_write_limit(slot_bytes_, p.remote.slot_bytes)) return false;
    ++stats_.send_dropped;
    ++peer_slot_dropped_;
    return true;
  }
  void return_credits(uint32_t peer, uint32_t lane);
  void on_qp_error(uint32_t peer, uint32_t lane, uint16_t epoch, WcStatus status, TimeNs now);
  void fail_lane(uint32_t peer, uint32_t lane, TimeNs now, const std::string& why);
  void drop_qp(Lane& l);
  Status post_home_recv(uint32_t i);
  void handle(const WorkCompletion& wc, const Deliver& deliver, size_t& delivered);
  void handle_home(const WorkCompletion& wc, const WrTag& tag);
  // The home QP after an error: reset to RTS keeping its QPN (so peers whose home QPs errored too
  // still reach it) or, where that fails (or rc_home_reset is off), a new QP with a new QPN, which
  // peers learn from the next set-up message (it names this port by its id). Then its buffers are
  // free, its receives posted (tagged with its new incarnation) and the path is refreshed.
  void recover_home(TimeNs now);
  // After the port was seen down or the home QP errored: the GID's index again (the kernel re-adds a
  // port's GIDs when its link comes back, perhaps elsewhere) and new address handles for every peer.
  // False while the GID is not back yet: set-up messages wait.
  bool refresh_path();

  VerbsPortConfig cfg_;
  NicRetry nic_;
  GidEntry gid_;
  uint32_t mtu_ = 1024;
  uint32_t slot_bytes_ = 0;
  std::string describe_;
  std::unique_ptr<IbDevice> dev_;
  std::unique_ptr<IbCq> cq_;
  std::unique_ptr<IbUdQp> home_;
  std::vector<uint8_t> home_recv_;  // kHomeRecvs buffers of kGrhBytes + mtu
  MrKeys home_recv_keys_;
  std::vector<uint8_t> home_send_;  // kHomeSends buffers of kRcSetupBytes
  MrKeys home_send_keys_;
  std::vector<uint32_t> home_send_free_;
  uint64_t port_id_ = 0;           // in every set-up message: how peers recognise this port
  uint16_t home_gen_ = 0;          // the home QP's incarnation, in its WRs' tags (epoch)
  TimeNs home_reset_at_ = kNever;  // the home QP errored: re-create it then
  bool path_stale_ = false;        // the port was down or the home QP errored: refresh_path() first
  uint64_t home_resets_ = 0;
  uint64_t home_recreated_ = 0;
  uint64_t setups_deferred_ = 0;          // set-up messages held back while the port was not ACTIVE
  uint64_t peer_home_moved_ = 0;          // set-up messages naming a known port's new home QPN
  TimeNs home_backoff_ = kSetupResendNs;  // from a home QP error to its re-creation
  bool home_told_ = false;                // the home QP's error has been logged and nothing succeeded since
  std::vector<uint8_t> pool_;             // bounce buffers of slot_bytes_
  MrKeys pool_keys_;
  std::vector<uint32_t> pool_free_;
  std::vector<uint32_t> pool_data_bytes_;  // per bounce buffer: its write's bytes if data, else 0
  uint32_t lane_send_depth_ = 0;
  uint32_t lane_recv_depth_ = 0;
  uint32_t cq_budget_ = kCqDepth;
  std::vector<std::unique_ptr<Peer>> peers_;
  std::unordered_map<uint32_t, std::pair<uint32_t, uint32_t>> by_qpn_;  // QPN -> (peer, lane)
  std::vector<WorkCompletion> stash_;                                   // completions polled while arming
  std::mt19937 rng_{std::random_device{}()};
  PortStats stats_;
  uint64_t setups_sent_ = 0, setups_received_ = 0, setups_refused_ = 0, lanes_connected_ = 0;
  uint64_t qp_errors_ = 0, qp_recreated_ = 0, lane_failures_ = 0, queued_ = 0, queue_dropped_ = 0;
  uint64_t failed_dropped_ = 0, credits_sent_ = 0;
  uint64_t queue_full_waits_ = 0;   // data packets that waited for rc_queue_bytes
  uint64_t control_first_ = 0;      // packets without payload posted ahead of waiting data
  uint64_t peer_slot_dropped_ = 0;  // packets larger than the peer's ring slots (rc_write_limit)
};

}  // namespace megascale::wire::verbs::rc_detail
