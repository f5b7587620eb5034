// verbs-ud's port over a fake device (no RDMA device needed): its address and description, receives
// posted on every QP (the home QP deepest), a send copied into a registered bounce buffer and addressed
// to the peer's QPN through a cached address handle with the slot's flow label and ECT(0), send
// buffers that run out (counted drops) and come back at their completions, a receive delivered under
// the peer id of its GRH source and src_qp with its CE mark and posted again, the peer table's limit,
// a completion in error failing the port naming the QP, and arm() telling whether work came.
#include "../../../../collectives/wire/verbs/src/ud_port.h"

#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <string>
#include <vector>

namespace megascale::wire::verbs {
namespace {

constexpr uint32_t kMtu = 1024;
constexpr uint32_t kFirstQpn = 0x100;

struct Posted {
  uint32_t qp = 0;  // the QP's index in creation order (= the port's slot)
  SendWr wr;
  void* ah = nullptr;
};

// What the fake device's objects share with the test.
struct Nic {
  std::deque<WorkCompletion> cq;
  std::vector<Posted> sends;
  std::vector<std::deque<RecvWr>> recvs;  // per QP, posted and not yet consumed
  std::vector<uint64_t> recvs_posted;     // per QP, ever
  std::vector<AhSpec> ahs;
  uint32_t arms = 0;
};

class FakeCq final : public IbCq {
 public:
  explicit FakeCq(Nic& nic) : nic_(nic) {}
  Result<uint32_t> poll(std::vector<WorkCompletion>& out, uint32_t max) override {
    uint32_t n = 0;
    while (n < max && !nic_.cq.empty()) {
      out.push_back(nic_.cq.front());
      nic_.cq.pop_front();
      ++n;
    }
    return n;
  }
  int event_fd() const override { return -1; }
  Status arm() override {
    ++nic_.arms;
    return {};
  }
  void drain_events() override {}

 private:
  Nic& nic_;
};

class FakeQp final : public IbUdQp {
 public:
  FakeQp(Nic& nic, uint32_t index) : nic_(nic), index_(index) {}
  uint32_t qpn() const override { return kFirstQpn + index_; }
  Status post_send(const SendWr& wr, void* ah) override {
    nic_.sends.push_back({index_, wr, ah});
    return {};
  }
  Status post_recv(const RecvWr& wr) override {
    nic_.recvs[index_].push_back(wr);
    ++nic_.recvs_posted[index_];
    return {};
  }
  Status reset() override {  // as a device does: the posted receives are gone
    nic_.recvs[index_].clear();
    return {};
  }

 private:
  Nic& nic_;
  uint32_t index_;
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
  Result<Gid> query_gid(uint32_t) const override { return Gid{}; }
  Result<std::unique_ptr<IbCq>> create_cq(uint32_t) override {
    return std::unique_ptr<IbCq>(new FakeCq(nic_));
  }
  Result<std::unique_ptr<IbUdQp>> create_ud_qp(IbCq&, const UdQpConfig& c) override {
    EXPECT_EQ(c.qkey, 0x4D53u);
    nic_.recvs.emplace_back();
    nic_.recvs_posted.push_back(0);
    return std::unique_ptr<IbUdQp>(new FakeQp(nic_, static_cast<uint32_t>(nic_.recvs.size() - 1)));
  }
  Result<std::unique_ptr<IbRcQp>> create_rc_qp(IbCq&, uint32_t, uint32_t) override {
    return make_error("fake: no RC");
  }
  Result<MrKeys> register_ring(void*, uint64_t) override { return make_error("fake: no rings"); }
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

GidEntry local_gid() {
  GidEntry g;
  g.index = 3;
  g.gid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 1};
  g.type = GidType::kRoceV2;
  return g;
}

struct Delivered {
  uint32_t peer;
  std::vector<uint8_t> bytes;
  bool ce;
};

class UdPortTest : public ::testing::Test {
 protected:
  void open(VerbsPortConfig c = {}) {
    c.recv_depth = 32;
    Result<std::unique_ptr<PacketPort>> p = make_ud_port(c, std::make_unique<FakeDevice>(nic_), local_gid());
    ASSERT_TRUE(p.ok()) << p.error().message;
    port_ = std::move(*p);
  }

