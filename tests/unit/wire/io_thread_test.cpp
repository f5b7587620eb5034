// The hand-over between the engine's thread and a UDP wire I/O thread (collectives/wire/udp/src/io_thread.h).
#include "../../../collectives/wire/udp/src/io_thread.h"

#include <gtest/gtest.h>

#include <thread>

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
  std::thread producer([&] {
    for (uint64_t i = 0; i < kCount;) {
      Item* slot = ring.producer_slot();
      if (slot == nullptr) {
        std::this_thread::yield();
        continue;
      }
      slot->value = i * 7 + 1;
      ring.publish();
      ++i;
    }
  });
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

}  // namespace
}  // namespace megascale::wire::detail
