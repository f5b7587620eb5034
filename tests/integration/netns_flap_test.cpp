// Link flaps on the bottleneck of a NetnsTopology (the router's interface toward the receiver is set
// down, taking its route with it, then up again), the failure MegaScale (NSDI '24 §6.3) names:
// - a 5 s flap in the middle of four transfers: every transfer completes and every byte is verified;
// - an outage longer than a short retry budget (3 s, tests/integration/netns/hybrid-1g-budget3s.yaml):
//   every sender fails with "peer ... unreachable ..." after at least the budget and at most the budget
//   plus one backed-off timeout (max_rto 0.5 s) plus slack; the receiver, which has nothing in flight,
//   fails the same way through the engine's keepalive; nothing waits for its own deadline.
//
// Skipped (with the reason) when not root or when ip/tc are missing.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "netns_transfer.h"

namespace megascale::netns_test {
namespace {

void sleep_until(TimeNs t) {
  const TimeNs left = t - wire::UdpWire::now();
  if (left > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(left));
}

class NetnsLinkFlap : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!netns_usable(why)) GTEST_SKIP() << why;
    ASSERT_TRUE(topo_.create(why)) << why;
    ASSERT_TRUE(topo_.shape_bottleneck("1gbit", "32kb", "40ms", why)) << why;
  }
  void TearDown() override { topo_.destroy(); }

  // Link down at start + `down_after_s` for `down_for_s`; returns the down and up times.
  std::function<void(TimeNs)> flap(double down_after_s, double down_for_s, TimeNs& down_ns, TimeNs& up_ns) {
    return [this, down_after_s, down_for_s, &down_ns, &up_ns](TimeNs start_ns) {
      std::string why;
      sleep_until(start_ns + sec(down_after_s));
      down_ns = wire::UdpWire::now();
      EXPECT_TRUE(topo_.set_bottleneck_up(false, why)) << why;
      sleep_until(down_ns + sec(down_for_s));
      up_ns = wire::UdpWire::now();
      EXPECT_TRUE(topo_.set_bottleneck_up(true, why)) << why;
    };
  }

  NetnsTopology topo_;
};

TEST_F(NetnsLinkFlap, FiveSecondFlapEveryTransferCompletesVerified) {
  TransferSpec spec;
  spec.cc = preset_path("hybrid-1g");   // the default 30 s retry budget outlasts the flap
  spec.bytes_per_sender = 64ULL << 20;  // 4 x 64 MiB: ~2.2 s of data at 1 Gbit/s; the flap hits at 0.7 s
  spec.sender_deadline_s = 25;
  spec.receiver_deadline_s = 30;
  TimeNs down_ns = 0, up_ns = 0;
  const TransferOutcome out = run_transfer(topo_, spec, flap(0.7, 5.0, down_ns, up_ns));
  ASSERT_TRUE(out.error.empty()) << out.error;
  std::printf("[ flap 5 s ] link down %.2f s after the start for %.2f s\n",
              static_cast<double>(down_ns - out.start_ns) / 1e9, static_cast<double>(up_ns - down_ns) / 1e9);
  for (size_t i = 0; i < out.senders.size(); ++i) {
    const json& s = out.senders[i];
    const json& c = s.value("connection", json::object());
    std::printf(
        "[ flap 5 s ] sender %zu: ok %d, %.2f s to send %llu B after the start, %d timeouts, %d "
        "retransmits%s%s\n",
        i, s.value("ok", false), static_cast<double>(s.value("end_ns", TimeNs{0}) - out.start_ns) / 1e9,
        static_cast<unsigned long long>(s.value("bytes", uint64_t{0})), c.value("timeouts", 0),
        c.value("retransmits", 0),
        s.value("error", "").empty() ? "" : ", error: ", s.value("error", "").c_str());
    EXPECT_EQ(out.sender_status[i], 0) << s.dump();
    EXPECT_TRUE(s.value("ok", false)) << s.dump();
    EXPECT_EQ(s.value("bytes", uint64_t{0}), spec.bytes_per_sender);
    // The flap happened in the middle of the transfer: the sender had to retransmit after timeouts and
    // finished only after the link came back.
    EXPECT_GT(c.value("timeouts", 0), 0) << "sender " << i << " never saw the flap";
    EXPECT_GT(s.value("end_ns", TimeNs{0}), up_ns) << "sender " << i << " finished before the link came back";
  }
  EXPECT_EQ(out.receiver_status, 0) << out.receiver.dump();
  EXPECT_TRUE(out.receiver.value("ok", false)) << out.receiver.dump();
  EXPECT_EQ(out.receiver.value("bytes", uint64_t{0}), spec.senders * spec.bytes_per_sender);
  EXPECT_EQ(out.receiver.value("mismatches", uint64_t{1}), 0u);
  EXPECT_EQ(out.receiver.value("verified_senders", json::array()).size(), spec.senders);
  std::printf("[ flap 5 s ] receiver: %llu B verified from %zu senders, %llu mismatches\n",
              static_cast<unsigned long long>(out.receiver.value("bytes", uint64_t{0})),
              out.receiver.value("verified_senders", json::array()).size(),
              static_cast<unsigned long long>(out.receiver.value("mismatches", uint64_t{0})));
}

