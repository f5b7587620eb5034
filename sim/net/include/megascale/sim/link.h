// A link: propagation delay from one end to the other. It receives a frame when its last bit has been
// put on the wire (by the OutputQueue feeding it) and hands it to the far end `delay_ps` later, when
// that last bit arrives. Frames in flight wait in a ring in arrival order, and the link keeps one
// pending event, for the head of the ring (htsim's Pipe): a 1 us, 400 Gbit/s link with
// 50 frames in flight costs one heap entry, not 50.
//
//   Link link(sim, /*delay_ps=*/kPsPerUs, &switch_port, &pool);
//   OutputQueue q(sim, pool, QueueConfig{.rate_bps = 100'000'000'000}, &link);
//   link.set_up(false);   // a link failure: frames on it and frames put on it are lost
//
// A link that is down (faults.h flaps links from a scenario) loses every frame in flight when it goes
// down and every frame put on it while down, as a cable pulled or an optic failing does: the frames'
// bits never arrive. The OutputQueue feeding it keeps serialising into it (the port does not know),
// which is how the frames queued at the failure are lost too. Losses are counted (`down_drops`).
#pragma once

#include <cstdint>
#include <vector>

#include "megascale/sim/packet.h"
#include "megascale/sim/simulation.h"

namespace megascale::sim {

class Link : public PacketSink, public EventSource {
 public:
  // `pool` takes back frames lost while the link is down (needed only for set_up(false)).
  Link(Simulation& sim, TimePs delay_ps, PacketSink* far_end = nullptr, PacketPool* pool = nullptr);

  void set_far_end(PacketSink* far_end) { far_end_ = far_end; }
  TimePs delay_ps() const { return delay_ps_; }

  // A frame whose last bit leaves now; it reaches the far end at now + delay_ps.
  void receive(Packet* pkt) override;
  void on_event() override;
  // A frame handed over from another partition (partition.h) that reaches the far end at arrive_ps
  // (>= now; a link's frames come in arrival order).
  void deliver_at(TimePs arrive_ps, Packet* pkt);

  // Down: frames in flight now and frames put on the link from now on are lost. Up: delivers again.
  void set_up(bool up);
  bool up() const { return up_; }

  size_t in_flight() const { return count_; }
  uint64_t down_drops() const { return down_drops_; }
  uint64_t delivered() const { return delivered_; }

 private:
  struct InFlight {
    TimePs arrive_ps;
    Packet* pkt;
  };
  void grow();

  Simulation& sim_;
  TimePs delay_ps_;
  PacketSink* far_end_;
  PacketPool* pool_;
  bool up_ = true;
  uint64_t down_drops_ = 0;
  std::vector<InFlight> ring_;  // power-of-two size
  size_t head_ = 0;
  size_t count_ = 0;
  uint64_t delivered_ = 0;
};

}  // namespace megascale::sim
