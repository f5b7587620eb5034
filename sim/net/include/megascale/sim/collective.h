// Collective traffic as flows for run_flows: all-to-all, ring all-reduce / all-gather / reduce-scatter
// and (double) binary tree all-reduce, over groups placed by 3D parallelism (TP x PP x DP).
//
//   Result<std::vector<std::vector<uint32_t>>> dp = parallel_groups({.tp = 8, .pp = 2, .dp = 4}, 64,
//                                                                   ParallelGroup::dp);
//   std::vector<FlowSpec> flows;
//   for (const auto& g : *dp) append_ring_flows(flows, g, CollectiveOp::all_reduce, 64 << 20);
//   auto r = run_flows(fabric, flows, limit);   // the step's DP all-reduce, every group at once
//
// Ring (Patarasuk & Yuan, JPDC 2009; NCCL's ring): n ranks, the buffer of `bytes` in n chunks; at step
// k rank r sends a chunk to rank r+1. Reduce-scatter and all-gather take n-1 steps, all-reduce 2(n-1)
// (a reduce-scatter, then an all-gather), so each rank sends 2(n-1)/n x bytes for an all-reduce.
// A step's send waits for the rank's previous receive (its `after`): the data it forwards is what it
// just got, as in NCCL, where a chunk moves on once it has arrived (one chunk per step here, no
// finer pipelining).
//
// Tree (NCCL 2.4's trees; the double binary tree after Sanders, Speck & Träff, Parallel Computing
// 2009): a binary tree over the group in heap order (rank i's children are 2i+1 and 2i+2). The
// buffer goes in `chunks` pieces; each piece is reduced up (a rank sends to its parent once it has the
// piece from all its children) and broadcast down (the root once it has reduced it, any other rank
// once it has it from its parent). Pieces pipeline: they follow each other on every edge. The double
// tree sends half of every piece down a second tree over the ranks in reverse order, whose inner
// ranks are the first tree's leaves (for an even group size), so every rank's links carry both halves.
//
// Placement (Megatron-LM's convention, TP innermost): host h has tp rank h % tp, pp rank (h / tp) % pp
// and dp rank h / (tp * pp). A TP group is tp consecutive hosts; a DP group is the dp hosts with the
// same tp and pp ranks (stride tp * pp); a PP group the pp hosts with the same tp and dp ranks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "megascale/common/result.h"
#include "megascale/sim/workload.h"

namespace megascale::sim {

struct Parallelism3D {
  uint32_t tp = 1;
  uint32_t pp = 1;
  uint32_t dp = 1;
};

enum class ParallelGroup { tp, pp, dp, all };
// send_recv: a pipeline pass (one microbatch's activations), stage i sending to stage i+1.
enum class CollectiveOp { all_reduce, all_gather, reduce_scatter, send_recv };
enum class CollectiveAlgorithm { ring, tree, double_tree };

// Every group of the kind, each a list of host addresses in rank order. `all` is one group of every
// host. Errors: a degree of 0, or tp * pp * dp != hosts.
Result<std::vector<std::vector<uint32_t>>> parallel_groups(const Parallelism3D& p, uint32_t hosts,
                                                           ParallelGroup kind);

// Appends a ring collective over `group` (>= 2 ranks; `bytes` >= group size): for all-reduce 2(n-1)
// steps, for all-gather and reduce-scatter n-1, each of n flows of bytes/n (the first bytes % n chunks
// one byte more). Flows are appended step by step; each step's flow of rank r waits for the previous
// step's flow into r. Errors: a group under 2 ranks, bytes under the group size.
Status append_ring_flows(std::vector<FlowSpec>& flows, const std::vector<uint32_t>& group, CollectiveOp op,
                         uint64_t bytes);

// Appends a tree all-reduce of `bytes` over `group` in `chunks` pieces (double: two trees, half each).
// Errors: a group under 2 ranks, chunks 0, or pieces of 0 bytes.
Status append_tree_all_reduce_flows(std::vector<FlowSpec>& flows, const std::vector<uint32_t>& group,
                                    uint64_t bytes, uint32_t chunks, bool double_tree);

// Appends a pipeline pass over `group` (stages in order): stage i sends `bytes` to stage i+1 once it
// has received from stage i-1 (the activations of one microbatch going forward through PP stages).
// Errors: a group under 2 stages.
Status append_pipeline_flows(std::vector<FlowSpec>& flows, const std::vector<uint32_t>& group,
                             uint64_t bytes);

// Chains a phase after the previous one, per rank: every flow of flows[begin, end of list) that
// waits for nothing gets, as `after`, the last flow from each source into its own source host among
// flows[prev_begin, begin) (messages on one connection complete in order, so the last per source is
// the one to wait for). So a rank starts a step's next collective once it has received all of the
// previous one; a rank that only sent in it (a pipeline's first stage) starts at once.
void chain_after_phase(std::vector<FlowSpec>& flows, size_t prev_begin, size_t begin);

// Every host of `hosts` sends `bytes` to every other one, all at once (n(n-1) flows, in order of
// source, then destination rotated by the source's position, so that no destination is everyone's
// first).
std::vector<FlowSpec> all_to_all_flows(const std::vector<uint32_t>& hosts, uint64_t bytes);

// Bytes each rank sends in a ring collective of `bytes` over n ranks (the bus-bandwidth factor of
// nccl-tests' PERFORMANCE.md times bytes): all-reduce 2(n-1)/n, all-gather and reduce-scatter
// (n-1)/n; a pipeline pass: bytes (every stage but the last).
double ring_bytes_per_rank(CollectiveOp op, uint32_t n, uint64_t bytes);

std::string to_string(CollectiveOp op);

}  // namespace megascale::sim
