// SendRequest: a send's arguments checked once where the request enters, then passed inward as a value
// (the plugin's isend and UdpWire::post_send build it; Connection::post_send takes it as it is).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "megascale/engine/request.h"
#include "test_net.h"

namespace megascale::engine {
namespace {

using testing::test_config;
using testing::TestNet;
using testing::wait_done;

TEST(SendRequest, NegativeTagIsRefusedWithItsValue) {
  const char byte = 0;
  Result<SendRequest> r = SendRequest::make(&byte, 1, -1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "post_send: tag must be >= 0, got -1");
}

TEST(SendRequest, NullBufferIsRefusedForANonEmptyMessageOnly) {
  Result<SendRequest> bad = SendRequest::make(nullptr, 10, 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "post_send: null buffer for a non-empty message");
  EXPECT_TRUE(SendRequest::make(nullptr, 0, 0).ok());
  // Virtual payload (a simulation): only the byte count exists.
  Result<SendRequest> counted = SendRequest::make(nullptr, 10, 3, /*virtual_payload=*/true);
  ASSERT_TRUE(counted.ok());
  EXPECT_EQ(counted->size_bytes(), 10u);
  EXPECT_EQ(counted->tag(), 3);
}

TEST(SendRequest, PartsAndCopiesKeepTheTag) {
  std::vector<char> data(100), copy(100);
  Result<SendRequest> r = SendRequest::make(data.data(), data.size(), 7);
  ASSERT_TRUE(r.ok());
  const SendRequest part = r->part(40, 60);
  EXPECT_EQ(part.data(), data.data() + 40);
  EXPECT_EQ(part.size_bytes(), 60u);
  EXPECT_EQ(part.tag(), 7);
  const SendRequest staged = r->read_from(copy.data()).part(0, 40);
  EXPECT_EQ(staged.data(), copy.data());
  EXPECT_EQ(staged.size_bytes(), 40u);
  EXPECT_EQ(staged.tag(), 7);
  // An empty message's parts are empty and need no buffer.
  Result<SendRequest> empty = SendRequest::make(nullptr, 0, 1);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->part(0, 0).data(), nullptr);
}

// Connection::post_send with raw arguments is a boundary too: the same messages as before.
TEST(SendRequest, ConnectionPostSendChecksRawArgumentsWithTheSameMessages) {
  TestNet net(test_config());
  auto [a, b] = net.connect_pair();
  ASSERT_NE(a, nullptr);
  const char byte = 1;
  Result<RequestId> tag = a->post_send(&byte, 1, -2);
  ASSERT_FALSE(tag.ok());
  EXPECT_EQ(tag.error().message, "post_send: tag must be >= 0, got -2");
  Result<RequestId> null = a->post_send(nullptr, 5, 0);
  ASSERT_FALSE(null.ok());
  EXPECT_EQ(null.error().message, "post_send: null buffer for a non-empty message");
  // A checked request goes in as it is and completes like any other.
  std::vector<uint8_t> sink(1);
  Result<RequestId> recv = b->post_recv(sink.data(), sink.size(), 0);
  ASSERT_TRUE(recv.ok());
  Result<SendRequest> req = SendRequest::make(&byte, 1, 0);
  ASSERT_TRUE(req.ok());
  Result<RequestId> send = a->post_send(*req);
  ASSERT_TRUE(send.ok());
  Completion done;
  ASSERT_TRUE(wait_done(net, b, *recv, &done));
  EXPECT_TRUE(done.ok);
  EXPECT_EQ(sink[0], 1);
}

}  // namespace
}  // namespace megascale::engine
