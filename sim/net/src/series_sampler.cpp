#include "series_sampler.h"

#include <algorithm>
#include <unordered_map>
#include <utility>

namespace megascale::sim {

SeriesSampler::SeriesSampler(Fabric& fabric, std::vector<std::vector<const engine::Connection*>> rx_by_host,
                             TimePs interval_ps, RunSeries* out)
    : fabric_(fabric),
      rx_by_host_(std::move(rx_by_host)),
      interval_ps_(interval_ps),
      out_(out),
      is_nic_(fabric.queue_count(), false),
      last_rx_bytes_(fabric.host_count(), 0) {
  // Host NICs are the queues the hosts hold; every other queue is a switch port.
  std::unordered_map<const OutputQueue*, size_t> index;
  for (size_t q = 0; q < fabric.queue_count(); ++q) index.emplace(&fabric.queue(q), q);
  owner_.assign(fabric.queue_count(), {0, 0});
  for (uint32_t h = 0; h < fabric.host_count(); ++h) {
    auto it = index.find(fabric.host(h).nic());
    if (it == index.end()) continue;
    is_nic_[it->second] = true;
    owner_[it->second] = {h, 0};
  }
  for (uint32_t sw = 0; sw < fabric.switch_count(); ++sw) {
    Switch& s = fabric.switch_at(sw);
    for (uint32_t port = 0; port < s.port_count(); ++port) {
      auto it = index.find(&s.port(port));
      if (it != index.end()) owner_[it->second] = {sw, port};
    }
  }
  out_->interval_ps = interval_ps;
}

void SeriesSampler::start(TimePs start_ps) {
  start_ps_ = last_sample_ps_ = start_ps;
  for (size_t h = 0; h < rx_by_host_.size(); ++h) last_rx_bytes_[h] = received_bytes(h);
  for (size_t q = 0; q < fabric_.queue_count(); ++q) last_paused_ps_ += fabric_.queue(q).paused_ps();
  fabric_.sim().schedule_at(start_ps + interval_ps_, this);
}

uint64_t SeriesSampler::received_bytes(size_t h) const {
  if (rx_by_host_[h].empty()) return 0;
  // The endpoint's sum over its connections rather than a walk over the run's receiving ones (5,000
  // at Swift's incast receiver, every sample): the same bytes, since every connection of a run's
  // endpoints is the run's and carries its flows one way (run_flows, workload.cpp).
  return fabric_.host(static_cast<uint32_t>(h)).endpoint().stats().bytes_received;
}

void SeriesSampler::on_event() {
  if (stopped_) return;
  ++fired_;
  sample();
  fabric_.sim().schedule_in(interval_ps_, this);
}

void SeriesSampler::sample() {
  const TimePs now = fabric_.sim().now();
  last_sample_ps_ = now;
  SeriesPoint p;
  p.t_ps = now - start_ps_;
  const auto interval = static_cast<uint32_t>(out_->points.size());
  for (size_t h = 0; h < rx_by_host_.size(); ++h) {
    const uint64_t b = received_bytes(h);
    const uint64_t delta = b - last_rx_bytes_[h];
    last_rx_bytes_[h] = b;
    if (delta == 0) continue;
    p.delivered_bytes += delta;
    out_->per_receiver.push_back(ReceiverBytes{interval, static_cast<uint32_t>(h), delta});
  }
  TimePs paused = 0;
  for (size_t q = 0; q < fabric_.queue_count(); ++q) {
    const OutputQueue& queue = fabric_.queue(q);
    paused += queue.paused_ps();
    if (queue.paused()) ++p.paused_ports;
    if (is_nic_[q]) continue;
    const uint64_t backlog = queue.backlog_bytes();
    p.switch_backlog_bytes += backlog;
    p.max_port_backlog_bytes = std::max(p.max_port_backlog_bytes, backlog);
    const uint32_t bucket = queue_bucket(backlog);
    if (out_->queue_histogram.size() <= bucket) out_->queue_histogram.resize(bucket + 1, 0);
    ++out_->queue_histogram[bucket];
  }
  p.paused_ps = paused - last_paused_ps_;
  last_paused_ps_ = paused;
  out_->points.push_back(p);
}

void SeriesSampler::finish() {
  stopped_ = true;
  if (fabric_.sim().now() > last_sample_ps_) sample();
  for (size_t q = 0; q < fabric_.queue_count(); ++q) {
    const OutputQueue& queue = fabric_.queue(q);
    const QueueStats& st = queue.stats();
    out_->ports.push_back(PortRecord{.nic = is_nic_[q],
                                     .owner = owner_[q].first,
                                     .port = owner_[q].second,
                                     .queue = static_cast<uint32_t>(q),
                                     .rate_bps = queue.config().rate_bps,
                                     .bytes_sent = st.bytes_sent,
                                     .max_backlog_bytes = st.max_bytes,
                                     .drops = st.dropped,
                                     .ecn_marks = st.marked,
                                     .pfc_pauses = st.pauses,
                                     .pfc_paused_ps = queue.paused_ps()});
  }
}

// Partitioned runs (partition.h): start() without the event; samples come from sample_now().
void SeriesSampler::start_driven(TimePs start_ps) {
  start_ps_ = last_sample_ps_ = start_ps;
  for (size_t h = 0; h < rx_by_host_.size(); ++h) {
    uint64_t b = 0;
    for (const engine::Connection* c : rx_by_host_[h]) b += c->stats().bytes_received;
    last_rx_bytes_[h] = b;
  }
  for (size_t q = 0; q < fabric_.queue_count(); ++q) last_paused_ps_ += fabric_.queue(q).paused_ps();
}

}  // namespace megascale::sim
