// The 3D rank layout: coordinates, groups, split keys, layer ranges, validation (parallel.h).
#include "megascale/trainer/parallel.h"

#include <fmt/format.h>

namespace megascale::trainer {

RankCoords coords_of(const ParallelLayout& layout, int rank) {
  RankCoords c;
  c.tp = rank % layout.tp;
  c.dp = (rank / layout.tp) % layout.dp;
  c.pp = rank / (layout.tp * layout.dp);
  return c;
}

int rank_of(const ParallelLayout& layout, const RankCoords& c) {
  return c.tp + layout.tp * (c.dp + layout.dp * c.pp);
}

std::string_view to_string(Group group) {
  switch (group) {
    case Group::kTensor:
      return "tp";
    case Group::kData:
      return "dp";
    case Group::kPipeline:
      return "pp";
  }
  return "?";
}

namespace {

int& axis(RankCoords& c, Group group) {
  switch (group) {
    case Group::kTensor:
      return c.tp;
    case Group::kData:
      return c.dp;
    case Group::kPipeline:
      break;
  }
  return c.pp;
}

// The layout's size along the group's axis.
int size_of(const ParallelLayout& layout, Group group) {
  RankCoords sizes{layout.tp, layout.dp, layout.pp};
  return axis(sizes, group);
}

}  // namespace

std::vector<int> group_members(const ParallelLayout& layout, Group group, int rank) {
  RankCoords c = coords_of(layout, rank);
  std::vector<int> members;
  for (int i = 0; i < size_of(layout, group); ++i) {
    axis(c, group) = i;
    members.push_back(rank_of(layout, c));
  }
  return members;
}

SplitKey split_key(const ParallelLayout& layout, Group group, int rank) {
  RankCoords c = coords_of(layout, rank);
  const int key = axis(c, group);
  axis(c, group) = 0;
  // The group's lowest rank (its member at coordinate 0) names it: equal for all members, distinct
  // between groups of one kind.
  return {rank_of(layout, c), key};
}

LayerRange layers_of(const ParallelLayout& layout, int n_layer, int pp_rank, int chunk) {
  const int stages = layout.pp * layout.vpp;
  const int per_stage = n_layer / stages;
  const int virtual_stage = chunk * layout.pp + pp_rank;
  return {virtual_stage * per_stage, (virtual_stage + 1) * per_stage};
}

namespace {

Status refused(const std::vector<std::string>& problems) {
  std::string all;
  for (const std::string& p : problems) all += (all.empty() ? "" : "\n") + p;
  return make_error(ErrorCode::kInvalidArgument, all);
}

}  // namespace

Status validate_layout(const ParallelLayout& layout, const RunConfig& run) {
  std::vector<std::string> problems;
  auto positive = [&](const char* key, int v) {
    if (v < 1) problems.push_back(fmt::format("{}: {}: must be >= 1", key, v));
  };
  positive("tp", layout.tp);
  positive("pp", layout.pp);
  positive("dp", layout.dp);
  positive("vpp", layout.vpp);
  if (!problems.empty()) return refused(problems);  // the checks below divide by these
  const ModelConfig& m = run.model;
  const TrainConfig& t = run.train;
  if (m.n_head % layout.tp != 0) {
    problems.push_back(fmt::format("tp: {}: must divide model.n_head ({}): each rank takes whole heads",
                                   layout.tp, m.n_head));
  }
  if (m.padded_vocab_size % layout.tp != 0) {
    problems.push_back(fmt::format(
        "tp: {}: must divide model.padded_vocab_size ({}): the embedding and the loss split the "
        "vocabulary",
        layout.tp, m.padded_vocab_size));
  }
  if (t.seq_len % layout.tp != 0) {
    problems.push_back(fmt::format(
        "tp: {}: must divide train.seq_len ({}): sequence parallel splits the sequence", layout.tp,
        t.seq_len));
  }
  if (m.n_layer % (layout.pp * layout.vpp) != 0) {
    problems.push_back(fmt::format(
        "pp x vpp: {} x {}: must divide model.n_layer ({}): each virtual stage takes as many layers",
        layout.pp, layout.vpp, m.n_layer));
  }
  if (layout.vpp > 1 && layout.pp == 1) {
    problems.push_back(fmt::format("vpp: {}: needs pp > 1: virtual stages interleave a pipeline", layout.vpp));
  }
  if (layout.vpp > 1 && t.grad_accum_steps % layout.pp != 0) {
    problems.push_back(fmt::format(
        "vpp: {}: the micro-batches (train.grad_accum_steps, {}) must be a multiple of pp ({}): the "
        "interleaved schedule runs them in groups of pp",
        layout.vpp, t.grad_accum_steps, layout.pp));
  }
  if (t.batch_size % layout.dp != 0) {
    problems.push_back(fmt::format(
        "dp: {}: must divide train.batch_size ({}): each replica takes an equal part of every "
        "micro-batch",
        layout.dp, t.batch_size));
  }
  if (problems.empty()) return {};
  return refused(problems);
}

std::string describe(const ParallelLayout& layout) {
  return fmt::format("tp {} x pp {}{} x dp {} = {} ranks", layout.tp, layout.pp,
                     layout.vpp > 1 ? fmt::format(" (vpp {})", layout.vpp) : "", layout.dp,
                     layout.world_size());
}

}  // namespace megascale::trainer
