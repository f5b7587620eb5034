// `megascale coll`'s flags and their checks (options.h).
#include "megascale/coll/options.h"

#include <fmt/format.h>

#include <charconv>

namespace megascale::coll {

void add_coll_options(CLI::App& app, CollOptions& o) {
  app.add_option("collective", o.collectives,
                 "all_reduce, all_gather, reduce_scatter, alltoall, broadcast, reduce, sendrecv, or all")
      ->capture_default_str();
  app.add_option("-b,--minbytes", o.min_bytes, "smallest size (K, M, G suffixes)")->capture_default_str();
  app.add_option("-e,--maxbytes", o.max_bytes, "largest size")->capture_default_str();
  app.add_option("-i,--stepbytes", o.step_bytes, "size increment")->capture_default_str();
  app.add_option("-f,--stepfactor", o.step_factor, "size multiplication factor (replaces -i)")
      ->capture_default_str();
  app.add_option("-n,--iters", o.iters, "timed iterations")->capture_default_str();
  app.add_option("-w,--warmup_iters", o.warmup_iters, "untimed iterations first")->capture_default_str();
  app.add_option("-m,--agg_iters", o.agg_iters, "operations aggregated in one ncclGroup")
      ->capture_default_str();
  app.add_option("-N,--run_cycles", o.run_cycles, "repeat the sweep this many times (0: for ever)")
      ->capture_default_str();
  app.add_option("-c,--check", o.check, "checked iterations (0: no data check)")->capture_default_str();
  app.add_option("-o,--op", o.op, "sum, prod, max, min, avg or all")->capture_default_str();
  app.add_option("-d,--datatype", o.datatype, "int8 .. bfloat16, or all")->capture_default_str();
  app.add_option("-r,--root", o.root, "root rank (broadcast, reduce), or all")->capture_default_str();
  app.add_option("-z,--blocking", o.blocking, "1: wait for each operation")->capture_default_str();
  app.add_option("-a,--average", o.average, "time over ranks: 0 rank 0, 1 mean, 2 min, 3 max")
      ->capture_default_str();
  app.add_option("-G,--cudagraph", o.cuda_graph,
                 "capture the iterations in a CUDA graph, replay it this many times")
      ->capture_default_str();
  app.add_option("-I,--per_iter_timing", o.per_iter_timing, "1: per-iteration times (min, max, p99, cv)")
      ->capture_default_str();
  app.add_option("-K,--per_iter_skip", o.per_iter_skip, "leading iterations left out of -I's statistics")
      ->capture_default_str();
  app.add_option("-T,--timeout", o.timeout_s, "seconds a row may take; past it the run fails naming the rank")
      ->capture_default_str();
  app.add_option("-J,--output_file", o.json_path, "nccl-tests' JSON document here");
  app.add_option("--json-lines", o.json_lines_path, "one JSON object per row here (- for standard output)");
  app.add_option("--plot", o.plot_path, "busbw against size as a PNG");
  app.add_option("--nproc", o.nproc, "fork this many ranks on this host (no MPI); 0: a launcher's ranks")
      ->capture_default_str();
  app.add_flag("--pairs", o.pairs,
               "every pair of ranks in turn: a busbw matrix, slow pairs and ranks marked");
  app.add_option("--pairs-threshold", o.pairs_threshold, "a pair below this fraction of the median is slow")
      ->capture_default_str();
  app.add_option("--split", o.split, "run sub-groups at once: rail (by local rank), host, or mod:N");
  app.add_option("--compare", o.compare,
                 "two settings run interleaved round by round, each NET (NCCL_NET) or VAR=VALUE[,VAR=VALUE]")
      ->expected(2);
  app.add_option("--rounds", o.rounds, "--compare: rounds, each running A then B")->capture_default_str();
}

int split_color(const Split& s, int rank, int local_rank, int host_index) {
  switch (s.kind) {
    case Split::Kind::kRail:
      return local_rank;
    case Split::Kind::kHost:
      return host_index;
    case Split::Kind::kMod:
      return s.mod > 0 ? rank % s.mod : 0;
    case Split::Kind::kNone:
      break;
  }
  return 0;
}

namespace {

Error refused(const std::string& what) {
  return make_error(ErrorCode::kInvalidArgument, what);
}

Result<uint64_t> size_flag(const char* flag, const std::string& text) {
  auto v = parse_size(text);
  if (!v) return refused(fmt::format("{}: {}", flag, v.error().message));
  return *v;
}

}  // namespace

Result<CollPlan> plan_coll(const CollOptions& o) {
  CollPlan p;
  for (const std::string& c : o.collectives) {
    if (c == "all") {
      p.collectives.assign(std::begin(kAllCollectives), std::end(kAllCollectives));
      continue;
    }
    const std::optional<Collective> parsed = parse_collective(c);
    if (!parsed) {
      return refused(fmt::format(
          "collective '{}': expected all_reduce, all_gather, reduce_scatter, alltoall, broadcast, reduce, "
          "sendrecv or all",
          c));
    }
    p.collectives.push_back(*parsed);
  }
  if (p.collectives.empty()) return refused("no collective given");
  auto min = size_flag("-b", o.min_bytes);
  if (!min) return min.error();
  auto max = size_flag("-e", o.max_bytes);
  if (!max) return max.error();
  auto step = size_flag("-i", o.step_bytes);
  if (!step) return step.error();
  auto sizes = size_sweep(*min, *max, *step, o.step_factor);
  if (!sizes) return sizes.error();
  p.sizes = std::move(*sizes);
  for (auto [flag, value, least] :
       {std::tuple{"-n", o.iters, 1}, std::tuple{"-w", o.warmup_iters, 0}, std::tuple{"-m", o.agg_iters, 1},
        std::tuple{"-N", o.run_cycles, 0}, std::tuple{"-c", o.check, 0}, std::tuple{"-G", o.cuda_graph, 0},
        std::tuple{"-T", o.timeout_s, 0}, std::tuple{"--nproc", o.nproc, 0}}) {
    if (value < least) return refused(fmt::format("{} {}: must be at least {}", flag, value, least));
  }
  if (o.average < 0 || o.average > 3) {
    return refused(fmt::format("-a {}: expected 0 (rank 0), 1 (mean), 2 (min) or 3 (max)", o.average));
  }
  if (o.blocking < 0 || o.blocking > 1) return refused(fmt::format("-z {}: expected 0 or 1", o.blocking));
  if (o.per_iter_timing != 0 && o.per_iter_timing != 1) {
    return refused(fmt::format("-I {}: expected 0 (off) or 1 (per-iteration times)", o.per_iter_timing));
  }
  if (o.per_iter_skip < 0 || o.per_iter_skip >= o.iters) {
    return refused(
        fmt::format("-K {}: expected 0 to {} (fewer than -n {})", o.per_iter_skip, o.iters - 1, o.iters));
  }
  if (o.cuda_graph > 0 && o.per_iter_timing != 0) {
    return refused("-I with -G: a CUDA graph's replays carry no per-iteration events; choose one");
  }
  if (o.cuda_graph > 0 && o.blocking != 0) {
    return refused(
        "-z 1 with -G: nothing can wait for an operation inside a CUDA graph's capture; choose one");
  }
  if (o.datatype == "all") {
    for (int t = 0; t <= static_cast<int>(DataType::kBfloat16); ++t)
      p.types.push_back(static_cast<DataType>(t));
  } else if (const std::optional<DataType> t = parse_type(o.datatype)) {
    p.types.push_back(*t);
  } else {
    return refused(fmt::format(
        "-d '{}': expected int8, uint8, int32, uint32, int64, uint64, half, float, double, bfloat16 or all",
        o.datatype));
  }
  if (o.op == "all") {
    for (int op = 0; op <= static_cast<int>(RedOp::kAvg); ++op) p.ops.push_back(static_cast<RedOp>(op));
  } else if (const std::optional<RedOp> op = parse_op(o.op)) {
    p.ops.push_back(*op);
  } else {
    return refused(fmt::format("-o '{}': expected sum, prod, max, min, avg or all", o.op));
  }
  if (o.root == "all") {
    p.all_roots = true;
  } else {
    int root = -1;
    const auto [end, ec] = std::from_chars(o.root.data(), o.root.data() + o.root.size(), root);
    if (ec != std::errc() || end != o.root.data() + o.root.size() || root < 0) {
      return refused(fmt::format("-r '{}': expected a rank (0 or more) or all", o.root));
    }
    p.roots.push_back(root);
  }
  if (!(o.pairs_threshold > 0 && o.pairs_threshold <= 1)) {
    return refused(fmt::format("--pairs-threshold {}: expected a fraction in (0, 1]", o.pairs_threshold));
  }
  if (o.split == "rail") {
    p.split.kind = Split::Kind::kRail;
  } else if (o.split == "host") {
    p.split.kind = Split::Kind::kHost;
  } else if (o.split.rfind("mod:", 0) == 0) {
    const std::string n = o.split.substr(4);
    int mod = 0;
    const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), mod);
    if (ec != std::errc() || end != n.data() + n.size() || mod < 1) {
      return refused(fmt::format("--split '{}': mod:N needs a whole N of 1 or more", o.split));
    }
    p.split = {Split::Kind::kMod, mod};
  } else if (!o.split.empty()) {
    return refused(fmt::format("--split '{}': expected rail, host or mod:N", o.split));
  }
  if (o.pairs && p.split.kind != Split::Kind::kNone) return refused("--pairs and --split: choose one");
  if (o.rounds < 1) return refused(fmt::format("--rounds {}: must be at least 1", o.rounds));
  if (!o.compare.empty() && o.compare.size() != 2) {
    return refused(fmt::format("--compare takes two settings, {} given", o.compare.size()));
  }
  return p;
}

}  // namespace megascale::coll
