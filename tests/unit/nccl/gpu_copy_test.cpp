// The copiers behind MEGASCALE_GDR_COPY (gpu_copy.h): the CPU's emulation keeps the queued order, makes
// a copy visible only once a mark behind it has passed (never at the first look), and drains; the CUDA
// copier refuses, naming why, where there is no driver or no current context (as on CI).
#include "../../../collectives/nccl/src/gpu_copy.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
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
