// The verbs wire's UD data path without a device: two engine Endpoints joined by a fake NIC that
// executes the work requests make_ud_send builds (gathering their SGEs from memory) into receive
// buffers make_ud_recv posted, writes a RoCE v2 GRH with the packet's IPv4 TOS, and completes them as
// the device would; translate_completion turns each completion into the engine call. A message must
// arrive whole, and CE marks put in the GRH must reach the engine as CE.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include "megascale/engine/endpoint.h"
#include "megascale/wire/verbs/completion.h"
#include "megascale/wire/verbs/work_request.h"

namespace megascale::wire::verbs {
namespace {

constexpr uint32_t kMtu = 1024;
constexpr uint32_t kRecvDepth = 64;
constexpr uint32_t kHeaderSlots = 256;

uint64_t addr_of(const void* p) {
  return reinterpret_cast<uint64_t>(p);
}

// One end: an engine, its registered header slots and receive buffers, its receive queue and CQ.
struct Side {
  std::unique_ptr<engine::Endpoint> ep;
  uint32_t peer = 0;  // how this side names the other
  std::vector<std::array<uint8_t, engine::kMaxHeaderBytes>> headers{kHeaderSlots};
  uint32_t next_header = 0;
  std::vector<std::vector<uint8_t>> buffers;
  std::deque<RecvWr> rq;
  std::deque<WorkCompletion> cq;
  uint32_t malformed = 0;

  void post_receives() {
    for (uint32_t i = rq.size(); i < kRecvDepth; ++i) repost(static_cast<uint32_t>(i));
  }
  void repost(uint32_t slot) {
    Result<RecvWr> wr =
        make_ud_recv({.kind = WrKind::kUdRecv, .lane = 0, .epoch = 0, .slot = slot},
                     {.addr = addr_of(buffers[slot].data()), .length = kGrhBytes + kMtu, .lkey = 1}, kMtu);
    ASSERT_TRUE(wr.ok()) << wr.error().message;
    rq.push_back(*wr);
  }
};

class VerbsUdLoopback : public ::testing::Test {
 protected:
  void SetUp() override {
    engine::EngineConfig cfg;
    cfg.lanes = 2;
    cfg.segment_bytes = ud_max_segment_bytes(kMtu);
    cfg.seed = 7;
    for (Side* s : {&a_, &b_}) {
      s->ep = std::move(engine::Endpoint::create(cfg).value());
      s->buffers.assign(kRecvDepth, std::vector<uint8_t>(kGrhBytes + kMtu));
      s->post_receives();
      cfg.seed = 8;
    }
    a_.peer = 1;
    b_.peer = 2;
  }

  // The fake NIC: executes one send WR from `from` into the next receive of `to`.
  void execute(Side& to, const SendWr& wr, uint8_t tos) {
    ++sent_;
    if (to.rq.empty()) return;  // no receive posted: UD drops
    const RecvWr recv = to.rq.front();
    to.rq.pop_front();
    auto* buf = reinterpret_cast<uint8_t*>(recv.sge.addr);
    std::memset(buf, 0, kGrhBytes);
    buf[20] = 0x45;  // the IPv4 header in the GRH's last 20 bytes
    buf[21] = tos;
    uint32_t at = kGrhBytes;
    for (uint32_t i = 0; i < wr.num_sge; ++i) {
      std::memcpy(buf + at, reinterpret_cast<const void*>(wr.sge[i].addr), wr.sge[i].length);
      at += wr.sge[i].length;
    }
    WorkCompletion wc;
    wc.wr_id = recv.wr_id;
    wc.opcode = WcOpcode::kRecv;
    wc.byte_len = at;
    wc.grh = true;
    wc.src_qp = 0x100;
    to.cq.push_back(wc);
  }

