// The single-bottleneck event loop behind run_fluid (fluid.h). Time is integer picoseconds; the queue
// is a work-conserving FIFO described by one number, the time the link next falls idle, so a segment's
// departure and the queue it found are both known the moment it arrives.
#include "megascale/sim/fluid.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>
#include <utility>

#include "megascale/common/percentile.h"
#include "megascale/common/splitmix.h"
#include "receiver_cnp.h"

namespace megascale::sim {
namespace {

using TimePs = int64_t;
constexpr TimePs kPsPerNs = 1000;
constexpr TimePs kNeverPs = std::numeric_limits<TimePs>::max();

// SplitMix64 (Steele, Lea and Flood, OOPSLA '14): tiny, seedable and the same on every platform,
// which std::uniform_real_distribution is not.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : s_(seed) {}
  double uniform() { return unit_interval(splitmix64_next(s_)); }

 private:
  uint64_t s_;
};

enum class EventKind : uint8_t {
  kSend,
  kArrive,
  kDeliver,
  kAck,
  kCnp,
  kLossNotice,
  kTimer,
  kSample,
  kHalfway,
  kProgress
};

struct Event {
  TimePs t = 0;
  uint64_t order = 0;  // bookkeeping events sort after network events at the same time, then FIFO
  EventKind kind = EventKind::kSend;
  int flow = 0;
  uint32_t gen = 0;    // kSend/kTimer: stale unless it matches the flow's current generation
  uint64_t seq = 0;    // segment number within the flow
  TimePs sent_at = 0;  // when the segment left the sender
  bool ce = false;     // segment carries CE
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : order > o.order; }
};

struct Flow {
  Flow(std::unique_ptr<cc::Controller> controller, TimeNs cnp_interval, TimePs start)
      : cc(std::move(controller)), pacer(cnp_interval), start_ps(start) {}

  std::unique_ptr<cc::Controller> cc;
  ReceiverCnpPacer pacer;
  bool cnp_feedback = false;  // CE goes back as CNPs from `pacer`, else as the ACK's echo
  TimePs start_ps;
  TimePs last_send_ps = 0;
  bool sent_any = false;
  uint64_t next_seq = 0;
  uint64_t recovery_point = 0;  // a loss of a segment numbered below this belongs to the current episode
  uint64_t inflight_bytes = 0;
  TimePs send_at = kNeverPs;
  uint32_t send_gen = 0;
  TimePs timer_at = kNeverPs;
  uint32_t timer_gen = 0;
  std::vector<uint64_t> delivered_at_samples;  // delivered bytes at each sample so far
  uint64_t delivered_at_half = 0;
  FlowSummary stats;
};

class Model {
 public:
  Model(const FluidConfig& config, std::vector<Flow> flows, const ProgressFn& progress)
      : c_(config), flows_(std::move(flows)), progress_(progress), rng_(config.seed) {
    line_rate_bps_ = c_.line_rate_bps > 0 ? c_.line_rate_bps : c_.capacity_bps;
    bytes_per_ps_ = c_.capacity_bps / 8e12;
    ser_ps_ = std::max<TimePs>(1, std::llround(c_.mss_bytes / bytes_per_ps_));
    const TimePs propagation = std::max<TimePs>(0, c_.base_rtt_ns * kPsPerNs - ser_ps_);
    d_fwd_ = propagation / 2;
    d_rev_ = propagation - d_fwd_;
    end_ps_ = c_.duration_ns * kPsPerNs;
    rate_window_samples_ = static_cast<size_t>(
        std::max<TimeNs>(1, (c_.rate_window_ns + c_.sample_interval_ns / 2) / c_.sample_interval_ns));
  }

  FluidResult run() {
    for (int f = 0; f < static_cast<int>(flows_.size()); ++f) {
      Flow& fl = flows_[f];
      fl.cnp_feedback = c_.ecn_feedback == EcnFeedback::kCnp || (c_.ecn_feedback == EcnFeedback::kAuto &&
                                                                 fl.cc->kind() == cc::ControllerKind::kDcqcn);
      refresh_timer(f, fl.start_ps);
      schedule_send(f, fl.start_ps);
    }
    const TimePs sample_ps = c_.sample_interval_ns * kPsPerNs;
    for (TimePs t = 0; t <= end_ps_; t += sample_ps) push(late(t, EventKind::kSample));
    push(late(end_ps_ / 2, EventKind::kHalfway));
    constexpr int kProgressSteps = 40;
    if (progress_)
      for (int k = 1; k <= kProgressSteps; ++k)
        push(late(end_ps_ * k / kProgressSteps, EventKind::kProgress));

    while (!events_.empty() && events_.top().t <= end_ps_) {
      const Event e = events_.top();
      events_.pop();
      dispatch(e);
    }
    return finish();
  }

