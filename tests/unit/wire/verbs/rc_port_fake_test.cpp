// verbs-rc's port over a fake device (no RDMA device needed): how it survives a link flap. Set-up
// messages name the sending port by its id; a home QP that errors is reset keeping its QPN, or, where
// that fails, re-created with a new QPN that the next set-up message carries; a peer whose home QPN changed
// keeps its peer id and is answered at its new address (a stale message does not move it back; another port
// at an old address is another peer); set-up messages wait while the port is not ACTIVE, and the path (GID
// index, address handles) is refreshed before the first one goes after it.
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "../../../../collectives/wire/verbs/src/rc_port.h"

namespace megascale::wire::verbs {
namespace {

constexpr uint32_t kMtu = 1024;

// What the fake device's objects share with the test.
struct Nic {
  struct UdQp {
    uint32_t qpn = 0;
    std::deque<RecvWr> recvs;  // posted and not yet consumed
    bool destroyed = false;
  };
  struct UdSend {
    size_t qp = 0;  // index in `ud`
    SendWr wr;
  };
  struct RcQp {
    uint32_t qpn = 0;
    bool connected = false;
    RcPeer peer;
    bool destroyed = false;
    std::vector<SendWr> writes;  // posted, in order
  };
  std::deque<WorkCompletion> cq;
  std::deque<UdQp> ud;  // in creation order
  std::vector<UdSend> ud_sends;
  std::deque<RcQp> rc;
  std::vector<AhSpec> ahs;
  uint32_t next_qpn = 0x100;
  bool port_active = true;
  bool reset_fails = false;
  bool gid_present = true;  // the port's GID in its table (the kernel re-adds it after a flap)
  uint32_t resets = 0;
  uint32_t cq_arms = 0;    // IbCq::arm() calls
  uint32_t cq_drains = 0;  // IbCq::drain_events() calls: each reads the completion channel's fd
  Gid gid{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 1};
};

class FakeCq final : public IbCq {
 public:
  explicit FakeCq(Nic& nic) : nic_(nic) {}
  Result<uint32_t> poll(std::vector<WorkCompletion>& out, uint32_t max) override {
    uint32_t n = 0;
    for (; n < max && !nic_.cq.empty(); ++n) {
      out.push_back(nic_.cq.front());
      nic_.cq.pop_front();
    }
    return n;
  }
  int event_fd() const override { return -1; }
  Status arm() override {
    ++nic_.cq_arms;
    return {};
  }
  void drain_events() override { ++nic_.cq_drains; }

 private:
  Nic& nic_;
};

class FakeUdQp final : public IbUdQp {
 public:
  FakeUdQp(Nic& nic, size_t index) : nic_(nic), index_(index) {}
  ~FakeUdQp() override { nic_.ud[index_].destroyed = true; }
  uint32_t qpn() const override { return nic_.ud[index_].qpn; }
  Status post_send(const SendWr& wr, void*) override {
    nic_.ud_sends.push_back({index_, wr});
    return {};
  }
  Status post_recv(const RecvWr& wr) override {
    nic_.ud[index_].recvs.push_back(wr);
    return {};
  }
  Status reset() override {
    if (nic_.reset_fails) return make_error("fake: UD QP to RESET: Invalid argument");
    ++nic_.resets;
    nic_.ud[index_].recvs.clear();  // as a device does: the posted receives are gone
    return {};
  }

 private:
  Nic& nic_;
  size_t index_;
};

class FakeRcQp final : public IbRcQp {
 public:
  FakeRcQp(Nic& nic, size_t index) : nic_(nic), index_(index) {}
  ~FakeRcQp() override { nic_.rc[index_].destroyed = true; }
  uint32_t qpn() const override { return nic_.rc[index_].qpn; }
  Status connect(const RcPeer& peer, const NicRetry&, uint32_t) override {
    nic_.rc[index_].connected = true;
    nic_.rc[index_].peer = peer;
    return {};
  }
  Status post_write(const SendWr& wr) override {
    nic_.rc[index_].writes.push_back(wr);
    return {};
  }
  Status post_recv(const RecvWr&) override { return {}; }

