// Partition maps, the mailboxes between partitions, and the window loop on threads (partition.h;
// docs/sim-distributed.md §2-§4: conservative, windowed, lookahead = the smallest crossing link delay).
#include "megascale/sim/partition.h"

#include <algorithm>
#include <barrier>
#include <thread>
#include <utility>

#include "megascale/sim/fabric.h"
#include "megascale/topology/fabric.h"

namespace megascale::sim {

PartitionMap block_partition_map(uint32_t switches, uint32_t hosts, uint32_t partitions) {
  PartitionMap m;
  const uint64_t p = std::max<uint32_t>(partitions, 1);
  for (uint64_t s = 0; s < switches; ++s)
    m.switch_partition.push_back(static_cast<uint32_t>(s * p / switches));
  for (uint64_t h = 0; h < hosts; ++h) m.host_partition.push_back(static_cast<uint32_t>(h * p / hosts));
  return m;
}

PartitionMap clos_partition_map(const topo::Fabric& model, uint32_t partitions) {
  const topo::FabricShape& shape = model.shape();
  const uint64_t p = std::max<uint32_t>(partitions, 1);
  const uint64_t tors = std::max<uint32_t>(shape.tors, 1);
  auto tor_part = [&](uint64_t tor) { return static_cast<uint32_t>(tor * p / tors); };
  PartitionMap m;
  const auto n_nodes = static_cast<uint32_t>(model.nodes().size());
  const uint32_t per_pod = std::max<uint32_t>(model.spec().tier2_per_pod, 1);
  const uint64_t tors_per_pod = std::max<uint32_t>(shape.tors_per_pod, 1);
  for (topo::NodeId n = shape.nics; n < n_nodes; ++n) {
    const topo::Node& node = model.nodes()[n];
    if (node.tier == topo::Tier::tor) {
      m.switch_partition.push_back(tor_part(node.index));
    } else if (node.tier == topo::Tier::aggregation) {
      // Aggregation switch a of pod q sits with the ToR at a's share of q's ToRs, so a pod's
      // aggregation switches spread over the partitions that hold its ToRs.
      const uint64_t a = node.index % per_pod;
      m.switch_partition.push_back(tor_part(node.pod * tors_per_pod + a * tors_per_pod / per_pod));
    } else {
      m.switch_partition.push_back(
          static_cast<uint32_t>(node.index * p / std::max<uint32_t>(shape.cores, 1)));
    }
  }
  for (topo::NodeId nic = 0; nic < shape.nics; ++nic)
    m.host_partition.push_back(tor_part(model.tor_of_nic(nic)));
  return m;
}

// In the sending partition, behind the queue: the frame goes into the mailbox with its arrival time.
class PartitionLinks::FrameSender : public PacketSink {
 public:
  FrameSender(Simulation& sim, PacketPool& pool, std::vector<FrameHandover>& box, uint32_t index,
              TimePs delay_ps)
      : sim_(sim), pool_(pool), box_(box), index_(index), delay_ps_(delay_ps) {}
  void receive(Packet* pkt) override {
    box_.push_back(FrameHandover{.arrive_ps = sim_.now() + delay_ps_, .cross_link = index_, .frame = *pkt});
    pool_.release(pkt);
  }

 private:
  Simulation& sim_;
  PacketPool& pool_;
  std::vector<FrameHandover>& box_;
  uint32_t index_;
  TimePs delay_ps_;
};

// In the ingress's partition: a PAUSE/RESUME goes into the mailbox toward the upstream port.
class PartitionLinks::PauseSender : public PauseSink {
 public:
  PauseSender(std::vector<PauseHandover>& box, uint32_t index) : box_(box), index_(index) {}
  void send_pause(TimePs arrive_ps, bool pause) override {
    box_.push_back(PauseHandover{.arrive_ps = arrive_ps, .cross_pause = index_, .pause = pause});
  }

 private:
  std::vector<PauseHandover>& box_;
  uint32_t index_;
};

// In the upstream port's partition: applies handed-over PAUSE/RESUMEs at their arrival times, as
// SwitchIngress::on_event does for a port in its own partition.
class PartitionLinks::PauseReceiver : public EventSource {
 public:
  PauseReceiver(Simulation& sim, OutputQueue& port) : sim_(sim), port_(port) {}
  void deliver(TimePs arrive_ps, bool pause) {
    in_flight_.emplace_back(arrive_ps, pause);
    if (in_flight_.size() == 1) sim_.schedule_at(arrive_ps, this);
  }
  void on_event() override {
    while (!in_flight_.empty() && in_flight_.front().first <= sim_.now()) {
      port_.set_paused(in_flight_.front().second);
      in_flight_.pop_front();
    }
    if (!in_flight_.empty()) sim_.schedule_at(in_flight_.front().first, this);
  }

