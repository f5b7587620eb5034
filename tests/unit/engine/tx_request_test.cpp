// TxPacket::request: every packet that carries a send's bytes names that send, so a wire that sends from
// other threads can tell when it no longer reads the send's buffer (the UDP wire's TX fence per send).
// Retransmissions and tail probes name it too; packets without a send's payload name none.
#include <gtest/gtest.h>

#include <map>

#include "test_net.h"

namespace megascale::engine::testing {
namespace {

TEST(TxPacketRequest, EveryCopyOfASendsBytesNamesThatSendAndNothingElseNamesOne) {
  EngineConfig c = test_config();
  c.tail_probe = true;
  TestNet net(c);
  // Lose the first copy of some segments, so that retransmissions carry payload too.
  net.rule = drop_first_copy_of({0, 3000, 40'000, 299'000});
  auto [a, b] = net.connect_pair();
  ASSERT_TRUE(a && b);
  Batch batch({1, 4096, 100'000, 300'000, 0, 77}, 21);
  ASSERT_NO_FATAL_FAILURE(batch.post_recvs(b));
  ASSERT_NO_FATAL_FAILURE(batch.post_sends(a));
  ASSERT_TRUE(batch.run(net, a, b));
  batch.expect_intact(b);

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

}  // namespace
}  // namespace megascale::engine::testing
