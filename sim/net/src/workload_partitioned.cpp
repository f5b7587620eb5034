// Flows on a partitioned fabric (workload_partitioned.h). Each partition has a PartRunner for its
// hosts: it posts the ends of flows whose hosts it holds (a flow's receive at its destination's
// partition, its send at its source's, both at the flow's start time) and checks them after engine
// activity there. Everything shared (flows done, the result rows, progress, samples) is touched only
// at the barriers, where one thread runs while the others wait.
#include "workload_partitioned.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <queue>
#include <string>
#include <utility>

#include "flow_setup.h"
#include "megascale/sim/partition.h"
#include "series_sampler.h"

namespace megascale::sim {

namespace {

struct PConn {
  engine::Connection* tx = nullptr;
  engine::Connection* rx = nullptr;
  uint64_t rx_done_bytes = 0;  // the destination partition's
  uint64_t tx_done_bytes = 0;  // the source partition's
};

// One flow. The send_ fields belong to the source's partition, the recv_ fields to the destination's;
// `done` to the barrier.
struct PFlow {
  uint32_t conn = 0;
  engine::RequestId send = 0;
  engine::RequestId recv = 0;
  bool send_started = false, recv_started = false;
  bool send_over = false, recv_over = false;  // completed or failed
  bool send_failed = false, recv_failed = false;
  TimePs send_started_ps = 0, recv_started_ps = 0;  // after the measure phase's start
  TimePs fct_ps = 0, send_done_ps = 0;
  std::string send_error, recv_error;
  bool done = false;
};

struct EndOver {
  uint32_t flow = 0;
  bool recv = false;
};

bool alive(const engine::Connection* c) {
  return c->state() == engine::ConnectionState::kEstablished ||
         c->state() == engine::ConnectionState::kConnecting;
}

// Above every element's id (Fabric numbers them from 1 in creation order).
constexpr uint32_t kRunnerOrderId = (1u << 24) - 1;

// The flow ends of one partition's hosts.
class PartRunner : public HostListener, public EventSource {
 public:
  PartRunner(Fabric& fabric, uint32_t partition, const std::vector<FlowSpec>& specs,
             std::vector<PFlow>& flows, std::vector<PConn>& conns, TimePs start)
      : fabric_(fabric),
        sim_(fabric.sim(partition)),
        partition_(partition),
        specs_(specs),
        flows_(flows),
        conns_(conns),
        start_(start),
        by_host_(fabric.host_count()) {
    // Every partition's runner has the same id: its events hold the place the one runner's would.
    set_order_id(kRunnerOrderId);
  }

  bool mine(uint32_t host) const { return fabric_.host_partition(host) == partition_; }

  // At the measure phase's start: posts this partition's ends of the flows due now (in list order) and
  // schedules the others. The caller then kicks every host and reports activity.
  void begin() {
    for (size_t k = 0; k < specs_.size(); ++k) {
      const auto i = static_cast<uint32_t>(k);
      if (specs_[i].start_ps == 0) {
        post(i);
      } else if (mine(specs_[i].src) || mine(specs_[i].dst)) {
        timed_.emplace(start_ + specs_[i].start_ps, i);
        arm(start_ + specs_[i].start_ps);
      }
    }
  }

  void on_host_activity(Host& host) override {
    std::vector<uint32_t>& list = by_host_[host.address()];
    for (size_t k = 0; k < list.size();) {
      if (check(list[k], host.address())) {
        list[k] = list.back();
        list.pop_back();
      } else {
        ++k;
      }
    }
  }

  void on_event() override {
    ++fired_;
    if (!armed_.empty()) armed_.pop_back();
    const TimePs now = sim_.now();
    std::vector<uint32_t> kicked;
    while (!timed_.empty() && timed_.top().first <= now) {
      const uint32_t i = timed_.top().second;
      timed_.pop();
      post(i);
      if (mine(specs_[i].src)) kicked.push_back(specs_[i].src);
      if (mine(specs_[i].dst)) kicked.push_back(specs_[i].dst);
    }
    for (uint32_t h : kicked) fabric_.host(h).kick();
    if (!timed_.empty()) arm(timed_.top().first);
  }

