// Four senders into one receiver through a 1 Gbit/s token-bucket bottleneck (tc tbf on a router
// namespace's egress, a queue that can grow to 40 ms): delay-based congestion control keeps the queue
// near its target while the link stays busy; a fixed window (no congestion control) fills the queue.
//
// What is compared is what the transport itself measured: each sender's RTT histogram
// (ConnectionStats::rtt), queueing delay = RTT p50 - min RTT, against 3x the preset's base delay
// target. The presets (tests/integration/netns/*.yaml) size that target for this software path and say
// why. TBF never marks ECN, so this is delay-driven control only: the hybrid's ECN half has nothing to
// react to.
//
// Skipped (with the reason) when not root or when ip/tc are missing. Each run takes ~5 s of transfer.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "megascale/congestion/config.h"
#include "netns_transfer.h"

namespace megascale::netns_test {
namespace {

constexpr double kLinkBps = 1e9;
constexpr uint64_t kBytesPerSender = 128ULL << 20;  // 4 x 128 MiB: ~4.4 s at 1 Gbit/s

class NetnsBottleneck : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!netns_usable(why)) GTEST_SKIP() << why;
    ASSERT_TRUE(topo_.create(why)) << why;
    // burst: a few jumbo frames; latency 40 ms: the queue may hold 5 MB, above the fixed windows' 2 MiB,
    // so the baseline shows delay, not loss.
    ASSERT_TRUE(topo_.shape_bottleneck("1gbit", "32kb", "40ms", why)) << why;
  }
  void TearDown() override { topo_.destroy(); }

  // Runs the transfer with `preset`, checks it moved every byte intact, prints what it measured.
  TransferOutcome run(const std::string& preset) {
    TransferSpec spec;
    spec.cc = preset_path(preset);
    spec.bytes_per_sender = kBytesPerSender;
    TransferOutcome out = run_transfer(topo_, spec);
    EXPECT_TRUE(out.error.empty()) << out.error;
    EXPECT_EQ(out.receiver_status, 0) << out.receiver.dump();
    EXPECT_TRUE(out.receiver.value("ok", false)) << out.receiver.dump();
    EXPECT_EQ(out.receiver.value("bytes", uint64_t{0}), spec.senders * kBytesPerSender);
    EXPECT_EQ(out.receiver.value("mismatches", uint64_t{1}), 0u);
    for (size_t i = 0; i < out.senders.size(); ++i) {
      EXPECT_EQ(out.sender_status[i], 0) << out.senders[i].dump();
      EXPECT_TRUE(out.senders[i].value("ok", false)) << out.senders[i].dump();
    }
    std::printf(
        "[ %-9s ] aggregate goodput %.3f Gbit/s (%.1f%% of 1 Gbit/s); queueing delay (RTT p50 - min) "
        "mean %.0f us; per sender:\n",
        preset.c_str(), out.aggregate_goodput_bps() / 1e9, 100 * out.aggregate_goodput_bps() / kLinkBps,
        out.mean_queueing_delay_ns() / 1e3);
    for (const json& s : out.senders) {
      const json& c = s.value("connection", json::object());
      const json& r = c.value("rtt", json::object());
      std::printf(
          "[ %-9s ]   sender %d: %.0f Mbit/s, rtt min %.0f p50 %.0f p90 %.0f p99 %.0f us, queueing %.0f us, "
          "retransmits %d, timeouts %d, cpu %.2f s\n",
          preset.c_str(), s.value("id", -1), s.value("goodput_bps", 0.0) / 1e6, r.value("min_ns", 0.0) / 1e3,
          r.value("p50_ns", 0.0) / 1e3, r.value("p90_ns", 0.0) / 1e3, r.value("p99_ns", 0.0) / 1e3,
          c.value("queueing_delay_ns", 0.0) / 1e3, c.value("retransmits", 0), c.value("timeouts", 0),
          s.value("cpu_user_s", 0.0) + s.value("cpu_sys_s", 0.0));
    }
    std::printf("[ %-9s ] other work on the host during the run: %.2f CPUs\n", preset.c_str(),
                out.foreign_cpus);
    std::printf("[ %-9s ] bottleneck: %s", preset.c_str(), topo_.bottleneck_stats().c_str());
    std::fflush(stdout);
    return out;
  }

  // The delay target a preset configures: Swift's base target (flow scaling adds to it for flows with
  // small windows, about +0.13 ms at the windows of this test; the presets explain).
  static double target_ns(const std::string& preset) {
    auto cfg = cc::load_cc_config(preset_path(preset));
    EXPECT_TRUE(cfg) << cfg.error().message;
    if (!cfg) return 0;
    const cc::SwiftParams& p = cfg->kind == cc::ControllerKind::kHybrid ? cfg->hybrid.swift : cfg->swift;
    return static_cast<double>(p.base_target_ns);
  }

  NetnsTopology topo_;
};