  Status send(uint32_t peer, uint32_t slot, const std::string& header, const std::string& payload,
              bool ect = true) {
    PortPacket p;
    p.header = reinterpret_cast<const uint8_t*>(header.data());
    p.header_len = static_cast<uint32_t>(header.size());
    p.payload = reinterpret_cast<const uint8_t*>(payload.data());
    p.payload_len = static_cast<uint32_t>(payload.size());
    p.peer = peer;
    p.slot = slot;
    p.lane = slot;
    p.ect = ect;
    return port_->send(std::span<const PortPacket>(&p, 1));
  }

  // A datagram from (10.0.0.<src_host>, src_qp) into the next receive posted on QP `qp`, `tos` in the
  // IPv4 header the GRH holds.
  void arrive(uint32_t qp, uint8_t src_host, uint32_t src_qp, const std::string& bytes, uint8_t tos) {
    ASSERT_FALSE(nic_.recvs[qp].empty());
    const RecvWr r = nic_.recvs[qp].front();
    nic_.recvs[qp].pop_front();
    ASSERT_EQ(r.sge.length, kGrhBytes + kMtu);
    auto* buf = reinterpret_cast<uint8_t*>(r.sge.addr);
    std::memset(buf, 0, kGrhBytes);
    buf[20] = 0x45;
    buf[21] = tos;
    const uint8_t src[4] = {10, 0, 0, src_host};
    std::memcpy(buf + 32, src, 4);
    std::memcpy(buf + kGrhBytes, bytes.data(), bytes.size());
    WorkCompletion wc;
    wc.wr_id = r.wr_id;
    wc.opcode = WcOpcode::kRecv;
    wc.byte_len = kGrhBytes + static_cast<uint32_t>(bytes.size());
    wc.grh = true;
    wc.qp_num = kFirstQpn + qp;
    wc.src_qp = src_qp;
    nic_.cq.push_back(wc);
  }

  Result<size_t> receive(std::vector<Delivered>& got, size_t max = 64) {
    return port_->receive(max, [&](uint32_t peer, uint8_t* data, size_t len, bool ce) {
      got.push_back({peer, std::vector<uint8_t>(data, data + len), ce});
    });
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
};

TEST_F(UdPortTest, AddressDescriptionAndPostedReceives) {
  open();
  EXPECT_EQ(port_->local_address(), "[::ffff:10.0.0.1]/0x000100");
  EXPECT_EQ(port_->describe(), "verbs-ud fake0 port 1 gid 3 (::ffff:10.0.0.1, RoCE v2) mtu 1024, 4 QPs");
  EXPECT_EQ(port_->slots(), 4u);
  EXPECT_EQ(port_->max_packet_bytes(), kMtu);
  ASSERT_EQ(nic_.recvs.size(), 4u);
  EXPECT_EQ(nic_.recvs[0].size(), 32u);  // the home QP: recv_depth
  for (uint32_t q = 1; q < 4; ++q) EXPECT_EQ(nic_.recvs[q].size(), 16u) << q;
}

TEST_F(UdPortTest, SendIsCopiedAndAddressedToThePeer) {
  VerbsPortConfig c;
  c.traffic_class = 46 << 2;
  open(c);
  Result<uint32_t> peer = port_->add_peer("[::ffff:10.0.0.2]/0x000abc");
  ASSERT_TRUE(peer.ok()) << peer.error().message;
  EXPECT_EQ(*peer, 0u);
  EXPECT_EQ(*port_->add_peer("[::ffff:10.0.0.2]/0xabc"), 0u);  // the same peer
  EXPECT_TRUE(port_->has_peer(0));
  EXPECT_FALSE(port_->has_peer(1));
  EXPECT_EQ(port_->peer_address(0), "[::ffff:10.0.0.2]/0x000abc");
  EXPECT_FALSE(port_->add_peer("10.0.0.2:4791").ok());

  std::string header = "HDR:", payload = "payload bytes";
  ASSERT_TRUE(send(0, 2, header, payload));
  header[0] = 'X';  // the NIC reads the bounce buffer after send() returned
  ASSERT_EQ(nic_.sends.size(), 1u);
  const Posted& s = nic_.sends[0];
  EXPECT_EQ(s.qp, 2u);
  EXPECT_EQ(s.wr.remote_qpn, 0xABCu);
  EXPECT_EQ(s.wr.remote_qkey, 0x4D53u);
  EXPECT_TRUE(s.wr.signaled);
  ASSERT_EQ(s.wr.num_sge, 1u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(s.wr.sge[0].addr), s.wr.sge[0].length),
            "HDR:payload bytes");
  EXPECT_EQ(s.wr.sge[0].lkey, 7u);
  ASSERT_EQ(nic_.ahs.size(), 1u);
  const AhSpec& ah = nic_.ahs[0];
  EXPECT_EQ(ah.dgid, parse_port_address("[::ffff:10.0.0.2]/1")->gid);
  EXPECT_EQ(ah.sgid_index, 3u);
  EXPECT_EQ(ah.traffic_class, (46 << 2) | 0x2);  // DSCP 46, ECT(0)
  EXPECT_EQ(ah.flow_label, *flow_label_for_sport(0xC000 | (kFirstQpn + 2)));
  EXPECT_EQ(s.ah, reinterpret_cast<void*>(uintptr_t{1}));

