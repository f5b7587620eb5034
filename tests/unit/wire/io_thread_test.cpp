// The hand-over between the engine's thread and a UDP wire I/O thread (collectives/wire/udp/src/io_thread.h).
#include "../../../collectives/wire/udp/src/io_thread.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace megascale::wire::detail {
namespace {

struct Item {
  explicit Item(size_t) {}
  uint64_t value = 0;
};

std::vector<std::unique_ptr<Item>> items(size_t n) {
  std::vector<std::unique_ptr<Item>> v;
  for (size_t i = 0; i < n; ++i) v.push_back(std::make_unique<Item>(0));
  return v;
}

// Publishes values i * 7 + 1 for i = 0 .. count - 1, waiting for free slots.
template <class Ring>
void produce(Ring& ring, uint64_t count) {
  for (uint64_t i = 0; i < count;) {
    Item* slot = ring.producer_slot();
    if (slot == nullptr) {
      std::this_thread::yield();
      continue;
    }
    slot->value = i * 7 + 1;
    ring.publish();
    ++i;
  }
}

TEST(SlotRing, FullAndEmptyAreNullAndOrderIsKept) {
  SlotRing<Item> ring(items(3));
  EXPECT_EQ(ring.consumer_slot(), nullptr);
  for (uint64_t i = 0; i < 3; ++i) {
    Item* slot = ring.producer_slot();
    ASSERT_NE(slot, nullptr);
    slot->value = i;
    ring.publish();
  }
  EXPECT_EQ(ring.producer_slot(), nullptr);  // three published, none released
  for (uint64_t i = 0; i < 2; ++i) {
    Item* slot = ring.consumer_slot();
    ASSERT_NE(slot, nullptr);
    EXPECT_EQ(slot->value, i);
    ring.release();
  }
  // Two slots free again; the wrap keeps the order.
  for (uint64_t i = 3; i < 5; ++i) {
    Item* slot = ring.producer_slot();
    ASSERT_NE(slot, nullptr);
    slot->value = i;
    ring.publish();
  }
  for (uint64_t i = 2; i < 5; ++i) {
    Item* slot = ring.consumer_slot();
    ASSERT_NE(slot, nullptr);
    EXPECT_EQ(slot->value, i);
    ring.release();
  }
  EXPECT_EQ(ring.consumer_slot(), nullptr);
}

// Two threads: every value arrives once, in order, with what the producer wrote into the slot visible.
TEST(SlotRing, ProducerAndConsumerThreadsHandOverEverySlot) {
  SlotRing<Item> ring(items(4));
  constexpr uint64_t kCount = 200'000;
  std::thread producer([&] { produce(ring, kCount); });
  uint64_t expected = 0;
  uint64_t wrong = 0;
  while (expected < kCount) {
    Item* slot = ring.consumer_slot();
    if (slot == nullptr) {
      std::this_thread::yield();
      continue;
    }
    wrong += slot->value != expected * 7 + 1 ? 1 : 0;
    ring.release();
    ++expected;
  }
  producer.join();
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(ring.consumer_slot(), nullptr);
}


// A TX ring: batches claimed one by one, finished out of order; released() counts only those finished
// in order, and a slot is not the producer's again until everything before it is finished.
TEST(ClaimRing, ClaimsInOrderAndReleasesInOrder) {
  ClaimRing<Item> ring(items(3));
  uint64_t seq = 99;
  EXPECT_EQ(ring.claim(seq), nullptr);
  EXPECT_FALSE(ring.has_unclaimed());
  for (uint64_t i = 0; i < 3; ++i) {
    Item* slot = ring.producer_slot();
    ASSERT_NE(slot, nullptr);
    slot->value = i;
    ring.publish();
  }
  EXPECT_TRUE(ring.has_unclaimed());
  uint64_t a = 0, b = 0;
  Item* first = ring.claim(a);
  Item* second = ring.claim(b);
  ASSERT_TRUE(first != nullptr && second != nullptr);
  EXPECT_EQ(a, 0u);
  EXPECT_EQ(b, 1u);
  EXPECT_EQ(first->value, 0u);
  EXPECT_EQ(second->value, 1u);
  ring.finish(b);  // the second first: nothing is released in order yet
  EXPECT_EQ(ring.released(), 0u);
  EXPECT_EQ(ring.producer_slot(), nullptr);
  ring.finish(a);  // now both
  EXPECT_EQ(ring.released(), 2u);
  EXPECT_NE(ring.producer_slot(), nullptr);
  uint64_t c = 0;
  Item* third = ring.claim(c);
  ASSERT_NE(third, nullptr);
  EXPECT_EQ(third->value, 2u);
  EXPECT_FALSE(ring.has_unclaimed());
  EXPECT_EQ(ring.claim(seq), nullptr);
  ring.finish(c);
  EXPECT_EQ(ring.released(), 3u);
}

// One producer, three claiming consumers (an I/O thread and two siblings): every batch is taken by
// exactly one of them with what the producer wrote visible, and released() reaches the count.
TEST(ClaimRing, ThreadsClaimEveryBatchExactlyOnce) {
  ClaimRing<Item> ring(items(4));
  constexpr uint64_t kCount = 100'000;
  std::vector<std::atomic<uint32_t>> taken(kCount);
  std::atomic<uint64_t> wrong{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> consumers;
  for (int t = 0; t < 3; ++t) {
    consumers.emplace_back([&] {
      while (!stop.load()) {
        uint64_t seq = 0;
        Item* slot = ring.claim(seq);
        if (slot == nullptr) {
          std::this_thread::yield();
          continue;
        }
        if (slot->value != seq * 7 + 1) wrong.fetch_add(1);
        if (seq < kCount) taken[seq].fetch_add(1);
        ring.finish(seq);
      }
    });
  }
  produce(ring, kCount);
  while (ring.released() < kCount) std::this_thread::yield();
  stop.store(true);
  for (std::thread& c : consumers) c.join();
  EXPECT_EQ(wrong.load(), 0u);
  uint64_t not_once = 0;
  for (const auto& n : taken) not_once += n.load() != 1 ? 1 : 0;
  EXPECT_EQ(not_once, 0u);
  EXPECT_EQ(ring.released(), kCount);
}

}  // namespace
}  // namespace megascale::wire::detail