TEST_F(NetnsLinkFlap, OutageLongerThanRetryBudgetFailsWithinBudget) {
  constexpr double kBudgetS = 3.0;  // hybrid-1g-budget3s.yaml: rto.retry_budget_s
  constexpr double kMaxRtoS = 0.5;  // its rto.max_rto_ms: the give-up is seen at the next timeout
  constexpr double kSlackS = 0.5;   // scheduling, the first RTO, process wake-ups
  TransferSpec spec;
  spec.cc = preset_path("hybrid-1g-budget3s");
  spec.bytes_per_sender = 64ULL << 20;
  spec.sender_deadline_s = 15;  // well past budget + slack: a hang shows as "deadline", not as a pass
  // The receiver has nothing in flight; the engine's keepalive (keepalive_interval_ns, 1 s) probes the
  // silent peer and spends the same retry budget. Its deadline lies well beyond that.
  constexpr double kKeepaliveS = 1.0;
  spec.receiver_deadline_s = 15;
  TimeNs down_ns = 0, up_ns = 0;
  const TransferOutcome out =
      run_transfer(topo_, spec, flap(0.7, kBudgetS + kMaxRtoS + kSlackS + 1.0, down_ns, up_ns));
  ASSERT_TRUE(out.error.empty()) << out.error;
  for (size_t i = 0; i < out.senders.size(); ++i) {
    const json& s = out.senders[i];
    const std::string error = s.value("error", "");
    const double failed_after_s = static_cast<double>(s.value("fail_ns", TimeNs{0}) - down_ns) / 1e9;
    std::printf("[ outage ] sender %zu failed %.2f s after the link went down (budget %.1f s): %s\n", i,
                failed_after_s, kBudgetS, error.c_str());
    EXPECT_EQ(out.sender_status[i], 1) << s.dump();
    EXPECT_FALSE(s.value("ok", true));
    EXPECT_NE(error.find("unreachable"), std::string::npos) << "unclear error: " << error;
    EXPECT_EQ(error.find("deadline"), std::string::npos) << "sender hung until its own deadline: " << error;
    EXPECT_GE(failed_after_s, kBudgetS) << "gave up before the retry budget was spent";
    EXPECT_LE(failed_after_s, kBudgetS + kMaxRtoS + kSlackS) << "took too long to give up";
    EXPECT_LT(s.value("bytes", uint64_t{0}), spec.bytes_per_sender) << "the outage should hit mid-transfer";
  }
  // The receiver fails too, with the same clear error, once its keepalive probes have spent the budget:
  // it never waits for its own deadline.
  const json errors = out.receiver.value("errors", json::array());
  const double rx_failed_after_s =
      static_cast<double>(out.receiver.value("end_ns", TimeNs{0}) - down_ns) / 1e9;
  std::printf("[ outage ] receiver ended %.2f s after the link went down: %s\n", rx_failed_after_s,
              errors.dump().c_str());
  EXPECT_EQ(out.receiver_status, 1) << out.receiver.dump();
  EXPECT_FALSE(out.receiver.value("ok", true));
  EXPECT_EQ(out.receiver.value("mismatches", uint64_t{1}), 0u) << "what did arrive must be intact";
  EXPECT_LE(rx_failed_after_s, kKeepaliveS + kBudgetS + kMaxRtoS + kSlackS)
      << "receiver took too long to give up";
  ASSERT_FALSE(errors.empty());
  for (const json& e : errors) {
    const std::string text = e.get<std::string>();
    EXPECT_NE(text.find("unreachable"), std::string::npos) << "receiver: " << text;
    EXPECT_EQ(text.find("deadline"), std::string::npos) << "receiver hung until its deadline: " << text;
  }
}

}  // namespace
}  // namespace megascale::netns_test
