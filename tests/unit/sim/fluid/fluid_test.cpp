// The single-bottleneck model (sim/fluid): conservation, queueing, RTT, ECN/CNP feedback, losses,
// timers and determinism, driven by small controllers written here so the model is tested on its own.
#include "megascale/sim/fluid.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

namespace megascale::sim {
namespace {

using cc::AckSample;
using cc::Controller;
using cc::ControllerKind;
using cc::ControllerState;

// What the model told the controllers, summed over every flow.
struct Tally {
  uint64_t acks = 0, ce_acks = 0, cnps = 0, fast_recoveries = 0, timers = 0, sent_bytes = 0;
  std::vector<std::pair<TimeNs, TimeNs>> rtts;  // (now, rtt_ns)
  TimeNs latest_timer_lateness_ns = 0;
};

// Base for the test controllers: counts every call into a Tally.
class Counting : public Controller {
 public:
  Counting(Tally* tally, ControllerKind kind) : tally_(tally), kind_(kind) {}
  ControllerKind kind() const override { return kind_; }
  void on_send(TimeNs, uint64_t bytes) override { tally_->sent_bytes += bytes; }
  void on_ack(TimeNs now, const AckSample& ack) override {
    ++tally_->acks;
    tally_->ce_acks += ack.ecn_ce ? 1 : 0;
    tally_->rtts.emplace_back(now, ack.rtt_ns);
  }
  void on_cnp(TimeNs) override { ++tally_->cnps; }
  void on_fast_recovery(TimeNs) override { ++tally_->fast_recoveries; }
  void on_rto(TimeNs) override {}
  void on_timer(TimeNs) override {}
  TimeNs next_timer_ns() const override { return kNever; }
  ControllerState state() const override {
    return ControllerState{.cwnd_bytes = cwnd_bytes(), .pacing_rate_bps = pacing_rate_bps()};
  }

 protected:
  Tally* tally_;
  ControllerKind kind_;
};

// Sends at a fixed rate, with a fixed window; reacts to nothing.
class FixedController : public Counting {
 public:
  FixedController(Tally* t, double rate_bps, double window_bytes,
                  ControllerKind kind = ControllerKind::kFixedWindow)
      : Counting(t, kind), rate_bps_(rate_bps), window_bytes_(window_bytes) {}
  double cwnd_bytes() const override { return window_bytes_; }
  double pacing_rate_bps() const override { return rate_bps_; }

 private:
  double rate_bps_, window_bytes_;
};

// Textbook AIMD window (Chiu and Jain 1989): +1 MSS per window of ACKs, halve on any congestion signal
// (ECN echo, CNP, loss) at most once per RTT. Paced at the line rate.
class AimdController : public Counting {
 public:
  AimdController(Tally* t, const cc::FlowParams& flow, ControllerKind kind)
      : Counting(t, kind), flow_(flow), cwnd_(10.0 * flow.mss_bytes) {}
  void on_ack(TimeNs now, const AckSample& ack) override {
    Counting::on_ack(now, ack);
    last_rtt_ = ack.rtt_ns;
    if (ack.ecn_ce) return cut(now);
    cwnd_ += static_cast<double>(flow_.mss_bytes) * static_cast<double>(ack.acked_bytes) / cwnd_;
  }
  void on_cnp(TimeNs now) override {
    Counting::on_cnp(now);
    cut(now);
  }
  void on_fast_recovery(TimeNs now) override {
    Counting::on_fast_recovery(now);
    cut(now);
  }
  double cwnd_bytes() const override { return cwnd_; }
  double pacing_rate_bps() const override { return flow_.line_rate_bps; }

 private:
  void cut(TimeNs now) {
    if (now - last_cut_ < last_rtt_) return;
    last_cut_ = now;
    cwnd_ = std::max<double>(flow_.mss_bytes, cwnd_ / 2);
  }
  cc::FlowParams flow_;
  double cwnd_;
  TimeNs last_rtt_ = 0, last_cut_ = -kNsPerSec;
};

// A controller with a periodic timer, like DCQCN's alpha timer.
class TimerController : public FixedController {
 public:
  TimerController(Tally* t, TimeNs period)
      : FixedController(t, gbps(10), 1e18), period_(period), next_(period) {}
  void on_timer(TimeNs now) override {
    if (now < next_) return;
    ++tally_->timers;
    tally_->latest_timer_lateness_ns = std::max(tally_->latest_timer_lateness_ns, now - next_);
    next_ += period_;
  }
  TimeNs next_timer_ns() const override { return next_; }

