// The flows of a scenario's workload (scenario.h): incast, permutation, all-to-all, collective
// (collective.h) and Poisson (flow_cdf.h).
#include <fmt/format.h>

#include "megascale/sim/flow_cdf.h"
#include "megascale/sim/scenario.h"

namespace megascale::sim {

Result<std::vector<FlowSpec>> scenario_flows(const SimScenario& s, uint32_t hosts, uint64_t host_rate_bps,
                                             uint32_t* group_ranks) {
  auto bad = [&](const std::string& why) {
    return make_error(fmt::format("{}:{}: workload: {}", s.source, s.workload_line, why));
  };
  const uint32_t used = s.workload_hosts == 0 ? hosts : s.workload_hosts;
  if (used > hosts) return bad(fmt::format("hosts: {}: the fabric has {} hosts", used, hosts));
  switch (s.workload) {
    case SimScenario::Workload::incast:
      if (s.receiver >= hosts || s.senders >= hosts)
        return make_error(fmt::format("{}: incast of {} senders to host {} needs more than {} hosts",
                                      s.source, s.senders, s.receiver, hosts));
      {
        std::vector<FlowSpec> flows = incast_flows(s.senders, s.receiver, s.bytes, s.flows_per_sender);
        if (s.start_spread_ps > 0) {
          // Its own stream, as poisson's below.
          Rng rng(s.seed ^ 0x57A27579EADULL);
          // uniform(), not below(): a spread in ps passes 2^32 (4.3 ms) and below() takes 32-bit bounds.
          for (FlowSpec& f : flows)
            f.start_ps = static_cast<TimePs>(rng.uniform() * static_cast<double>(s.start_spread_ps));
        }
        return flows;
      }
    case SimScenario::Workload::permutation: {
      Rng rng(s.seed ^ 0x5EED5EED5EED5EEDULL);
      return permutation_flows(hosts, s.bytes, rng);
    }
    case SimScenario::Workload::all_to_all: {
      std::vector<uint32_t> group(used);
      for (uint32_t h = 0; h < used; ++h) group[h] = h;
      return all_to_all_flows(group, s.bytes);
    }
    case SimScenario::Workload::collective: {
      // The job's ranks are hosts 0..used-1 (all of the fabric's unless `hosts` is given).
      Parallelism3D p = s.parallel;
      if (p.dp == 0) {  // the rest of the hosts
        if (used % (uint64_t{p.tp} * p.pp) != 0)
          return bad(fmt::format("tp {} x pp {} does not divide the {} hosts (NICs)", p.tp, p.pp, used));
        p.dp = used / (p.tp * p.pp);
      }
      std::vector<SimScenario::Phase> phases = s.phases;
      if (phases.empty())
        phases.push_back(SimScenario::Phase{
            .group = s.group, .op = s.op, .algorithm = s.algorithm, .bytes = s.bytes, .chunks = s.chunks});
      std::vector<FlowSpec> flows;
      size_t prev_begin = 0;
      for (size_t k = 0; k < phases.size(); ++k) {
        const SimScenario::Phase& ph = phases[k];
        auto groups = parallel_groups(p, used, ph.group);
        if (!groups) return bad(groups.error().message);
        const size_t begin = flows.size();
        for (const std::vector<uint32_t>& g : *groups) {
          if (g.size() < 2) return bad(fmt::format("groups of {} rank have no traffic", g.size()));
          Status st = ph.op == CollectiveOp::send_recv ? append_pipeline_flows(flows, g, ph.bytes)
                      : ph.algorithm == CollectiveAlgorithm::ring
                          ? append_ring_flows(flows, g, ph.op, ph.bytes)
                          : append_tree_all_reduce_flows(flows, g, ph.bytes, ph.chunks,
                                                         ph.algorithm == CollectiveAlgorithm::double_tree);
          if (!st) return bad(st.error().message);
        }
        if (k > 0) chain_after_phase(flows, prev_begin, begin);
        prev_begin = begin;
        if (group_ranks != nullptr && phases.size() == 1)
          *group_ranks = static_cast<uint32_t>(groups->front().size());
      }
      return flows;
    }
    case SimScenario::Workload::poisson: {
      auto cdf = FlowSizeCdf::load(s.cdf);
      if (!cdf) return bad(cdf.error().message);
      // Its own stream, so the flows do not depend on what else draws from the simulation's PRNG.
      Rng rng(s.seed ^ 0xF10CDF0F10CDF0F1ULL);
      return poisson_flows(
          PoissonLoad{
              .hosts = used, .load = s.load, .host_rate_bps = host_rate_bps, .duration_ps = s.duration_ps},
          *cdf, rng);
    }
  }
  return bad("unknown kind");
}

}  // namespace megascale::sim
