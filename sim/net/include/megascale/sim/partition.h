// Partitioned runs of one fabric on several threads (docs/sim-distributed.md): every host, switch and
// output queue belongs to one partition, each partition has its own Simulation (event queue, PRNG) and
// PacketPool, and the partitions advance together in windows no longer than the smallest propagation
// delay of a link between two partitions (the lookahead), so nothing sent in a window can arrive in it.
// A frame put on such a link is copied into a mailbox and handed to the far partition at the barrier
// that ends the window; so is a PFC PAUSE/RESUME sent back over one.
//
//   FabricConfig fc;
//   fc.partitions = 4;                                       // before the build: elements are placed
//   auto fabric = build_clos(fc, topo::load_fabric("megascale").value(), {});
//   run_flows(**fabric, flows, limit_ps, options);           // runs the windows on 4 threads
//
// Determinism: the same scenario and seed give the same run for every partition count from 2 up, and
// for one partition with FabricConfig::canonical_order, whatever the threads' timing. Such fabrics run
// in canonical order (Simulation::set_canonical_order: same-time events by element id, then that
// element's scheduling count), RED and spraying draw from per-element PRNG streams, and the windows
// last the link delay whatever the count. Within a window no two partitions interact, so each runs
// the global canonical order restricted to its elements. A handed-over frame is scheduled by its link
// just as on one partition (once per distinct arrival time), and a handed-over PAUSE under its
// ingress's id. Mail is drained in a fixed order (sending partition, then send order).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "megascale/common/result.h"
#include "megascale/sim/link.h"
#include "megascale/sim/packet.h"
#include "megascale/sim/pfc.h"
#include "megascale/sim/queue.h"
#include "megascale/sim/simulation.h"

namespace megascale::topo {
class Fabric;
}

namespace megascale::sim {

class Fabric;

// Which partition each switch (by Fabric switch index) and each host (by address) belongs to.
struct PartitionMap {
  std::vector<uint32_t> switch_partition;
  std::vector<uint32_t> host_partition;
};

// A fabric from topology/'s model split into `partitions` parts of whole ToRs (docs/sim-distributed.md
// §2): ToRs in index order (so pod by pod) in equal blocks, each NIC with its ToR, aggregation switch a
// of a pod with the ToR at a's share of the pod, cores in equal blocks. With the MegaScale preset and
// 6 partitions that is one pod each; with fewer, groups of ToRs; with more, parts of pods.
PartitionMap clos_partition_map(const topo::Fabric& model, uint32_t partitions);
// Equal blocks: switches [0, n) over the partitions in order, and hosts likewise.
PartitionMap block_partition_map(uint32_t switches, uint32_t hosts, uint32_t partitions);

// A frame on its way over a link into another partition.
struct FrameHandover {
  TimePs arrive_ps = 0;
  uint32_t cross_link = 0;  // PartitionLinks' index of the link
  Packet frame;             // a copy: the sender's packet goes back to its own pool
};
// A PFC PAUSE (true) or RESUME on its way back over such a link to the upstream port.
struct PauseHandover {
  TimePs arrive_ps = 0;
  uint32_t cross_pause = 0;  // PartitionLinks' index of the upstream port's receiver
  bool pause = false;
};

// The per-(from, to) mailboxes of one window. Box (from, to) is written only by partition `from`
// during a window and read only by partition `to` after the barrier.
class PartitionMail {
 public:
  explicit PartitionMail(uint32_t partitions)
      : partitions_(partitions), frames_(size_t{partitions} * partitions), pauses_(frames_.size()) {}
  uint32_t partitions() const { return partitions_; }
  std::vector<FrameHandover>& frames(uint32_t from, uint32_t to) { return frames_[from * partitions_ + to]; }
  std::vector<PauseHandover>& pauses(uint32_t from, uint32_t to) { return pauses_[from * partitions_ + to]; }

 private:
  uint32_t partitions_;
  std::vector<std::vector<FrameHandover>> frames_;
  std::vector<std::vector<PauseHandover>> pauses_;
};

// The links between partitions of one fabric, and their mailboxes. Fabric owns one when it has more
// than one partition; its add_port/attach_host/connect_switches register the crossing links here.
class PartitionLinks {
 public:
  // Out of line: the element classes are complete only in partition.cpp.
  explicit PartitionLinks(uint32_t partitions);
  ~PartitionLinks();

  // `link` (in partition `to`, its far end's) is fed by a queue in partition `from`: returns what the
  // queue should send into instead, which posts each frame to the mailbox.
  PacketSink& add_link(Simulation& from_sim, PacketPool& from_pool, uint32_t from, uint32_t to, Link& link);
  // An ingress in partition `from` whose upstream port (in partition `to`) is `port`: returns where
  // the ingress sends its PAUSE/RESUME instead of scheduling them itself.
  // `order_id`: the ingress's canonical-order id, which the receiver's events take.
  PauseSink& add_pause(Simulation& from_sim, uint32_t from, uint32_t to, Simulation& port_sim,
                       OutputQueue& port, uint32_t order_id = 0);

  // The smallest delay of a crossing link (kNeverPs without one): the window length.
  TimePs lookahead_ps() const { return lookahead_ps_; }
  uint64_t frames_handed_over() const;
  // Moves everything sent to partition `to` into its event queue, in (sending partition, send order)
  // order; `pool` is partition `to`'s. Call between windows only, from partition `to`'s thread.
  void drain(uint32_t to, PacketPool& pool);
  PartitionMail& mail() { return mail_; }

 private:
  class FrameSender;
  class PauseSender;
  class PauseReceiver;
  PartitionMail mail_;
  std::vector<Link*> links_;                               // by cross-link index
  std::vector<std::unique_ptr<FrameSender>> senders_;      // by cross-link index
  std::vector<std::unique_ptr<PauseReceiver>> receivers_;  // by cross-pause index
  std::vector<std::unique_ptr<PauseSender>> pause_senders_;
  TimePs lookahead_ps_ = kNeverPs;
  std::vector<uint64_t> handed_by_partition_;  // frames drained, per receiving partition (its thread's)
};

// What the run decides at each barrier (all partitions stopped, their mail drained).
struct BarrierDecision {
  bool stop = false;
  TimePs next_barrier_ps = kNeverPs;  // the next window must end by then (a sample, a progress line)
};

// Runs `fabric`'s partitions, one thread each (the caller's is partition 0), in windows of at most the
// lookahead until every event before `until_ps` has run, no event is left, or `at_barrier` says stop.
// `at_barrier(now)` runs on one thread while the others wait, at every window boundary (and once
// before the first window). Returns the windows run.
uint64_t run_windows(Fabric& fabric, TimePs until_ps,
                     const std::function<BarrierDecision(TimePs now_ps)>& at_barrier);

}  // namespace megascale::sim
