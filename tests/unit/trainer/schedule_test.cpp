// The cosine schedule: warmup ramp, peak, monotone decay, the floor, continuity at the seams.
#include "megascale/trainer/schedule.h"

#include <gtest/gtest.h>

#include <cmath>

namespace megascale::trainer {
namespace {

TEST(CosineSchedule, WarmsUpLinearlyThenDecaysToTheFloor) {
  CosineSchedule s{
      .peak_learning_rate = 1e-3, .min_lr_fraction = 0.1, .warmup_steps = 10, .total_steps = 110};
  EXPECT_DOUBLE_EQ(s.learning_rate(0), 1e-4);  // (0 + 1) / 10 of the peak: step 0 trains
  EXPECT_DOUBLE_EQ(s.learning_rate(4), 5e-4);
  EXPECT_DOUBLE_EQ(s.learning_rate(9), 1e-3);
  EXPECT_DOUBLE_EQ(s.learning_rate(10), 1e-3);                   // the peak, start of the cosine
  EXPECT_NEAR(s.learning_rate(60), 0.5 * (1e-3 + 1e-4), 1e-15);  // half way: the mean of peak and floor
  EXPECT_DOUBLE_EQ(s.learning_rate(110), 1e-4);
  EXPECT_DOUBLE_EQ(s.learning_rate(5000), 1e-4);
  for (int step = 10; step < 110; ++step) {
    EXPECT_LE(s.learning_rate(step + 1), s.learning_rate(step)) << step;
    EXPECT_GE(s.learning_rate(step), 1e-4);
  }
  // Continuous at the end: the last decaying step is within one cosine step of the floor.
  EXPECT_NEAR(s.learning_rate(109), 1e-4, 1e-3 * (1 - std::cos(M_PI / 100)));
}

TEST(CosineSchedule, NoWarmupAndZeroFloor) {
  TrainConfig t;
  t.learning_rate = 2.0;
  t.min_lr_fraction = 0;
  t.warmup_steps = 0;
  t.steps = 4;
  CosineSchedule s = CosineSchedule::from(t);
  EXPECT_DOUBLE_EQ(s.learning_rate(0), 2.0);
  EXPECT_NEAR(s.learning_rate(2), 1.0, 1e-12);
  EXPECT_NEAR(s.learning_rate(1), 1.0 + std::cos(M_PI / 4), 1e-12);
  EXPECT_DOUBLE_EQ(s.learning_rate(4), 0.0);
}

TEST(CosineSchedule, WarmupAsLongAsTheRunNeverDecays) {
  CosineSchedule s{.peak_learning_rate = 1.0, .min_lr_fraction = 0.5, .warmup_steps = 4, .total_steps = 4};
  EXPECT_DOUBLE_EQ(s.learning_rate(3), 1.0);
  EXPECT_DOUBLE_EQ(s.learning_rate(4), 0.5);
}

}  // namespace
}  // namespace megascale::trainer