// The comparison: the hybrid (and Swift) hold the queue near the target at > 90% of what the fixed
// window moves; the fixed window's standing queue is many times deeper. Every figure is printed.
//
// Goodput here is made by host CPUs (four senders, a receiver and a router namespace). A queue held near
// a 0.5 ms target covers only short gaps in the senders' scheduling, while the fixed window's 15-20 ms
// queue covers long ones: with two CPU hogs on a 2-core host the controllers measured 0.63-0.69x the
// fixed window, with one 0.99-1.00x, with none 1.00x. So the goodput comparison is judged on pairs run
// back to back (fixed window, then the controller) during which other work left the transfer at least
// kMinFreeCpus of the host, up to kAttempts pairs; it passes when a judged pair meets it. When no pair
// could be judged the test says so and skips that comparison (a skip, not a pass). The queueing-delay
// bounds are checked on every run, loaded or not.
TEST_F(NetnsBottleneck, DelayControlKeepsQueueNearTargetFixedWindowDoesNot) {
  constexpr int kAttempts = 3;
  constexpr double kMinFreeCpus = 0.75;
  const double host_cpus = static_cast<double>(std::max<long>(sysconf(_SC_NPROCESSORS_ONLN), 1));
  const auto loaded = [&](const TransferOutcome& o) { return o.foreign_cpus > host_cpus - kMinFreeCpus; };
  std::string not_judged;
  double worst_load = 0;
  for (const std::string preset : {"hybrid-1g", "swift-1g"}) {
    const double target = target_ns(preset);
    bool judged = false, goodput_met = false;
    double fixed_bps = 0, preset_bps = 0;
    for (int attempt = 1; attempt <= kAttempts && !goodput_met; ++attempt) {
      const TransferOutcome fixed = run("fixed-1g");
      ASSERT_FALSE(HasFailure());
      const double fixed_delay_ns = fixed.mean_queueing_delay_ns();
      ASSERT_GE(fixed.aggregate_goodput_bps(), 0.5 * kLinkBps)
          << "the shaped path carries under half its rate";
      const TransferOutcome out = run(preset);
      ASSERT_FALSE(HasFailure());
      const double delay_ns = out.mean_queueing_delay_ns();
      const bool judge = !loaded(fixed) && !loaded(out);
      worst_load = std::max({worst_load, fixed.foreign_cpus, out.foreign_cpus});
      fixed_bps = fixed.aggregate_goodput_bps();
      preset_bps = out.aggregate_goodput_bps();
      judged = judged || judge;
      goodput_met = judge && preset_bps >= 0.9 * fixed_bps;
      std::printf(
          "[ %-9s ] pair %d of %d: queueing delay %.0f us = %.2f x its %.0f us target; fixed window %.0f us "
          "= "
          "%.1f x %s; goodput %.3f vs %.3f Gbit/s (%.2f x, bound 0.90%s)\n",
          preset.c_str(), attempt, kAttempts, delay_ns / 1e3, delay_ns / target, target / 1e3,
          fixed_delay_ns / 1e3, fixed_delay_ns / delay_ns, preset.c_str(), preset_bps / 1e9, fixed_bps / 1e9,
          preset_bps / fixed_bps, judge ? "" : "; not judged: the host was busy with other work");
      std::fflush(stdout);
      EXPECT_LE(delay_ns, 3 * target) << preset << " lets the queue grow past 3x its delay target";
      EXPECT_GE(fixed_delay_ns, 4 * delay_ns)
          << "the fixed window should queue many times deeper than " << preset;
    }
    if (!judged) {
      not_judged += preset + " ";
      continue;
    }
    // The fixed window, with no congestion control, moves what this host's namespaces can forward
    // through the shaper (81-98% of the link on a 2-core VM, varying with the host): the controllers are
    // held to that same-pair figure, not to the link rate, which measures the host.
    EXPECT_TRUE(goodput_met) << preset << " leaves the bottleneck idle: " << preset_bps / 1e9 << " vs "
                             << fixed_bps / 1e9 << " Gbit/s for the fixed window in the last of " << kAttempts
                             << " pairs (bound 0.90 x)";
  }
  if (!not_judged.empty())
    GTEST_SKIP() << "goodput of " << not_judged << "not judged: other work took up to "
                 << std::round(worst_load * 100) / 100 << " of the host's " << host_cpus
                 << " CPUs in every pair (delay bounds were checked)";
}

}  // namespace
}  // namespace megascale::netns_test