 private:
  Simulation& sim_;
  OutputQueue& port_;
  std::deque<std::pair<TimePs, bool>> in_flight_;
};

PartitionLinks::PartitionLinks(uint32_t partitions)
    : mail_(partitions), handed_by_partition_(partitions, 0) {}

PartitionLinks::~PartitionLinks() = default;

PacketSink& PartitionLinks::add_link(Simulation& from_sim, PacketPool& from_pool, uint32_t from, uint32_t to,
                                     Link& link) {
  const auto index = static_cast<uint32_t>(links_.size());
  links_.push_back(&link);
  senders_.push_back(
      std::make_unique<FrameSender>(from_sim, from_pool, mail_.frames(from, to), index, link.delay_ps()));
  lookahead_ps_ = std::min(lookahead_ps_, link.delay_ps());
  return *senders_.back();
}

PauseSink& PartitionLinks::add_pause(Simulation& /*from_sim*/, uint32_t from, uint32_t to,
                                     Simulation& port_sim, OutputQueue& port, uint32_t order_id) {
  const auto index = static_cast<uint32_t>(receivers_.size());
  receivers_.push_back(std::make_unique<PauseReceiver>(port_sim, port));
  receivers_.back()->set_order_id(order_id);
  pause_senders_.push_back(std::make_unique<PauseSender>(mail_.pauses(from, to), index));
  return *pause_senders_.back();
}

uint64_t PartitionLinks::frames_handed_over() const {
  uint64_t n = 0;
  for (uint64_t k : handed_by_partition_) n += k;
  return n;
}

void PartitionLinks::drain(uint32_t to, PacketPool& pool) {
  for (uint32_t from = 0; from < mail_.partitions(); ++from) {
    std::vector<FrameHandover>& frames = mail_.frames(from, to);
    for (const FrameHandover& h : frames) {
      Packet* p = pool.alloc();
      *p = h.frame;
      p->next = nullptr;
      p->ingress = nullptr;
      links_[h.cross_link]->deliver_at(h.arrive_ps, p);
    }
    handed_by_partition_[to] += frames.size();
    frames.clear();
    std::vector<PauseHandover>& pauses = mail_.pauses(from, to);
    for (const PauseHandover& h : pauses) receivers_[h.cross_pause]->deliver(h.arrive_ps, h.pause);
    pauses.clear();
  }
}

uint64_t run_windows(Fabric& fabric, TimePs until_ps,
                     const std::function<BarrierDecision(TimePs now_ps)>& at_barrier) {
  const uint32_t parts = fabric.partition_count();
  PartitionLinks* cross = fabric.partition_links();
  // Windows of the fabric's link delay even where the crossing links are longer (or absent): the
  // window boundaries, where flows are settled and samples taken, are then the same for every
  // partition count.
  const TimePs lookahead =
      std::min(cross != nullptr ? cross->lookahead_ps() : kNeverPs, fabric.config().link_delay_ps);
  std::vector<TimePs> next_ps(parts, kNeverPs);  // each written by its partition's thread only
  TimePs now = fabric.sim(0).now();
  TimePs window_end = now;
  bool stop = false;
  uint64_t windows = 0;

  // Runs on one thread while the others wait: every partition's mail is drained and its next event
  // time published, so the decision sees the whole state.
  auto decide = [&]() noexcept {
    const BarrierDecision d = at_barrier(now);
    TimePs earliest = kNeverPs;
    for (TimePs t : next_ps) earliest = std::min(earliest, t);
    if (d.stop || earliest == kNeverPs || earliest >= until_ps) {
      stop = true;
      return;
    }
    // Idle stretches are skipped: the window starts at the earliest pending event. It ends one
    // lookahead later (a frame sent in it arrives at or after its end), or sooner for the caller.
    const TimePs start = std::max(now, earliest);
    TimePs end = lookahead == kNeverPs || start > kNeverPs - lookahead ? kNeverPs : start + lookahead;
    end = std::min({end, until_ps, std::max(d.next_barrier_ps, now + 1)});
    window_end = end;
    ++windows;
  };
  std::barrier decided(static_cast<std::ptrdiff_t>(parts), decide);
  std::barrier ran(static_cast<std::ptrdiff_t>(parts));

  auto partition_loop = [&](uint32_t p) {
    Simulation& sim = fabric.sim(p);
    PacketPool& pool = fabric.pool(p);
    for (;;) {
      if (cross != nullptr) cross->drain(p, pool);
      next_ps[p] = sim.next_event_ps();
      decided.arrive_and_wait();
      if (stop) return;
      sim.run_before(window_end);
      ran.arrive_and_wait();
      if (p == 0) now = window_end;  // read by decide() after the next barrier
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(parts - 1);
  for (uint32_t p = 1; p < parts; ++p) threads.emplace_back(partition_loop, p);
  partition_loop(0);
  for (std::thread& t : threads) t.join();
  return windows;
}

}  // namespace megascale::sim
