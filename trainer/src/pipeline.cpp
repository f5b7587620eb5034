// Pipeline schedules (1F1B, interleaved 1F1B) and their replay (pipeline.h).
#include "megascale/trainer/pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>

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
    return make_error(
        ErrorCode::kInvalidArgument,
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
  const int warmup = micro_batches == pp ? total : std::min((pp - stage - 1) * 2 + (vpp - 1) * pp, total);
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
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("{} micro-batches: must be >= 1", micro_batches));
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
      : stages_(stages),
        micro_batches_(micro_batches),
        t_(2 * static_cast<size_t>(stages) * micro_batches, kNotDone) {}
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
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("stage {}: pass {} runs twice", stage, to_string(p)));
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
          return make_error(ErrorCode::kInvalidArgument, fmt::format("stage {}: pass {} is missing", stage,
                                                                     to_string(Pass{kind, mb, chunk})));
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
          waits +=
              fmt::format("{}stage {} at {}", waits.empty() ? "" : ", ", s, to_string(schedules[s][next[s]]));
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

std::string to_string(const P2pOp& op) {
  static constexpr const char* kNames[] = {"sendA", "recvA", "sendG", "recvG"};
  return fmt::format("{}{}.{}", kNames[static_cast<int>(op.kind)], op.micro_batch, op.chunk);
}

Result<std::vector<CoupledStep>> coupled_schedule(const ParallelLayout& layout, int stage,
                                                  int micro_batches) {
  auto passes = pipeline_schedule(layout, stage, micro_batches);
  if (!passes) return passes.error();
  const int last_virtual = layout.pp * layout.vpp - 1;
  std::vector<CoupledStep> out;
  std::optional<P2pOp> held;  // the send of the pass before, waiting for the next receive
  for (const Pass& p : *passes) {
    const int virtual_stage = p.chunk * layout.pp + stage;
    CoupledStep step;
    if (held) step.ops.push_back(*held);
    held.reset();
    const bool forward = p.kind == PassKind::kForward;
    if (forward && virtual_stage > 0) step.ops.push_back({P2pKind::kRecvActivation, p.micro_batch, p.chunk});
    if (!forward && virtual_stage < last_virtual) {
      step.ops.push_back({P2pKind::kRecvGradient, p.micro_batch, p.chunk});
    }
    step.pass = p;
    out.push_back(std::move(step));
    if (forward && virtual_stage < last_virtual)
      held = P2pOp{P2pKind::kSendActivation, p.micro_batch, p.chunk};
    if (!forward && virtual_stage > 0) held = P2pOp{P2pKind::kSendGradient, p.micro_batch, p.chunk};
  }
  if (held) out.push_back({{*held}, std::nullopt});
  return out;
}

namespace {

// Where an operation's data goes or comes from: the peer stage, the peer's chunk, and the channel
// (sender, receiver, gradients or not) both ends are matched on in order.
struct Counterpart {
  int peer = 0;
  P2pOp op;
  std::tuple<int, int, bool> channel;
};

Counterpart counterpart_of(const P2pOp& op, int stage, int pp) {
  const int next = (stage + 1) % pp, prev = (stage + pp - 1) % pp;
  const int chunk_next = op.chunk + (stage == pp - 1 ? 1 : 0), chunk_prev = op.chunk - (stage == 0 ? 1 : 0);
  switch (op.kind) {
    case P2pKind::kSendActivation:
      return {next, {P2pKind::kRecvActivation, op.micro_batch, chunk_next}, {stage, next, false}};
    case P2pKind::kRecvActivation:
      return {prev, {P2pKind::kSendActivation, op.micro_batch, chunk_prev}, {prev, stage, false}};
    case P2pKind::kSendGradient:
      return {prev, {P2pKind::kRecvGradient, op.micro_batch, chunk_prev}, {stage, prev, true}};
    case P2pKind::kRecvGradient:
      break;
  }
  return {next, {P2pKind::kSendGradient, op.micro_batch, chunk_next}, {next, stage, true}};
}

}  // namespace