 private:
  TimeNs ns(TimePs t) const { return t / kPsPerNs; }

  void push(Event e) {
    e.order += next_order_++;
    events_.push(e);
  }
  Event at(TimePs t, EventKind kind, int flow) const {
    Event e;
    e.t = t;
    e.kind = kind;
    e.flow = flow;
    return e;
  }
  Event late(TimePs t, EventKind kind) const {
    Event e = at(t, kind, 0);
    e.order = uint64_t{1} << 62;
    return e;
  }

  void dispatch(const Event& e) {
    switch (e.kind) {
      case EventKind::kSend:
        return on_send_event(e);
      case EventKind::kArrive:
        return on_arrive(e);
      case EventKind::kDeliver:
        return on_deliver(e);
      case EventKind::kAck:
        return on_ack(e);
      case EventKind::kCnp:
        return on_cnp(e);
      case EventKind::kLossNotice:
        return on_loss_notice(e);
      case EventKind::kTimer:
        return on_timer(e);
      case EventKind::kSample:
        return sample(e.t);
      case EventKind::kHalfway:
        for (Flow& fl : flows_) fl.delivered_at_half = fl.stats.delivered_bytes;
        return;
      case EventKind::kProgress:
        return progress_(static_cast<double>(e.t) / static_cast<double>(end_ps_));
    }
  }

  // --- sender ---------------------------------------------------------------------------------------

  void schedule_send(int f, TimePs t) {
    Flow& fl = flows_[f];
    if (fl.send_at == t) return;
    fl.send_at = t;
    Event e = at(t, EventKind::kSend, f);
    e.gen = ++fl.send_gen;
    push(e);
  }
  void cancel_send(Flow& fl) {
    if (fl.send_at == kNeverPs) return;
    fl.send_at = kNeverPs;
    ++fl.send_gen;
  }

  void on_send_event(const Event& e) {
    Flow& fl = flows_[e.flow];
    if (e.gen != fl.send_gen) return;
    fl.send_at = kNeverPs;
    try_send(e.flow, e.t);
  }

  // Sends one segment if the window and the pacer allow it now, else arranges to be called when the
  // pacer will (a window-limited flow is woken by its next ACK or loss notice instead).
  void try_send(int f, TimePs now) {
    Flow& fl = flows_[f];
    if (now < fl.start_ps) return schedule_send(f, fl.start_ps);
    if (fl.inflight_bytes > 0 && static_cast<double>(fl.inflight_bytes + c_.mss_bytes) > fl.cc->cwnd_bytes())
      return cancel_send(fl);
    const double rate = std::clamp(fl.cc->pacing_rate_bps(), 1.0, line_rate_bps_);
    const TimePs gap = std::max<TimePs>(1, std::llround(c_.mss_bytes * 8e12 / rate));
    if (fl.sent_any && fl.last_send_ps + gap > now) return schedule_send(f, fl.last_send_ps + gap);

    cancel_send(fl);
    fl.cc->on_send(ns(now), c_.mss_bytes);
    fl.sent_any = true;
    fl.last_send_ps = now;
    fl.inflight_bytes += c_.mss_bytes;
    ++fl.stats.sent_packets;
    Event arrive = at(now + d_fwd_, EventKind::kArrive, f);
    arrive.seq = fl.next_seq++;
    arrive.sent_at = now;
    push(arrive);
    refresh_timer(f, now);
    try_send(f, now);  // schedules the next segment: the gap is at least 1 ps, so this recurses once
  }

  void refresh_timer(int f, TimePs now) {
    Flow& fl = flows_[f];
    const TimeNs next_ns = fl.cc->next_timer_ns();
    TimePs t = kNeverPs;
    if (next_ns != kNever && next_ns < kNeverPs / kPsPerNs)
      t = std::max(next_ns * kPsPerNs, ns(now) * kPsPerNs + kPsPerNs);  // a due timer runs 1 ns later
    if (t == fl.timer_at) return;
    fl.timer_at = t;
    ++fl.timer_gen;
    if (t == kNeverPs) return;
    Event e = at(t, EventKind::kTimer, f);
    e.gen = fl.timer_gen;
    push(e);
  }

