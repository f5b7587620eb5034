// Pipeline schedules (1F1B, interleaved 1F1B) and their replay (pipeline.h).
#include "megascale/trainer/pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace megascale::trainer {

std::string to_string(const Pass& pass) {
  return fmt::format("{}{}.{}", pass.kind == PassKind::kForward ? 'F' : 'B', pass.micro_batch, pass.chunk);
}

std::vector<Pass> one_f_one_b(int pp, int stage, int micro_batches) {
  const int warmup = std::min(pp - stage - 1, micro_batches);
  std::vector<Pass> out;
  out.reserve(2 * static_cast<size_t>(micro_batches));
  int forward = 0;
  int backward = 0;
  for (; forward < warmup; ++forward) out.push_back({PassKind::kForward, forward, 0});
  while (forward < micro_batches) {
    out.push_back({PassKind::kForward, forward++, 0});
    out.push_back({PassKind::kBackward, backward++, 0});
  }
  while (backward < micro_batches) out.push_back({PassKind::kBackward, backward++, 0});
  return out;
}

Result<std::vector<Pass>> interleaved_one_f_one_b(int pp, int vpp, int stage, int micro_batches) {
  if (pp < 2 || vpp < 2) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("interleaved 1F1B needs pp >= 2 and vpp >= 2 (pp {}, vpp {})", pp, vpp));
  }
  if (micro_batches < 1 || micro_batches % pp != 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("interleaved 1F1B: {} micro-batches: must be a positive multiple of pp ({})",
                                  micro_batches, pp));
  }
  // The k-th forward (or backward) of this rank, k < m * vpp: micro-batches go through the chunks in
  // groups of pp; backwards visit the chunks last first.
  const int group = pp * vpp;
  auto nth = [&](PassKind kind, int k) {
    const int in_group = k % group;
    int chunk = in_group / pp;
    if (kind == PassKind::kBackward) chunk = vpp - 1 - chunk;
    return Pass{kind, (k / group) * pp + in_group % pp, chunk};
  };
  const int total = micro_batches * vpp;
  const int warmup =
      micro_batches == pp ? total : std::min((pp - stage - 1) * 2 + (vpp - 1) * pp, total);
  std::vector<Pass> out;
  out.reserve(2 * static_cast<size_t>(total));
  int forward = 0;
  int backward = 0;
  for (; forward < warmup; ++forward) out.push_back(nth(PassKind::kForward, forward));
  while (forward < total) {
    out.push_back(nth(PassKind::kForward, forward++));
    out.push_back(nth(PassKind::kBackward, backward++));
  }
  while (backward < total) out.push_back(nth(PassKind::kBackward, backward++));
  return out;
}

Result<std::vector<Pass>> pipeline_schedule(const ParallelLayout& layout, int stage, int micro_batches) {
  if (stage < 0 || stage >= layout.pp) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("pipeline stage {}: not in [0, {})", stage, layout.pp));
  }
  if (micro_batches < 1) {
    return make_error(ErrorCode::kInvalidArgument, fmt::format("{} micro-batches: must be >= 1", micro_batches));
  }
  if (layout.vpp == 1) return one_f_one_b(layout.pp, stage, micro_batches);
  return interleaved_one_f_one_b(layout.pp, layout.vpp, stage, micro_batches);
}

int max_in_flight(const std::vector<Pass>& passes) {
  int now = 0;
  int most = 0;
  for (const Pass& p : passes) {
    now += p.kind == PassKind::kForward ? 1 : -1;
    most = std::max(most, now);
  }
  return most;
}

namespace {

constexpr double kNotDone = std::numeric_limits<double>::infinity();

// Finish times of every (kind, virtual stage, micro-batch) pass; kNotDone until replayed.
class Finishes {
 public:
  Finishes(int stages, int micro_batches)
      : stages_(stages), micro_batches_(micro_batches), t_(2 * static_cast<size_t>(stages) * micro_batches, kNotDone) {}
  double& at(PassKind kind, int virtual_stage, int micro_batch) {
    return t_[(static_cast<size_t>(kind == PassKind::kBackward) * stages_ + virtual_stage) * micro_batches_ +
              micro_batch];
  }