 private:
  Nic& nic_;
  size_t index_;
};

class FakeDevice final : public IbDevice {
 public:
  explicit FakeDevice(Nic& nic)
      : nic_(nic),
        cache_(
            [](uint64_t, uint64_t) -> Result<Registration> {
              return Registration{.keys = {7, 7}};
            },
            [](void*) {}) {}
  const std::string& name() const override { return name_; }
  uint32_t port() const override { return 1; }
  uint32_t active_mtu_bytes() const override { return kMtu; }
  Result<Gid> query_gid(uint32_t index) const override {
    if (index == 3 && nic_.gid_present) return nic_.gid;
    return Gid{};
  }
  bool port_active() const override { return nic_.port_active; }
  Result<std::unique_ptr<IbCq>> create_cq(uint32_t) override {
    return std::unique_ptr<IbCq>(new FakeCq(nic_));
  }
  Result<std::unique_ptr<IbUdQp>> create_ud_qp(IbCq&, const UdQpConfig&) override {
    nic_.ud.emplace_back();
    nic_.ud.back().qpn = nic_.next_qpn++;
    return std::unique_ptr<IbUdQp>(new FakeUdQp(nic_, nic_.ud.size() - 1));
  }
  Result<std::unique_ptr<IbRcQp>> create_rc_qp(IbCq&, uint32_t, uint32_t) override {
    nic_.rc.emplace_back();
    nic_.rc.back().qpn = nic_.next_qpn++;
    return std::unique_ptr<IbRcQp>(new FakeRcQp(nic_, nic_.rc.size() - 1));
  }
  Result<MrKeys> register_ring(void*, uint64_t) override { return MrKeys{.lkey = 5, .rkey = 6}; }
  Result<uint32_t> create_ah(const AhSpec& spec) override {
    nic_.ahs.push_back(spec);
    return static_cast<uint32_t>(nic_.ahs.size() - 1);
  }
  void* ah(uint32_t index) const override {
    return reinterpret_cast<void*>(static_cast<uintptr_t>(index) + 1);
  }
  MrCache& mr_cache() override { return cache_; }
  Status probe_dmabuf() override { return make_error("fake: no dma-buf"); }

 private:
  Nic& nic_;
  std::string name_ = "fake0";
  MrCache cache_;
};

const Gid kPeerGid{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 2};
constexpr uint64_t kPeerId = 0x77;

class RcPortFakeTest : public ::testing::Test {
 protected:
  void SetUp() override { make_port(config()); }

  static VerbsPortConfig config() {
    VerbsPortConfig c;
    c.mode = PortMode::kRc;
    c.slots = 2;
    c.ring_slots = 8;
    c.segment_bytes = 1024;
    c.send_depth = 16;
    c.retry_budget_ns = sec(10);
    c.sysfs_root = "/nonexistent/megascale-rc-fake";  // the GID is found at its index or not at all
    return c;
  }

  void make_port(const VerbsPortConfig& c) {
    port_.reset();
    GidEntry g;
    g.index = 3;
    g.gid = nic_.gid;
    g.type = GidType::kRoceV2;
    Result<std::unique_ptr<PacketPort>> p = rc_detail::RcPort::make(c, std::make_unique<FakeDevice>(nic_), g);
    ASSERT_TRUE(p.ok()) << p.error().message;
    port_ = std::move(*p);
    t0_ = UdpWire::now();
  }

  void send(uint32_t peer, uint32_t slot, uint32_t payload_len = 0) {
    const std::string header = "HDR";
    const std::vector<uint8_t> payload(payload_len, 0xAB);
    PortPacket p;
    p.header = reinterpret_cast<const uint8_t*>(header.data());
    p.header_len = static_cast<uint32_t>(header.size());
    p.payload = payload.data();
    p.payload_len = payload_len;
    p.peer = peer;
    p.slot = slot;
    p.lane = slot;
    ASSERT_TRUE(port_->send(std::span<const PortPacket>(&p, 1)).ok());
  }

