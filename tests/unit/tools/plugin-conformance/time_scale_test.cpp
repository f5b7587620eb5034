// The factor on the conformance cases' deadlines for a loaded host (tools/plugin-conformance/src/
// harness.h): a host running more threads than it has CPUs gives each of them, the plugin's included,
// that much less of a CPU, so its deadlines stretch by the 1-minute load average per CPU, from 1 to 4.
#include <gtest/gtest.h>

#include "../../../../tools/plugin-conformance/src/harness.h"

namespace megascale::nccl::conformance {
namespace {

TEST(ConformanceTimeScale, AnIdleOrJustBusyHostKeepsTheBuildsFactor) {
  EXPECT_DOUBLE_EQ(scale_for_load(1.0, 0.3, 2), 1.0);
  EXPECT_DOUBLE_EQ(scale_for_load(3.0, 2.0, 2), 3.0);  // one runnable thread per CPU
}

TEST(ConformanceTimeScale, ALoadedHostStretchesByItsLoadPerCpu) {
  EXPECT_DOUBLE_EQ(scale_for_load(1.0, 3.0, 2), 1.5);
  EXPECT_DOUBLE_EQ(scale_for_load(5.0, 6.0, 2), 15.0);  // ThreadSanitizer's 5 on a 3x loaded host
}

TEST(ConformanceTimeScale, TheStretchStopsAtFour) {
  EXPECT_DOUBLE_EQ(scale_for_load(1.0, 40.0, 2), 4.0);
  EXPECT_DOUBLE_EQ(scale_for_load(3.0, 40.0, 2), 12.0);
}

TEST(ConformanceTimeScale, AnUnknownCpuCountOrLoadLeavesTheFactor) {
  EXPECT_DOUBLE_EQ(scale_for_load(3.0, 8.0, 0), 3.0);
  EXPECT_DOUBLE_EQ(scale_for_load(3.0, -1.0, 2), 3.0);
}

}  // namespace
}  // namespace megascale::nccl::conformance
