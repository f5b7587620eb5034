// Scripted replay (sim/fluid replay.h): scenario parsing, errors that name file/line/key, and that
// events reach the controller in order, exactly as written.
#include "megascale/sim/replay.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>

namespace megascale::sim {
namespace {

using cc::AckSample;
using cc::ControllerKind;
using cc::ControllerState;

// Logs every call as text; its "cwnd" is the number of calls so far, so rows show state after each.
class RecordingController : public cc::Controller {
 public:
  explicit RecordingController(ControllerKind kind = ControllerKind::kHybrid) : kind_(kind) {}
  ControllerKind kind() const override { return kind_; }
  void on_send(TimeNs now, uint64_t bytes) override { log(fmt::format("send {} @{}", bytes, now)); }
  void on_ack(TimeNs now, const AckSample& a) override {
    log(fmt::format("ack {}B {}p rtt={} ce={}/{} @{}", a.acked_bytes, a.acked_packets, a.rtt_ns, a.ecn_ce,
                    a.ce_packets, now));
  }
  void on_cnp(TimeNs now) override { log(fmt::format("cnp @{}", now)); }
  void on_fast_recovery(TimeNs now) override { log(fmt::format("fast_recovery @{}", now)); }
  void on_rto(TimeNs now) override { log(fmt::format("rto @{}", now)); }
  void on_timer(TimeNs now) override { log(fmt::format("timer @{}", now)); }
  TimeNs next_timer_ns() const override { return kNever; }
  double cwnd_bytes() const override { return static_cast<double>(calls.size()); }
  double pacing_rate_bps() const override { return 1e9; }
  ControllerState state() const override { return {.cwnd_bytes = cwnd_bytes(), .pacing_rate_bps = 1e9}; }

  std::vector<std::string> calls;

 private:
  void log(std::string s) { calls.push_back(std::move(s)); }
  ControllerKind kind_;
};

Scenario parse_ok(const std::string& yaml) {
  Result<Scenario> s = parse_scenario(yaml, "test.yaml");
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
  return s.ok() ? std::move(s).value() : Scenario{};
}

std::string parse_error(const std::string& yaml) {
  Result<Scenario> s = parse_scenario(yaml, "bad.yaml");
  EXPECT_FALSE(s.ok()) << "parsed:\n" << yaml;
  return s.ok() ? "" : s.error().message;
}

ReplayOptions options(uint32_t mss = 4096) {
  ReplayOptions o;
  o.flow.mss_bytes = mss;
  return o;
}

TEST(ReplayTest, AppliesEveryEventInOrderAsWritten) {
  Scenario s = parse_ok(R"(
description: every kind once
events:
  - {t_us: 0, send_bytes: 10000}
  - {t_us: 10, rtt_us: 12.5}
  - {t_us: 11, rtt_us: 30, acked_packets: 4, ecn: true}
  - {t_us: 20, cnp: true}
  - {t_us: 30, loss: true}
  - {t_us: 40, rto: true}
  - {t_us: 50, timer: true}
  - {t_us: 60, rtt_us: 14, repeat: 3, every_us: 2.5}
)");
  EXPECT_EQ(s.description, "every kind once");
  ASSERT_EQ(s.events.size(), 10u);
  EXPECT_EQ(s.events[1].line, 5);

  RecordingController cc;
  std::vector<ReplayRow> rows = replay(s, cc, options());
  const std::vector<std::string> expected = {
      "send 4096 @0",  // 10000 bytes leave as MSS segments
      "send 4096 @0",
      "send 1808 @0",
      "ack 4096B 1p rtt=12500 ce=false/0 @10000",
      "ack 16384B 4p rtt=30000 ce=true/4 @11000",
      "cnp @20000",
      "fast_recovery @30000",
      "rto @40000",
      "timer @50000",
      "ack 4096B 1p rtt=14000 ce=false/0 @60000",
      "ack 4096B 1p rtt=14000 ce=false/0 @62500",
      "ack 4096B 1p rtt=14000 ce=false/0 @65000",
  };
  EXPECT_EQ(cc.calls, expected);
  ASSERT_EQ(rows.size(), s.events.size());
  // One row per event, with the controller's state right after it.
  const std::vector<double> calls_after = {3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].t_ns, s.events[i].t_ns);
    EXPECT_EQ(rows[i].state.cwnd_bytes, calls_after[i]) << "row " << i;
  }
  EXPECT_EQ(rows[0].event, "send 10000B");
  EXPECT_EQ(rows[2].event, "ack rtt=30.0us x4 ecn");
  EXPECT_EQ(rows[3].event, "cnp");
}