  // The set-up message of the i-th UD send.
  RcSetupMsg sent(size_t i) {
    const SendWr& wr = nic_.ud_sends.at(i).wr;
    Result<RcSetupMsg> m =
        decode_rc_setup(reinterpret_cast<const uint8_t*>(wr.sge[0].addr), wr.sge[0].length);
    EXPECT_TRUE(m.ok()) << m.error().message;
    return m.ok() ? *m : RcSetupMsg{};
  }

  // A set-up message from the peer's port into the next receive posted on home QP `qp`.
  void arrive(size_t qp, RcSetupKind kind, uint64_t port_id, uint32_t home_qpn, uint8_t lane, uint16_t epoch,
              uint32_t lane_qpn) {
    RcSetupMsg m;
    m.kind = kind;
    m.lane = lane;
    m.epoch = epoch;
    m.home_gid = kPeerGid;
    m.home_qpn = home_qpn;
    m.qpn = lane_qpn;
    m.psn = 1;
    m.mtu_bytes = kMtu;
    m.ring = {.addr = 0x10000, .rkey = 9, .slots = 8, .slot_bytes = 4096};
    m.ring_lanes = 2;
    m.port_id = port_id;
    ASSERT_FALSE(nic_.ud[qp].recvs.empty());
    const RecvWr r = nic_.ud[qp].recvs.front();
    nic_.ud[qp].recvs.pop_front();
    auto* buf = reinterpret_cast<uint8_t*>(r.sge.addr);
    std::memset(buf, 0, kGrhBytes);
    buf[20] = 0x45;  // the GRH holds an IPv4 header (RoCE v2 over IPv4)
    ASSERT_TRUE(encode_rc_setup(m, buf + kGrhBytes).ok());
    WorkCompletion wc;
    wc.wr_id = r.wr_id;
    wc.opcode = WcOpcode::kRecv;
    wc.byte_len = kGrhBytes + static_cast<uint32_t>(kRcSetupBytes);
    wc.grh = true;
    wc.qp_num = nic_.ud[qp].qpn;
    wc.src_qp = home_qpn;
    nic_.cq.push_back(wc);
    receive();
  }

  void receive() {
    Result<size_t> n = port_->receive(64, [](uint32_t, uint8_t*, size_t, bool) {});
    ASSERT_TRUE(n.ok()) << n.error().message;
  }

  uint64_t extra(const std::string& name) {
    for (const auto& [n, v] : port_->stats().extra) {
      if (n == name) return v;
    }
    ADD_FAILURE() << "no counter " << name;
    return 0;
  }

