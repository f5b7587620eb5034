// What the engine tells a wire about whose bytes it is moving, so that a wire whose other threads read
// and write application buffers can report each request once its own bytes are done (the UDP wire's
// precise TX and copy fences):
//  - TxPacket::request: every packet that carries a send's bytes names that send, retransmissions and
//    tail probes included; packets without a send's payload name none.
//  - PayloadCopier::copy: every copy names the receive it fills (its connection and request id).
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "test_net.h"

namespace megascale::engine::testing {
namespace {

// Messages of several sizes (an empty one among them) from A to B, the first copy of the DATA segments
// at `lost_offsets` dropped so that retransmissions carry payload too; every byte checked.
void transfer_with_losses(TestNet& net, Batch& batch, std::set<uint64_t> lost_offsets, Connection** b_out) {
  net.rule = drop_first_copy_of(std::move(lost_offsets));
  auto [a, b] = net.connect_pair();
  ASSERT_TRUE(a && b);
  *b_out = b;
  ASSERT_NO_FATAL_FAILURE(batch.post_recvs(b));
  ASSERT_NO_FATAL_FAILURE(batch.post_sends(a));
  ASSERT_TRUE(batch.run(net, a, b));
  batch.expect_intact(b);
}

TEST(TxPacketRequest, EveryCopyOfASendsBytesNamesThatSendAndNothingElseNamesOne) {
  EngineConfig c = test_config();
  c.tail_probe = true;
  TestNet net(c);
  Batch batch({1, 4096, 100'000, 300'000, 0, 77}, 21);
  Connection* b = nullptr;
  ASSERT_NO_FATAL_FAILURE(transfer_with_losses(net, batch, {0, 3000, 40'000, 299'000}, &b));

  // Which send each sent payload byte range belongs to, by the message's tag and offset.
  uint64_t with_payload = 0, retransmitted = 0;
  std::map<RequestId, uint64_t> bytes_by_request;
  for (const Sent& s : net.trace) {
    if (s.from != 0 || !s.is_data() || s.pkt.seg.payload_len == 0) {
      EXPECT_EQ(s.tx_meta.request, 0u) << "packet " << s.index << " carries no send's bytes";
      continue;
    }
    ++with_payload;
    retransmitted += s.copy > 0 ? 1 : 0;
    // The message is the one whose size matches the segment's message length and whose bytes match.
    const Batch::Msg* owner = nullptr;
    for (const Batch::Msg& m : batch.msgs) {
      if (m.data.size() != s.pkt.seg.msg_len || s.pkt.seg.offset + s.pkt.seg.payload_len > m.data.size()) continue;
      if (std::equal(s.pkt.payload, s.pkt.payload + s.pkt.seg.payload_len,
                     m.data.begin() + static_cast<std::ptrdiff_t>(s.pkt.seg.offset))) {
        owner = &m;
      }
    }
    ASSERT_NE(owner, nullptr) << "packet " << s.index << ": payload of no message";
    EXPECT_EQ(s.tx_meta.request, owner->send_id) << "packet " << s.index << " (copy " << s.copy << ")";
    if (s.copy == 0) bytes_by_request[s.tx_meta.request] += s.pkt.seg.payload_len;
  }
  EXPECT_GT(with_payload, 0u);
  EXPECT_GT(retransmitted, 0u) << "no retransmission carried payload: the test shows nothing about them";
  for (const Batch::Msg& m : batch.msgs) {
    if (m.data.empty()) continue;
    EXPECT_EQ(bytes_by_request[m.send_id], m.data.size()) << "send " << m.send_id;
  }
}

// Copies as a wire would hand them to another thread, recorded with the receive they name.
struct RecordingCopier final : PayloadCopier {
  struct Copy {
    const uint8_t* dst;
    size_t n;
    ConnId conn;
    RequestId request;
  };
  std::vector<Copy> copies;
  void copy(uint8_t* dst, const uint8_t* src, size_t n, ConnId conn, RequestId request) override {
    std::memcpy(dst, src, n);
    copies.push_back(Copy{dst, n, conn, request});
  }
};

TEST(PayloadCopierRequest, EveryCopyNamesTheReceiveItFills) {
  TestNet net(test_config());
  RecordingCopier copier;
  net.ep[1]->set_payload_copier(&copier);
  Batch batch({1, 4096, 100'000, 300'000, 0, 77}, 22);
  Connection* b = nullptr;
  // Retransmitted segments are copied too; the bytes checked are those the copier copied.
  ASSERT_NO_FATAL_FAILURE(transfer_with_losses(net, batch, {2000, 150'000}, &b));
  ASSERT_FALSE(copier.copies.empty());
  std::map<RequestId, uint64_t> bytes_by_request;
  for (const RecordingCopier::Copy& c : copier.copies) {
    EXPECT_EQ(c.conn, b->id());
    const Batch::Msg* owner = nullptr;
    for (const Batch::Msg& m : batch.msgs) {
      if (c.dst >= m.dst.data() && c.dst + c.n <= m.dst.data() + m.dst.size()) owner = &m;
    }
    ASSERT_NE(owner, nullptr) << "a copy into no receive's buffer";
    EXPECT_EQ(c.request, owner->recv_id);
    bytes_by_request[c.request] += c.n;
  }
  for (const Batch::Msg& m : batch.msgs) EXPECT_EQ(bytes_by_request[m.recv_id], m.data.size());
}

}  // namespace
}  // namespace megascale::engine::testing
