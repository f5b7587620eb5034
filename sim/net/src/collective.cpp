#include "megascale/sim/collective.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace megascale::sim {

Result<std::vector<std::vector<uint32_t>>> parallel_groups(const Parallelism3D& p, uint32_t hosts,
                                                           ParallelGroup kind) {
  if (p.tp == 0 || p.pp == 0 || p.dp == 0)
    return make_error(
        fmt::format("tp {} x pp {} x dp {}: every degree must be at least 1", p.tp, p.pp, p.dp));
  const uint64_t ranks = uint64_t{p.tp} * p.pp * p.dp;
  if (ranks != hosts)
    return make_error(fmt::format("tp {} x pp {} x dp {} = {} ranks, but there are {} hosts (NICs)", p.tp,
                                  p.pp, p.dp, ranks, hosts));
  std::vector<std::vector<uint32_t>> groups;
  auto host = [&](uint32_t t, uint32_t q, uint32_t d) { return t + p.tp * (q + p.pp * d); };
  switch (kind) {
    case ParallelGroup::all: {
      groups.emplace_back();
      for (uint32_t h = 0; h < hosts; ++h) groups.back().push_back(h);
      break;
    }
    case ParallelGroup::tp:
      for (uint32_t d = 0; d < p.dp; ++d)
        for (uint32_t q = 0; q < p.pp; ++q) {
          groups.emplace_back();
          for (uint32_t t = 0; t < p.tp; ++t) groups.back().push_back(host(t, q, d));
        }
      break;
    case ParallelGroup::pp:
      for (uint32_t d = 0; d < p.dp; ++d)
        for (uint32_t t = 0; t < p.tp; ++t) {
          groups.emplace_back();
          for (uint32_t q = 0; q < p.pp; ++q) groups.back().push_back(host(t, q, d));
        }
      break;
    case ParallelGroup::dp:
      for (uint32_t q = 0; q < p.pp; ++q)
        for (uint32_t t = 0; t < p.tp; ++t) {
          groups.emplace_back();
          for (uint32_t d = 0; d < p.dp; ++d) groups.back().push_back(host(t, q, d));
        }
      break;
  }
  return groups;
}

Status append_ring_flows(std::vector<FlowSpec>& flows, const std::vector<uint32_t>& group, CollectiveOp op,
                         uint64_t bytes) {
  const auto n = static_cast<uint32_t>(group.size());
  if (n < 2) return make_error(fmt::format("a ring needs at least 2 ranks, not {}", n));
  if (bytes < n) return make_error(fmt::format("{} bytes cannot be cut into {} ring chunks", bytes, n));
  const uint32_t steps = op == CollectiveOp::all_reduce ? 2 * (n - 1) : n - 1;
  auto chunk_bytes = [&](uint32_t c) { return bytes / n + (c < bytes % n ? 1 : 0); };
  const auto base = static_cast<uint32_t>(flows.size());
  for (uint32_t k = 0; k < steps; ++k) {
    for (uint32_t r = 0; r < n; ++r) {
      // Rank r sends chunk (r - k) mod n (reduce-scatter: the partial sum it just added to; all-gather:
      // the reduced chunk it just got), the chunk rank r - 1 sent it one step earlier.
      FlowSpec f{.src = group[r], .dst = group[(r + 1) % n], .bytes = chunk_bytes((r + n - k % n) % n)};
      if (k > 0) f.after.push_back(base + (k - 1) * n + (r + n - 1) % n);
      flows.push_back(std::move(f));
    }
  }
  return Status{};
}

namespace {

// One binary tree in heap order over `order` (positions -> hosts), for one piece of `bytes`.
void append_tree_piece(std::vector<FlowSpec>& flows, const std::vector<uint32_t>& order, uint64_t bytes) {
  const auto n = static_cast<uint32_t>(order.size());
  std::vector<uint32_t> up(n, 0);  // [position]: the flow to its parent (position 0 has none)
  // Reduce: deepest positions first, so a parent's send comes after its children's.
  for (uint32_t i = n; i-- > 1;) {
    FlowSpec f{.src = order[i], .dst = order[(i - 1) / 2], .bytes = bytes};
    for (uint32_t c : {2 * i + 1, 2 * i + 2}) {
      if (c < n) f.after.push_back(up[c]);
    }
    up[i] = static_cast<uint32_t>(flows.size());
    flows.push_back(std::move(f));
  }
  // Broadcast: the root once its children's pieces are in, every other position once its parent's is.
  std::vector<uint32_t> down(n, 0);  // [position]: the flow from its parent
  for (uint32_t i = 0; i < n; ++i) {
    for (uint32_t c : {2 * i + 1, 2 * i + 2}) {
      if (c >= n) continue;
      FlowSpec f{.src = order[i], .dst = order[c], .bytes = bytes};
      if (i == 0) {
        for (uint32_t k : {1u, 2u}) {
          if (k < n) f.after.push_back(up[k]);
        }
      } else {
        f.after.push_back(down[i]);
      }
      down[c] = static_cast<uint32_t>(flows.size());
      flows.push_back(std::move(f));
    }
  }
}

}  // namespace