  void transmit(Side& from, Side& to, TimeNs now) {
    engine::TxPacket pkt;
    while (from.ep->poll_tx(now, pkt)) {
      auto& slot = from.headers[from.next_header];
      std::memcpy(slot.data(), pkt.header, pkt.header_len);
      Result<SendWr> wr = make_ud_send(
          {.tag = {.kind = WrKind::kUdSend, .lane = pkt.lane, .epoch = 0, .slot = from.next_header},
           .header = {.addr = addr_of(slot.data()), .length = pkt.header_len, .lkey = 1},
           .payload = {.addr = addr_of(pkt.payload), .length = pkt.payload_len, .lkey = 2},
           .ah = pkt.peer,
           .remote_qpn = 0x200,
           .qkey = 0x4D53,
           .mtu_bytes = kMtu,
           .signaled = true});
      ASSERT_TRUE(wr.ok()) << wr.error().message;
      from.next_header = (from.next_header + 1) % kHeaderSlots;
      // Every fifth ECN-capable packet meets a queue that marks CE.
      uint8_t tos = *traffic_class(26, pkt.ect);
      if (pkt.ect && ++ect_sent_ % 5 == 0) {
        tos |= kEcnCe;
        ++ce_marked_;
      }
      execute(to, *wr, tos);
    }
  }

  void receive(Side& s, TimeNs now) {
    const CompletionContext ctx{.mode = WireMode::kUd, .grh_ipv4 = true, .ring_slots = 0, .slot_bytes = 0};
    while (!s.cq.empty()) {
      const WorkCompletion wc = s.cq.front();
      s.cq.pop_front();
      const uint8_t* buf = s.buffers[decode_wr_id(wc.wr_id)->slot].data();
      CompletionEvent ev = translate_completion(wc, ctx, buf);
      if (ev.kind != EventKind::kPacket) {
        ++s.malformed;
        continue;
      }
      ASSERT_TRUE(ev.ecn_known);
      s.ep->on_packet(now, s.peer, buf + ev.offset, ev.length, ev.ce);
      s.repost(ev.tag.slot);
    }
  }

  Side a_, b_;
  uint64_t sent_ = 0, ect_sent_ = 0, ce_marked_ = 0;
};

TEST_F(VerbsUdLoopback, MessageArrivesWholeAndGrhCeMarksReachTheEngine) {
  std::vector<uint8_t> message(256 * 1024);
  for (size_t i = 0; i < message.size(); ++i) message[i] = static_cast<uint8_t>(i * 131 + 7);
  std::vector<uint8_t> received(message.size());

  TimeNs now = 0;
  engine::ConnId client = *a_.ep->connect(now, a_.peer);
  engine::Connection* c = a_.ep->connection(client);
  engine::RequestId send = *c->post_send(message.data(), message.size(), 3);
  engine::Connection* server = nullptr;
  engine::RequestId recv = 0;
  bool sent = false, got = false;
  for (int round = 0; round < 200000 && !(sent && got); ++round) {
    now += 5'000;
    for (Side* s : {&a_, &b_}) {
      if (s->ep->next_deadline() <= now) s->ep->on_timer(now);
    }
    transmit(a_, b_, now);
    transmit(b_, a_, now);
    receive(a_, now);
    receive(b_, now);
    if (server == nullptr) {
      if (std::optional<engine::ConnId> id = b_.ep->accept()) {
        server = b_.ep->connection(*id);
        recv = *server->post_recv(received.data(), received.size(), 3);
      }
    }
    if (!sent && c->test(send).done) sent = true;
    if (server != nullptr && !got) {
      engine::Completion done = server->test(recv);
      if (done.done) {
        ASSERT_TRUE(done.ok) << done.error;
        EXPECT_EQ(done.bytes, message.size());
        got = true;
      }
    }
  }
  ASSERT_TRUE(sent && got) << "transfer did not finish";
  EXPECT_EQ(received, message);
  EXPECT_EQ(a_.malformed + b_.malformed, 0u);
  // Every datagram fit one MTU: 256 KiB in segments of 952 bytes.
  EXPECT_GE(c->stats().segments_sent, (message.size() + 951) / 952);
  ASSERT_GT(ce_marked_, 0u);
  EXPECT_EQ(server->stats().ce_received, ce_marked_);
  EXPECT_GT(c->stats().ecn_marks, 0u);
}

}  // namespace
}  // namespace megascale::wire::verbs