  // After any controller call: its timer may have moved and its window or rate changed.
  void refresh(int f, TimePs now) {
    refresh_timer(f, now);
    try_send(f, now);
  }

  void on_timer(const Event& e) {
    Flow& fl = flows_[e.flow];
    if (e.gen != fl.timer_gen) return;
    fl.timer_at = kNeverPs;
    fl.cc->on_timer(ns(e.t));
    refresh(e.flow, e.t);
  }

  void on_ack(const Event& e) {
    Flow& fl = flows_[e.flow];
    fl.inflight_bytes -= c_.mss_bytes;
    cc::AckSample ack;
    ack.acked_bytes = c_.mss_bytes;
    ack.acked_packets = 1;
    ack.rtt_ns = (e.t - e.sent_at + kPsPerNs / 2) / kPsPerNs;
    ack.ecn_ce = e.ce;
    ack.ce_packets = e.ce ? 1 : 0;
    fl.cc->on_ack(ns(e.t), ack);
    refresh(e.flow, e.t);
  }

  void on_cnp(const Event& e) {
    flows_[e.flow].cc->on_cnp(ns(e.t));
    refresh(e.flow, e.t);
  }

  void on_loss_notice(const Event& e) {
    Flow& fl = flows_[e.flow];
    fl.inflight_bytes -= c_.mss_bytes;
    if (e.seq >= fl.recovery_point) {  // a new loss episode: everything sent so far belongs to it
      fl.recovery_point = fl.next_seq;
      ++fl.stats.loss_episodes;
      fl.cc->on_fast_recovery(ns(e.t));
    }
    refresh(e.flow, e.t);
  }

  // --- bottleneck and receiver ----------------------------------------------------------------------

  double red_probability(double q) const {
    const EcnMarking& m = c_.ecn;
    if (q <= static_cast<double>(m.kmin_bytes)) return 0;
    if (q > static_cast<double>(m.kmax_bytes)) return 1;
    return m.pmax * (q - static_cast<double>(m.kmin_bytes)) /
           static_cast<double>(m.kmax_bytes - m.kmin_bytes);
  }

  void on_arrive(const Event& e) {
    Flow& fl = flows_[e.flow];
    const TimePs backlog_ps = std::max<TimePs>(0, link_free_ps_ - e.t);
    const double q = static_cast<double>(backlog_ps) * bytes_per_ps_;
    if (q + c_.mss_bytes > static_cast<double>(c_.buffer_bytes)) {
      ++fl.stats.drops;
      // The SACK of the next segment to get through reveals the hole about when this one's ACK would have
      // come back.
      Event notice = at(e.t + backlog_ps + ser_ps_ + d_rev_, EventKind::kLossNotice, e.flow);
      notice.seq = e.seq;
      push(notice);
      return;
    }
    bool ce = false;
    if (c_.ecn.enabled) {
      const double p = red_probability(q);
      ce = p >= 1 || (p > 0 && rng_.uniform() < p);
    }
    if (ce) ++fl.stats.ecn_marks;
    waits_ps_.push_back(backlog_ps);
    const TimePs depart = std::max(e.t, link_free_ps_) + ser_ps_;
    link_free_ps_ = depart;
    Event deliver = e;
    deliver.t = depart;
    deliver.kind = EventKind::kDeliver;
    deliver.order = 0;
    deliver.ce = ce;
    push(deliver);
  }

  void on_deliver(const Event& e) {
    Flow& fl = flows_[e.flow];
    fl.stats.delivered_bytes += c_.mss_bytes;
    Event ack = e;
    ack.t = e.t + d_rev_;
    ack.kind = EventKind::kAck;
    ack.order = 0;
    if (fl.cnp_feedback) {
      ack.ce = false;  // RoCE ACKs do not echo CE; the CNP does
      if (fl.pacer.on_packet(ns(e.t), e.ce)) {
        ++fl.stats.cnps;
        push(at(e.t + d_rev_, EventKind::kCnp, e.flow));  // queued before the ACK: processed first
      }
    }
    push(ack);
  }

  // --- output ---------------------------------------------------------------------------------------

