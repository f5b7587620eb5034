// run_flows for a fabric of several partitions (partition.h), which run_flows hands over to: the same
// connect and measure phases, but each flow end is handled by its host's partition on that partition's
// thread, and the run's bookkeeping (flows done, progress, samples, the end) happens at the window
// barriers.
//
//   if (fabric.partition_count() > 1) return run_flows_partitioned(fabric, specs, limit_ps, options);
//
// What a partitioned run cannot do, it refuses with an error naming why: flows that wait for other
// flows (`FlowSpec::after`: collective steps start at another host the instant a receive completes,
// a zero-delay interaction across partitions, with no lookahead). One difference: with several
// connections per pair, a pair's k-th flow takes connection k mod n (round robin) instead of the least
// busy one, whose choice needs both ends' state at once.
#pragma once

#include <vector>

#include "megascale/common/result.h"
#include "megascale/sim/fabric.h"
#include "megascale/sim/workload.h"

namespace megascale::sim {

Result<RunResult> run_flows_partitioned(Fabric& fabric, const std::vector<FlowSpec>& specs,
                                        TimePs time_limit_ps, const RunOptions& options);

}  // namespace megascale::sim