  // Ends that completed or failed since the barrier last took them.
  std::vector<EndOver>& over() { return over_; }
  const std::string& error() const { return error_; }
  // Its own events (timed starts). A flow whose ends are in two partitions takes one in each, so they
  // are left out of RunResult::events, which then does not depend on the partition count.
  uint64_t fired() const { return fired_; }

 private:
  // This partition's ends of flow i, now: the receive first, as run_flows posts them.
  void post(uint32_t i) {
    PFlow& f = flows_[i];
    const FlowSpec& spec = specs_[i];
    PConn& c = conns_[f.conn];
    const TimePs t = sim_.now() - start_;
    if (mine(spec.dst)) {
      auto r = c.rx->post_recv(nullptr, spec.bytes, 0);
      if (!r.ok()) {
        if (error_.empty()) error_ = "flow " + std::to_string(i) + ": " + r.error().message;
        return;
      }
      f.recv = *r;
      f.recv_started = true;
      f.recv_started_ps = t;
      by_host_[spec.dst].push_back(i);
    }
    if (mine(spec.src)) {
      auto s = c.tx->post_send(nullptr, spec.bytes, 0);
      if (!s.ok()) {
        if (error_.empty()) error_ = "flow " + std::to_string(i) + ": " + s.error().message;
        return;
      }
      f.send = *s;
      f.send_started = true;
      f.send_started_ps = t;
      by_host_[spec.src].push_back(i);
    }
  }

  void arm(TimePs at_ps) {
    if (!armed_.empty() && armed_.back() <= at_ps) return;
    armed_.push_back(at_ps);
    sim_.schedule_at(at_ps, this);
  }

  // True when flow i's end at `host` is over (completed or failed), or the flow is (failed elsewhere).
  bool check(uint32_t i, uint32_t host) {
    PFlow& f = flows_[i];
    PConn& c = conns_[f.conn];
    const uint64_t bytes = specs_[i].bytes;
    const TimePs now = sim_.now() - start_;
    if (host == specs_[i].dst && !f.recv_over &&
        (c.rx->stats().bytes_received >= c.rx_done_bytes + bytes || !alive(c.rx))) {
      engine::Completion done = c.rx->test(f.recv);
      if (done.done) {
        f.recv_over = true;
        f.recv_failed = !done.ok || done.bytes != bytes;
        if (!done.ok) f.recv_error = "receive: " + done.error;
        f.fct_ps = now - f.recv_started_ps;
        c.rx_done_bytes += bytes;
        over_.push_back(EndOver{i, true});
      }
    }
    if (host == specs_[i].src && !f.send_over &&
        (c.tx->stats().bytes_acked >= c.tx_done_bytes + bytes || !alive(c.tx))) {
      engine::Completion done = c.tx->test(f.send);
      if (done.done) {
        f.send_over = true;
        f.send_failed = !done.ok;
        if (!done.ok) f.send_error = "send: " + done.error;
        f.send_done_ps = now - f.send_started_ps;
        c.tx_done_bytes += bytes;
        over_.push_back(EndOver{i, false});
      }
    }
    return (host == specs_[i].dst ? f.recv_over : f.send_over) || f.done;
  }