  void sample(TimePs t) {
    FluidSeries& s = series_;
    if (s.flows.empty()) s.flows.resize(flows_.size());
    // Segments waiting behind the one on the wire; all segments take ser_ps_ on the link.
    const TimePs backlog_ps = std::max<TimePs>(0, link_free_ps_ - t);
    const TimePs waiting = backlog_ps == 0 ? 0 : (backlog_ps + ser_ps_ - 1) / ser_ps_ - 1;
    const double queue = static_cast<double>(waiting) * c_.mss_bytes;
    s.t_us.push_back(static_cast<double>(t) / 1e6);
    s.queue_bytes.push_back(queue);
    s.queue_delay_us.push_back(queue / bytes_per_ps_ / 1e6);
    const size_t k = s.t_us.size() - 1;
    const size_t back = std::min(k, rate_window_samples_);
    const double window_s = static_cast<double>(back) * static_cast<double>(c_.sample_interval_ns) / 1e9;
    for (size_t f = 0; f < flows_.size(); ++f) {
      Flow& fl = flows_[f];
      FlowSeries& fs = s.flows[f];
      fl.delivered_at_samples.push_back(fl.stats.delivered_bytes);
      const uint64_t bytes = fl.stats.delivered_bytes - fl.delivered_at_samples[k - back];
      fs.rate_gbps.push_back(back == 0 ? 0.0 : static_cast<double>(bytes) * 8 / window_s / 1e9);
      fs.cwnd_bytes.push_back(fl.cc->cwnd_bytes());
      fs.inflight_bytes.push_back(static_cast<double>(fl.inflight_bytes));
      fs.pacing_gbps.push_back(fl.cc->pacing_rate_bps() / 1e9);
    }
  }

  FluidResult finish() {
    FluidResult r;
    r.series = std::move(series_);
    FluidSummary& s = r.summary;
    const double half_s = static_cast<double>(end_ps_ - end_ps_ / 2) / 1e12;
    std::vector<double> means;
    for (Flow& fl : flows_) {
      fl.stats.mean_rate_gbps =
          static_cast<double>(fl.stats.delivered_bytes - fl.delivered_at_half) * 8 / half_s / 1e9;
      means.push_back(fl.stats.mean_rate_gbps);
      s.goodput_gbps += fl.stats.mean_rate_gbps;
      s.ecn_marks += fl.stats.ecn_marks;
      s.cnps += fl.stats.cnps;
      s.drops += fl.stats.drops;
      s.delivered_packets += fl.stats.delivered_bytes / c_.mss_bytes;
      s.flows.push_back(fl.stats);
    }
    s.capacity_fraction = s.goodput_gbps * 1e9 / c_.capacity_bps;
    s.jain = cc::jain_index(means.data(), static_cast<int>(means.size()));
    std::sort(waits_ps_.begin(), waits_ps_.end());
    const double bytes_per_us = bytes_per_ps_ * 1e6;
    s.queue_delay_p50_us = static_cast<double>(percentile_sorted(waits_ps_, 0.50)) / 1e6;
    s.queue_delay_p99_us = static_cast<double>(percentile_sorted(waits_ps_, 0.99)) / 1e6;
    s.queue_delay_max_us = static_cast<double>(percentile_sorted(waits_ps_, 1.0)) / 1e6;
    s.queue_p50_bytes = s.queue_delay_p50_us * bytes_per_us;
    s.queue_p99_bytes = s.queue_delay_p99_us * bytes_per_us;
    s.queue_max_bytes = s.queue_delay_max_us * bytes_per_us;
    return r;
  }

  FluidConfig c_;
  std::vector<Flow> flows_;
  ProgressFn progress_;
  SplitMix64 rng_;
  double line_rate_bps_ = 0;
  double bytes_per_ps_ = 0;  // bottleneck capacity
  TimePs ser_ps_ = 0;        // one segment's serialisation at the bottleneck
  TimePs d_fwd_ = 0, d_rev_ = 0;
  TimePs end_ps_ = 0;
  size_t rate_window_samples_ = 1;  // the rate series averages over this many sampling intervals
  TimePs link_free_ps_ = 0;         // when the bottleneck finishes everything admitted so far
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  uint64_t next_order_ = 0;
  std::vector<TimePs> waits_ps_;
  FluidSeries series_;
};

}  // namespace

