// The thin layer over libibverbs on a real device: a UD datagram from a QP to itself through the
// device, its payload intact, its GRH carrying the packet's IP header and its completion translated
// into the packet event the engine gets. Needs an RDMA device: without one (every host but the
// Soft-RoCE guest of scripts/test-rxe.sh) it skips, saying so.
#include "megascale/wire/verbs/ib_device.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

namespace megascale::wire::verbs {
namespace {

constexpr const char* kSysfs = "/sys/class/infiniband";

TEST(VerbsIbDevice, UdDatagramToItselfThroughTheDevice) {
  const std::vector<std::string> names = list_devices();
  if (names.empty()) GTEST_SKIP() << "no RDMA device (libibverbs lists none): runs in the Soft-RoCE guest";
  Result<std::vector<DeviceInfo>> devs = discover_devices(kSysfs);
  ASSERT_TRUE(devs.ok()) << devs.error().message;
  const DeviceInfo* info = nullptr;
  for (const DeviceInfo& d : *devs) {
    if (d.name == names[0]) info = &d;
  }
  ASSERT_NE(info, nullptr) << names[0] << " is not under " << kSysfs;
  Result<const PortInfo*> port = select_port(*info, 0);
  ASSERT_TRUE(port.ok()) << port.error().message;
  Result<GidEntry> gid = select_gid(*info, **port, GidSelector{});
  ASSERT_TRUE(gid.ok()) << gid.error().message;

  Result<std::unique_ptr<IbDevice>> dev = IbDevice::open(info->name, (*port)->port);
  ASSERT_TRUE(dev.ok()) << dev.error().message;
  Result<Gid> queried = (*dev)->query_gid(gid->index);
  ASSERT_TRUE(queried.ok()) << queried.error().message;
  EXPECT_EQ(*queried, gid->gid) << "sysfs and ibv_query_gid disagree";
  const uint32_t mtu = (*dev)->active_mtu_bytes();
  ASSERT_GE(mtu, 256u);

  Result<std::unique_ptr<IbCq>> cq = (*dev)->create_cq(64);
  ASSERT_TRUE(cq.ok()) << cq.error().message;
  Result<std::unique_ptr<IbUdQp>> qp =
      (*dev)->create_ud_qp(**cq, {.qkey = 0x4D53, .send_depth = 16, .recv_depth = 16, .psn = 0});
  ASSERT_TRUE(qp.ok()) << qp.error().message;
  Result<uint32_t> ah = (*dev)->create_ah({.dgid = gid->gid,
                                           .sgid_index = static_cast<uint8_t>(gid->index),
                                           .traffic_class = *traffic_class(26, true),
                                           .hop_limit = 64,
                                           .flow_label = 0,
                                           .port_num = static_cast<uint8_t>((*port)->port)});
  ASSERT_TRUE(ah.ok()) << ah.error().message;

  std::vector<uint8_t> header(72), payload(mtu - 72), recv(kGrhBytes + mtu);
  for (size_t i = 0; i < header.size(); ++i) header[i] = static_cast<uint8_t>(i);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 7 + 1);
  MrCache& mrs = (*dev)->mr_cache();
  Result<MrKeys> hk = mrs.find_or_register(reinterpret_cast<uint64_t>(header.data()), header.size());
  Result<MrKeys> pk = mrs.find_or_register(reinterpret_cast<uint64_t>(payload.data()), payload.size());
  Result<MrKeys> rk = mrs.find_or_register(reinterpret_cast<uint64_t>(recv.data()), recv.size());
  ASSERT_TRUE(hk.ok() && pk.ok() && rk.ok());

  Result<RecvWr> rwr = make_ud_recv({.kind = WrKind::kUdRecv, .lane = 0, .epoch = 0, .slot = 3},
                                    {.addr = reinterpret_cast<uint64_t>(recv.data()),
                                     .length = static_cast<uint32_t>(recv.size()),
                                     .lkey = rk->lkey},
                                    mtu);
  ASSERT_TRUE(rwr.ok()) << rwr.error().message;
  ASSERT_TRUE((*qp)->post_recv(*rwr).ok());
  Result<SendWr> swr = make_ud_send(
      {.tag = {.kind = WrKind::kUdSend, .lane = 0, .epoch = 0, .slot = 1},
       .header = {.addr = reinterpret_cast<uint64_t>(header.data()), .length = 72, .lkey = hk->lkey},
       .payload = {.addr = reinterpret_cast<uint64_t>(payload.data()),
                   .length = static_cast<uint32_t>(payload.size()),
                   .lkey = pk->lkey},
       .ah = *ah,
       .remote_qpn = (*qp)->qpn(),
       .qkey = 0x4D53,
       .mtu_bytes = mtu,
       .signaled = true});
  ASSERT_TRUE(swr.ok()) << swr.error().message;
  Status posted = (*qp)->post_send(*swr, (*dev)->ah(*ah));
  ASSERT_TRUE(posted.ok()) << posted.error().message;

  std::vector<WorkCompletion> wcs;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (wcs.size() < 2 && std::chrono::steady_clock::now() < deadline) {
    Result<uint32_t> n = (*cq)->poll(wcs, 4);
    ASSERT_TRUE(n.ok()) << n.error().message;
    if (*n == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(wcs.size(), 2u) << "send and receive did not both complete within 20 s";
  const CompletionContext ctx{
      .mode = WireMode::kUd, .grh_ipv4 = gid_is_ipv4(gid->gid), .ring_slots = 0, .slot_bytes = 0};
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
  qp->reset();
  cq->reset();
}

}  // namespace
}  // namespace megascale::wire::verbs