  Nic nic_;
  std::unique_ptr<PacketPort> port_;
  TimeNs t0_ = 0;
};

TEST_F(RcPortFakeTest, RequestNamesThisPortByIdAndHomeQpn) {
  ASSERT_EQ(*port_->add_peer("[::ffff:10.0.0.2]/0x000300"), 0u);
  send(0, 1);
  ASSERT_EQ(nic_.ud_sends.size(), 1u);
  EXPECT_EQ(nic_.ud_sends[0].wr.remote_qpn, 0x300u);
  const RcSetupMsg m = sent(0);
  EXPECT_EQ(m.kind, RcSetupKind::kRequest);
  EXPECT_EQ(m.lane, 1);
  EXPECT_EQ(m.home_qpn, nic_.ud[0].qpn);
  EXPECT_EQ(m.home_gid, nic_.gid);
  EXPECT_NE(m.port_id, 0u);
  ASSERT_EQ(nic_.rc.size(), 1u);
  EXPECT_EQ(m.qpn, nic_.rc[0].qpn);
}

// A send the link could not carry errors the home QP; where its reset fails it is re-created (a new
// QPN, its receives posted, the old one destroyed), the lane's next request leaves from it naming the new QPN
// and the same port id, after the path was refreshed (new address handles), and the answer arriving on it
// connects the lane.
TEST_F(RcPortFakeTest, HomeQpErrorRecreatesItWithANewQpnWhenItsResetFails) {
  nic_.reset_fails = true;
  ASSERT_EQ(*port_->add_peer("[::ffff:10.0.0.2]/0x000300"), 0u);
  const std::string before = port_->local_address();
  send(0, 0);
  ASSERT_EQ(nic_.ud_sends.size(), 1u);
  const RcSetupMsg first = sent(0);
  WorkCompletion wc;
  wc.wr_id = nic_.ud_sends[0].wr.wr_id;
  wc.status = WcStatus::kLocQpOpErr;
  wc.opcode = WcOpcode::kSend;
  wc.qp_num = nic_.ud[0].qpn;
  nic_.cq.push_back(wc);
  receive();
  EXPECT_EQ(nic_.ud.size(), 1u);  // not at once: after a short wait
  EXPECT_LT(port_->next_deadline(), t0_ + sec(1));
  const size_t ahs = nic_.ahs.size();
  port_->on_timer(t0_ + sec(1));
  ASSERT_EQ(nic_.ud.size(), 2u);
  EXPECT_TRUE(nic_.ud[0].destroyed);
  EXPECT_EQ(nic_.ud[1].recvs.size(), rc_detail::kHomeRecvs);
  EXPECT_NE(nic_.ud[1].qpn, nic_.ud[0].qpn);
  EXPECT_NE(port_->local_address(), before);
  EXPECT_EQ(extra("rc_home_recreated"), 1u);
  // The lane still connecting asked again, from the new QP.
  ASSERT_EQ(nic_.ud_sends.size(), 2u);
  EXPECT_EQ(nic_.ud_sends[1].qp, 1u);
  const RcSetupMsg again = sent(1);
  EXPECT_EQ(again.home_qpn, nic_.ud[1].qpn);
  EXPECT_EQ(again.port_id, first.port_id);
  EXPECT_EQ(nic_.ud_sends[1].wr.remote_qpn, 0x300u);
  EXPECT_GT(nic_.ahs.size(), ahs);
  // The new QP's receives are the port's: the peer's answer arriving there connects the lane.
  arrive(1, RcSetupKind::kAnswer, kPeerId, 0x300, 0, again.epoch, 0x500);
  ASSERT_EQ(nic_.rc.size(), 1u);
  EXPECT_TRUE(nic_.rc[0].connected);
  EXPECT_EQ(nic_.rc[0].peer.qpn, 0x500u);
  EXPECT_EQ(extra("rc_lanes_up"), 1u);
  EXPECT_EQ(nic_.ud[1].recvs.size(), rc_detail::kHomeRecvs);  // the receive posted again
  // A completion of the old QP, flushed after its end, is not acted on.
  wc.status = WcStatus::kWrFlushErr;
  nic_.cq.push_back(wc);
  receive();
  EXPECT_EQ(nic_.ud.size(), 2u);
  EXPECT_EQ(extra("rc_home_recreated"), 1u);
}

// A home QP that errored is reset keeping its QPN (peers whose home QPs errored too still reach it):
// its receives posted again with the new incarnation, the lane's request sent again from it, and the
// answer arriving on it connects the lane; a completion of the incarnation before is ignored.
TEST_F(RcPortFakeTest, HomeQpErrorResetsItKeepingItsQpn) {
  ASSERT_EQ(*port_->add_peer("[::ffff:10.0.0.2]/0x000300"), 0u);
  const std::string before = port_->local_address();
  send(0, 0);
  ASSERT_EQ(nic_.ud_sends.size(), 1u);
  WorkCompletion wc;
  wc.wr_id = nic_.ud_sends[0].wr.wr_id;
  wc.status = WcStatus::kLocQpOpErr;
  wc.opcode = WcOpcode::kSend;
  wc.qp_num = nic_.ud[0].qpn;
  nic_.cq.push_back(wc);
  const RecvWr stale = nic_.ud[0].recvs.front();  // posted before the error
  receive();
  port_->on_timer(t0_ + sec(1));
  EXPECT_EQ(nic_.resets, 1u);
  ASSERT_EQ(nic_.ud.size(), 1u);
  EXPECT_EQ(port_->local_address(), before);
  EXPECT_EQ(extra("rc_home_resets"), 1u);
  EXPECT_EQ(extra("rc_home_recreated"), 0u);
  EXPECT_EQ(nic_.ud[0].recvs.size(), rc_detail::kHomeRecvs);
  ASSERT_EQ(nic_.ud_sends.size(), 2u);
  EXPECT_EQ(sent(1).home_qpn, nic_.ud[0].qpn);
  // A receive of the incarnation before, flushed by the reset, is neither used nor posted again.
  WorkCompletion flushed;
  flushed.wr_id = stale.wr_id;
  flushed.status = WcStatus::kWrFlushErr;
  flushed.opcode = WcOpcode::kRecv;
  flushed.qp_num = nic_.ud[0].qpn;
  nic_.cq.push_back(flushed);
  receive();
  EXPECT_EQ(nic_.ud[0].recvs.size(), rc_detail::kHomeRecvs);
  arrive(0, RcSetupKind::kAnswer, kPeerId, 0x300, 0, sent(1).epoch, 0x500);
  ASSERT_EQ(nic_.rc.size(), 1u);
  EXPECT_TRUE(nic_.rc[0].connected);
  EXPECT_EQ(extra("rc_lanes_up"), 1u);
}

TEST_F(RcPortFakeTest, SetupMessagesWaitWhileThePortIsNotActive) {
  ASSERT_EQ(*port_->add_peer("[::ffff:10.0.0.2]/0x000300"), 0u);
  nic_.port_active = false;
  send(0, 0);
  EXPECT_TRUE(nic_.ud_sends.empty());
  port_->on_timer(t0_ + sec(1));
  EXPECT_TRUE(nic_.ud_sends.empty());
  EXPECT_GE(extra("rc_setups_deferred"), 2u);
  const size_t ahs = nic_.ahs.size();
  nic_.port_active = true;
  port_->on_timer(t0_ + sec(2));
  ASSERT_EQ(nic_.ud_sends.size(), 1u);
  EXPECT_EQ(sent(0).kind, RcSetupKind::kRequest);
  EXPECT_EQ(nic_.ahs.size(), ahs + 1);  // the peer's address handle made anew
  EXPECT_EQ(extra("rc_home_recreated"), 0u);
}

// A set-up message arriving after the port was seen down refreshes the path before the lane's QP is
// connected through it: while the port's GID is not back in its table the message is not acted on
// (the peer asks again); once it is, the lane connects and is answered.
TEST_F(RcPortFakeTest, SetupArrivingAfterThePortWasDownRefreshesThePathFirst) {
  ASSERT_EQ(*port_->add_peer("[::ffff:10.0.0.2]/0x000300"), 0u);
  nic_.port_active = false;
  send(0, 0);
  EXPECT_TRUE(nic_.ud_sends.empty());
  nic_.port_active = true;
  nic_.gid_present = false;
  const uint64_t deferred = extra("rc_setups_deferred");
  arrive(0, RcSetupKind::kRequest, kPeerId, 0x300, 0, 1, 0x400);
  EXPECT_EQ(extra("rc_setups_deferred"), deferred + 1);
  ASSERT_EQ(nic_.rc.size(), 1u);  // the lane's QP of epoch 0, still connecting
  EXPECT_FALSE(nic_.rc[0].connected);
  EXPECT_TRUE(nic_.ud_sends.empty());
  nic_.gid_present = true;
  const size_t ahs = nic_.ahs.size();
  arrive(0, RcSetupKind::kRequest, kPeerId, 0x300, 0, 1, 0x400);
  EXPECT_EQ(nic_.ahs.size(), ahs + 1);
  ASSERT_EQ(nic_.rc.size(), 2u);
  EXPECT_TRUE(nic_.rc[1].connected);
  EXPECT_EQ(nic_.rc[1].peer.path.sgid_index, 3u);
  ASSERT_EQ(nic_.ud_sends.size(), 1u);
  EXPECT_EQ(sent(0).kind, RcSetupKind::kAnswer);
}

// The peer known by its address takes the port id its first message carries; when its home QP moves
// (a new QPN) it keeps its peer id and is answered at the new address; a stale message from the old
// address does not move it back; another port at an old address is another peer.
TEST_F(RcPortFakeTest, PeerKnownByPortIdKeepsItsIdWhenItsHomeQpnChanges) {
  ASSERT_EQ(*port_->add_peer("[::ffff:10.0.0.2]/0x000300"), 0u);
  arrive(0, RcSetupKind::kRequest, kPeerId, 0x300, 0, 0, 0x400);
  EXPECT_FALSE(port_->has_peer(1));
  ASSERT_EQ(nic_.rc.size(), 1u);
  EXPECT_TRUE(nic_.rc[0].connected);
  EXPECT_EQ(nic_.rc[0].peer.qpn, 0x400u);
  ASSERT_EQ(nic_.ud_sends.size(), 1u);
  EXPECT_EQ(sent(0).kind, RcSetupKind::kAnswer);
  EXPECT_EQ(nic_.ud_sends[0].wr.remote_qpn, 0x300u);

  // Its home QP was re-created: epoch 1 from 0x301.
  arrive(0, RcSetupKind::kRequest, kPeerId, 0x301, 0, 1, 0x401);
  EXPECT_FALSE(port_->has_peer(1));
  EXPECT_EQ(extra("rc_peer_home_moved"), 1u);
  ASSERT_EQ(nic_.rc.size(), 2u);
  EXPECT_TRUE(nic_.rc[0].destroyed);
  EXPECT_TRUE(nic_.rc[1].connected);
  EXPECT_EQ(nic_.rc[1].peer.qpn, 0x401u);
  ASSERT_EQ(nic_.ud_sends.size(), 2u);
  EXPECT_EQ(nic_.ud_sends[1].wr.remote_qpn, 0x301u);
  EXPECT_EQ(port_->peer_address(0), "[::ffff:10.0.0.2]/0x000300");  // the engine's name for it stays

  // A late request of epoch 0 from the old address: stale, it moves nothing.
  arrive(0, RcSetupKind::kRequest, kPeerId, 0x300, 0, 0, 0x400);
  EXPECT_EQ(extra("rc_peer_home_moved"), 1u);
  send(0, 1);  // lane 1's request goes to the peer's current address
  ASSERT_EQ(nic_.ud_sends.size(), 3u);
  EXPECT_EQ(nic_.ud_sends[2].wr.remote_qpn, 0x301u);

  // Another port (a restarted process) at the peer's old address: a peer of its own.
  arrive(0, RcSetupKind::kRequest, kPeerId + 1, 0x300, 0, 0, 0x402);
  EXPECT_TRUE(port_->has_peer(1));
  EXPECT_EQ(extra("rc_peer_home_moved"), 1u);
}

// The completion channel is read (a system call) only before a sleep, when the port arms its CQ, not
// by every receive(): a polling wire's rounds make no system call for it.
TEST_F(RcPortFakeTest, ReadsTheCompletionChannelOnlyWhenArmingForASleep) {
  for (int i = 0; i < 100; ++i) receive();
  EXPECT_EQ(nic_.cq_drains, 0u);
  EXPECT_EQ(nic_.cq_arms, 0u);
  EXPECT_TRUE(port_->arm());  // nothing came: the wire may sleep
  EXPECT_EQ(nic_.cq_drains, 1u);
  EXPECT_EQ(nic_.cq_arms, 1u);
  for (int i = 0; i < 100; ++i) receive();
  EXPECT_EQ(nic_.cq_drains, 1u);
  EXPECT_TRUE(port_->arm());
  EXPECT_EQ(nic_.cq_drains, 2u);
}

// An older build's set-up message (version 1) is refused, said on stderr naming the version, counted,
// and never acted on.
TEST_F(RcPortFakeTest, RefusesAnOlderVersionsSetupMessage) {
  ASSERT_FALSE(nic_.ud[0].recvs.empty());
  const RecvWr r = nic_.ud[0].recvs.front();
  nic_.ud[0].recvs.pop_front();
  auto* buf = reinterpret_cast<uint8_t*>(r.sge.addr);
  std::memset(buf, 0, kGrhBytes + 72);
  buf[20] = 0x45;
  const uint32_t magic = kRcSetupMagic;
  std::memcpy(buf + kGrhBytes, &magic, 4);
  buf[kGrhBytes + 4] = 1;
  WorkCompletion wc;
  wc.wr_id = r.wr_id;
  wc.opcode = WcOpcode::kRecv;
  wc.byte_len = kGrhBytes + 72;
  wc.grh = true;
  wc.qp_num = nic_.ud[0].qpn;
  nic_.cq.push_back(wc);
  ::testing::internal::CaptureStderr();
  receive();
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("version 1; this build reads version 2"), std::string::npos) << said;
  EXPECT_EQ(extra("rc_setups_refused"), 1u);
  EXPECT_FALSE(port_->has_peer(0));
  EXPECT_TRUE(nic_.rc.empty());
}

// Data writes a lane keeps posted are bounded by rc_queue_bytes (one is always allowed); more data
// waits in the port, and a packet without payload (an ACK) is posted at once, ahead of it, so it never
// waits behind megabytes in the NIC's send queue. A completion makes room for the data that waited.
TEST_F(RcPortFakeTest, PacketsWithoutPayloadGoAheadOfDataHeldByTheQueueLimit) {
  VerbsPortConfig c = config();
  c.rc_queue_bytes = 2500;
  make_port(c);
  arrive(nic_.ud.size() - 1, RcSetupKind::kRequest, kPeerId, 0x300, 0, 0, 0x400);  // the peer connects lane 0
  ASSERT_EQ(nic_.rc.size(), 1u);
  ASSERT_TRUE(nic_.rc[0].connected);
  auto bytes = [&](size_t i) { return nic_.rc[0].writes.at(i).sge[0].length; };

  send(0, 0, 1000);
  send(0, 0, 1000);
  send(0, 0, 1000);  // 3 x 1003 bytes > 2500: the third waits
  ASSERT_EQ(nic_.rc[0].writes.size(), 2u);
  EXPECT_EQ(extra("rc_queue_full_waits"), 1u);
  send(0, 0);  // an ACK
  ASSERT_EQ(nic_.rc[0].writes.size(), 3u);
  EXPECT_EQ(bytes(2), 3u);
  EXPECT_EQ(extra("rc_control_first"), 1u);
  EXPECT_EQ(extra("rc_waiting"), 1u);

  WorkCompletion wc;  // the first write completes
  wc.wr_id = nic_.rc[0].writes[0].wr_id;
  wc.opcode = WcOpcode::kRdmaWrite;
  wc.qp_num = nic_.rc[0].qpn;
  nic_.cq.push_back(wc);
  receive();
  ASSERT_EQ(nic_.rc[0].writes.size(), 4u);
  EXPECT_EQ(bytes(3), 1003u);
  EXPECT_EQ(extra("rc_waiting"), 0u);

  // One write larger than the limit still goes when nothing else is posted.
  c.rc_queue_bytes = 100;
  make_port(c);
  arrive(nic_.ud.size() - 1, RcSetupKind::kRequest, kPeerId, 0x300, 0, 0, 0x400);
  ASSERT_EQ(nic_.rc.size(), 2u);
  const size_t before = nic_.rc[1].writes.size();
  send(0, 0, 1000);
  EXPECT_EQ(nic_.rc[1].writes.size(), before + 1);
}

TEST_F(RcPortFakeTest, RefusesAQueueLimitOfZero) {
  VerbsPortConfig c = config();
  c.rc_queue_bytes = 0;
  GidEntry g;
  g.index = 3;
  g.gid = nic_.gid;
  g.type = GidType::kRoceV2;
  Result<std::unique_ptr<PacketPort>> p = rc_detail::RcPort::make(c, std::make_unique<FakeDevice>(nic_), g);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().message.find("rc_queue_bytes 0"), std::string::npos) << p.error().message;
}

}  // namespace
}  // namespace megascale::wire::verbs
