#include "megascale/sim/fabric.h"

#include <string>
#include <utility>

#include "megascale/common/splitmix.h"

namespace megascale::sim {

namespace {
uint64_t mix64(uint64_t z) {
  return splitmix64_next(z);  // a copy of z is the state: one step of the sequence from it
}
}  // namespace

Fabric::Fabric(const FabricConfig& config)
    : cfg_(config), sim_(config.seed), canonical_(config.canonical_order || config.partitions > 1) {
  // Partition p > 0 gets its own PRNG stream (partition.h: a partition count fixes the run, as a seed
  // does); partition 0 keeps the seed's, so one partition is the simulation of before.
  for (uint32_t p = 1; p < config.partitions; ++p) {
    extra_sims_.push_back(std::make_unique<Simulation>(mix64(config.seed ^ (uint64_t{p} << 40))));
    extra_pools_.push_back(std::make_unique<PacketPool>());
  }
  if (config.partitions > 1) cross_ = std::make_unique<PartitionLinks>(config.partitions);
  sim_.set_canonical_order(canonical_);
  for (auto& s : extra_sims_) s->set_canonical_order(canonical_);
}

Rng* Fabric::spray_rng(uint32_t switch_id) {
  if (!canonical_) return &sim(switch_partition(switch_id)).rng();
  while (spray_rngs_.size() <= switch_id) {
    const uint64_t id = spray_rngs_.size();
    spray_rngs_.emplace_back(mix64(cfg_.seed ^ 0x5B4A7E5EEDULL ^ (id << 32)));
  }
  return &spray_rngs_[switch_id];
}

Status Fabric::set_partition_map(PartitionMap map) {
  if (!hosts_.empty() || !switches_.empty())
    return make_error("partition map: set it before adding elements");
  for (uint32_t p : map.switch_partition)
    if (p >= partition_count()) return make_error("partition map: switch partition out of range");
  for (uint32_t p : map.host_partition)
    if (p >= partition_count()) return make_error("partition map: host partition out of range");
  map_ = std::move(map);
  return Status{};
}

uint64_t Fabric::events_processed() const {
  uint64_t n = sim_.events_processed();
  for (const auto& s : extra_sims_) n += s->events_processed();
  return n;
}

QueueConfig Fabric::switch_port(uint64_t rate_bps) const {
  // Lossless: the ingresses' PFC thresholds and headroom bound the buffer, not the output queue.
  if (cfg_.priorities < 2 && cfg_.shared_buffer.bytes == 0) {
    const uint64_t capacity = cfg_.pfc.enabled ? ~uint64_t{0} / 2 : cfg_.switch_buffer_bytes;
    return QueueConfig{.rate_bps = rate_bps, .capacity_bytes = capacity, .red = cfg_.red};
  }
  // Priorities or a shared buffer: the data class is lossless with PFC; the control class (and lossy
  // data) is held by switch_buffer_bytes per port, or by the shared buffer's threshold.
  return QueueConfig{.rate_bps = rate_bps,
                     .capacity_bytes = cfg_.switch_buffer_bytes,
                     .red = cfg_.red,
                     .priorities = cfg_.priorities,
                     .lossless = cfg_.pfc.enabled};
}

Result<Host*> Fabric::add_host() {
  const auto address = static_cast<uint32_t>(hosts_.size());
  engine::EngineConfig ec = cfg_.engine;
  ec.virtual_payload = true;
  // Connection arrays grow on demand (same packets, engine/config.h): a 12,288-host permutation's
  // 24,576 connection ends would otherwise take ~0.55 MiB each, allocated whole.
  ec.grow_connection_state = true;
  // Simulated hosts replay no one's datagrams: accept at the SYN, with the packets (and so the
  // published results) of versions 1 and 2.
  ec.confirm_handshake = false;
  ec.seed = mix64(cfg_.engine.seed ^ (uint64_t{address} << 20));
  ec.cc.flow.line_rate_bps = static_cast<double>(cfg_.host_rate_bps);
  auto ep = engine::Endpoint::create(ec);
  if (!ep.ok()) return make_error("host " + std::to_string(address) + ": " + ep.error().message);
  const uint32_t part = host_partition(address);
  hosts_.push_back(std::make_unique<Host>(sim(part), pool(part), address, std::move(*ep)));
  number(*hosts_.back());
  return hosts_.back().get();
}

Switch& Fabric::add_switch() {
  const auto id = static_cast<uint32_t>(switches_.size());
  switches_.push_back(
      std::make_unique<Switch>(id, mix64(cfg_.seed * 31 + id), pool(switch_partition(id)), cfg_.hash));
  if (cfg_.shared_buffer.bytes != 0) buffers_.push_back(std::make_unique<SharedBuffer>(cfg_.shared_buffer));
  return *switches_.back();
}

OutputQueue& Fabric::add_port(const QueueConfig& q, PacketSink* far_end) {
  return add_port_between(q, far_end, 0, 0);
}

OutputQueue& Fabric::add_port_between(const QueueConfig& q, PacketSink* far_end, uint32_t from, uint32_t to) {
  // The link delivers in its far end's partition; a queue in another partition posts into the mailbox.
  links_.push_back(std::make_unique<Link>(sim(to), cfg_.link_delay_ps, far_end, &pool(to)));
  number(*links_.back());
  PacketSink* next = links_.back().get();
  if (from != to) next = &cross_->add_link(sim(from), pool(from), from, to, *links_.back());
  queues_.push_back(std::make_unique<OutputQueue>(sim(from), pool(from), q, next));
  number(*queues_.back());
  if (canonical_) queues_.back()->use_own_rng(mix64(cfg_.seed ^ (uint64_t{next_order_id_} << 24)));
  return *queues_.back();
}

OutputQueue& Fabric::add_port_into(const QueueConfig& q, Switch& sw) {
  return add_port_into_from(q, sw, switch_partition(sw.id()));
}

OutputQueue& Fabric::add_port_into_from(const QueueConfig& q, Switch& sw, uint32_t from) {
  const uint32_t to = switch_partition(sw.id());
  OutputQueue& port = add_port_between(q, nullptr, from, to);
  ingresses_.push_back(std::make_unique<SwitchIngress>(sim(to), pool(to), &sw, &port, cfg_.link_delay_ps,
                                                       q.rate_bps, cfg_.pfc));
  ingresses_.back()->set_shared_buffer(shared_buffer(sw.id()));
  ingresses_.back()->set_lossless_data_only(cfg_.priorities > 1);
  const uint32_t ingress_id = next_order_id_;
  number(*ingresses_.back());
  // Across partitions the PAUSE/RESUME events are the receiver's, under the ingress's id: the same
  // events, in the same order, as the ingress's own on one partition.
  if (from != to && cfg_.pfc.enabled) {
    ingresses_.back()->set_remote_upstream(
        &cross_->add_pause(sim(to), to, from, sim(from), port, ingress_id));
  }
  // Without PFC an ingress only counts (it never pauses or drops, and charges no shared buffer), so the
  // link feeds the switch directly: the same run with two fewer cold objects touched per frame and hop
  // (at 12,288 hosts the simulator is bound by such cache misses). Its counters then stay zero.
  links_.back()->set_far_end(cfg_.pfc.enabled ? static_cast<PacketSink*>(ingresses_.back().get()) : &sw);
  return port;
}

uint32_t Fabric::attach_host(Host& host, Switch& sw) {
  // The NIC never drops: the engine's windows bound what it holds (it pulls one frame at a time).
  OutputQueue& nic = add_port_into_from(
      QueueConfig{.rate_bps = cfg_.host_rate_bps, .capacity_bytes = ~uint64_t{0} / 2, .red = {}}, sw,
      host_partition(host.address()));
  host.attach_nic(&nic);
  OutputQueue& down = add_port_between(switch_port(cfg_.host_rate_bps), &host, switch_partition(sw.id()),
                                       host_partition(host.address()));
  down.set_shared_buffer(shared_buffer(sw.id()));
  return sw.add_port(&down);
}

std::pair<uint32_t, uint32_t> Fabric::connect_switches(Switch& a, Switch& b, uint64_t rate_bps) {
  const uint64_t rate = rate_bps != 0 ? rate_bps : cfg_.fabric_rate_bps;
  OutputQueue& to_b = add_port_into_from(switch_port(rate), b, switch_partition(a.id()));
  to_b.set_shared_buffer(shared_buffer(a.id()));
  OutputQueue& to_a = add_port_into_from(switch_port(rate), a, switch_partition(b.id()));
  to_a.set_shared_buffer(shared_buffer(b.id()));
  return {a.add_port(&to_b), b.add_port(&to_a)};
}

uint64_t Fabric::total_drops() const {
  uint64_t n = 0;
  for (const auto& q : queues_) n += q->stats().dropped;
  for (const auto& in : ingresses_) n += in->stats().headroom_drops;
  return n;
}

uint64_t Fabric::total_link_down_drops() const {
  uint64_t n = 0;
  for (const auto& l : links_) n += l->down_drops();
  return n;
}

uint64_t Fabric::total_pauses() const {
  uint64_t n = 0;
  for (const auto& in : ingresses_) n += in->stats().pauses_sent;
  return n;
}

TimePs Fabric::total_paused_ps() const {
  TimePs t = 0;
  for (const auto& q : queues_) t += q->paused_ps();
  return t;
}

uint64_t Fabric::total_marks() const {
  uint64_t n = 0;
  for (const auto& q : queues_) n += q->stats().marked;
  return n;
}

Result<std::unique_ptr<Fabric>> build_star(const FabricConfig& config, uint32_t hosts) {
  if (hosts < 2) return make_error("star: need at least 2 hosts, got " + std::to_string(hosts));
  auto f = std::make_unique<Fabric>(config);
  if (config.partitions > 1) {
    // The switch in partition 0, the hosts in equal blocks: every host link crosses.
    PartitionMap map = block_partition_map(1, hosts, config.partitions);
    map.switch_partition[0] = 0;
    if (Status st = f->set_partition_map(std::move(map)); !st) return st.error();
  }
  Switch& sw = f->add_switch();
  for (uint32_t h = 0; h < hosts; ++h) {
    auto host = f->add_host();
    if (!host.ok()) return host.error();
    sw.set_route(h, {f->attach_host(**host, sw)});
  }
  return f;
}

Result<std::unique_ptr<Fabric>> build_leaf_spine(const FabricConfig& config, const LeafSpineShape& shape) {
  if (shape.leaves < 1 || shape.spines < 1 || shape.hosts_per_leaf < 1) {
    return make_error("leaf-spine: leaves, spines and hosts_per_leaf must be >= 1");
  }
  auto f = std::make_unique<Fabric>(config);
  if (config.partitions > 1) {
    // Leaves (and their hosts) in equal blocks, spines in equal blocks; switch ids: leaves, then spines.
    const uint32_t n_hosts = shape.leaves * shape.hosts_per_leaf;
    PartitionMap leaves_map = block_partition_map(shape.leaves, n_hosts, config.partitions);
    PartitionMap spines_map = block_partition_map(shape.spines, 0, config.partitions);
    PartitionMap map;
    map.switch_partition = leaves_map.switch_partition;
    map.switch_partition.insert(map.switch_partition.end(), spines_map.switch_partition.begin(),
                                spines_map.switch_partition.end());
    for (uint32_t h = 0; h < n_hosts; ++h)
      map.host_partition.push_back(leaves_map.switch_partition[h / shape.hosts_per_leaf]);
    if (Status st = f->set_partition_map(std::move(map)); !st) return st.error();
  }
  std::vector<Switch*> leaves, spines;
  for (uint32_t l = 0; l < shape.leaves; ++l) leaves.push_back(&f->add_switch());
  for (uint32_t s = 0; s < shape.spines; ++s) spines.push_back(&f->add_switch());
  const uint32_t n = shape.leaves * shape.hosts_per_leaf;
  std::vector<uint32_t> down(n);  // leaf port toward each host
  for (uint32_t h = 0; h < n; ++h) {
    auto host = f->add_host();
    if (!host.ok()) return host.error();
    down[h] = f->attach_host(**host, *leaves[h / shape.hosts_per_leaf]);
  }
  // up[l][s]: leaf l's port to spine s; to_leaf[s][l]: spine s's port to leaf l.
  std::vector<std::vector<uint32_t>> up(shape.leaves, std::vector<uint32_t>(shape.spines));
  std::vector<std::vector<uint32_t>> to_leaf(shape.spines, std::vector<uint32_t>(shape.leaves));
  for (uint32_t l = 0; l < shape.leaves; ++l) {
    for (uint32_t s = 0; s < shape.spines; ++s) {
      auto [ls, sl] = f->connect_switches(*leaves[l], *spines[s]);
      up[l][s] = ls;
      to_leaf[s][l] = sl;
    }
  }
  for (uint32_t h = 0; h < n; ++h) {
    const uint32_t home = h / shape.hosts_per_leaf;
    for (uint32_t l = 0; l < shape.leaves; ++l) {
      leaves[l]->set_route(h, l == home ? std::vector<uint32_t>{down[h]} : up[l]);
    }
    for (uint32_t s = 0; s < shape.spines; ++s) spines[s]->set_route(h, {to_leaf[s][home]});
  }
  return f;
}

}  // namespace megascale::sim
