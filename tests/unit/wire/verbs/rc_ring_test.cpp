// RC ring credits: slots taken in order until the credit runs out, returned in batches, refused when a
// peer returns more than it got or fills slots out of order, and the writer never starved for good.
#include "megascale/wire/verbs/rc_ring.h"

#include <gtest/gtest.h>

namespace megascale::wire::verbs {
namespace {

TEST(VerbsRcRing, WriterTakesSlotsInOrderUntilCreditRunsOut) {
  RingWriter w(4);
  for (uint32_t i = 0; i < 4; ++i) EXPECT_EQ(w.take(), i);
  EXPECT_FALSE(w.take());
  ASSERT_TRUE(w.on_credit(2).ok());
  EXPECT_EQ(w.take(), 0u);  // wraps
  EXPECT_EQ(w.take(), 1u);
  EXPECT_FALSE(w.take());
  Status over = w.on_credit(5);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.error().message, "RC ring: the peer returned 5 slots, only 4 are out");
  w.reset();
  EXPECT_EQ(w.credits(), 4u);
  EXPECT_EQ(w.take(), 0u);
}

TEST(VerbsRcRing, ReaderReturnsInBatchesAndRefusesOutOfOrderSlots) {
  RingReader r(8, 3);
  ASSERT_TRUE(r.on_filled(0).ok());
  ASSERT_TRUE(r.on_filled(1).ok());
  EXPECT_EQ(r.take_credits(), 0u);
  ASSERT_TRUE(r.on_filled(2).ok());
  EXPECT_EQ(r.take_credits(), 3u);
  EXPECT_EQ(r.take_credits(), 0u);
  Status skip = r.on_filled(4);
  ASSERT_FALSE(skip.ok());
  EXPECT_EQ(skip.error().message,
            "RC ring: a write into slot 4, expected 3 (writes of one QP arrive in order)");
  r.reset();
  EXPECT_TRUE(r.on_filled(0).ok());
  EXPECT_FALSE(RingReader::check(8, 9).ok());
  EXPECT_FALSE(RingReader::check(8, 0).ok());
  EXPECT_TRUE(RingReader::check(8, 8).ok());
}

TEST(VerbsRcRing, WriterAndReaderNeverDeadlockAtAnyBatch) {
  for (uint32_t slots : {1u, 2u, 7u, 16u}) {
    for (uint32_t batch = 1; batch <= slots; ++batch) {
      RingWriter w(slots);
      RingReader r(slots, batch);
      uint32_t written = 0;
      // Write as long as credit allows; the reader consumes everything that arrived, then returns.
      for (int round = 0; round < 100; ++round) {
        while (std::optional<uint32_t> s = w.take()) {
          ASSERT_TRUE(r.on_filled(*s).ok());
          ++written;
        }
        const uint32_t n = r.take_credits();
        ASSERT_GT(n, 0u) << "writer starved: slots " << slots << " batch " << batch;
        ASSERT_TRUE(w.on_credit(n).ok());
      }
      EXPECT_GE(written, 100u * batch);
    }
  }
}

}  // namespace
}  // namespace megascale::wire::verbs
