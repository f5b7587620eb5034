// `megascale coll`'s JSON: each row as an entry of nccl-tests' -J document ("results": size, count,
// type, redop, root as nccl-tests writes it ("%6i"), out_of_place and in_place with time, alg_bw,
// bus_bw and nwrong, actual_iterations, experiment_name; with -I out_of_place_per_iter and
// in_place_per_iter), so the tools that read nccl-tests' files read these; and the JSON line per row of --json-lines, which adds what nccl-tests cannot say: the
// collective, the ranks, every rank's own time, the straggler, and the transport's counters.
//
//   nlohmann::json entry = result_json(row, "all_reduce", 20);
//   std::cout << json_line(row, extras).dump() << "\n";
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "megascale/coll/analysis.h"
#include "megascale/coll/table.h"

namespace megascale::coll {

nlohmann::json result_json(const Row& row, const std::string& experiment, int actual_iterations);

struct RowExtras {
  Collective collective = Collective::kAllReduce;
  int nranks = 1;
  std::string net;                   // the net NCCL used ("Socket", "MegaScale", ...)
  std::vector<double> rank_time_us;  // each rank's own mean time for the out-of-place placement
  nlohmann::json transport;          // the plugin's counters for the row (transport_json), when NCCL
                                     // runs over it (null else)
};
// {"collective", "ranks", "net", "size", "count", "type", "redop", "root" (a number), "out_of_place",
// "in_place" (time_us, algbw_gbs, busbw_gbs, wrong: null when unchecked), "rank_time_us",
// "straggler" (rank, time_us, median_us, ratio; null with fewer than 2 ranks), "transport"}.
nlohmann::json json_line(const Row& row, const RowExtras& extras);

}  // namespace megascale::coll
