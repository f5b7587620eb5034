#include "megascale/sim/workload.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <queue>
#include <string>
#include <utility>

#include "flow_setup.h"
#include "series_sampler.h"
#include "workload_partitioned.h"

namespace megascale::sim {

std::vector<FlowSpec> incast_flows(uint32_t senders, uint32_t receiver, uint64_t bytes,
                                   uint32_t flows_per_sender) {
  std::vector<FlowSpec> flows;
  uint32_t used = 0;
  for (uint32_t h = 0; used < senders; ++h) {
    if (h == receiver) continue;
    for (uint32_t f = 0; f < flows_per_sender; ++f) flows.push_back(FlowSpec{h, receiver, bytes});
    ++used;
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

// One connection of a (source, destination) pair, both ends.
struct Conn {
  engine::Connection* tx = nullptr;
  engine::Connection* rx = nullptr;
  uint32_t active = 0;         // flows started on it and not yet done
  uint64_t rx_done_bytes = 0;  // bytes of its completed receives
  uint64_t tx_done_bytes = 0;  // bytes of its completed sends
};

struct Flow {
  uint32_t pair = 0;
  uint32_t conn = 0;  // index into the run's connections, once started
  engine::RequestId send = 0;
  engine::RequestId recv = 0;
  uint32_t waiting = 0;  // flows in `after` whose receives are not done yet
  bool started = false;
  bool send_done = false;
  bool recv_done = false;
  bool failed = false;
  bool done = false;
};

// Starts flows (at their times, or when what they wait for is received) and checks the started flows
// of a host after each engine call there; stops the simulation when all are done.
class Runner : public HostListener, public EventSource {
 public:
  Runner(Fabric& fabric, const std::vector<FlowSpec>& specs, std::vector<Flow>& flows,
         std::vector<Conn>& conns, std::vector<std::vector<uint32_t>> pair_conns, RunResult& result,
         TimePs start)
      : fabric_(fabric),
        specs_(specs),
        flows_(flows),
        conns_(conns),
        pair_conns_(std::move(pair_conns)),
        result_(result),
        start_(start),
        by_host_(fabric.host_count()),
        dirty_(fabric.host_count(), 1),
        peers_(fabric.host_count()),
        dependents_(specs.size()) {
    remaining_ = specs.size();
    for (const FlowSpec& f : specs) {
      peers_[f.src].push_back(f.dst);
      peers_[f.dst].push_back(f.src);
    }
    for (std::vector<uint32_t>& p : peers_) {
      std::sort(p.begin(), p.end());
      p.erase(std::unique(p.begin(), p.end()), p.end());
    }
    for (size_t i = 0; i < specs.size(); ++i) {
      flows_[i].waiting = static_cast<uint32_t>(specs[i].after.size());
      for (uint32_t d : specs[i].after) dependents_[d].push_back(static_cast<uint32_t>(i));
    }
  }

  // At the measure phase's start: posts every flow due now (in list order, then kicks every host, as
  // a run without timed flows always did) and schedules the others.
  Status begin() {
    for (size_t i = 0; i < specs_.size(); ++i) {
      if (flows_[i].waiting > 0) continue;
      if (specs_[i].start_ps == 0) {
        if (Status st = post(static_cast<uint32_t>(i)); !st) return st;
      } else {
        defer(static_cast<uint32_t>(i), start_ + specs_[i].start_ps);
      }
    }
    for (uint32_t h = 0; h < fabric_.host_count(); ++h) fabric_.host(h).kick();
    for (uint32_t h = 0; h < fabric_.host_count(); ++h) on_host_activity(fabric_.host(h));  // 0-byte flows
    return Status{};
  }

  // A check acts only on a request that completed (test() done; a receive of the posted size, placed
  // or failed, passes the counter gate in check()), so a host's list needs a look only after a request
  // of one of its flows completed: with 5,000 flows into one host, a look at every frame would be most
  // of a run. A completion during a frame or a timer is looked at right after, on the same host, whose
  // list holds the flow; one during a kick or a free NIC waits for the next activity of either end of
  // its flow, so the peers look too. The looks that
  // remain happen at the same events as before, so the results are the same.
  void on_requests_completed(Host& host, bool activity_follows) override {
    const uint32_t h = host.address();
    dirty_[h] = 1;
    if (activity_follows) return;
    for (uint32_t peer : peers_[h]) dirty_[peer] = 1;
  }

  void on_host_activity(Host& host) override {
    const uint32_t h = host.address();
    if (dirty_[h] != 0) {
      dirty_[h] = 0;  // before the look: completions during it bring the next one
      scan(h);
    }
    if (remaining_ == 0 || !error_.empty()) fabric_.sim().stop();
  }

  void scan(uint32_t h) {
    std::vector<uint32_t>& mine = by_host_[h];
    for (size_t k = 0; k < mine.size();) {
      if (check(mine[k])) {
        mine[k] = mine.back();  // done: the flow leaves this host's list
        mine.pop_back();
      } else {
        ++k;
      }
    }
  }

  // Timed starts are due.
  void on_event() override {
    if (!armed_.empty()) armed_.pop_back();
    const TimePs now = fabric_.sim().now();
    std::vector<uint32_t> kicked;
    while (!timed_.empty() && timed_.top().first <= now) {
      const uint32_t i = timed_.top().second;
      timed_.pop();
      if (flows_[i].done) continue;  // what it waited for failed after all (fail_dependents)
      if (!post(i)) return;
      kicked.push_back(specs_[i].src);
      kicked.push_back(specs_[i].dst);
    }
    for (uint32_t h : kicked) fabric_.host(h).kick();
    if (!timed_.empty()) arm(timed_.top().first);
  }

  size_t remaining() const { return remaining_; }
  const std::string& error() const { return error_; }

 private:
  // Posts flow i's receive and send now on the least busy connection of its pair.
  Status post(uint32_t i) {
    Flow& f = flows_[i];
    const FlowSpec& spec = specs_[i];
    const std::vector<uint32_t>& pool = pair_conns_[f.pair];
    f.conn = pool[0];
    for (uint32_t c : pool) {
      if (conns_[c].active < conns_[f.conn].active) f.conn = c;
    }
    Conn& c = conns_[f.conn];
    auto r = c.rx->post_recv(nullptr, spec.bytes, 0);
    auto s = r.ok() ? c.tx->post_send(nullptr, spec.bytes, 0) : Result<engine::RequestId>(r.error());
    if (!r.ok() || !s.ok()) {
      error_ = "flow " + std::to_string(i) + ": " + (r.ok() ? s.error().message : r.error().message);
      fabric_.sim().stop();
      return make_error(error_);
    }
    f.recv = *r;
    f.send = *s;
    f.started = true;
    ++c.active;
    result_.flows[i].started_ps = fabric_.sim().now() - start_;
    by_host_[spec.src].push_back(i);
    by_host_[spec.dst].push_back(i);
    return Status{};
  }

  void defer(uint32_t i, TimePs at_ps) {
    timed_.emplace(at_ps, i);
    arm(at_ps);
  }
  void arm(TimePs at_ps) {
    if (!armed_.empty() && armed_.back() <= at_ps) return;  // an event at or before it is pending
    armed_.push_back(at_ps);
    fabric_.sim().schedule_at(at_ps, this);
  }

  // Flow i's receive is done: the flows waiting for it may start.
  void release(uint32_t i) {
    for (uint32_t d : dependents_[i]) {
      if (--flows_[d].waiting > 0 || flows_[d].done) continue;
      const TimePs at = std::max(fabric_.sim().now(), start_ + specs_[d].start_ps);
      if (at > fabric_.sim().now()) {
        defer(d, at);
      } else if (post(d)) {
        fabric_.host(specs_[d].src).kick();
        fabric_.host(specs_[d].dst).kick();
      }
    }
  }

  // Flow i failed: what waits for it and has not started never will; it fails too, with the reason.
  // (A flow that started already had i's data: its send failing later does not undo that.)
  void fail_dependents(uint32_t i) {
    for (uint32_t d : dependents_[i]) {
      if (flows_[d].done || flows_[d].started) continue;
      flows_[d].done = flows_[d].failed = true;
      FlowResult& r = result_.flows[d];
      r.failed = true;
      r.error = "not started: flow " + std::to_string(i) + ", which it waits for, failed";
      --remaining_;
      fail_dependents(d);
    }
  }

  // True when flow i has nothing left to wait for.
  bool check(uint32_t i) {
    Flow& f = flows_[i];
    FlowResult& r = result_.flows[i];
    if (f.done) return true;
    Conn& c = conns_[f.conn];
    const TimePs now = fabric_.sim().now();
    const uint64_t bytes = specs_[i].bytes;
    // Counters first: test() is only worth calling once the bytes can be there (or the connection
    // died). Bytes of completed messages plus this one's is a floor, whatever the order of placement.
    if (!f.recv_done && (c.rx->stats().bytes_received >= c.rx_done_bytes + bytes || !alive(c.rx))) {
      engine::Completion done = c.rx->test(f.recv);
      if (done.done) {
        f.recv_done = true;
        f.failed |= !done.ok || done.bytes != bytes;
        if (!done.ok && r.error.empty()) r.error = "receive: " + done.error;
        r.fct_ps = now - start_ - r.started_ps;
        c.rx_done_bytes += bytes;
        if (!f.failed) release(i);
      }
    }
    if (!f.send_done && (c.tx->stats().bytes_acked >= c.tx_done_bytes + bytes || !alive(c.tx))) {
      engine::Completion done = c.tx->test(f.send);
      if (done.done) {
        f.send_done = true;
        f.failed |= !done.ok;
        if (!done.ok && r.error.empty()) r.error = "send: " + done.error;
        r.send_done_ps = now - start_ - r.started_ps;
        c.tx_done_bytes += bytes;
      }
    }
    // A failed end ends the flow: its other end may wait much longer (a receiver whose sender gave up
    // hears nothing more), and an application would abort on the first error, as NCCL does.
    if ((f.recv_done && f.send_done) || f.failed) {
      f.done = true;
      r.completed = !f.failed;
      r.failed = f.failed;
      --c.active;
      --remaining_;
      if (f.failed) fail_dependents(i);
      return true;
    }
    return false;
  }
  static bool alive(const engine::Connection* c) {
    return c->state() == engine::ConnectionState::kEstablished ||
           c->state() == engine::ConnectionState::kConnecting;
  }

  Fabric& fabric_;
  const std::vector<FlowSpec>& specs_;
  std::vector<Flow>& flows_;
  std::vector<Conn>& conns_;
  std::vector<std::vector<uint32_t>> pair_conns_;  // [pair] connection indices
  RunResult& result_;
  TimePs start_;
  std::vector<std::vector<uint32_t>> by_host_;     // started flows not yet done, by src and dst
  std::vector<uint8_t> dirty_;                     // [host]: its list needs a look (a request completed)
  std::vector<std::vector<uint32_t>> peers_;       // [host]: the other ends of its flows
  std::vector<std::vector<uint32_t>> dependents_;  // [i]: flows with i in their `after`
  using Timed = std::pair<TimePs, uint32_t>;       // (start time, flow): earliest first, then index
  std::priority_queue<Timed, std::vector<Timed>, std::greater<>> timed_;
  std::vector<TimePs> armed_;  // times of this runner's pending events, earliest last
  size_t remaining_ = 0;
  std::string error_;
};

}  // namespace

Result<RunResult> run_flows(Fabric& fabric, const std::vector<FlowSpec>& specs, TimePs time_limit_ps,
                            const RunProgress* progress, const std::function<void(TimePs)>& on_start) {
  return run_flows(fabric, specs, time_limit_ps, RunOptions{.progress = progress, .on_start = on_start});
}

Result<RunResult> run_flows(Fabric& fabric, const std::vector<FlowSpec>& specs, TimePs time_limit_ps,
                            const RunOptions& options) {
  if (fabric.partition_count() > 1 || fabric.canonical_order())
    return run_flows_partitioned(fabric, specs, time_limit_ps, options);
  Simulation& sim = fabric.sim();
  const auto n_hosts = static_cast<uint32_t>(fabric.host_count());
  RunResult result;
  std::vector<Flow> flows(specs.size());
  const TimePs t0 = sim.now();

  // Pairs in order of first appearance, and how many flows each has.
  auto grouped = detail::group_pairs(specs, n_hosts, result, [&](size_t i) -> std::string {
    for (uint32_t d : specs[i].after) {
      if (d >= i)
        return "flow " + std::to_string(i) + ": waits for flow " + std::to_string(d) +
               ", which is not an earlier one";
    }
    return {};
  });
  if (!grouped) return grouped.error();
  detail::FlowPairs& g = *grouped;
  for (size_t i = 0; i < specs.size(); ++i) flows[i].pair = g.pair_of_flow[i];

  // Connect phase: every pair's connections, in order of first appearance.
  auto opened =
      detail::open_connections(fabric, g, std::max<uint32_t>(options.connections_per_pair, 1), sim.now());
  if (!opened) return opened.error();
  std::vector<Conn> conns;
  for (engine::Connection* tx : *opened) conns.push_back(Conn{.tx = tx});
  result.connections = conns.size();
  // Run in short slices until every connection is established, then pair each with the receiver's
  // accepted end.
  for (;;) {
    bool all = true;
    for (const Conn& c : conns) all &= c.tx->state() == engine::ConnectionState::kEstablished;
    if (all) break;
    for (const Conn& c : conns) {
      if (c.tx->state() == engine::ConnectionState::kFailed) {
        return make_error("connect " + std::to_string(c.tx->peer()) + ": " + c.tx->error());
      }
    }
    if (sim.now() - t0 > time_limit_ps)
      return make_error("connections not established within the time limit");
    sim.run(sim.now() + kPsPerUs);
  }
  auto accepted = detail::match_accepted(fabric, *opened);
  if (!accepted) return accepted.error();
  for (size_t c = 0; c < conns.size(); ++c) conns[c].rx = (*accepted)[c];
  result.handshake_ps = sim.now() - t0;

  // Measure phase.
  const TimePs start = sim.now();
  result.start_ps = start;
  if (options.on_start) options.on_start(start);
  std::unique_ptr<SeriesSampler> sampler;
  if (options.series_interval_ps > 0) {
    sampler = std::make_unique<SeriesSampler>(fabric, detail::receivers_by_host(g, *accepted, n_hosts),
                                              options.series_interval_ps, &result.series);
    sampler->start(start);
  }
  Runner runner(fabric, specs, flows, conns, std::move(g.conns_of_pair), result, start);
  for (uint32_t h = 0; h < n_hosts; ++h) fabric.host(h).set_listener(&runner);
  if (Status st = runner.begin(); !st) return st.error();
  const RunProgress* progress = options.progress;
  if (progress == nullptr || !progress->report) {
    if (runner.remaining() > 0) sim.run(start + time_limit_ps);
  } else {
    // In slices: the events run in the same order, so a run with progress is the run without it.
    const TimePs end = start + time_limit_ps;
    while (runner.remaining() > 0 && runner.error().empty() && sim.now() < end && sim.pending_events() > 0) {
      sim.run(std::min(end, sim.now() + std::max<TimePs>(progress->interval_ps, 1)));
      RunProgress::Sample sample{.flows = specs.size()};
      for (const FlowSpec& f : specs) sample.total_bytes += f.bytes;
      for (const Conn& c : conns) sample.delivered_bytes += c.rx->stats().bytes_received;
      sample.now_ps = sim.now() - start;
      sample.done = specs.size() - runner.remaining();
      progress->report(sample);
    }
  }
  for (uint32_t h = 0; h < n_hosts; ++h) fabric.host(h).set_listener(nullptr);
  if (!runner.error().empty()) return make_error(runner.error());
  if (sampler) sampler->finish();

  std::vector<const engine::Connection*> flow_tx(specs.size(), nullptr), conn_tx;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (flows[i].started) flow_tx[i] = conns[flows[i].conn].tx;
  }
  for (const Conn& c : conns) conn_tx.push_back(c.tx);
  detail::finish_run_result(result, flow_tx, conn_tx, runner.remaining() == 0, sim.now() - start,
                            time_limit_ps, fabric);
  result.events = sim.events_processed() - (sampler ? sampler->samples() : 0);
  result.simulated_ps = sim.now();
  return result;
}

}  // namespace megascale::sim
