// The thin layer over libibverbs on a real device: a UD datagram from a QP to itself, its payload
// intact, its GRH carrying the packet's IP header, its completion translated into the packet event the
// engine gets; and an RC write with immediate between two connected QPs landing in the reader's ring
// slot that the immediate names. Needs an RDMA device: without one (every host but the Soft-RoCE guest
// of scripts/test-rxe.sh) each test skips, saying so.
#include "megascale/wire/verbs/ib_device.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "megascale/wire/verbs/rc_recovery.h"

namespace megascale::wire::verbs {
namespace {

constexpr const char* kSysfs = "/sys/class/infiniband";

class VerbsIbDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::vector<std::string> names = list_devices();
    if (names.empty()) GTEST_SKIP() << "no RDMA device (libibverbs lists none): runs in the Soft-RoCE guest";
    Result<std::vector<DeviceInfo>> devs = discover_devices(kSysfs);
    ASSERT_TRUE(devs.ok()) << devs.error().message;
    for (const DeviceInfo& d : *devs) {
      if (d.name == names[0]) info_ = d;
    }
    ASSERT_EQ(info_.name, names[0]) << names[0] << " is not under " << kSysfs;
    Result<const PortInfo*> port = select_port(info_, 0);
    ASSERT_TRUE(port.ok()) << port.error().message;
    port_ = (*port)->port;
    Result<GidEntry> gid = select_gid(info_, **port, GidSelector{});
    ASSERT_TRUE(gid.ok()) << gid.error().message;
    gid_ = *gid;
    Result<std::unique_ptr<IbDevice>> dev = IbDevice::open(info_.name, port_);
    ASSERT_TRUE(dev.ok()) << dev.error().message;
    dev_ = std::move(*dev);
    Result<std::unique_ptr<IbCq>> cq = dev_->create_cq(64);
    ASSERT_TRUE(cq.ok()) << cq.error().message;
    cq_ = std::move(*cq);
  }

  // The CQ goes before its device.
  void TearDown() override {
    cq_.reset();
    dev_.reset();
  }