 private:
  TimeNs period_, next_;
};

ControllerFactory fixed(Tally* t, double rate_bps, double window_bytes = 1e18,
                        ControllerKind kind = ControllerKind::kFixedWindow) {
  return [=](const cc::FlowParams&, int) {
    return std::make_unique<FixedController>(t, rate_bps, window_bytes, kind);
  };
}

ControllerFactory aimd(Tally* t, ControllerKind kind = ControllerKind::kHybrid) {
  return [=](const cc::FlowParams& flow, int) { return std::make_unique<AimdController>(t, flow, kind); };
}

FluidResult run(const FluidConfig& config, const ControllerFactory& make) {
  Result<FluidResult> r = run_fluid(config, make);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? std::move(r).value() : FluidResult{};
}

double max_of(const std::vector<double>& v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

TEST(FluidTest, SingleFlowBelowCapacityNeverQueues) {
  FluidConfig config;
  config.flows = 1;
  config.duration_ns = 2 * kNsPerMs;
  Tally tally;
  FluidResult r = run(config, fixed(&tally, gbps(90)));
  EXPECT_EQ(r.summary.queue_max_bytes, 0);
  EXPECT_EQ(max_of(r.series.queue_bytes), 0);
  EXPECT_EQ(r.summary.drops, 0u);
  EXPECT_EQ(r.summary.ecn_marks, 0u);
  EXPECT_NEAR(r.summary.goodput_gbps, 90, 0.5);
  ASSERT_FALSE(tally.rtts.empty());
  for (auto [now, rtt] : tally.rtts) ASSERT_EQ(rtt, config.base_rtt_ns) << "at " << now;
  // Once a full rate window (100 us) has passed, the rate series reads the sending rate.
  for (size_t k = 0; k < r.series.t_us.size(); ++k) {
    if (r.series.t_us[k] < 120) continue;
    ASSERT_NEAR(r.series.flows[0].rate_gbps[k], 90, 0.5) << "at " << r.series.t_us[k];
  }
}

TEST(FluidTest, StaggeredFlowsBelowCapacityNeverQueue) {
  // Four 20 Gb/s flows send a segment every 1638.4 ns; staggered by a quarter of that, their segments
  // (327.68 ns each at 100 Gb/s) never overlap at the bottleneck.
  FluidConfig config;
  config.flows = 4;
  config.start_stagger_ns = 410;
  config.duration_ns = 2 * kNsPerMs;
  Tally tally;
  FluidResult r = run(config, fixed(&tally, gbps(20)));
  EXPECT_EQ(r.summary.queue_max_bytes, 0);
  EXPECT_NEAR(r.summary.goodput_gbps, 80, 0.5);
  EXPECT_GT(r.summary.jain, 0.999);
}

TEST(FluidTest, AboveCapacityFillsTheBufferAndDropsOncePerEpisode) {
  FluidConfig config;
  config.flows = 2;
  config.buffer_bytes = 256 * 1024;
  config.duration_ns = 2 * kNsPerMs;
  Tally tally;
  FluidResult r = run(config, fixed(&tally, gbps(75)));
  const double buffer = static_cast<double>(config.buffer_bytes);
  EXPECT_LE(max_of(r.series.queue_bytes), buffer);
  EXPECT_GE(max_of(r.series.queue_bytes), buffer - 2 * config.mss_bytes);
  EXPECT_LE(r.summary.queue_max_bytes, buffer - config.mss_bytes);
  EXPECT_GT(r.summary.drops, 0u);
  // Offered 150 Gb/s into 100: a third is dropped, the link stays full.
  const double offered = static_cast<double>(r.summary.drops + r.summary.delivered_packets);
  EXPECT_NEAR(static_cast<double>(r.summary.drops) / offered, 1.0 / 3, 0.05);
  EXPECT_NEAR(r.summary.capacity_fraction, 1.0, 0.01);
  // Losses reach the sender once per episode, not once per dropped segment.
  uint64_t episodes = 0;
  for (const FlowSummary& f : r.summary.flows) episodes += f.loss_episodes;
  EXPECT_EQ(tally.fast_recoveries, episodes);
  EXPECT_GE(episodes, 2u);
  EXPECT_LT(episodes * 10, r.summary.drops);
}

TEST(FluidTest, DeliveredDataIsConservedAndBoundedByCapacity) {
  FluidConfig config;
  config.duration_ns = 5 * kNsPerMs;
  config.buffer_bytes = 200 * 1024;
  Tally tally;
  FluidResult r = run(config, aimd(&tally));
  const double capacity_bytes = config.capacity_bps / 8 * static_cast<double>(config.duration_ns) / 1e9;
  uint64_t delivered = 0, sent = 0;
  for (size_t f = 0; f < r.summary.flows.size(); ++f) {
    const FlowSummary& fs = r.summary.flows[f];
    delivered += fs.delivered_bytes;
    sent += fs.sent_packets;
    // Every segment sent is delivered, dropped, or still between sender and receiver at the end.
    const uint64_t accounted = fs.delivered_bytes / config.mss_bytes + fs.drops;
    ASSERT_GE(fs.sent_packets, accounted);
    EXPECT_LE(static_cast<double>((fs.sent_packets - accounted) * config.mss_bytes),
              r.series.flows[f].inflight_bytes.back());
  }
  EXPECT_EQ(tally.sent_bytes, sent * config.mss_bytes);
  EXPECT_LE(static_cast<double>(delivered), capacity_bytes + config.mss_bytes);
  EXPECT_GT(r.summary.drops + r.summary.ecn_marks, 0u);  // the test exercised congestion
  // In every sampling interval the flows together got at most C (plus one segment of slack).
  const double interval_s = static_cast<double>(config.sample_interval_ns) / 1e9;
  const double slack_gbps = config.mss_bytes * 8 / interval_s / 1e9;
  for (size_t k = 0; k < r.series.t_us.size(); ++k) {
    double sum = 0;
    for (const FlowSeries& fs : r.series.flows) sum += fs.rate_gbps[k];
    ASSERT_LE(sum, config.capacity_bps / 1e9 + slack_gbps) << "at " << r.series.t_us[k] << " us";
    ASSERT_GE(r.series.queue_bytes[k], 0);
    ASSERT_LE(r.series.queue_bytes[k], static_cast<double>(config.buffer_bytes));
  }
}

TEST(FluidTest, RttIsBaseRttPlusQueueOverCapacity) {
  // One flow with a fixed 40-segment window into a 10 Gb/s bottleneck: at steady state the link is
  // always busy, so a segment's RTT is the window's drain time, W/C, and the standing queue is what
  // the base RTT does not hold: RTT = base + q/C.
  FluidConfig config;
  config.flows = 1;
  config.capacity_bps = gbps(10);
  config.line_rate_bps = gbps(100);
  config.ecn.enabled = false;
  config.duration_ns = 3 * kNsPerMs;
  config.sample_interval_ns = 1'000;
  const double window = 40.0 * config.mss_bytes;
  Tally tally;
  FluidResult r = run(config, fixed(&tally, gbps(100), window));
  const double ser_ns = serialize_ns(config.mss_bytes, config.capacity_bps);
  const double drain_ns = serialize_ns(window, config.capacity_bps);
  int checked = 0;
  for (auto [now, rtt] : tally.rtts) {
    if (now < kNsPerMs) continue;
    ASSERT_NEAR(static_cast<double>(rtt), drain_ns, ser_ns) << "at " << now;
    ++checked;
  }
  EXPECT_GT(checked, 100);
  double queue_delay_sum = 0;
  int n = 0;
  for (size_t k = 0; k < r.series.t_us.size(); ++k) {
    if (r.series.t_us[k] < 1000) continue;
    queue_delay_sum += r.series.queue_delay_us[k];
    ++n;
    EXPECT_NEAR(r.series.queue_delay_us[k] * 1e3, r.series.queue_bytes[k] * 8 / config.capacity_bps * 1e9,
                1e-6);
    EXPECT_EQ(std::fmod(r.series.queue_bytes[k], config.mss_bytes), 0);  // whole segments wait
  }
  const double mean_queue_ns = queue_delay_sum / n * 1e3;
  EXPECT_NEAR(static_cast<double>(config.base_rtt_ns) + mean_queue_ns, drain_ns, ser_ns);
  EXPECT_NEAR(r.summary.queue_delay_p50_us * 1e3 + static_cast<double>(config.base_rtt_ns), drain_ns, ser_ns);
}

TEST(FluidTest, WindowBelowOnePacketStillSendsOneSegmentAtATime) {
  FluidConfig config;
  config.flows = 1;
  config.duration_ns = kNsPerMs;
  config.sample_interval_ns = 1'000;
  Tally tally;
  FluidResult r = run(config, fixed(&tally, gbps(1), 0.25 * config.mss_bytes));
  EXPECT_NEAR(r.summary.goodput_gbps, 1.0, 0.05);
  EXPECT_LE(max_of(r.series.flows[0].inflight_bytes), config.mss_bytes);
}

TEST(FluidTest, DcqcnGetsPacedCnpsAndNoEcnEcho) {
  FluidConfig config;
  config.flows = 2;
  config.duration_ns = 2 * kNsPerMs;
  config.ecn = {.enabled = true, .kmin_bytes = 0, .kmax_bytes = 4096, .pmax = 1.0};
  config.cnp_interval_ns = 50'000;
  Tally tally;
  FluidResult r = run(config, fixed(&tally, gbps(75), 1e18, ControllerKind::kDcqcn));
  const uint64_t most_per_flow = static_cast<uint64_t>(config.duration_ns / config.cnp_interval_ns) + 1;
  for (const FlowSummary& f : r.summary.flows) {
    EXPECT_LE(f.cnps, most_per_flow);
    EXPECT_GE(f.cnps, most_per_flow - 3);  // marks never stop, so one CNP per interval
  }
  EXPECT_GT(r.summary.ecn_marks, 10 * r.summary.cnps);
  EXPECT_LE(tally.cnps, r.summary.cnps);  // the last may still be on its way
  EXPECT_GE(tally.cnps + 2, r.summary.cnps);
  EXPECT_EQ(tally.ce_acks, 0u);
}

TEST(FluidTest, HybridGetsEcnEchoedOnAcksAndNoCnps) {
  FluidConfig config;
  config.flows = 2;
  config.duration_ns = 2 * kNsPerMs;
  config.ecn = {.enabled = true, .kmin_bytes = 0, .kmax_bytes = 4096, .pmax = 1.0};
  Tally tally;
  FluidResult r = run(config, fixed(&tally, gbps(75), 1e18, ControllerKind::kHybrid));
  EXPECT_EQ(r.summary.cnps, 0u);
  EXPECT_EQ(tally.cnps, 0u);
  EXPECT_GT(tally.ce_acks, 0u);
  EXPECT_LE(tally.ce_acks, r.summary.ecn_marks);
  // Marks not yet echoed are segments still queued or on their way: at most a buffer and a BDP.
  const double bdp_packets =
      config.capacity_bps / 8 * static_cast<double>(config.base_rtt_ns) / 1e9 / config.mss_bytes;
  EXPECT_LE(static_cast<double>(r.summary.ecn_marks - tally.ce_acks),
            static_cast<double>(config.buffer_bytes / config.mss_bytes) + bdp_packets + 2);
}

TEST(FluidTest, TimersFireWhenDue) {
  FluidConfig config;
  config.flows = 1;
  config.duration_ns = kNsPerMs;
  Tally tally;
  FluidResult r = run(
      config, [&](const cc::FlowParams&, int) { return std::make_unique<TimerController>(&tally, 55'000); });
  EXPECT_EQ(tally.timers, static_cast<uint64_t>(config.duration_ns / 55'000));
  EXPECT_EQ(tally.latest_timer_lateness_ns, 0);
}

TEST(FluidTest, AimdFlowsConvergeToAFairFullLink) {
  FluidConfig config;  // the `megascale cc` default: 8 flows, 100 Gb/s, 10 us, 4 KB, 20 ms
  config.start_stagger_ns = 100'000;
  Tally tally;
  const auto t0 = std::chrono::steady_clock::now();
  FluidResult r = run(config, aimd(&tally));
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(wall_s, 1.0) << "the default model must run in well under a second";
  EXPECT_GT(r.summary.jain, 0.95);
  EXPECT_GT(r.summary.capacity_fraction, 0.9);
  // Over the second half the link carries at most C, give or take the one segment at the boundary.
  const double half_s = static_cast<double>(config.duration_ns) / 2e9;
  EXPECT_LE(r.summary.capacity_fraction, 1.0 + config.mss_bytes * 8 / (config.capacity_bps * half_s));
  EXPECT_GT(r.summary.ecn_marks, 0u);
  EXPECT_EQ(r.series.t_us.size(), static_cast<size_t>(config.duration_ns / config.sample_interval_ns) + 1);
  EXPECT_EQ(r.series.flows.size(), 8u);
}

TEST(FluidTest, SameSeedSameSeriesOtherSeedOtherMarks) {
  FluidConfig config;
  config.duration_ns = 3 * kNsPerMs;
  config.ecn = {.enabled = true, .kmin_bytes = 20 * 1024, .kmax_bytes = 2 * 1024 * 1024, .pmax = 0.05};
  Tally t1, t2, t3;
  FluidResult a = run(config, aimd(&t1));
  FluidResult b = run(config, aimd(&t2));
  ASSERT_GT(a.summary.ecn_marks, 0u);
  EXPECT_EQ(a.series.queue_bytes, b.series.queue_bytes);
  for (size_t f = 0; f < a.series.flows.size(); ++f) {
    EXPECT_EQ(a.series.flows[f].rate_gbps, b.series.flows[f].rate_gbps);
    EXPECT_EQ(a.series.flows[f].cwnd_bytes, b.series.flows[f].cwnd_bytes);
  }
  EXPECT_EQ(a.summary.ecn_marks, b.summary.ecn_marks);
  EXPECT_EQ(t1.rtts, t2.rtts);
  config.seed = 2;
  FluidResult c = run(config, aimd(&t3));
  EXPECT_NE(a.series.queue_bytes, c.series.queue_bytes);
}

TEST(FluidTest, RejectsBadConfigsWithTheFieldNamed) {
  Tally tally;
  FluidConfig config;
  config.buffer_bytes = 1000;
  Result<FluidResult> r = run_fluid(config, fixed(&tally, gbps(1)));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("buffer"), std::string::npos) << r.error().message;

  config = FluidConfig{};
  config.ecn.kmin_bytes = 500'000;
  r = run_fluid(config, fixed(&tally, gbps(1)));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("Kmin"), std::string::npos) << r.error().message;

  config = FluidConfig{};
  config.start_ns = {0, 1};
  r = run_fluid(config, fixed(&tally, gbps(1)));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("start times"), std::string::npos) << r.error().message;

  r = run_fluid(FluidConfig{}, [](const cc::FlowParams&, int) { return std::unique_ptr<Controller>(); });
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("flow 0"), std::string::npos) << r.error().message;
}

TEST(FluidTest, CsvHasOneRowPerSampleAndFourColumnsPerFlow) {
  FluidConfig config;
  config.flows = 3;
  config.duration_ns = 100'000;
  Tally tally;
  FluidResult r = run(config, fixed(&tally, gbps(10), 1e18, ControllerKind::kDcqcn));
  const std::string path = ::testing::TempDir() + "fluid_test.csv";
  ASSERT_TRUE(write_fluid_csv(r.series, path).ok());
  FILE* f = std::fopen(path.c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  std::fclose(f);
  EXPECT_EQ(static_cast<size_t>(std::count(text.begin(), text.end(), '\n')), r.series.t_us.size() + 1);
  const std::string header = text.substr(0, text.find('\n'));
  EXPECT_EQ(std::count(header.begin(), header.end(), ','), 2 + 4 * 3);
  EXPECT_NE(header.find("f2_pacing_gbps"), std::string::npos);
  // The unbounded window of a rate-based controller is an empty field, not a huge number.
  const std::string row =
      text.substr(header.size() + 1, text.find('\n', header.size() + 1) - header.size() - 1);
  EXPECT_NE(row.find(",,"), std::string::npos) << row;
}

}  // namespace
}  // namespace megascale::sim
