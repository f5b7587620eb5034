// The flow runners' shared set-up and totals (flow_setup.h).
#include "flow_setup.h"

#include <algorithm>
#include <map>
#include <unordered_map>

namespace megascale::sim::detail {

Result<FlowPairs> group_pairs(const std::vector<FlowSpec>& specs, uint32_t n_hosts, RunResult& result,
                              const std::function<std::string(size_t)>& check_flow) {
  FlowPairs g;
  g.pair_of_flow.assign(specs.size(), 0);
  g.nth_of_pair.assign(specs.size(), 0);
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> pair_index;
  for (size_t i = 0; i < specs.size(); ++i) {
    const FlowSpec& s = specs[i];
    if (s.src >= n_hosts || s.dst >= n_hosts || s.src == s.dst) {
      return make_error("flow " + std::to_string(i) + ": bad hosts " + std::to_string(s.src) + " -> " +
                        std::to_string(s.dst) + " (fabric has " + std::to_string(n_hosts) + ")");
    }
    if (check_flow) {
      if (std::string why = check_flow(i); !why.empty()) return make_error(why);
    }
    auto [it, added] =
        pair_index.emplace(std::make_pair(s.src, s.dst), static_cast<uint32_t>(g.pairs.size()));
    if (added) {
      g.pairs.emplace_back(s.src, s.dst);
      g.flows_of_pair.push_back(0);
    }
    g.pair_of_flow[i] = it->second;
    g.nth_of_pair[i] = g.flows_of_pair[it->second]++;
    result.flows.push_back(FlowResult{.spec = s});
  }
  return g;
}

Result<std::vector<engine::Connection*>> open_connections(Fabric& fabric, FlowPairs& g, uint32_t per_pair,
                                                          TimePs now_ps) {
  std::vector<engine::Connection*> tx;
  g.conns_of_pair.assign(g.pairs.size(), {});
  for (size_t p = 0; p < g.pairs.size(); ++p) {
    for (uint32_t k = 0; k < std::min(per_pair, g.flows_of_pair[p]); ++k) {
      Host& src = fabric.host(g.pairs[p].first);
      auto id = src.endpoint().connect(ns_from_ps(now_ps), g.pairs[p].second);
      if (!id.ok())
        return make_error("connect " + std::to_string(g.pairs[p].first) + " -> " +
                          std::to_string(g.pairs[p].second) + ": " + id.error().message);
      g.conns_of_pair[p].push_back(static_cast<uint32_t>(tx.size()));
      tx.push_back(src.endpoint().connection(*id));
      src.kick();
    }
  }
  return tx;
}

Result<std::vector<engine::Connection*>> match_accepted(Fabric& fabric,
                                                        const std::vector<engine::Connection*>& tx) {
  std::unordered_map<engine::ConnId, engine::Connection*> accepted;
  for (uint32_t h = 0; h < fabric.host_count(); ++h) {
    while (auto a = fabric.host(h).endpoint().accept())
      accepted.emplace(*a, fabric.host(h).endpoint().connection(*a));
  }
  std::vector<engine::Connection*> rx;
  rx.reserve(tx.size());
  for (const engine::Connection* c : tx) {
    auto it = accepted.find(c->remote_id());
    if (it == accepted.end())
      return make_error("connection to " + std::to_string(c->peer()) + ": not accepted at the receiver");
    rx.push_back(it->second);
  }
  return rx;
}

std::vector<std::vector<const engine::Connection*>> receivers_by_host(
    const FlowPairs& g, const std::vector<engine::Connection*>& rx, uint32_t n_hosts) {
  std::vector<std::vector<const engine::Connection*>> by_host(n_hosts);
  for (size_t p = 0; p < g.pairs.size(); ++p) {
    for (uint32_t c : g.conns_of_pair[p]) by_host[g.pairs[p].second].push_back(rx[c]);
  }
  return by_host;
}

void finish_run_result(RunResult& result, const std::vector<const engine::Connection*>& flow_tx,
                       const std::vector<const engine::Connection*>& conn_tx, bool ended, TimePs elapsed_ps,
                       TimePs time_limit_ps, const Fabric& fabric) {
  uint64_t bytes = 0;
  TimePs last = 0;
  for (size_t i = 0; i < result.flows.size(); ++i) {
    FlowResult& r = result.flows[i];
    if (r.failed) ++result.failed;
    if (flow_tx[i] == nullptr) continue;
    const engine::ConnectionStats& st = flow_tx[i]->stats();
    r.retransmits = st.retransmits();
    r.timeouts = st.timeouts;
    r.rtt_samples = st.rtt.count();
    r.rtt_p50_ps = ps_from_ns(static_cast<uint64_t>(st.rtt.percentile_ns(0.5)));
    r.rtt_p99_ps = ps_from_ns(static_cast<uint64_t>(st.rtt.percentile_ns(0.99)));
    if (r.completed) {
      ++result.completed;
      bytes += r.spec.bytes;
      last = std::max(last, r.started_ps + r.fct_ps);
    }
  }
  for (const engine::Connection* c : conn_tx) {
    result.retransmits += c->stats().retransmits();
    result.timeouts += c->stats().timeouts;
  }
  result.makespan_ps = result.completed == result.flows.size() ? last : ended ? elapsed_ps : time_limit_ps;
  result.goodput_bps = result.makespan_ps > 0
                           ? static_cast<double>(bytes) * 8e12 / static_cast<double>(result.makespan_ps)
                           : 0.0;
  result.drops = fabric.total_drops();
  result.link_down_drops = fabric.total_link_down_drops();
  result.ecn_marks = fabric.total_marks();
  result.pfc_pauses = fabric.total_pauses();
  result.pfc_paused_ps = fabric.total_paused_ps();
}

}  // namespace megascale::sim::detail