  Fabric& fabric_;
  Simulation& sim_;
  uint32_t partition_;
  const std::vector<FlowSpec>& specs_;
  std::vector<PFlow>& flows_;
  std::vector<PConn>& conns_;
  TimePs start_;
  std::vector<std::vector<uint32_t>> by_host_;  // this partition's started ends not yet over, by host
  using Timed = std::pair<TimePs, uint32_t>;    // (start time, flow): earliest first, then index
  std::priority_queue<Timed, std::vector<Timed>, std::greater<>> timed_;
  std::vector<TimePs> armed_;
  std::vector<EndOver> over_;
  std::string error_;
  uint64_t fired_ = 0;
};

// What a partitioned run cannot model, named (workload_partitioned.h).
Status check_partitionable(const std::vector<FlowSpec>& specs, uint32_t parts) {
  for (size_t i = 0; i < specs.size(); ++i) {
    if (!specs[i].after.empty()) {
      return make_error("threads " + std::to_string(parts) + ": flow " + std::to_string(i) +
                        " waits for flow " + std::to_string(specs[i].after[0]) +
                        " (a collective's dependent step starts at another host the instant a receive "
                        "completes: a zero-delay interaction between partitions); run it with threads: 1");
    }
  }
  return Status{};
}

}  // namespace

Result<RunResult> run_flows_partitioned(Fabric& fabric, const std::vector<FlowSpec>& specs,
                                        TimePs time_limit_ps, const RunOptions& options) {
  const uint32_t parts = fabric.partition_count();
  const auto n_hosts = static_cast<uint32_t>(fabric.host_count());
  if (Status st = check_partitionable(specs, parts); !st) return st.error();
  if (fabric.config().link_delay_ps == 0 ||
      (fabric.partition_links() != nullptr && fabric.partition_links()->lookahead_ps() == 0))
    return make_error("threads " + std::to_string(parts) +
                      ": links have no delay, so windows would have no length (no lookahead); give links a "
                      "delay or run with threads: 1");
  RunResult result;
  std::vector<PFlow> flows(specs.size());
  const TimePs t0 = fabric.sim(0).now();

  // Pairs in order of first appearance, and their connections opened in that order, as run_flows does.
  // A pair's k-th flow takes its connection k mod n (round robin) rather than the least busy one:
  // "least busy" counts flows done at both ends, which no one partition knows at the flow's start.
  auto grouped = detail::group_pairs(specs, n_hosts, result, {});
  if (!grouped) return grouped.error();
  detail::FlowPairs& g = *grouped;
  auto opened = detail::open_connections(fabric, g, std::max<uint32_t>(options.connections_per_pair, 1),
                                         fabric.sim(0).now());
  if (!opened) return opened.error();
  std::vector<PConn> conns;
  for (engine::Connection* tx : *opened) conns.push_back(PConn{.tx = tx});
  for (size_t i = 0; i < specs.size(); ++i) {
    const std::vector<uint32_t>& mine = g.conns_of_pair[g.pair_of_flow[i]];
    flows[i].conn = mine[g.nth_of_pair[i] % mine.size()];
  }
  result.connections = conns.size();

  // Connect phase, in windows until every connection is established.
  std::string error;
  run_windows(fabric, t0 + time_limit_ps + 1, [&](TimePs) {
    bool all = true;
    for (const PConn& c : conns) {
      all &= c.tx->state() == engine::ConnectionState::kEstablished;
      if (c.tx->state() == engine::ConnectionState::kFailed && error.empty())
        error = "connect " + std::to_string(c.tx->peer()) + ": " + c.tx->error();
    }
    return BarrierDecision{.stop = all || !error.empty()};
  });
  if (!error.empty()) return make_error(error);
  for (const PConn& c : conns) {
    if (c.tx->state() != engine::ConnectionState::kEstablished)
      return make_error("connections not established within the time limit");
  }
  auto accepted = detail::match_accepted(fabric, *opened);
  if (!accepted) return accepted.error();
  for (size_t c = 0; c < conns.size(); ++c) conns[c].rx = (*accepted)[c];
  const TimePs start = fabric.sim(0).now();
  result.handshake_ps = start - t0;
  result.start_ps = start;
  if (options.on_start) options.on_start(start);

  // Measure phase.
  std::unique_ptr<SeriesSampler> sampler;
  if (options.series_interval_ps > 0) {
    sampler = std::make_unique<SeriesSampler>(fabric, detail::receivers_by_host(g, *accepted, n_hosts),
                                              options.series_interval_ps, &result.series);
    sampler->start_driven(start);
  }
  std::vector<std::unique_ptr<PartRunner>> runners;
  for (uint32_t p = 0; p < parts; ++p)
    runners.push_back(std::make_unique<PartRunner>(fabric, p, specs, flows, conns, start));
  for (uint32_t h = 0; h < n_hosts; ++h) fabric.host(h).set_listener(runners[fabric.host_partition(h)].get());
  for (auto& r : runners) r->begin();
  for (uint32_t h = 0; h < n_hosts; ++h) fabric.host(h).kick();
  for (uint32_t h = 0; h < n_hosts; ++h) runners[fabric.host_partition(h)]->on_host_activity(fabric.host(h));

  size_t remaining = specs.size();
  TimePs ended = start;
  // The flows whose ends came over in the last window (partition order, then the order they did).
  auto settle = [&]() {
    for (auto& r : runners) {
      for (const EndOver& e : r->over()) {
        PFlow& f = flows[e.flow];
        if (f.done) continue;
        // A failed end ends the flow (as run_flows: its other end may wait much longer).
        if ((f.send_over && f.recv_over) || f.send_failed || f.recv_failed) {
          f.done = true;
          --remaining;
        }
      }
      r->over().clear();
      if (error.empty()) error = r->error();
    }
  };
  const TimePs end = start + time_limit_ps + 1;  // run_flows runs the events at the limit too
  const RunProgress* progress =
      options.progress != nullptr && options.progress->report ? options.progress : nullptr;
  TimePs next_report = progress != nullptr ? start + std::max<TimePs>(progress->interval_ps, 1) : kNeverPs;
  TimePs next_sample = sampler ? start + options.series_interval_ps : kNeverPs;
  run_windows(fabric, end, [&](TimePs now) {
    settle();
    if (sampler && now >= next_sample) {
      sampler->sample_now();
      next_sample += options.series_interval_ps;
    }
    if (progress != nullptr && now >= next_report) {
      RunProgress::Sample sample{.flows = specs.size()};
      for (const FlowSpec& f : specs) sample.total_bytes += f.bytes;
      for (const PConn& c : conns) sample.delivered_bytes += c.rx->stats().bytes_received;
      sample.now_ps = now - start;
      sample.done = specs.size() - remaining;
      progress->report(sample);
      next_report += std::max<TimePs>(progress->interval_ps, 1);
    }
    ended = now;
    return BarrierDecision{.stop = remaining == 0 || !error.empty(),
                           .next_barrier_ps = std::min(next_report, next_sample)};
  });
  settle();
  for (uint32_t h = 0; h < n_hosts; ++h) fabric.host(h).set_listener(nullptr);
  if (!error.empty()) return make_error(error);
  if (sampler) sampler->finish();

  std::vector<const engine::Connection*> flow_tx(specs.size(), nullptr), conn_tx;
  for (size_t i = 0; i < specs.size(); ++i) {
    const PFlow& f = flows[i];
    FlowResult& r = result.flows[i];
    r.started_ps = f.send_started ? f.send_started_ps : f.recv_started_ps;
    r.fct_ps = f.fct_ps;
    r.send_done_ps = f.send_done_ps;
    r.failed = f.send_failed || f.recv_failed;
    r.completed = f.done && !r.failed;
    r.error = !f.recv_error.empty() ? f.recv_error : f.send_error;
    if (f.send_started) flow_tx[i] = conns[f.conn].tx;
  }
  for (const PConn& c : conns) conn_tx.push_back(c.tx);
  detail::finish_run_result(result, flow_tx, conn_tx, remaining == 0, ended - start, time_limit_ps, fabric);
  // Samples are taken at barriers, not as events; the runners' own events are left out (fired()).
  result.events = fabric.events_processed();
  for (const auto& r : runners) result.events -= r->fired();
  result.simulated_ps = fabric.sim(0).now();
  return result;
}

}  // namespace megascale::sim