Status validate_fluid_config(const FluidConfig& c) {
  auto bad = [](std::string what) { return make_error("fluid model: " + what); };
  if (c.flows < 1 || c.flows > 100'000) return bad(fmt::format("flows must be 1..100000, got {}", c.flows));
  if (!(c.capacity_bps > 0) || !std::isfinite(c.capacity_bps))
    return bad(fmt::format("capacity must be positive, got {} b/s", c.capacity_bps));
  if (!(c.line_rate_bps >= 0) || !std::isfinite(c.line_rate_bps))
    return bad(fmt::format("line rate must be positive (or 0 = capacity), got {} b/s", c.line_rate_bps));
  if (c.mss_bytes == 0 || c.mss_bytes > 1'000'000)
    return bad(fmt::format("mss must be 1..1000000 bytes, got {}", c.mss_bytes));
  const double ser_ns = serialize_ns(c.mss_bytes, c.capacity_bps);
  if (static_cast<double>(c.base_rtt_ns) < ser_ns)
    return bad(fmt::format("base RTT {} ns is shorter than one segment's serialisation ({:.0f} ns)",
                           c.base_rtt_ns, ser_ns));
  if (c.buffer_bytes < c.mss_bytes)
    return bad(fmt::format("buffer {} bytes must hold at least one segment ({} bytes)", c.buffer_bytes,
                           c.mss_bytes));
  if (c.ecn.kmin_bytes > c.ecn.kmax_bytes)
    return bad(fmt::format("ECN Kmin {} bytes is above Kmax {} bytes", c.ecn.kmin_bytes, c.ecn.kmax_bytes));
  if (!(c.ecn.pmax >= 0 && c.ecn.pmax <= 1))
    return bad(fmt::format("ECN Pmax must be in [0, 1], got {}", c.ecn.pmax));
  if (c.cnp_interval_ns < 0)
    return bad(fmt::format("CNP interval must be >= 0, got {} ns", c.cnp_interval_ns));
  if (c.duration_ns <= 0 || c.duration_ns > 100 * kNsPerSec)
    return bad(fmt::format("duration must be in (0, 100 s], got {} ns", c.duration_ns));
  if (c.sample_interval_ns <= 0 || c.sample_interval_ns > c.duration_ns)
    return bad(fmt::format("sample interval must be in (0, duration], got {} ns", c.sample_interval_ns));
  const double points = static_cast<double>(c.duration_ns / c.sample_interval_ns + 1) * c.flows;
  if (points > 5e7)
    return bad(fmt::format("{} flows x {} samples is too much time series; raise the sample interval",
                           c.flows, c.duration_ns / c.sample_interval_ns + 1));
  if (c.rate_window_ns < 0) return bad(fmt::format("rate window must be >= 0, got {} ns", c.rate_window_ns));
  if (c.start_stagger_ns < 0)
    return bad(fmt::format("start stagger must be >= 0, got {} ns", c.start_stagger_ns));
  if (!c.start_ns.empty() && c.start_ns.size() != static_cast<size_t>(c.flows))
    return bad(fmt::format("{} start times given for {} flows", c.start_ns.size(), c.flows));
  for (TimeNs t : c.start_ns)
    if (t < 0) return bad(fmt::format("start time {} ns is negative", t));
  return {};
}

Result<FluidResult> run_fluid(const FluidConfig& config, const ControllerFactory& make,
                              const ProgressFn& progress) {
  if (Status s = validate_fluid_config(config); !s) return s.error();
  cc::FlowParams params;
  params.line_rate_bps = config.line_rate_bps > 0 ? config.line_rate_bps : config.capacity_bps;
  params.mss_bytes = config.mss_bytes;
  params.base_rtt_ns = config.base_rtt_ns;
  std::vector<Flow> flows;
  flows.reserve(static_cast<size_t>(config.flows));
  for (int f = 0; f < config.flows; ++f) {
    std::unique_ptr<cc::Controller> controller = make ? make(params, f) : nullptr;
    if (!controller) return make_error(fmt::format("fluid model: no controller was made for flow {}", f));
    const TimeNs start =
        config.start_ns.empty() ? config.start_stagger_ns * f : config.start_ns[static_cast<size_t>(f)];
    flows.emplace_back(std::move(controller), config.cnp_interval_ns, start * kPsPerNs);
  }
  Model model(config, std::move(flows), progress);
  return model.run();
}

}  // namespace megascale::sim
