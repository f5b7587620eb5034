// What one `megascale coll` run does, from nccl-tests' flags with their meanings and defaults (-b -e -i
// -f -n -w -c -o -d -r -z -a -G -N -I -K -T -J and -m for aggregated iterations) and ours: --nproc (fork
// the ranks on this host), --pairs (every pair of ranks in turn), --split (parallel sub-groups),
// --json-lines, --plot, --compare.
//
//   CLI::App app;  CollOptions o;  add_coll_options(app, o);  app.parse(argc, argv);
//   Result<CollPlan> plan = plan_coll(o);   // checked: sizes, names, ranges; the errors name the flag
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "megascale/coll/coll.h"
#include "megascale/common/result.h"

namespace megascale::coll {

struct CollOptions {
  std::vector<std::string> collectives = {"all_reduce"};  // positional; "all" runs every one
  std::string min_bytes = "32M";                          // -b (nccl-tests' default)
  std::string max_bytes = "32M";                          // -e
  std::string step_bytes = "1M";                          // -i
  uint64_t step_factor = 1;                               // -f (> 1: multiply instead of add)
  int iters = 20;                                         // -n
  int warmup_iters = 1;                                   // -w
  int agg_iters = 1;                                      // -m: operations per ncclGroup
  int run_cycles = 1;                                     // -N: repeat the whole sweep (0: for ever)
  int check = 1;                                          // -c: checked iterations (0: no check)
  std::string op = "sum";                                 // -o (sum prod max min avg, or all)
  std::string datatype = "float";                         // -d (a type, or all)
  std::string root = "0";                                 // -r (a rank, or all)
  int blocking = 0;                                       // -z: 0 asynchronous, 1 wait after each operation
  int average = 1;                   // -a: the reported time over ranks: 0 rank 0, 1 mean,
                                     //     2 min, 3 max
  int cuda_graph = 0;                // -G: capture and replay this many times
  int per_iter_timing = 0;           // -I: 1 for per-iteration CUDA events (min, max, p99, cv)
  int per_iter_skip = 0;             // -K: leading iterations left out of -I's statistics
  int timeout_s = 0;                 // -T: a row longer than this fails, naming the rank
  std::string json_path;             // -J: nccl-tests' JSON document
  std::string json_lines_path;       // --json-lines: a JSON object per row (ours)
  std::string plot_path;             // --plot: busbw against size (PNG)
  int nproc = 0;                     // --nproc: fork this many ranks here (0: a launcher's)
  bool pairs = false;                // --pairs
  double pairs_threshold = 0.8;      // --pairs-threshold: slower than this x the median
  std::string split;                 // --split rail|host|mod:N
  std::vector<std::string> compare;  // --compare A B: two NCCL_NET (or env) settings (compare.h)
  int rounds = 3;                    // --rounds: --compare's rounds, each A's run then B's
};

// Registers every flag on `app` (CLI11), writing into `o`.
void add_coll_options(CLI::App& app, CollOptions& o);

// --split: how the ranks are coloured into sub-groups that run at once, each its own communicator.
struct Split {
  enum class Kind { kNone, kRail, kHost, kMod } kind = Kind::kNone;
  int mod = 0;  // kMod: colour = rank % mod (nccl-tests' NCCL_TESTS_SPLIT "MOD N")
};
// The colour of `rank`: kRail by its local rank (one group per GPU index across hosts), kHost by its
// host (one group per host), kMod rank % mod; 0 for kNone.
int split_color(const Split& s, int rank, int local_rank, int host_index);

struct CollPlan {
  std::vector<Collective> collectives;
  std::vector<uint64_t> sizes;
  std::vector<DataType> types;
  std::vector<RedOp> ops;  // for the collectives with one
  std::vector<int> roots;  // for the collectives with one; all ranks with -r all (needs the rank count)
  bool all_roots = false;
  Split split;
};

// Checks the options and expands them. Refused, naming the flag and the value: an unknown collective,
// type or op; a malformed size or sweep; -n, -w, -m below 1; -c, -N, -G, -T, --nproc below 0; -a
// outside 0..3; -z outside 0..1; -I other than 0 or 1; -K outside 0..-n minus 1; -I or -z 1 with -G (a
// graph's replays have no per-iteration events, and nothing can wait inside a capture); a negative
// root; a --pairs-threshold outside (0, 1]; a --split other than rail, host or mod:N (N >= 1);
// --compare with other than two settings; --pairs with --split.
Result<CollPlan> plan_coll(const CollOptions& o);

}  // namespace megascale::coll