  ASSERT_TRUE(send(0, 2, header, payload));  // the same AH
  EXPECT_EQ(nic_.ahs.size(), 1u);
  ASSERT_TRUE(send(0, 1, header, payload));  // another slot: its own source port
  ASSERT_TRUE(send(0, 1, header, "", /*ect=*/false));
  ASSERT_EQ(nic_.ahs.size(), 3u);
  EXPECT_NE(nic_.ahs[1].flow_label, nic_.ahs[0].flow_label);
  EXPECT_EQ(nic_.ahs[2].traffic_class, 46 << 2);
  EXPECT_EQ(nic_.sends[3].wr.sge[0].length, header.size());
  EXPECT_EQ(extra("ah_created"), 3u);
  EXPECT_EQ(port_->stats().packets_sent, 4u);

  // A packet to an unknown peer, or larger than the MTU, is dropped and counted.
  ASSERT_TRUE(send(5, 0, header, payload));
  ASSERT_TRUE(send(0, 0, header, std::string(kMtu, 'x')));
  EXPECT_EQ(port_->stats().send_dropped, 2u);
  EXPECT_EQ(nic_.sends.size(), 4u);
}

TEST_F(UdPortTest, SendBuffersRunOutAndComeBackAtTheirCompletions) {
  VerbsPortConfig c;
  c.send_depth = 2;
  open(c);
  ASSERT_TRUE(port_->add_peer("[::ffff:10.0.0.2]/0x000abc").ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(send(0, 0, "h", "p"));
  EXPECT_EQ(nic_.sends.size(), 2u);
  EXPECT_EQ(port_->stats().send_dropped, 1u);
  EXPECT_EQ(extra("send_slots_full"), 1u);
  EXPECT_NE(nic_.sends[0].wr.sge[0].addr, nic_.sends[1].wr.sge[0].addr);
  // Another QP has its own buffers.
  ASSERT_TRUE(send(0, 1, "h", "p"));
  EXPECT_EQ(nic_.sends.size(), 3u);
  // The completions free them: the next send takes one (send() polls when none is free).
  for (int i = 0; i < 2; ++i) {
    WorkCompletion wc;
    wc.wr_id = nic_.sends[static_cast<size_t>(i)].wr.wr_id;
    wc.opcode = WcOpcode::kSend;
    wc.qp_num = kFirstQpn;
    nic_.cq.push_back(wc);
  }
  ASSERT_TRUE(send(0, 0, "h", "p"));
  ASSERT_TRUE(send(0, 0, "h", "p"));
  EXPECT_EQ(nic_.sends.size(), 5u);
  EXPECT_EQ(extra("send_completions"), 2u);
  EXPECT_EQ(extra("send_slots_full"), 1u);
}

TEST_F(UdPortTest, ReceivesArriveUnderTheirSourcesPeerIdWithCe) {
  open();
  ASSERT_TRUE(port_->add_peer("[::ffff:10.0.0.2]/0x000abc").ok());  // peer 0
  arrive(0, 2, 0xABC, "from the home QP", 0x02);                    // ECT(0)
  arrive(0, 2, 0xABD, "from its lane 1", 0x03);                     // CE
  arrive(0, 9, 0xABC, "another host", 0x00);
  std::vector<Delivered> got;
  Result<size_t> n = receive(got);
  ASSERT_TRUE(n.ok()) << n.error().message;
  ASSERT_EQ(*n, 3u);
  EXPECT_EQ(got[0].peer, 0u);
  EXPECT_EQ(std::string(got[0].bytes.begin(), got[0].bytes.end()), "from the home QP");
  EXPECT_FALSE(got[0].ce);
  EXPECT_EQ(got[1].peer, 1u);
  EXPECT_TRUE(got[1].ce);
  EXPECT_EQ(got[2].peer, 2u);
  EXPECT_EQ(port_->peer_address(1), "[::ffff:10.0.0.2]/0x000abd");
  EXPECT_EQ(port_->peer_address(2), "[::ffff:10.0.0.9]/0x000abc");
  // Every buffer went back: 32 posted at the start, 3 again.
  EXPECT_EQ(nic_.recvs[0].size(), 32u);
  EXPECT_EQ(nic_.recvs_posted[0], 35u);
  EXPECT_EQ(extra("recv_reposted"), 3u);
  const PortStats s = port_->stats();
  EXPECT_EQ(s.packets_received, 3u);
  EXPECT_EQ(s.ce_received, 1u);
  // A lane QP's receive (an answer to that source) is delivered as well.
  arrive(2, 2, 0xABC, "to lane 2", 0);
  got.clear();
  ASSERT_EQ(*receive(got), 1u);
  EXPECT_EQ(got[0].peer, 0u);
  EXPECT_EQ(nic_.recvs[2].size(), 16u);
}

TEST_F(UdPortTest, ReceiveDeliversAtMostMaxAndKeepsTheRest) {
  open();
  for (char c : std::string("01234")) arrive(0, 2, 0xABC, std::string(1, c), 0);
  std::vector<Delivered> got;
  ASSERT_EQ(*receive(got, 2), 2u);
  ASSERT_EQ(*receive(got, 10), 3u);
  ASSERT_EQ(got.size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(got[static_cast<size_t>(i)].bytes.back(), '0' + i);
}

TEST_F(UdPortTest, TheFullPeerTableDropsNewSourcesAndCountsThem) {
  VerbsPortConfig c;
  c.max_peers = 1;
  open(c);
  ASSERT_TRUE(port_->add_peer("[::ffff:10.0.0.2]/0x000abc").ok());
  Result<uint32_t> more = port_->add_peer("[::ffff:10.0.0.3]/0x000abc");
  ASSERT_FALSE(more.ok());
  EXPECT_NE(more.error().message.find("peer table is full (1 peers)"), std::string::npos)
      << more.error().message;
  arrive(0, 3, 0x55, "stranger", 0);
  arrive(0, 2, 0xABC, "known", 0);
  std::vector<Delivered> got;
  ASSERT_EQ(*receive(got), 1u);
  EXPECT_EQ(got[0].peer, 0u);
  EXPECT_EQ(port_->stats().peer_table_full, 1u);
  EXPECT_EQ(nic_.recvs[0].size(), 32u);  // both buffers posted again
}

TEST_F(UdPortTest, ACompletionInErrorFailsThePortNamingTheQp) {
  open();
  ASSERT_TRUE(port_->add_peer("[::ffff:10.0.0.2]/0x000abc").ok());
  ASSERT_TRUE(send(0, 1, "h", "p"));
  WorkCompletion flushed;  // a flush alone is counted, not an error
  flushed.wr_id = nic_.recvs[3].front().wr_id;
  flushed.status = WcStatus::kWrFlushErr;
  nic_.cq.push_back(flushed);
  std::vector<Delivered> got;
  ASSERT_TRUE(receive(got).ok());
  EXPECT_EQ(extra("flushed"), 1u);

  WorkCompletion wc;
  wc.wr_id = nic_.sends[0].wr.wr_id;
  wc.status = WcStatus::kLocLenErr;
  wc.qp_num = kFirstQpn + 1;
  nic_.cq.push_back(wc);
  Result<size_t> r = receive(got);
  ASSERT_FALSE(r.ok());
  const std::string& m = r.error().message;
  EXPECT_NE(m.find("QP 0x000101 (slot 1) failed"), std::string::npos) << m;
  EXPECT_NE(m.find("IBV_WC_LOC_LEN_ERR"), std::string::npos) << m;
  EXPECT_EQ(port_->stats().send_errors, 1u);
  // The port stays failed.
  Status s = send(0, 0, "h", "p");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, m);
  EXPECT_FALSE(receive(got).ok());
  EXPECT_FALSE(port_->arm());
}

TEST_F(UdPortTest, ArmSaysWhetherWorkCame) {
  open();
  EXPECT_TRUE(port_->arm());
  EXPECT_EQ(nic_.arms, 1u);
  arrive(0, 2, 0xABC, "late", 0);
  EXPECT_FALSE(port_->arm());  // polled after arming: kept for receive()
  EXPECT_FALSE(port_->arm());
  std::vector<Delivered> got;
  ASSERT_EQ(*receive(got), 1u);
  EXPECT_EQ(std::string(got[0].bytes.begin(), got[0].bytes.end()), "late");
  EXPECT_TRUE(port_->arm());
}

}  // namespace
}  // namespace megascale::wire::verbs
