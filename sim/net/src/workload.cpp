#include "megascale/sim/workload.h"

#include <algorithm>
#include <string>

namespace megascale::sim {

std::vector<FlowSpec> incast_flows(uint32_t senders, uint32_t receiver, uint64_t bytes) {
  std::vector<FlowSpec> flows;
  for (uint32_t h = 0; flows.size() < senders; ++h) {
    if (h != receiver) flows.push_back(FlowSpec{h, receiver, bytes});
  }
  return flows;
}

std::vector<FlowSpec> permutation_flows(uint32_t hosts, uint64_t bytes, Rng& rng) {
  // Sattolo's algorithm: a uniformly random single cycle, so no host is its own partner.
  std::vector<uint32_t> p(hosts);
  for (uint32_t i = 0; i < hosts; ++i) p[i] = i;
  for (uint32_t i = hosts; i > 1; --i) std::swap(p[i - 1], p[rng.below(i - 1)]);
  std::vector<FlowSpec> flows;
  for (uint32_t i = 0; i < hosts; ++i) flows.push_back(FlowSpec{i, p[i], bytes});
  return flows;
}

namespace {

struct Flow {
  engine::Connection* tx = nullptr;
  engine::Connection* rx = nullptr;
  engine::RequestId send = 0;
  engine::RequestId recv = 0;
  bool send_done = false;
  bool recv_done = false;
  bool failed = false;
};

// Checks the flows of a host after each engine call there; stops the simulation when all are done.
class Tracker : public HostListener {
 public:
  Tracker(Fabric& fabric, std::vector<Flow>& flows, RunResult& result, TimePs start)
      : fabric_(fabric), flows_(flows), result_(result), start_(start), by_host_(fabric.host_count()) {
    for (size_t i = 0; i < flows.size(); ++i) {
      by_host_[result.flows[i].spec.src].push_back(static_cast<uint32_t>(i));
      by_host_[result.flows[i].spec.dst].push_back(static_cast<uint32_t>(i));
    }
    remaining_ = flows.size();
  }

  void on_host_activity(Host& host) override {
    std::vector<uint32_t>& mine = by_host_[host.address()];
    for (size_t k = 0; k < mine.size();) {
      if (check(mine[k])) {
        mine[k] = mine.back();  // done: the flow leaves this host's list
        mine.pop_back();
      } else {
        ++k;
      }
    }
    if (remaining_ == 0) fabric_.sim().stop();
  }

  size_t remaining() const { return remaining_; }

 private:
  // True when flow i has nothing left to wait for.
  bool check(uint32_t i) {
    Flow& f = flows_[i];
    FlowResult& r = result_.flows[i];
    const TimePs now = fabric_.sim().now();
    if ((f.recv_done && f.send_done) || f.failed) return true;
    // Counters first: test() is only worth calling once the bytes are there (or the connection died).
    if (!f.recv_done && (f.rx->stats().bytes_received >= r.spec.bytes || !alive(f.rx))) {
      engine::Completion c = f.rx->test(f.recv);
      if (c.done) {
        f.recv_done = true;
        f.failed |= !c.ok || c.bytes != r.spec.bytes;
        if (!c.ok && r.error.empty()) r.error = "receive: " + c.error;
        r.fct_ps = now - start_;
      }
    }
    if (!f.send_done && (f.tx->stats().bytes_acked >= r.spec.bytes || !alive(f.tx))) {
      engine::Completion c = f.tx->test(f.send);
      if (c.done) {
        f.send_done = true;
        f.failed |= !c.ok;
        if (!c.ok && r.error.empty()) r.error = "send: " + c.error;
        r.send_done_ps = now - start_;
      }
    }
    // A failed end ends the flow: its other end may wait much longer (a receiver whose sender gave up
    // hears nothing more), and an application would abort on the first error, as NCCL does.
    if ((f.recv_done && f.send_done) || f.failed) {
      r.completed = !f.failed;
      r.failed = f.failed;
      --remaining_;
      return true;
    }
    return false;
  }
  static bool alive(const engine::Connection* c) {
    return c->state() == engine::ConnectionState::kEstablished ||
           c->state() == engine::ConnectionState::kConnecting;
  }

