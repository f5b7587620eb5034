// The learning-rate schedule: linear warmup to the peak, then a cosine decay to min_lr_fraction * peak
// (Loshchilov and Hutter, SGDR, ICLR 2017, without restarts; the GPT-2/3 recipe llm.c also uses).
//
//   CosineSchedule schedule = CosineSchedule::from(run.train);
//   for (int step = 0; step < run.train.steps; ++step) {
//     double lr = schedule.learning_rate(step);   // step is 0-based
//     ...
//   }
#pragma once

#include "megascale/trainer/config.h"

namespace megascale::trainer {

struct CosineSchedule {
  double peak_learning_rate = 0;
  double min_lr_fraction = 0;  // the floor is min_lr_fraction * peak_learning_rate
  int warmup_steps = 0;
  int total_steps = 0;

  static CosineSchedule from(const TrainConfig& train);

  // The rate of 0-based optimizer step `step`:
  //   step < warmup:           peak * (step + 1) / warmup   (step 0 already moves; it never returns 0)
  //   warmup <= step < total:  floor + (peak - floor) * (1 + cos(pi * progress)) / 2,
  //                            progress = (step - warmup) / (total - warmup) in [0, 1)
  //   step >= total:           floor
  double learning_rate(int step) const;
};

}  // namespace megascale::trainer
