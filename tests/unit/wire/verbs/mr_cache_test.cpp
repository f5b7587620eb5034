// The registration cache: page-widened registrations found again for every buffer they cover,
// invalidation, errors passed through, and every registration deregistered exactly once.
#include "megascale/wire/verbs/mr_cache.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace megascale::wire::verbs {
namespace {

struct FakeNic {
  std::vector<std::pair<uint64_t, uint64_t>> registered;  // (addr, len) in call order
  std::set<uintptr_t> live;
  bool refuse = false;
  MrCache::RegisterFn reg() {
    return [this](uint64_t addr, uint64_t len) -> Result<Registration> {
      if (refuse) return make_error(ErrorCode::kSystem, "ibv_reg_mr: Cannot allocate memory");
      registered.emplace_back(addr, len);
      const uintptr_t handle = registered.size();
      live.insert(handle);
      const auto key = static_cast<uint32_t>(0x100 + registered.size());
      return Registration{.keys = {.lkey = key, .rkey = key + 0x1000},
                          .handle = reinterpret_cast<void*>(handle)};
    };
  }
  MrCache::DeregisterFn dereg() {
    return [this](void* handle) { EXPECT_EQ(live.erase(reinterpret_cast<uintptr_t>(handle)), 1u); };
  }
};

TEST(VerbsMrCache, RegistersWholePagesAndFindsThemAgain) {
  FakeNic nic;
  {
    MrCache cache(nic.reg(), nic.dereg());
    Result<MrKeys> k = cache.find_or_register(0x10010, 100);
    ASSERT_TRUE(k.ok());
    EXPECT_EQ(k->lkey, 0x101u);
    EXPECT_EQ(k->rkey, 0x1101u);
    ASSERT_EQ(nic.registered.size(), 1u);
    EXPECT_EQ(nic.registered[0], std::make_pair(uint64_t{0x10000}, uint64_t{0x1000}));
    // Anything else inside that page: a hit.
    EXPECT_EQ(cache.find_or_register(0x10000, 0x1000)->lkey, 0x101u);
    EXPECT_EQ(cache.find_or_register(0x10800, 8)->lkey, 0x101u);
    EXPECT_EQ(cache.hits(), 2u);
    // Crossing into the next page: a new registration of both pages.
    EXPECT_EQ(cache.find_or_register(0x10FF0, 0x20)->lkey, 0x102u);
    EXPECT_EQ(nic.registered[1], std::make_pair(uint64_t{0x10000}, uint64_t{0x2000}));
    // A large region covers a small buffer that starts far inside it.
    EXPECT_EQ(cache.find_or_register(0x100000, 0x100000)->lkey, 0x103u);
    EXPECT_EQ(cache.find_or_register(0x1F0000, 0x10)->lkey, 0x103u);
    EXPECT_EQ(cache.misses(), 3u);
    EXPECT_EQ(cache.regions(), 3u);
  }
  EXPECT_TRUE(nic.live.empty()) << "the cache's destructor deregisters every region";
}

TEST(VerbsMrCache, InvalidateDropsOverlappingRegionsOnly) {
  FakeNic nic;
  MrCache cache(nic.reg(), nic.dereg());
  ASSERT_TRUE(cache.find_or_register(0x10000, 0x1000).ok());
  ASSERT_TRUE(cache.find_or_register(0x20000, 0x1000).ok());
  cache.invalidate(0x10800, 1);
  EXPECT_EQ(cache.regions(), 1u);
  EXPECT_EQ(nic.live.size(), 1u);
  // The freed range registers anew; the other is still a hit.
  EXPECT_EQ(cache.find_or_register(0x10000, 16)->lkey, 0x103u);
  EXPECT_EQ(cache.find_or_register(0x20000, 16)->lkey, 0x102u);
}

TEST(VerbsMrCache, ErrorsAreNamedAndNothingIsCached) {
  FakeNic nic;
  MrCache cache(nic.reg(), nic.dereg());
  nic.refuse = true;
  Result<MrKeys> k = cache.find_or_register(0x10000, 16);
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.error().message, "ibv_reg_mr: Cannot allocate memory");
  EXPECT_EQ(cache.regions(), 0u);
  EXPECT_EQ(cache.find_or_register(0x10000, 0).error().message, "memory registration of 0 bytes");
  EXPECT_EQ(cache.find_or_register(UINT64_MAX - 4, 16).error().message, "memory registration range wraps");
}

}  // namespace
}  // namespace megascale::wire::verbs
