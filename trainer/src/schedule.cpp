// Cosine learning-rate schedule with linear warmup (schedule.h).
#include "megascale/trainer/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace megascale::trainer {

CosineSchedule CosineSchedule::from(const TrainConfig& train) {
  return {train.learning_rate, train.min_lr_fraction, train.warmup_steps, train.steps};
}

double CosineSchedule::learning_rate(int step) const {
  const double floor = min_lr_fraction * peak_learning_rate;
  if (step < warmup_steps) {
    // (step + 1): the first step already trains; a zero rate would waste it (llm.c does the same).
    return peak_learning_rate * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  }
  if (step >= total_steps) return floor;
  const double progress =
      static_cast<double>(step - warmup_steps) / static_cast<double>(total_steps - warmup_steps);
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * std::clamp(progress, 0.0, 1.0)));
  return floor + (peak_learning_rate - floor) * cosine;
}

}  // namespace megascale::trainer
