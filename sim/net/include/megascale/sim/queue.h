// An output port's queue: frames wait in FIFO order and are serialised onto the next element (a Link)
// at the port's rate, one completion event per frame in service (htsim's
// beginService/completeService). It has a byte capacity with tail drop and RED/ECN marking.
//
//   QueueConfig qc{.rate_bps = 100'000'000'000, .capacity_bytes = 1 << 20,
//                  .red = {.enabled = true, .kmin_bytes = 100'000, .kmax_bytes = 400'000, .pmax = 0.2}};
//   OutputQueue port(sim, pool, qc, &link);
//   port.receive(pkt);   // queued (maybe CE-marked), dropped at capacity, or put on the wire
//
// RED/ECN (Floyd & Jacobson 1993; ECN per RFC 3168; parameters as in DCQCN, Zhu et al. SIGCOMM '15
// §3): on arrival, with q the bytes the frame finds (waiting and in service), the mark probability is
// 0 below Kmin, Pmax·(q−Kmin)/(Kmax−Kmin) from Kmin to Kmax and 1 above Kmax, using the instantaneous
// queue (no EWMA), as datacenter switches configured for DCQCN do. An ECT frame is marked CE instead
// of dropped; a non-ECT frame (ACKs, handshakes) is left alone: the ECN-only WRED profile of RoCE
// fabrics, where only the buffer limit drops. Tail drop: a frame that would take the queue over its
// capacity is dropped, whatever its ECN bits.
//
// PFC (IEEE 802.1Qbb): a PAUSE from the downstream switch (pfc.h) stops the port from starting new
// frames; the frame already on the wire completes, as on a real port. A RESUME restarts it. The port
// counts the PAUSEs it obeyed and the time it spent paused.
//
// Priorities and the shared buffer (opt-in; the defaults give the single FIFO above, unchanged): with
// `priorities = 2` the port keeps one FIFO per traffic class (packet.h) and serves control strictly
// before data; a PAUSE stops only the data class. With `lossless` the data class never tail-drops here
// (its ingress's PFC bounds it; the control class still can). With a SharedBuffer (shared_buffer.h) a
// class's FIFO is admitted by the dynamic threshold (its bytes + the frame <= alpha x free shared
// buffer) instead of `capacity_bytes`, and the frame is charged to the switch's pool until it leaves.
#pragma once

#include <cstdint>

#include "megascale/sim/packet.h"
#include "megascale/sim/shared_buffer.h"
#include "megascale/sim/simulation.h"

namespace megascale::sim {

struct RedConfig {
  bool enabled = false;
  uint64_t kmin_bytes = 0;
  uint64_t kmax_bytes = 0;  // > kmin_bytes
  double pmax = 0.0;        // mark probability at Kmax, in [0, 1]
};

struct QueueConfig {
  uint64_t rate_bps = 100'000'000'000;      // serialisation rate of the port
  uint64_t capacity_bytes = 1'000'000'000;  // tail drop above this many bytes of a class (waiting + in
                                            // service; with one priority, of the port)
  RedConfig red;
  uint8_t priorities = 1;  // 1: one FIFO for every frame; 2: control served before data (packet.h)
  bool lossless = false;   // the data class never tail-drops (PFC bounds it upstream)
};

struct QueueStats {
  uint64_t enqueued = 0;  // frames accepted
  uint64_t sent = 0;      // frames serialised
  uint64_t bytes_sent = 0;
  uint64_t dropped = 0;    // tail drops
  uint64_t marked = 0;     // CE marks set here
  uint64_t max_bytes = 0;  // largest backlog seen (after an arrival)
  TimePs busy_ps = 0;      // time spent serialising
  uint64_t pauses = 0;     // PFC PAUSEs that stopped this port (a PAUSE while paused is not counted)
  TimePs paused_ps = 0;    // time spent paused, up to the last RESUME (see OutputQueue::paused_ps)
};

class OutputQueue;

// Told when a queue has finished a frame and holds nothing more: a host NIC refills it from the
// engine then (the NIC pulls, as a real NIC's scheduler does when its port frees).
class QueueIdleListener {
 public:
  virtual ~QueueIdleListener() = default;
  virtual void on_queue_idle(OutputQueue& queue) = 0;
};

class OutputQueue : public PacketSink, public EventSource {
 public:
  OutputQueue(Simulation& sim, PacketPool& pool, const QueueConfig& config, PacketSink* next = nullptr);

  void set_next(PacketSink* next) { next_ = next; }
  void set_idle_listener(QueueIdleListener* l) { idle_listener_ = l; }
  // Admission by the switch's shared buffer's dynamic threshold (nullptr: capacity_bytes, as before).
  void set_shared_buffer(SharedBuffer* shared) { shared_ = shared; }
  // RED draws from a stream of this port's own (canonical order, partition.h) instead of the
  // simulation's PRNG.
  void use_own_rng(uint64_t seed) {
    own_rng_ = Rng(seed);
    rng_ = &own_rng_;
  }
  const SharedBuffer* shared_buffer() const { return shared_; }

  // A frame arrives: dropped at capacity, else maybe CE-marked, queued, and served when the port frees.
  void receive(Packet* pkt) override;
  // The frame in service is on the wire: it goes to `next`, the following one starts.
  void on_event() override;

  // PFC: stop starting frames (true) or start again (false). Called by SwitchIngress when a PAUSE
  // or RESUME reaches this port.
  void set_paused(bool paused);
  bool paused() const { return paused_; }
  // Time spent paused up to now, including a pause still in force.
  TimePs paused_ps() const;

  // Nothing waiting and nothing in service.
  bool idle() const { return head_[0] == nullptr && head_[1] == nullptr && !in_service_; }
  uint64_t backlog_bytes() const { return backlog_bytes_; }
  // Bytes of one traffic class waiting and in service (class 0 holds everything with one priority).
  uint64_t class_backlog_bytes(uint8_t priority) const { return class_bytes_[priority]; }
  const QueueConfig& config() const { return cfg_; }
  const QueueStats& stats() const { return stats_; }

  // The mark probability for a backlog of `q_bytes` (0 when RED is off).
  double mark_probability(uint64_t q_bytes) const;

 private:
  // Starts serving the next frame if one may go (the control class first; data unless paused).
  void start_service();
  uint8_t class_of(const Packet* pkt) const { return cfg_.priorities > 1 ? pkt->priority : kPriorityData; }
  // Whether a frame of class `c` is charged to the shared buffer here (lossless data is charged by its
  // ingress instead).
  bool egress_charged(uint8_t c) const {
    return shared_ != nullptr && !(cfg_.lossless && c == kPriorityData);
  }

  Simulation& sim_;
  PacketPool& pool_;
  QueueConfig cfg_;
  PacketSink* next_;
  QueueIdleListener* idle_listener_ = nullptr;
  SharedBuffer* shared_ = nullptr;
  Rng* rng_;  // the simulation's PRNG, or own_rng_
  Rng own_rng_{0};
  Packet* head_[kMaxPriorities] = {};  // first waiting frame of each class
  Packet* tail_[kMaxPriorities] = {};
  Packet* serving_ = nullptr;  // the frame on the wire while in_service_
  bool in_service_ = false;
  bool paused_ = false;
  TimePs paused_since_ = 0;
  uint64_t backlog_bytes_ = 0;
  uint64_t class_bytes_[kMaxPriorities] = {};
  QueueStats stats_;
};

}  // namespace megascale::sim