  // Polls until `n` completions or 20 s.
  std::vector<WorkCompletion> poll(size_t n) {
    std::vector<WorkCompletion> wcs;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (wcs.size() < n && std::chrono::steady_clock::now() < deadline) {
      Result<uint32_t> got = cq_->poll(wcs, 4);
      EXPECT_TRUE(got.ok()) << got.error().message;
      if (!got.ok()) break;
      if (*got == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return wcs;
  }

  AhSpec path_to_self() const {
    return {.dgid = gid_.gid,
            .sgid_index = static_cast<uint8_t>(gid_.index),
            .traffic_class = *traffic_class(26, true),
            .hop_limit = 64,
            .flow_label = 0,
            .port_num = static_cast<uint8_t>(port_)};
  }

  DeviceInfo info_;
  uint32_t port_ = 0;
  GidEntry gid_;
  std::unique_ptr<IbDevice> dev_;
  std::unique_ptr<IbCq> cq_;
};

uint64_t addr_of(const void* p) {
  return reinterpret_cast<uint64_t>(p);
}

TEST_F(VerbsIbDevice, UdDatagramToItselfThroughTheDevice) {
  Result<Gid> queried = dev_->query_gid(gid_.index);
  ASSERT_TRUE(queried.ok()) << queried.error().message;
  EXPECT_EQ(*queried, gid_.gid) << "sysfs and ibv_query_gid disagree";
  const uint32_t mtu = dev_->active_mtu_bytes();
  ASSERT_GE(mtu, 256u);

  Result<std::unique_ptr<IbUdQp>> qp =
      dev_->create_ud_qp(*cq_, {.qkey = 0x4D53, .send_depth = 16, .recv_depth = 16, .psn = 0});
  ASSERT_TRUE(qp.ok()) << qp.error().message;
  Result<uint32_t> ah = dev_->create_ah(path_to_self());
  ASSERT_TRUE(ah.ok()) << ah.error().message;

  std::vector<uint8_t> header(72), payload(mtu - 72), recv(kGrhBytes + mtu);
  for (size_t i = 0; i < header.size(); ++i) header[i] = static_cast<uint8_t>(i);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 7 + 1);
  MrCache& mrs = dev_->mr_cache();
  Result<MrKeys> hk = mrs.find_or_register(addr_of(header.data()), header.size());
  Result<MrKeys> pk = mrs.find_or_register(addr_of(payload.data()), payload.size());
  Result<MrKeys> rk = mrs.find_or_register(addr_of(recv.data()), recv.size());
  ASSERT_TRUE(hk.ok() && pk.ok() && rk.ok());

  Result<RecvWr> rwr = make_ud_recv(
      {.kind = WrKind::kUdRecv, .lane = 0, .epoch = 0, .slot = 3},
      {.addr = addr_of(recv.data()), .length = static_cast<uint32_t>(recv.size()), .lkey = rk->lkey}, mtu);
  ASSERT_TRUE(rwr.ok()) << rwr.error().message;
  ASSERT_TRUE((*qp)->post_recv(*rwr).ok());
  Result<SendWr> swr =
      make_ud_send({.tag = {.kind = WrKind::kUdSend, .lane = 0, .epoch = 0, .slot = 1},
                    .header = {.addr = addr_of(header.data()), .length = 72, .lkey = hk->lkey},
                    .payload = {.addr = addr_of(payload.data()),
                                .length = static_cast<uint32_t>(payload.size()),
                                .lkey = pk->lkey},
                    .ah = *ah,
                    .remote_qpn = (*qp)->qpn(),
                    .qkey = 0x4D53,
                    .mtu_bytes = mtu,
                    .signaled = true});
  ASSERT_TRUE(swr.ok()) << swr.error().message;
  Status posted = (*qp)->post_send(*swr, dev_->ah(*ah));
  ASSERT_TRUE(posted.ok()) << posted.error().message;

  std::vector<WorkCompletion> wcs = poll(2);
  ASSERT_EQ(wcs.size(), 2u) << "send and receive did not both complete within 20 s";
  const CompletionContext ctx{
      .mode = WireMode::kUd, .grh_ipv4 = gid_is_ipv4(gid_.gid), .ring_slots = 0, .slot_bytes = 0};
  bool got_packet = false, got_send = false;
  for (const WorkCompletion& wc : wcs) {
    ASSERT_EQ(wc.status, WcStatus::kSuccess) << to_string(wc.status);
    CompletionEvent ev = translate_completion(wc, ctx, recv.data());
    if (ev.kind == EventKind::kSendDone) {
      got_send = true;
      EXPECT_EQ(ev.tag.slot, 1u);
    } else {
      ASSERT_EQ(ev.kind, EventKind::kPacket) << ev.why;
      got_packet = true;
      EXPECT_EQ(ev.length, mtu);
      EXPECT_EQ(std::memcmp(recv.data() + ev.offset, header.data(), 72), 0);
      EXPECT_EQ(std::memcmp(recv.data() + ev.offset + 72, payload.data(), payload.size()), 0);
      EXPECT_TRUE(ev.ecn_known) << "the GRH holds no IP header of the expected family";
      EXPECT_EQ(ev.src_qp, (*qp)->qpn());
    }
  }
  EXPECT_TRUE(got_packet && got_send);
}

TEST_F(VerbsIbDevice, RcWriteWithImmediateIntoAPeerRingSlot) {
  // Two RC QPs of one device, connected to each other with the NIC retry derived from the engine's RTO.
  Result<NicRetry> nic = derive_nic_retry(cc::RtoParams{});
  ASSERT_TRUE(nic.ok()) << nic.error().message;
  Result<std::unique_ptr<IbRcQp>> writer = dev_->create_rc_qp(*cq_, 16, 16);
  Result<std::unique_ptr<IbRcQp>> reader = dev_->create_rc_qp(*cq_, 16, 16);
  ASSERT_TRUE(writer.ok()) << writer.error().message;
  ASSERT_TRUE(reader.ok()) << reader.error().message;
  const uint32_t mtu = dev_->active_mtu_bytes();
  Status c1 = (*writer)->connect(
      {.path = path_to_self(), .qpn = (*reader)->qpn(), .psn = 200, .mtu_bytes = mtu}, *nic, 100);
  ASSERT_TRUE(c1.ok()) << c1.error().message;
  Status c2 = (*reader)->connect(
      {.path = path_to_self(), .qpn = (*writer)->qpn(), .psn = 100, .mtu_bytes = mtu}, *nic, 200);
  ASSERT_TRUE(c2.ok()) << c2.error().message;

  constexpr uint32_t kSlots = 8, kSlotBytes = 4096 + 72;
  std::vector<uint8_t> ring(2 * kSlots * kSlotBytes);
  Result<MrKeys> ring_keys = dev_->register_ring(ring.data(), ring.size());
  ASSERT_TRUE(ring_keys.ok()) << ring_keys.error().message;
  const RemoteRing peer_ring{
      .addr = addr_of(ring.data()), .rkey = ring_keys->rkey, .slots = kSlots, .slot_bytes = kSlotBytes};

  std::vector<uint8_t> header(72), payload(4096);
  for (size_t i = 0; i < header.size(); ++i) header[i] = static_cast<uint8_t>(0xA0 + i);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 13 + 5);
  Result<MrKeys> hk = dev_->mr_cache().find_or_register(addr_of(header.data()), header.size());
  Result<MrKeys> pk = dev_->mr_cache().find_or_register(addr_of(payload.data()), payload.size());
  ASSERT_TRUE(hk.ok() && pk.ok());

