// The registration cache: page-widened registrations found again for every buffer they cover,
// invalidation, errors passed through, and every registration deregistered exactly once; dma-buf
// regions kept apart from host regions, registered exactly with their fd and offset, and held regions
// deregistered at their last release.
#include "megascale/wire/verbs/mr_cache.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace megascale::wire::verbs {
namespace {

struct DmabufCall {
  uint64_t iova = 0;
  uint64_t len = 0;
  int fd = -1;
  uint64_t offset = 0;
  bool operator==(const DmabufCall&) const = default;
};

struct FakeNic {
  std::vector<std::pair<uint64_t, uint64_t>> registered;  // host (addr, len) in call order
  std::vector<DmabufCall> dmabufs;                        // dma-buf registrations in call order
  std::set<uintptr_t> live;
  bool refuse = false;
  uintptr_t calls = 0;  // registrations of either kind: handles and keys count up across both
  Registration next() {
    const uintptr_t handle = ++calls;
    live.insert(handle);
    const auto key = static_cast<uint32_t>(0x100 + handle);
    return Registration{.keys = {.lkey = key, .rkey = key + 0x1000},
                        .handle = reinterpret_cast<void*>(handle)};
  }
  MrCache::RegisterFn reg() {
    return [this](uint64_t addr, uint64_t len) -> Result<Registration> {
      if (refuse) return make_error(ErrorCode::kSystem, "ibv_reg_mr: Cannot allocate memory");
      registered.emplace_back(addr, len);
      return next();
    };
  }
  MrCache::RegisterDmabufFn reg_dmabuf() {
    return [this](uint64_t iova, uint64_t len, DmabufRef buf) -> Result<Registration> {
      if (refuse) return make_error(ErrorCode::kSystem, "ibv_reg_dmabuf_mr: Bad address");
      dmabufs.push_back({.iova = iova, .len = len, .fd = buf.fd, .offset = buf.offset});
      return next();
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

// A GPU buffer and a host buffer at overlapping addresses (as a test can arrange; in a process the
// address spaces are one, but the cache must not rely on it): each kind finds only its own regions.
TEST(VerbsMrCache, DmabufAndHostRegionsNeverAnswerForEachOther) {
  FakeNic nic;
  MrCache cache(nic.reg(), nic.dereg(), nic.reg_dmabuf());
  Result<MrKeys> gpu = cache.find_or_register_dmabuf(0x7F0000100000, 0x10000, {.fd = 9, .offset = 0x100});
  ASSERT_TRUE(gpu.ok()) << gpu.error().message;
  EXPECT_EQ(gpu->lkey, 0x101u);
  // A host lookup inside the dma-buf region misses and registers host memory.
  Result<MrKeys> host = cache.find_or_register(0x7F0000100000, 16);
  ASSERT_TRUE(host.ok());
  EXPECT_EQ(host->lkey, 0x102u);
  ASSERT_EQ(nic.registered.size(), 1u);
  // A dma-buf lookup inside the host page misses the host region and hits its own.
  EXPECT_EQ(cache.find_or_register_dmabuf(0x7F0000100000, 8, {.fd = 9, .offset = 0x100})->lkey, 0x101u);
  EXPECT_EQ(cache.find_or_register(0x7F0000100008, 8)->lkey, 0x102u);
  EXPECT_EQ(cache.regions(MrKind::kDmabuf), 1u);
  EXPECT_EQ(cache.regions(MrKind::kHost), 1u);
  EXPECT_EQ(cache.hits(), 2u);
  EXPECT_EQ(cache.misses(), 2u);
}

TEST(VerbsMrCache, DmabufRegionsAreRegisteredExactlyAndFoundAgainByAddress) {
  FakeNic nic;
  MrCache cache(nic.reg(), nic.dereg(), nic.reg_dmabuf());
  // Not page-aligned: registered as given (iova = the address, the fd's offset unchanged).
  ASSERT_TRUE(cache.find_or_register_dmabuf(0x200010, 0x3000, {.fd = 7, .offset = 0x10}).ok());
  ASSERT_EQ(nic.dmabufs.size(), 1u);
  EXPECT_EQ(nic.dmabufs[0], (DmabufCall{.iova = 0x200010, .len = 0x3000, .fd = 7, .offset = 0x10}));
  // Inside it, whatever fd the caller now holds for the same memory: a hit.
  EXPECT_EQ(cache.find_or_register_dmabuf(0x201000, 0x100, {.fd = 12, .offset = 0x1000})->lkey, 0x101u);
  // One byte before it (inside the page a host region would have widened to): a new registration.
  EXPECT_EQ(cache.find_or_register_dmabuf(0x20000F, 2, {.fd = 7, .offset = 0xF})->lkey, 0x102u);
  EXPECT_EQ(nic.dmabufs[1], (DmabufCall{.iova = 0x20000F, .len = 2, .fd = 7, .offset = 0xF}));
  // Past its end: a new registration.
  EXPECT_EQ(cache.find_or_register_dmabuf(0x203000, 0x20, {.fd = 7, .offset = 0x3000})->lkey, 0x103u);
  EXPECT_TRUE(nic.registered.empty());
}

TEST(VerbsMrCache, HeldRegionsAreDeregisteredAtTheirLastRelease) {
  FakeNic nic;
  MrCache cache(nic.reg(), nic.dereg(), nic.reg_dmabuf());
  // Two comms register the same GPU buffer (NCCL's regMrDmaBuf on each): one registration, two holds.
  Result<MrHold> a = cache.hold_dmabuf(0x400000, 0x10000, {.fd = 5, .offset = 0});
  Result<MrHold> b = cache.hold_dmabuf(0x400000, 0x10000, {.fd = 6, .offset = 0});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->region, b->region);
  EXPECT_EQ(a->keys.lkey, b->keys.lkey);
  EXPECT_EQ(nic.dmabufs.size(), 1u);
  EXPECT_TRUE(cache.release(a->region));
  EXPECT_EQ(nic.live.size(), 1u) << "one hold left: still registered";
  EXPECT_TRUE(cache.release(b->region));
  EXPECT_TRUE(nic.live.empty()) << "the last hold released: deregistered at once";
  EXPECT_EQ(cache.regions(), 0u);
  EXPECT_FALSE(cache.release(b->region)) << "released twice";
  EXPECT_FALSE(cache.release(9999)) << "never held";
  // The same address again (the memory freed and allocated anew): a fresh registration from the new fd.
  Result<MrHold> c = cache.hold_dmabuf(0x400000, 0x10000, {.fd = 8, .offset = 0});
  ASSERT_TRUE(c.ok());
  EXPECT_NE(c->region, a->region);
  ASSERT_EQ(nic.dmabufs.size(), 2u);
  EXPECT_EQ(nic.dmabufs[1].fd, 8);
  // Host holds work alike; a host region found without a hold stays until invalidated.
  ASSERT_TRUE(cache.find_or_register(0x10000, 16).ok());
  Result<MrHold> h = cache.hold(0x20000, 16);
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(cache.release(h->region));
  EXPECT_EQ(cache.regions(MrKind::kHost), 1u);
}

TEST(VerbsMrCache, InvalidateDropsHeldDmabufRegionsAndTheirHolds) {
  FakeNic nic;
  MrCache cache(nic.reg(), nic.dereg(), nic.reg_dmabuf());
  Result<MrHold> g = cache.hold_dmabuf(0x400000, 0x1000, {.fd = 5, .offset = 0});
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(cache.find_or_register(0x400000, 0x1000).ok());
  cache.invalidate(0x400800, 1);
  EXPECT_EQ(cache.regions(), 0u) << "both kinds overlap the freed range";
  EXPECT_TRUE(nic.live.empty());
  EXPECT_FALSE(cache.release(g->region)) << "its region is gone: nothing to release";
}

TEST(VerbsMrCache, DmabufErrorsAreNamedAndNothingIsCached) {
  FakeNic nic;
  {
    MrCache host_only(nic.reg(), nic.dereg());
    Result<MrKeys> k = host_only.find_or_register_dmabuf(0x1000, 16, {.fd = 3, .offset = 0});
    ASSERT_FALSE(k.ok());
    EXPECT_EQ(k.error().code, ErrorCode::kUnsupported);
    EXPECT_EQ(k.error().message, "dma-buf registration is not available in this cache");
  }
  MrCache cache(nic.reg(), nic.dereg(), nic.reg_dmabuf());
  EXPECT_EQ(cache.find_or_register_dmabuf(0x1000, 16, {.fd = -1, .offset = 0}).error().message,
            "dma-buf registration with fd -1 (not a file descriptor)");
  EXPECT_EQ(cache.hold_dmabuf(0x1000, 0, {.fd = 3, .offset = 0}).error().message,
            "memory registration of 0 bytes");
  EXPECT_EQ(cache.hold_dmabuf(UINT64_MAX - 4, 16, {.fd = 3, .offset = 0}).error().message,
            "memory registration range wraps");
  nic.refuse = true;
  EXPECT_EQ(cache.hold_dmabuf(0x1000, 16, {.fd = 3, .offset = 0}).error().message,
            "ibv_reg_dmabuf_mr: Bad address");
  EXPECT_EQ(cache.regions(), 0u);
  EXPECT_TRUE(nic.dmabufs.empty());
}

}  // namespace
}  // namespace megascale::wire::verbs