Status check_coupled(const ParallelLayout& layout, int micro_batches) {
  const int pp = layout.pp;
  std::vector<std::vector<CoupledStep>> steps;
  for (int s = 0; s < pp; ++s) {
    auto mine = coupled_schedule(layout, s, micro_batches);
    if (!mine) return mine.error();
    steps.push_back(std::move(*mine));
  }
  // Each operation's place on its channel: the channel's operations on one side, in the rank's order.
  using Channel = std::tuple<int, int, bool>;
  std::vector<std::vector<std::vector<int>>> position(static_cast<size_t>(pp));
  std::map<std::pair<Channel, bool>, int> count;  // (channel, sending side) -> operations so far
  for (int s = 0; s < pp; ++s) {
    for (const CoupledStep& st : steps[static_cast<size_t>(s)]) {
      std::vector<int> at;
      for (const P2pOp& op : st.ops) {
        const bool sending = op.kind == P2pKind::kSendActivation || op.kind == P2pKind::kSendGradient;
        at.push_back(count[{counterpart_of(op, s, pp).channel, sending}]++);
      }
      position[static_cast<size_t>(s)].push_back(std::move(at));
    }
  }
  std::vector<size_t> next(static_cast<size_t>(pp), 0);
  // done[s][k]: operation k of rank s's current step has met its counterpart.
  std::vector<std::vector<bool>> done(static_cast<size_t>(pp));
  for (int s = 0; s < pp; ++s) {
    if (!steps[static_cast<size_t>(s)].empty())
      done[static_cast<size_t>(s)].assign(steps[static_cast<size_t>(s)][0].ops.size(), false);
  }
  for (;;) {
    bool moved = false, finished = true;
    for (int s = 0; s < pp; ++s) {
      const auto& mine = steps[static_cast<size_t>(s)];
      size_t& i = next[static_cast<size_t>(s)];
      if (i >= mine.size()) continue;
      finished = false;
      const CoupledStep& st = mine[i];
      for (size_t k = 0; k < st.ops.size(); ++k) {
        if (done[static_cast<size_t>(s)][k]) continue;
        const Counterpart c = counterpart_of(st.ops[k], s, pp);
        const size_t j = next[static_cast<size_t>(c.peer)];
        const auto& theirs = steps[static_cast<size_t>(c.peer)];
        if (j >= theirs.size()) continue;
        for (size_t q = 0; q < theirs[j].ops.size(); ++q) {
          const Counterpart back = counterpart_of(theirs[j].ops[q], c.peer, pp);
          if (back.channel != c.channel || back.peer != s ||
              position[static_cast<size_t>(c.peer)][j][q] != position[static_cast<size_t>(s)][i][k]) {
            continue;
          }
          if (theirs[j].ops[q] != c.op) {
            return make_error(
                ErrorCode::kInvalidArgument,
                fmt::format("pp {} vpp {}, {} micro-batches: rank {}'s {} meets rank {}'s {}", pp, layout.vpp,
                            micro_batches, s, to_string(st.ops[k]), c.peer, to_string(theirs[j].ops[q])));
          }
          done[static_cast<size_t>(s)][k] = true;
          done[static_cast<size_t>(c.peer)][q] = true;
          moved = true;
        }
      }
      if (std::all_of(done[static_cast<size_t>(s)].begin(), done[static_cast<size_t>(s)].end(),
                      [](bool d) { return d; })) {
        ++i;
        done[static_cast<size_t>(s)].assign(i < mine.size() ? mine[i].ops.size() : 0, false);
        moved = true;
      }
    }
    if (finished) return {};
    if (!moved) {
      std::string waits;
      for (int s = 0; s < pp; ++s) {
        const size_t i = next[static_cast<size_t>(s)];
        if (i >= steps[static_cast<size_t>(s)].size()) continue;
        std::string ops;
        for (const P2pOp& op : steps[static_cast<size_t>(s)][i].ops) {
          if (!ops.empty()) ops += ' ';
          ops += to_string(op);
        }
        waits += fmt::format("{}rank {} in {{{}}}", waits.empty() ? "" : "; ", s, ops);
      }
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("pp {} vpp {}, {} micro-batches: the coupled exchanges deadlock: {}", pp,
                                    layout.vpp, micro_batches, waits));
    }
  }
}

}  // namespace megascale::trainer
