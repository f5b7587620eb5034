// The verbs wire's RC data path without a device: two engine Endpoints whose lanes are RC "QPs" of a
// fake NIC that executes make_rc_write's writes into the peer's receive ring and completes them as a
// device does (the sender's completions one round late, so writes are in flight). Ring credits flow
// back as zero-length writes. Lane 1's path fails for a while mid-transfer: its writes then fail with
// IBV_WC_RETRY_EXC_ERR and flush, RcLaneRecovery re-creates and re-connects the lane (again and again
// while the path stays down), and the unfinished writes are posted again. The message must arrive
// whole.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include "megascale/engine/endpoint.h"
#include "megascale/wire/verbs/completion.h"
#include "megascale/wire/verbs/rc_recovery.h"
#include "megascale/wire/verbs/rc_ring.h"
#include "megascale/wire/verbs/work_request.h"

namespace megascale::wire::verbs {
namespace {

constexpr uint32_t kLanes = 2;
constexpr uint32_t kSlots = 16;
constexpr uint32_t kSegment = 4096;
constexpr uint32_t kSlotBytes = kSegment + engine::kMaxHeaderBytes;
constexpr uint32_t kHeaderSlots = 4096;
constexpr TimeNs kRound = 10'000;

uint64_t addr_of(const void* p) {
  return reinterpret_cast<uint64_t>(p);
}

struct Held {  // what a header slot holds: one engine packet, for posting and posting again
  std::array<uint8_t, engine::kMaxHeaderBytes> header{};
  uint32_t header_len = 0;
  const uint8_t* payload = nullptr;
  uint32_t payload_len = 0;
  uint8_t lane = 0;
};

struct Lane {
  RingWriter writer{kSlots};
  RingReader reader{kSlots, kSlots / 4};
  RcLaneRecovery recovery;
  std::deque<uint32_t> backlog;  // header slots waiting for credit or for the lane to come back
  explicit Lane(const RecoveryParams& p, uint8_t i) : recovery(i, p) {}
};

struct Side {
  std::unique_ptr<engine::Endpoint> ep;
  uint32_t peer = 0;
  std::vector<uint8_t> ring = std::vector<uint8_t>(size_t{kLanes} * kSlots * kSlotBytes);
  std::vector<Held> held = std::vector<Held>(kHeaderSlots);
  uint32_t next_held = 0;
  std::vector<Lane> lanes;
  std::deque<WorkCompletion> cq;
  std::deque<WorkCompletion> send_cq_next;  // the sender's completions, delivered a round late
  RemoteRing ring_of_peer;
  RemoteRing own_ring() {
    return {.addr = addr_of(ring.data()), .rkey = 1, .slots = kSlots, .slot_bytes = kSlotBytes};
  }
};

class VerbsRcLoopback : public ::testing::Test {
 protected:
  void SetUp() override {
    engine::EngineConfig cfg;
    cfg.lanes = kLanes;
    cfg.segment_bytes = kSegment;
    cfg.seed = 11;
    RecoveryParams p;
    p.retry_budget_ns = 2'000'000'000;
    p.first_backoff_ns = 100'000;
    p.max_backoff_ns = 400'000;
    p.connect_timeout_ns = 1'000'000;
    for (Side* s : {&a_, &b_}) {
      s->ep = std::move(engine::Endpoint::create(cfg).value());
      for (uint8_t i = 0; i < kLanes; ++i) s->lanes.emplace_back(p, i);
      cfg.seed = 12;
    }
    a_.peer = 1;
    b_.peer = 2;
    a_.ring_of_peer = b_.own_ring();
    b_.ring_of_peer = a_.own_ring();
  }

  Side& other(Side& s) { return &s == &a_ ? b_ : a_; }
  bool path_down(uint8_t lane) const { return lane == 1 && now_ >= down_from_ && now_ < down_until_; }

