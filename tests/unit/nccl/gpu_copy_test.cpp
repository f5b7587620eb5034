// The copiers behind MEGASCALE_GDR_COPY (gpu_copy.h): the CPU's emulation keeps the queued order, makes
// a copy visible only once a mark behind it has passed (never at the first look), and drains; a copy not
// done within the copier's timeout fails it (naming the wait, the knob and the likely cause), at once from
// then on, and drain() gives up as well instead of waiting forever; the CUDA copier refuses, naming why,
// where there is no driver or no current context (as on CI).
#include "../../../collectives/nccl/src/gpu_copy.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace megascale::nccl {
namespace {

TEST(GpuCopy, EmulatedCopiesLandInOrderOnlyWhenTheirMarkPasses) {
  auto made = make_copier(GdrCopyMode::kEmulate);
  ASSERT_TRUE(made) << made.error().message;
  Copier& c = **made;
  auto shadow = c.alloc_shadow(64);
  ASSERT_TRUE(shadow) << shadow.error().message;
  auto* host = static_cast<char*>(*shadow);
  std::memset(host, 0, 64);
  std::vector<char> gpu(64, 'a');

  ASSERT_TRUE(c.to_host(host, gpu.data(), 32));
  auto first = c.mark();
  ASSERT_TRUE(first);
  ASSERT_TRUE(c.to_host(host + 32, gpu.data(), 32));
  auto second = c.mark();
  ASSERT_TRUE(second);
  EXPECT_LT(*first, *second);

  // The first look never finds a fresh copy done, and nothing was copied before its mark passed.
  auto look = c.passed(*first);
  ASSERT_TRUE(look);
  EXPECT_FALSE(*look);
  EXPECT_EQ(host[0], 0);
  int looks = 1;
  while (!*c.passed(*first)) ASSERT_LT(++looks, 10);
  EXPECT_EQ(host[0], 'a');
  EXPECT_EQ(host[31], 'a');
  EXPECT_EQ(host[32], 0);  // the second copy waits for its own mark
  while (!*c.passed(*second)) ASSERT_LT(++looks, 20);
  EXPECT_EQ(host[63], 'a');

  // Back to the "GPU", then drained: every queued copy is done without looks.
  ASSERT_TRUE(c.to_device(gpu.data(), "zz", 2));
  auto third = c.mark();
  ASSERT_TRUE(third);
  ASSERT_TRUE(c.drain());
  EXPECT_TRUE(*c.passed(*third));
  EXPECT_EQ(std::string(gpu.data(), 3), "zza");
  c.free_shadow(host);
}

TEST(GpuCopy, AMarkWithNothingQueuedPassesAtOnceAfterDrain) {
  auto made = make_copier(GdrCopyMode::kEmulate);
  ASSERT_TRUE(made);
  auto m = (*made)->mark();
  ASSERT_TRUE(m);
  ASSERT_TRUE((*made)->drain());
  EXPECT_TRUE(*(*made)->passed(*m));
}

// Marks come from a fixed pool (the data path makes no CUDA objects): with all of them queued there is
// none, mark() refuses by name, and one comes back as soon as a queued mark passes.
TEST(GpuCopy, MarksAreAFixedPoolThatRefillsAsMarksPass) {
  ASSERT_FALSE(make_copier(GdrCopyMode::kEmulate, 0));
  auto made = make_copier(GdrCopyMode::kEmulate, 2);
  ASSERT_TRUE(made) << made.error().message;
  Copier& c = **made;
  EXPECT_EQ(c.free_marks(), 2u);
  auto a = c.mark();
  auto b = c.mark();
  ASSERT_TRUE(a);
  ASSERT_TRUE(b);
  EXPECT_EQ(c.free_marks(), 0u);
  auto none = c.mark();
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("no free mark"), std::string::npos) << none.error().message;
  int looks = 0;
  while (!*c.passed(*a)) ASSERT_LT(++looks, 10);
  EXPECT_GE(c.free_marks(), 1u);
  ASSERT_TRUE(c.mark());
  ASSERT_TRUE(c.drain());
  EXPECT_EQ(c.free_marks(), 2u);
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// MEGASCALE_FAULT_COPY_STALL holds back every copy after the first N; past the timeout the copier gives up
// on the oldest, and fails every call from then on, naming why.
TEST(GpuCopy, ACopyNotDoneWithinTheTimeoutFailsTheCopierForGood) {
  auto made = make_copier(GdrCopyMode::kEmulate, 8, CopyLimits{50'000'000, 1});  // 50 ms, stall after 1
  ASSERT_TRUE(made) << made.error().message;
  Copier& c = **made;
  auto shadow = c.alloc_shadow(64);
  ASSERT_TRUE(shadow);
  std::vector<char> gpu(64, 'g');
  ASSERT_TRUE(c.to_host(*shadow, gpu.data(), 32));
  auto first = c.mark();
  ASSERT_TRUE(first);
  int looks = 0;
  while (!*c.passed(*first)) ASSERT_LT(++looks, 10);  // the first copy is not held back
  ASSERT_TRUE(c.to_host(static_cast<char*>(*shadow) + 32, gpu.data(), 32));
  auto second = c.mark();
  ASSERT_TRUE(second);
  for (int i = 0; i < 10; ++i) {
    auto look = c.passed(*second);
    ASSERT_TRUE(look) << "gave up before the timeout: " << look.error().message;
    EXPECT_FALSE(*look);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  auto late = c.passed(*second);
  ASSERT_FALSE(late);
  const std::string& why = late.error().message;
  EXPECT_TRUE(has(why, "a GPU buffer copy was still not done")) << why;
  EXPECT_TRUE(has(why, "MEGASCALE_GDR_COPY_TIMEOUT_MS=50")) << why;
  EXPECT_TRUE(has(why, "MEGASCALE_FAULT_COPY_STALL=1")) << why;
  EXPECT_TRUE(has(why, "CUDA_DEVICE_MAX_CONNECTIONS")) << why;
  EXPECT_TRUE(has(why, "MEGASCALE_GDR_COPY=0")) << why;
  // From then on every call fails at once with the same reason, and none waits.
  EXPECT_FALSE(c.passed(*first));
  EXPECT_EQ(c.free_marks(), 0u);
  EXPECT_FALSE(c.mark());
  EXPECT_FALSE(c.to_device(gpu.data(), *shadow, 1));
  EXPECT_FALSE(c.alloc_shadow(8));
  const auto t0 = std::chrono::steady_clock::now();
  Status drained = c.drain();
  ASSERT_FALSE(drained);
  EXPECT_EQ(drained.error().message, why);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  c.free_shadow(*shadow);  // the emulation moves nothing after giving up: its shadow may go
}

// drain() waits for the queued copies, copies queued after the last mark too, and gives up on a held-back
// one after the timeout instead of blocking for good.
TEST(GpuCopy, DrainGivesUpOnAStuckCopyAfterTheTimeout) {
  {
    auto made = make_copier(GdrCopyMode::kEmulate, 4, CopyLimits{5'000'000'000, 0});
    ASSERT_TRUE(made);
    std::vector<char> a(16, 'a'), b(16, 0);
    ASSERT_TRUE((*made)->to_device(b.data(), a.data(), 16));  // no mark behind it
    ASSERT_TRUE((*made)->drain());
    EXPECT_EQ(std::string(b.data(), 16), std::string(16, 'a'));
  }
  auto made = make_copier(GdrCopyMode::kEmulate, 4, CopyLimits{100'000'000, 1});
  ASSERT_TRUE(made);
  Copier& c = **made;
  std::vector<char> src(16, 's'), dst(16, 0);
  ASSERT_TRUE(c.to_device(dst.data(), src.data(), 8));
  ASSERT_TRUE(c.mark());
  ASSERT_TRUE(c.to_device(dst.data() + 8, src.data(), 8));
  ASSERT_TRUE(c.mark());  // held back
  const auto t0 = std::chrono::steady_clock::now();
  Status drained = c.drain();
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(drained);
  EXPECT_TRUE(has(drained.error().message, "still not done")) << drained.error().message;
  EXPECT_GE(took, std::chrono::milliseconds(100));
  EXPECT_LT(took, std::chrono::seconds(5));
  EXPECT_EQ(dst[0], 's');  // the copy before the stall was made
}

// With no timeout a copy is waited for however long it takes (MEGASCALE_GDR_COPY_TIMEOUT_MS=0).
TEST(GpuCopy, NoTimeoutNeverGivesUp) {
  auto made = make_copier(GdrCopyMode::kEmulate, 4, CopyLimits{0, 0});
  ASSERT_TRUE(made);
  std::vector<char> src(8, 'x'), dst(8, 0);
  ASSERT_TRUE((*made)->to_device(dst.data(), src.data(), 8));
  auto m = (*made)->mark();
  ASSERT_TRUE(m);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto look = (*made)->passed(*m);
  ASSERT_TRUE(look) << look.error().message;
  ASSERT_TRUE((*made)->drain());
  EXPECT_TRUE(*(*made)->passed(*m));
  EXPECT_FALSE(make_copier(GdrCopyMode::kEmulate, 4, CopyLimits{-1, 0}));
}

TEST(GpuCopy, CudaCopierNamesWhyItCannotStart) {
  // On CI there is no driver (libcuda.so.1); on a GPU host this thread has no CUDA context current.
  auto made = make_copier(GdrCopyMode::kCuda);
  if (made) GTEST_SKIP() << "a CUDA context is current on this thread";
  const std::string& m = made.error().message;
  EXPECT_TRUE(m.find("libcuda.so.1") != std::string::npos || m.find("cuInit") != std::string::npos ||
              m.find("no CUDA context is current") != std::string::npos)
      << m;
}

TEST(GpuCopy, OffHasNoCopier) {
  auto made = make_copier(GdrCopyMode::kOff);
  ASSERT_FALSE(made);
  EXPECT_NE(made.error().message.find("MEGASCALE_GDR_COPY"), std::string::npos);
}

}  // namespace
}  // namespace megascale::nccl