  Fabric& fabric_;
  std::vector<Flow>& flows_;
  RunResult& result_;
  TimePs start_;
  std::vector<std::vector<uint32_t>> by_host_;
  size_t remaining_ = 0;
};

}  // namespace

Result<RunResult> run_flows(Fabric& fabric, const std::vector<FlowSpec>& specs, TimePs time_limit_ps,
                            const RunProgress* progress, const std::function<void(TimePs)>& on_start) {
  Simulation& sim = fabric.sim();
  const auto n_hosts = static_cast<uint32_t>(fabric.host_count());
  RunResult result;
  std::vector<Flow> flows(specs.size());
  std::vector<engine::ConnId> ids(specs.size());
  const TimePs t0 = sim.now();
  for (size_t i = 0; i < specs.size(); ++i) {
    const FlowSpec& s = specs[i];
    if (s.src >= n_hosts || s.dst >= n_hosts || s.src == s.dst) {
      return make_error("flow " + std::to_string(i) + ": bad hosts " + std::to_string(s.src) + " -> " +
                        std::to_string(s.dst) + " (fabric has " + std::to_string(n_hosts) + ")");
    }
    result.flows.push_back(FlowResult{.spec = s});
    Host& src = fabric.host(s.src);
    auto id = src.endpoint().connect(ns_from_ps(sim.now()), s.dst);
    if (!id.ok()) return make_error("flow " + std::to_string(i) + ": " + id.error().message);
    ids[i] = *id;
    flows[i].tx = src.endpoint().connection(*id);
    src.kick();
  }

  // Connect phase: run in short slices until every connection is established, then pair each
  // destination's accepted connections with its flows (a connection's peer is its source host).
  std::vector<std::vector<engine::Connection*>> accepted(n_hosts);  // [dst] accepted, in order
  for (;;) {
    bool all = true;
    for (const Flow& f : flows) all &= f.tx->state() == engine::ConnectionState::kEstablished;
    if (all) break;
    for (const Flow& f : flows) {
      if (f.tx->state() == engine::ConnectionState::kFailed) {
        return make_error("connect " + std::to_string(f.tx->peer()) + ": " + f.tx->error());
      }
    }
    if (sim.now() - t0 > time_limit_ps)
      return make_error("connections not established within the time limit");
    sim.run(sim.now() + kPsPerUs);
  }
  for (uint32_t h = 0; h < n_hosts; ++h) {
    while (auto a = fabric.host(h).endpoint().accept()) {
      accepted[h].push_back(fabric.host(h).endpoint().connection(*a));
    }
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    std::vector<engine::Connection*>& pool = accepted[specs[i].dst];
    auto it = std::find_if(pool.begin(), pool.end(), [&](engine::Connection* c) {
      return c->remote_id() != 0 && c->peer() == specs[i].src;
    });
    if (it == pool.end())
      return make_error("flow " + std::to_string(i) + ": no accepted connection at the receiver");
    flows[i].rx = *it;
    pool.erase(it);
  }
  result.handshake_ps = sim.now() - t0;

  // Measure phase.
  const TimePs start = sim.now();
  result.start_ps = start;
  if (on_start) on_start(start);
  for (size_t i = 0; i < specs.size(); ++i) {
    auto r = flows[i].rx->post_recv(nullptr, specs[i].bytes, 0);
    if (!r.ok()) return make_error("flow " + std::to_string(i) + ": " + r.error().message);
    flows[i].recv = *r;
    auto s = flows[i].tx->post_send(nullptr, specs[i].bytes, 0);
    if (!s.ok()) return make_error("flow " + std::to_string(i) + ": " + s.error().message);
    flows[i].send = *s;
  }
  Tracker tracker(fabric, flows, result, start);
  for (uint32_t h = 0; h < n_hosts; ++h) fabric.host(h).set_listener(&tracker);
  for (uint32_t h = 0; h < n_hosts; ++h) fabric.host(h).kick();
  for (uint32_t h = 0; h < n_hosts; ++h) tracker.on_host_activity(fabric.host(h));  // zero-byte flows
  if (progress == nullptr || !progress->report) {
    if (tracker.remaining() > 0) sim.run(start + time_limit_ps);
  } else {
    // In slices: the events run in the same order, so a run with progress is the run without it.
    const TimePs end = start + time_limit_ps;
    while (tracker.remaining() > 0 && sim.now() < end && sim.pending_events() > 0) {
      sim.run(std::min(end, sim.now() + std::max<TimePs>(progress->interval_ps, 1)));
      progress->report(sim.now() - start, specs.size() - tracker.remaining(), specs.size());
    }
  }
  for (uint32_t h = 0; h < n_hosts; ++h) fabric.host(h).set_listener(nullptr);

  uint64_t bytes = 0;
  TimePs last = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    FlowResult& r = result.flows[i];
    const engine::ConnectionStats& st = flows[i].tx->stats();
    r.retransmits = st.retransmits();
    r.timeouts = st.timeouts;
    r.rtt_samples = st.rtt.count();
    r.rtt_p50_ps = ps_from_ns(static_cast<uint64_t>(st.rtt.percentile_ns(0.5)));
    r.rtt_p99_ps = ps_from_ns(static_cast<uint64_t>(st.rtt.percentile_ns(0.99)));
    result.retransmits += r.retransmits;
    result.timeouts += r.timeouts;
    if (r.failed) ++result.failed;
    if (r.completed) {
      ++result.completed;
      bytes += r.spec.bytes;
      last = std::max(last, r.fct_ps);
    }
  }
  // Every flow ended (some may have failed): the run ended when the last one did.
  result.makespan_ps = result.completed == specs.size() ? last
                       : tracker.remaining() == 0       ? sim.now() - start
                                                        : time_limit_ps;
  result.goodput_bps = result.makespan_ps > 0
                           ? static_cast<double>(bytes) * 8e12 / static_cast<double>(result.makespan_ps)
                           : 0.0;
  result.drops = fabric.total_drops();
  result.link_down_drops = fabric.total_link_down_drops();
  result.ecn_marks = fabric.total_marks();
  result.pfc_pauses = fabric.total_pauses();
  result.pfc_paused_ps = fabric.total_paused_ps();
  result.events = sim.events_processed();
  result.simulated_ps = sim.now();
  return result;
}

}  // namespace megascale::sim