  // The fake NIC: one write from `from`, on its lane QP of the epoch in the tag.
  void execute(Side& from, const SendWr& wr) {
    const WrTag tag = *decode_wr_id(wr.wr_id);
    Side& to = other(from);
    WorkCompletion done;
    done.wr_id = wr.wr_id;
    done.opcode = WcOpcode::kRdmaWrite;
    // A path that is down, or a QP whose peer QP is of another epoch (not connected): the NIC retries,
    // gives up, and the QP's later WRs flush.
    if (path_down(tag.lane) || to.lanes[tag.lane].recovery.epoch() != tag.epoch || failed_epoch(from, tag)) {
      done.status = failed_epoch(from, tag) ? WcStatus::kWrFlushErr : WcStatus::kRetryExcErr;
      failed_[&from == &a_ ? 0 : 1][tag.lane] = tag.epoch + 1;
      from.send_cq_next.push_back(done);
      return;
    }
    uint8_t* dst = reinterpret_cast<uint8_t*>(wr.remote_addr);
    uint32_t at = 0;
    for (uint32_t i = 0; i < wr.num_sge; ++i) {
      ASSERT_LE(wr.remote_addr + at + wr.sge[i].length, addr_of(to.ring.data()) + to.ring.size());
      std::memcpy(dst + at, reinterpret_cast<const void*>(wr.sge[i].addr), wr.sge[i].length);
      at += wr.sge[i].length;
    }
    WorkCompletion recv;
    recv.wr_id = encode_wr_id({.kind = WrKind::kRcRecv, .lane = tag.lane, .epoch = tag.epoch, .slot = 0});
    recv.opcode = WcOpcode::kRecvRdmaWithImm;
    recv.with_imm = true;
    recv.imm_data = wr.imm_data;
    recv.byte_len = at;
    to.cq.push_back(recv);
    from.send_cq_next.push_back(done);
  }
  // After an error, the rest of that QP's WRs flush (failed_ holds the failed epoch + 1).
  bool failed_epoch(Side& from, const WrTag& tag) {
    return failed_[&from == &a_ ? 0 : 1][tag.lane] == tag.epoch + 1;
  }

  void act(Side& s, uint8_t lane, const RecoveryAction& a) {
    using Kind = RecoveryAction::Kind;
    Lane& l = s.lanes[lane];
    switch (a.kind) {
      case Kind::kNone:
        return;
      case Kind::kFail:
        FAIL() << a.error.message;
        return;
      case Kind::kRecreate:
        ++recreated_;
        l.writer.reset();
        l.reader.reset();
        if (a.answer) requeue(l, a.resend);
        // The re-connect message goes over the home UD QP, on another path: it arrives.
        act(other(s), lane, other(s).lanes[lane].recovery.on_peer_message(now_, a.epoch));
        return;
      case Kind::kReply:
        act(other(s), lane, other(s).lanes[lane].recovery.on_peer_message(now_, a.epoch));
        return;
      case Kind::kResend:
        requeue(l, a.resend);
        return;
    }
  }
  void requeue(Lane& l, const std::vector<uint64_t>& resend) {
    for (auto it = resend.rbegin(); it != resend.rend(); ++it) l.backlog.push_front(decode_wr_id(*it)->slot);
    resent_ += resend.size();
  }

  void transmit(Side& s) {
    engine::TxPacket pkt;
    while (s.ep->poll_tx(now_, pkt)) {
      Held& h = s.held[s.next_held];
      std::memcpy(h.header.data(), pkt.header, pkt.header_len);
      h.header_len = pkt.header_len;
      h.payload = pkt.payload;
      h.payload_len = pkt.payload_len;
      h.lane = pkt.lane;
      s.lanes[pkt.lane].backlog.push_back(s.next_held);
      s.next_held = (s.next_held + 1) % kHeaderSlots;
    }
    for (uint8_t i = 0; i < kLanes; ++i) {
      Lane& l = s.lanes[i];
      while (l.recovery.can_post() && !l.backlog.empty()) {
        std::optional<uint32_t> slot = l.writer.take();
        if (!slot) break;
        const uint32_t hs = l.backlog.front();
        l.backlog.pop_front();
        const Held& h = s.held[hs];
        Result<SendWr> wr = make_rc_write(
            {.tag = {.kind = WrKind::kRcWrite, .lane = i, .epoch = l.recovery.epoch(), .slot = hs},
             .header = {.addr = addr_of(h.header.data()), .length = h.header_len, .lkey = 1},
             .payload = {.addr = addr_of(h.payload), .length = h.payload_len, .lkey = 2},
             .ring = s.ring_of_peer,
             .remote_slot = *slot,
             .signaled = true});
        ASSERT_TRUE(wr.ok()) << wr.error().message;
        l.recovery.on_posted(wr->wr_id);
        execute(s, *wr);
      }
    }
  }

