// Pipeline schedules: the order in which one pipeline rank runs the forward and backward passes of the
// micro-batches through its model chunks, and a replay of all ranks' schedules that checks them and
// measures the bubble.
//
// 1F1B (PipeDream-Flush; Narayanan et al., SC '21, §2.2.1): stage s runs min(pp - s - 1, m) warm-up
// forwards, then one forward and one backward in turn, then the backwards left. At most pp - s
// micro-batches are in flight on stage s; the bubble is (pp - 1) / m of the ideal time.
//
// Interleaved 1F1B (§2.2.2), in Megatron-Core's order: rank s holds vpp chunks, chunk c being virtual
// stage c * pp + s. Forwards go through the chunks in groups of pp micro-batches (micro-batches 0..pp-1
// through chunk 0, then through chunk 1, ..., then pp..2pp-1 through chunk 0, ...); backwards the same
// from the last chunk down. Warm-up is (pp - s - 1) * 2 + (vpp - 1) * pp forwards (all of them when
// m == pp), then one forward and one backward in turn. The bubble is (pp - 1) / (vpp * m).
//
//   std::vector<Pass> mine = *pipeline_schedule(layout, coords.pp, micro_batches);
//   for (const Pass& p : mine) { p.kind == PassKind::kForward ? forward(p.micro_batch, p.chunk) : ... }
//
//   PipelineReplay r = *replay_pipeline(layout, micro_batches, {.forward = 1, .backward = 2});
//   r.bubble_ratio;        // (pp - 1) / (vpp * m) for these uniform pass times
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "megascale/common/result.h"
#include "megascale/trainer/parallel.h"

namespace megascale::trainer {

enum class PassKind : uint8_t { kForward, kBackward };

struct Pass {
  PassKind kind = PassKind::kForward;
  int micro_batch = 0;
  int chunk = 0;  // the rank's model chunk: virtual stage chunk * pp + stage
  bool operator==(const Pass&) const = default;
};

// "F3.1" (forward of micro-batch 3 through chunk 1), "B0.0".
std::string to_string(const Pass& pass);

// 1F1B for `stage` of `pp` over `micro_batches` (every chunk 0). Any m >= 1.
std::vector<Pass> one_f_one_b(int pp, int stage, int micro_batches);

// Interleaved 1F1B; refused unless vpp >= 2, pp >= 2 and micro_batches is a multiple of pp.
Result<std::vector<Pass>> interleaved_one_f_one_b(int pp, int vpp, int stage, int micro_batches);

// The layout's schedule for pipeline rank `stage`: 1F1B when vpp == 1 (pp == 1 included: forward then
// backward of each micro-batch in turn), interleaved otherwise.
Result<std::vector<Pass>> pipeline_schedule(const ParallelLayout& layout, int stage, int micro_batches);

// The most micro-batch chunks whose forward ran and whose backward has not, at any point of `passes`:
// the activations a rank holds at once.
int max_in_flight(const std::vector<Pass>& passes);

// Pass times for one virtual stage (a chunk's layers), any unit.
struct PassTimes {
  double forward = 1;
  double backward = 2;
};

struct PipelineReplay {
  double makespan = 0;         // first pass's start to the last pass's end, over all ranks
  double ideal = 0;            // one rank's busy time: m * vpp * (forward + backward)
  double bubble_ratio = 0;     // (makespan - ideal) / ideal: Narayanan et al.'s bubble time fraction
  std::vector<int> in_flight;  // max_in_flight of each rank's schedule
};

// Runs every rank's schedule (schedules[stage]) against the others: a pass starts when its rank is free and
// its input is there (a forward needs the previous virtual stage's forward of its micro-batch; a backward the
// next virtual stage's backward, the last virtual stage's backward its own forward). Communication takes no
// time and sends never wait (decoupled send and receive). Refused, naming the problem, when a schedule
// lacks or repeats a pass, runs a backward before its forward, or the ranks deadlock (naming the passes
// each waits on).
Result<PipelineReplay> replay_pipeline(const ParallelLayout& layout, int micro_batches,
                                       const std::vector<std::vector<Pass>>& schedules, PassTimes times);
// The same over the layout's own schedules (pipeline_schedule for every stage).
Result<PipelineReplay> replay_pipeline(const ParallelLayout& layout, int micro_batches, PassTimes times);

// The coupled baseline (`--pp-coupled`), what MegaScale's decoupled sends improve on (§3.2): a stage's
// sends and receives run on its compute stream, so it waits for its neighbour at every exchange. A send
// is held back and issued in one group with the receive the stage's next pass needs, as Megatron-Core's
// send_forward_recv_backward and send_backward_recv_forward do (two blocking calls in turn deadlock:
// each neighbour sends first); with no receive to pair it with, it goes alone.
enum class P2pKind : uint8_t { kSendActivation, kRecvActivation, kSendGradient, kRecvGradient };

struct P2pOp {
  P2pKind kind = P2pKind::kSendActivation;
  int micro_batch = 0;
  int chunk = 0;  // this rank's chunk whose pass made the send, or takes the receive
  bool operator==(const P2pOp&) const = default;
};

// "sendA3.0" (activations of micro-batch 3 from chunk 0), "recvG2.1".
std::string to_string(const P2pOp& op);

// One step of a rank's coupled schedule: `ops` as one group on the compute stream, then `pass` (none in
// a last step that only sends).
struct CoupledStep {
  std::vector<P2pOp> ops;
  std::optional<Pass> pass;
};

// The layout's schedule for pipeline rank `stage` with its exchanges coupled; refused as
// pipeline_schedule refuses.
Result<std::vector<CoupledStep>> coupled_schedule(const ParallelLayout& layout, int stage, int micro_batches);

// Runs every rank's coupled schedule against the others as NCCL would: a group's operations are posted
// together and the group ends when each has met its peer's counterpart, matched in order on each
// (sender, receiver, activations or gradients) channel. Refused, naming what each rank waits on, when
// the ranks deadlock, and naming both operations when a channel pairs operations of different
// micro-batches or chunks.
Status check_coupled(const ParallelLayout& layout, int micro_batches);

}  // namespace megascale::trainer