 private:
  int stages_;
  int micro_batches_;
  std::vector<double> t_;
};

// Every (kind, chunk, micro-batch) exactly once, and each backward after its forward.
Status check_schedule(const std::vector<Pass>& passes, int stage, int vpp, int micro_batches) {
  std::vector<int> seen(2 * static_cast<size_t>(vpp) * micro_batches, 0);
  auto index = [&](PassKind kind, int chunk, int mb) {
    return (static_cast<size_t>(kind == PassKind::kBackward) * vpp + chunk) * micro_batches + mb;
  };
  for (const Pass& p : passes) {
    if (p.chunk < 0 || p.chunk >= vpp || p.micro_batch < 0 || p.micro_batch >= micro_batches) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("stage {}: pass {} is outside {} chunks x {} micro-batches", stage,
                                    to_string(p), vpp, micro_batches));
    }
    if (seen[index(p.kind, p.chunk, p.micro_batch)]++ > 0) {
      return make_error(ErrorCode::kInvalidArgument, fmt::format("stage {}: pass {} runs twice", stage, to_string(p)));
    }
    if (p.kind == PassKind::kBackward && seen[index(PassKind::kForward, p.chunk, p.micro_batch)] == 0) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("stage {}: pass {} runs before its forward", stage, to_string(p)));
    }
  }
  for (int chunk = 0; chunk < vpp; ++chunk) {
    for (int mb = 0; mb < micro_batches; ++mb) {
      for (PassKind kind : {PassKind::kForward, PassKind::kBackward}) {
        if (seen[index(kind, chunk, mb)] == 0) {
          return make_error(ErrorCode::kInvalidArgument,
                            fmt::format("stage {}: pass {} is missing", stage, to_string(Pass{kind, mb, chunk})));
        }
      }
    }
  }
  return {};
}

}  // namespace

Result<PipelineReplay> replay_pipeline(const ParallelLayout& layout, int micro_batches,
                                       const std::vector<std::vector<Pass>>& schedules, PassTimes times) {
  const int pp = layout.pp;
  const int vpp = layout.vpp;
  if (static_cast<int>(schedules.size()) != pp) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("{} schedules for {} pipeline stages", schedules.size(), pp));
  }
  for (int s = 0; s < pp; ++s) {
    if (Status st = check_schedule(schedules[s], s, vpp, micro_batches); !st) return st.error();
  }
  const int stages = pp * vpp;
  Finishes done(stages, micro_batches);
  std::vector<size_t> next(pp, 0);
  std::vector<double> free_at(pp, 0);
  size_t left = 0;
  for (const auto& s : schedules) left += s.size();
  // Each round runs, on every rank, the passes whose input is there; a round that runs none while passes
  // are left is a deadlock. A pass's times depend only on its rank's previous pass and its input, so
  // the order the ranks are visited in does not change them.
  while (left > 0) {
    bool ran = false;
    for (int s = 0; s < pp; ++s) {
      while (next[s] < schedules[s].size()) {
        const Pass& p = schedules[s][next[s]];
        const int v = p.chunk * pp + s;
        double input = 0;
        if (p.kind == PassKind::kForward) {
          if (v > 0) input = done.at(PassKind::kForward, v - 1, p.micro_batch);
        } else {
          input = v < stages - 1 ? done.at(PassKind::kBackward, v + 1, p.micro_batch)
                                 : done.at(PassKind::kForward, v, p.micro_batch);
        }
        if (input == kNotDone) break;
        const double start = std::max(free_at[s], input);
        free_at[s] = start + (p.kind == PassKind::kForward ? times.forward : times.backward);
        done.at(p.kind, v, p.micro_batch) = free_at[s];
        ++next[s];
        --left;
        ran = true;
      }
    }
    if (!ran) {
      std::string waits;
      for (int s = 0; s < pp; ++s) {
        if (next[s] < schedules[s].size()) {
          waits += fmt::format("{}stage {} at {}", waits.empty() ? "" : ", ", s, to_string(schedules[s][next[s]]));
        }
      }
      return make_error(ErrorCode::kInvalidArgument, "the pipeline deadlocks: " + waits);
    }
  }
  PipelineReplay r;
  r.makespan = *std::max_element(free_at.begin(), free_at.end());
  r.ideal = static_cast<double>(micro_batches) * vpp * (times.forward + times.backward);
  r.bubble_ratio = (r.makespan - r.ideal) / r.ideal;
  for (const auto& s : schedules) r.in_flight.push_back(max_in_flight(s));
  return r;
}

Result<PipelineReplay> replay_pipeline(const ParallelLayout& layout, int micro_batches, PassTimes times) {
  std::vector<std::vector<Pass>> schedules;
  for (int s = 0; s < layout.pp; ++s) {
    auto mine = pipeline_schedule(layout, s, micro_batches);
    if (!mine) return mine.error();
    schedules.push_back(std::move(*mine));
  }
  return replay_pipeline(layout, micro_batches, schedules, times);
}

}  // namespace megascale::trainer