  void complete(Side& s) {
    const CompletionContext ctx{
        .mode = WireMode::kRc, .grh_ipv4 = true, .ring_slots = kSlots, .slot_bytes = kSlotBytes};
    std::deque<WorkCompletion> sends;
    sends.swap(s.send_cq_next);
    for (const WorkCompletion& wc : sends) {
      CompletionEvent ev = translate_completion(wc, ctx, nullptr);
      if (ev.kind == EventKind::kSendDone) {
        s.lanes[ev.tag.lane].recovery.on_send_done(now_, wc.wr_id);
      } else if (ev.kind == EventKind::kQpError) {
        ++qp_errors_;
        act(s, ev.tag.lane, s.lanes[ev.tag.lane].recovery.on_qp_error(now_, ev.tag.epoch, ev.status));
      } else {
        ASSERT_EQ(ev.kind, EventKind::kFlushed) << ev.why;
      }
    }
    while (!s.cq.empty()) {
      const WorkCompletion wc = s.cq.front();
      s.cq.pop_front();
      CompletionEvent ev = translate_completion(wc, ctx, nullptr);
      Lane& l = s.lanes[ev.tag.lane];
      if (ev.tag.epoch != l.recovery.epoch()) continue;  // a receive of a QP since replaced
      if (ev.kind == EventKind::kCredit) {
        ASSERT_TRUE(l.writer.on_credit(ev.credits).ok());
        continue;
      }
      ASSERT_EQ(ev.kind, EventKind::kPacket) << ev.why;
      ASSERT_TRUE(l.reader.on_filled(ev.ring_slot).ok());
      const uint8_t* slot = s.ring.data() + (size_t{ev.tag.lane} * kSlots + ev.ring_slot) * kSlotBytes;
      s.ep->on_packet(now_, s.peer, slot + ev.offset, ev.length, false);
      if (uint32_t n = l.reader.take_credits()) {
        Result<SendWr> credit = make_rc_credit(
            {.kind = WrKind::kRcCredit, .lane = ev.tag.lane, .epoch = l.recovery.epoch(), .slot = 0},
            s.ring_of_peer, n);
        ASSERT_TRUE(credit.ok());
        execute(s, *credit);
      }
    }
  }

  Side a_, b_;
  TimeNs now_ = 0;
  TimeNs down_from_ = kNever, down_until_ = kNever;
  uint16_t failed_[2][kLanes] = {};
  uint64_t qp_errors_ = 0, recreated_ = 0, resent_ = 0;
};

TEST_F(VerbsRcLoopback, MessageSurvivesALaneWhosePathFailsForAWhile) {
  std::vector<uint8_t> message(1 << 20);
  for (size_t i = 0; i < message.size(); ++i) message[i] = static_cast<uint8_t>(i * 251 + 3);
  std::vector<uint8_t> received(message.size());
  engine::Connection* c = a_.ep->connection(*a_.ep->connect(now_, a_.peer));
  engine::RequestId send = *c->post_send(message.data(), message.size(), 1);
  engine::Connection* server = nullptr;
  engine::RequestId recv = 0;
  bool sent = false, got = false;
  const auto step = [&] {
    now_ += kRound;
    // Lane 1's path fails once data flows, for 3 ms.
    if (down_from_ == kNever && server != nullptr && server->stats().bytes_received > message.size() / 4) {
      down_from_ = now_;
      down_until_ = now_ + 3'000'000;
    }
    for (Side* s : {&a_, &b_}) {
      if (s->ep->next_deadline() <= now_) s->ep->on_timer(now_);
      for (uint8_t i = 0; i < kLanes; ++i) {
        if (s->lanes[i].recovery.next_deadline() <= now_) act(*s, i, s->lanes[i].recovery.on_timer(now_));
      }
    }
    transmit(a_);
    transmit(b_);
    complete(a_);
    complete(b_);
  };
  for (int round = 0; round < 400000 && !(sent && got); ++round) {
    step();
    if (server == nullptr) {
      if (std::optional<engine::ConnId> id = b_.ep->accept()) {
        server = b_.ep->connection(*id);
        recv = *server->post_recv(received.data(), received.size(), 1);
      }
    }
    if (!sent && c->test(send).done) sent = true;
    if (server != nullptr && !got) {
      engine::Completion done = server->test(recv);
      if (done.done) {
        ASSERT_TRUE(done.ok) << done.error;
        got = true;
      }
    }
  }
  ASSERT_TRUE(sent && got) << "transfer did not finish; QP errors " << qp_errors_;
  EXPECT_EQ(received, message);
  ASSERT_NE(down_from_, kNever);
  std::printf(
      "1 MiB in %.1f ms of virtual time; lane 1 down %.1f..%.1f ms: %llu QP errors, %llu QPs re-created, "
      "%llu writes posted again\n",
      static_cast<double>(now_) / 1e6, static_cast<double>(down_from_) / 1e6,
      static_cast<double>(down_until_) / 1e6, static_cast<unsigned long long>(qp_errors_),
      static_cast<unsigned long long>(recreated_), static_cast<unsigned long long>(resent_));
  EXPECT_GT(qp_errors_, 1u) << "the path stayed down across several re-connects";
  EXPECT_GT(recreated_, 2u);
  EXPECT_GT(resent_, 0u);
  // The transfer may end on lane 0 while lane 1 still waits out a backoff; once its path is back, it
  // comes up too.
  while (now_ < down_until_ + 10'000'000) step();
  for (Side* s : {&a_, &b_}) {
    for (uint8_t i = 0; i < kLanes; ++i) {
      EXPECT_EQ(s->lanes[i].recovery.state(), RcLaneRecovery::State::kUp) << "lane " << int(i);
    }
  }
}

}  // namespace
}  // namespace megascale::wire::verbs