Status append_tree_all_reduce_flows(std::vector<FlowSpec>& flows, const std::vector<uint32_t>& group,
                                    uint64_t bytes, uint32_t chunks, bool double_tree) {
  const auto n = static_cast<uint32_t>(group.size());
  if (n < 2) return make_error(fmt::format("a tree needs at least 2 ranks, not {}", n));
  if (chunks == 0) return make_error("a tree all-reduce needs at least 1 chunk");
  const uint64_t trees = double_tree ? 2 : 1;
  if (bytes < chunks * trees)
    return make_error(fmt::format("{} bytes cannot be cut into {} chunks per tree", bytes, chunks));
  std::vector<uint32_t> reversed(group.rbegin(), group.rend());
  // Piece sizes: bytes over (trees x chunks), the first ones a byte larger, so they add up exactly.
  const uint64_t pieces = chunks * trees;
  uint64_t piece = 0;
  for (uint32_t c = 0; c < chunks; ++c) {
    for (uint64_t t = 0; t < trees; ++t, ++piece) {
      const uint64_t size = bytes / pieces + (piece < bytes % pieces ? 1 : 0);
      append_tree_piece(flows, t == 0 ? group : reversed, size);
    }
  }
  return Status{};
}

Status append_pipeline_flows(std::vector<FlowSpec>& flows, const std::vector<uint32_t>& group,
                             uint64_t bytes) {
  if (group.size() < 2)
    return make_error(fmt::format("a pipeline needs at least 2 stages, not {}", group.size()));
  for (size_t i = 0; i + 1 < group.size(); ++i) {
    FlowSpec f{.src = group[i], .dst = group[i + 1], .bytes = bytes};
    if (i > 0) f.after.push_back(static_cast<uint32_t>(flows.size() - 1));  // stage i's input
    flows.push_back(std::move(f));
  }
  return Status{};
}

void chain_after_phase(std::vector<FlowSpec>& flows, size_t prev_begin, size_t begin) {
  // [host] -> the last flow into it from each source, in the previous phase.
  std::map<uint32_t, std::map<uint32_t, uint32_t>> last_in;
  for (size_t i = prev_begin; i < begin; ++i) last_in[flows[i].dst][flows[i].src] = static_cast<uint32_t>(i);
  for (size_t i = begin; i < flows.size(); ++i) {
    if (!flows[i].after.empty()) continue;
    auto it = last_in.find(flows[i].src);
    if (it == last_in.end()) continue;
    for (const auto& [src, index] : it->second) flows[i].after.push_back(index);
  }
}

std::vector<FlowSpec> all_to_all_flows(const std::vector<uint32_t>& hosts, uint64_t bytes) {
  std::vector<FlowSpec> flows;
  const size_t n = hosts.size();
  flows.reserve(n * (n > 0 ? n - 1 : 0));
  for (size_t i = 0; i < n; ++i) {
    for (size_t k = 1; k < n; ++k)
      flows.push_back(FlowSpec{.src = hosts[i], .dst = hosts[(i + k) % n], .bytes = bytes});
  }
  return flows;
}

double ring_bytes_per_rank(CollectiveOp op, uint32_t n, uint64_t bytes) {
  if (op == CollectiveOp::send_recv) return static_cast<double>(bytes);  // every stage but the last
  const double factor = op == CollectiveOp::all_reduce ? 2.0 * (n - 1) / n : static_cast<double>(n - 1) / n;
  return factor * static_cast<double>(bytes);
}

std::string to_string(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::all_reduce:
      return "all-reduce";
    case CollectiveOp::all_gather:
      return "all-gather";
    case CollectiveOp::reduce_scatter:
      return "reduce-scatter";
    case CollectiveOp::send_recv:
      return "send-recv";
  }
  return "?";
}

}  // namespace megascale::sim