TEST(ReplayTest, EcnReachesDcqcnAsPacedCnps) {
  // ECN-marked ACKs every 10 us; the receiver sends at most one CNP per 50 us interval.
  Scenario s = parse_ok("events:\n  - {t_us: 0, rtt_us: 12, ecn: true, repeat: 21, every_us: 10}\n");
  RecordingController dcqcn(ControllerKind::kDcqcn);
  ReplayOptions o = options();
  o.cnp_interval_ns = 50'000;
  std::vector<ReplayRow> rows = replay(s, dcqcn, o);
  std::vector<TimeNs> cnp_times;
  for (const ReplayRow& r : rows)
    if (r.cnp_sent) cnp_times.push_back(r.t_ns);
  EXPECT_EQ(cnp_times, (std::vector<TimeNs>{0, 50'000, 100'000, 150'000, 200'000}));
  EXPECT_EQ(rows[0].event, "ack rtt=12.0us ecn +cnp");
  // The CNP arrives first, and the ACK itself echoes nothing (RoCE ACKs carry no ECN echo).
  EXPECT_EQ(dcqcn.calls[0], "cnp @0");
  EXPECT_EQ(dcqcn.calls[1], "ack 4096B 1p rtt=12000 ce=false/0 @0");

  RecordingController hybrid(ControllerKind::kHybrid);
  rows = replay(s, hybrid, o);
  for (const ReplayRow& r : rows) EXPECT_FALSE(r.cnp_sent);
  ASSERT_EQ(hybrid.calls.size(), 21u);
  for (const std::string& call : hybrid.calls) EXPECT_NE(call.find("ce=true/1"), std::string::npos) << call;
}

TEST(ReplayTest, ErrorsNameTheFileLineAndKey) {
  std::string e = parse_error("events:\n  - {t_us: 0, rtt_us: 10}\n  - {t_us: 5, rtt: 10}\n");
  EXPECT_NE(e.find("bad.yaml:3:"), std::string::npos) << e;
  EXPECT_NE(e.find("'rtt'"), std::string::npos) << e;

  e = parse_error("events:\n  - {t_us: 0, rtt_us: 10}\n  - {t_us: 5, rtt_us: fast}\n");
  EXPECT_NE(e.find("bad.yaml:3:"), std::string::npos) << e;
  EXPECT_NE(e.find("'rtt_us'"), std::string::npos) << e;
  EXPECT_NE(e.find("'fast'"), std::string::npos) << e;

  e = parse_error("events:\n  - {t_us: 0, rtt_us: 10\n  - {t_us: 5, cnp: true}\n");  // unclosed brace
  EXPECT_NE(e.find("bad.yaml:"), std::string::npos) << e;
  EXPECT_NE(e.find("YAML syntax error"), std::string::npos) << e;

  e = parse_error("events:\n  - {t_us: 20, cnp: true}\n  - {t_us: 10, cnp: true}\n");
  EXPECT_NE(e.find("bad.yaml:3:"), std::string::npos) << e;
  EXPECT_NE(e.find("time order"), std::string::npos) << e;

  e = parse_error("events:\n  - {t_us: 0, cnp: true, loss: true}\n");
  EXPECT_NE(e.find("bad.yaml:2:"), std::string::npos) << e;
  EXPECT_NE(e.find("exactly one"), std::string::npos) << e;

  e = parse_error("events:\n  - {rtt_us: 10}\n");
  EXPECT_NE(e.find("'t_us'"), std::string::npos) << e;

  e = parse_error("events:\n  - {t_us: 0, cnp: true, ecn: true}\n");
  EXPECT_NE(e.find("'ecn'"), std::string::npos) << e;

  e = parse_error("events:\n  - {t_us: 0, rtt_us: 10, repeat: 5}\n");
  EXPECT_NE(e.find("every_us"), std::string::npos) << e;

  e = parse_error("events:\n  - {t_us: 0, rtt_us: 10, acked_packets: 1.5}\n");
  EXPECT_NE(e.find("'acked_packets'"), std::string::npos) << e;

  e = parse_error("name: x\nevents:\n  - {t_us: 0, cnp: true}\n");
  EXPECT_NE(e.find("bad.yaml:1:"), std::string::npos) << e;
  EXPECT_NE(e.find("'name'"), std::string::npos) << e;

  e = parse_error("description: nothing\n");
  EXPECT_NE(e.find("events"), std::string::npos) << e;

  Result<Scenario> missing = load_scenario("/nonexistent/scenario.yaml");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("/nonexistent/scenario.yaml"), std::string::npos);
}

TEST(ReplayTest, ShippedScenariosParseAndDescribeThemselves) {
  const std::filesystem::path dir = std::filesystem::path(MEGASCALE_SOURCE_DIR) / "configs" / "scenarios";
  int found = 0;
  for (const char* name : {"incast-ramp.yaml", "ecn-before-delay.yaml", "loss-burst.yaml"}) {
    Result<Scenario> s = load_scenario((dir / name).string());
    ASSERT_TRUE(s.ok()) << s.error().message;
    EXPECT_FALSE(s->description.empty()) << name;
    EXPECT_GE(s->events.size(), 10u) << name;
    RecordingController cc;
    EXPECT_EQ(replay(*s, cc, options()).size(), s->events.size());
    ++found;
  }
  EXPECT_EQ(found, 3);
}

TEST(ReplayScenario, DuplicateKeyIsRefusedWithBothLines) {
  const std::string e = parse_error("controller: swift\nname: a\ncontroller: dcqcn\n");
  EXPECT_NE(e.find("bad.yaml:3: duplicate key 'controller' (first on line 1)"), std::string::npos) << e;
}

}  // namespace
}  // namespace megascale::sim