  ASSERT_TRUE(
      (*reader)->post_recv(make_rc_recv({.kind = WrKind::kRcRecv, .lane = 1, .epoch = 0, .slot = 0})).ok());
  Result<SendWr> wr =
      make_rc_write({.tag = {.kind = WrKind::kRcWrite, .lane = 1, .epoch = 0, .slot = 6},
                     .header = {.addr = addr_of(header.data()), .length = 72, .lkey = hk->lkey},
                     .payload = {.addr = addr_of(payload.data()), .length = 4096, .lkey = pk->lkey},
                     .ring = peer_ring,
                     .remote_slot = 3,
                     .signaled = true});
  ASSERT_TRUE(wr.ok()) << wr.error().message;
  Status posted = (*writer)->post_write(*wr);
  ASSERT_TRUE(posted.ok()) << posted.error().message;

  std::vector<WorkCompletion> wcs = poll(2);
  ASSERT_EQ(wcs.size(), 2u) << "write and its receive did not both complete within 20 s";
  const CompletionContext ctx{
      .mode = WireMode::kRc, .grh_ipv4 = true, .ring_slots = kSlots, .slot_bytes = kSlotBytes};
  bool got_packet = false, got_send = false;
  for (const WorkCompletion& wc : wcs) {
    ASSERT_EQ(wc.status, WcStatus::kSuccess) << to_string(wc.status);
    CompletionEvent ev = translate_completion(wc, ctx, nullptr);
    if (ev.kind == EventKind::kSendDone) {
      got_send = true;
      EXPECT_EQ(ev.tag.slot, 6u);
    } else {
      ASSERT_EQ(ev.kind, EventKind::kPacket) << ev.why;
      got_packet = true;
      EXPECT_EQ(ev.ring_slot, 3u);
      EXPECT_EQ(ev.length, 72u + 4096u);
      const uint8_t* slot = ring.data() + (1 * kSlots + 3) * kSlotBytes;
      EXPECT_EQ(std::memcmp(slot, header.data(), 72), 0);
      EXPECT_EQ(std::memcmp(slot + 72, payload.data(), 4096), 0);
    }
  }
  EXPECT_TRUE(got_packet && got_send);
}

}  // namespace
}  // namespace megascale::wire::verbs
