// perf's session over two wires (the data connection on a second wire, as with --wire verbs-*): inside
// a row (progress_data) the control wire gets a round only once in 16, after a sleep and when its own
// timers are due, yet a peer's "error" sent meanwhile is still seen within a few rounds; control
// exchanges (progress) drive both wires every round.
#include "../../../cli/perf/src/session.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>

#include "megascale/perf/protocol.h"

namespace megascale::perf {
namespace {

using wire::UdpWire;

std::unique_ptr<UdpWire> open_wire() {
  wire::UdpConfig c;
  c.bind_host = "127.0.0.1";
  auto w = UdpWire::create(c);
  EXPECT_TRUE(w) << (w ? "" : w.error().message);
  return w ? std::move(*w) : nullptr;
}

// Connects a to b by driving both; returns (a's id, b's id).
std::optional<std::pair<engine::ConnId, engine::ConnId>> join(UdpWire& a, UdpWire& b) {
  auto c = a.connect(b.local_address());
  EXPECT_TRUE(c) << c.error().message;
  if (!c) return std::nullopt;
  for (int i = 0; i < 200000; ++i) {
    EXPECT_TRUE(a.progress());
    EXPECT_TRUE(b.progress());
    if (std::optional<engine::ConnId> accepted = b.accept()) {
      for (int k = 0; k < 1000; ++k) {  // until a sees it established too
        EXPECT_TRUE(a.progress());
        EXPECT_TRUE(b.progress());
        const engine::Connection* conn = a.endpoint().connection(*c);
        if (conn != nullptr && conn->state() == engine::ConnectionState::kEstablished) break;
      }
      return std::make_pair(*c, *accepted);
    }
  }
  return std::nullopt;
}

class PerfTwoWireSession : public ::testing::Test {
 protected:
  void SetUp() override {
    control_a_ = open_wire();
    control_b_ = open_wire();
    data_a_ = open_wire();
    data_b_ = open_wire();
    ASSERT_TRUE(control_a_ && control_b_ && data_a_ && data_b_);
    auto control = join(*control_a_, *control_b_);
    auto data = join(*data_a_, *data_b_);
    ASSERT_TRUE(control && data);
    control_peer_ = control->second;
    options_.poll = PerfPoll::kSleep;
    session_ = std::make_unique<detail::Session>(*control_a_, control->first, options_, sink_, "client");
    session_->add_wire(*data_a_);
    session_->move_data(data->first);
  }

  uint64_t rounds(const UdpWire& w) const { return w.stats().progress_calls; }

  std::unique_ptr<UdpWire> control_a_, control_b_, data_a_, data_b_;
  engine::ConnId control_peer_ = 0;
  PerfOptions options_;
  PerfSink sink_;
  std::unique_ptr<detail::Session> session_;
};

TEST_F(PerfTwoWireSession, InsideARowTheControlWireGetsOneRoundInSixteen) {
  const uint64_t control0 = rounds(*control_a_), data0 = rounds(*data_a_);
  ASSERT_TRUE(session_->progress_data());  // the first after set-up drives both
  constexpr uint64_t kRounds = 1600;
  for (uint64_t i = 0; i < kRounds; ++i) ASSERT_TRUE(session_->progress_data());
  EXPECT_EQ(rounds(*data_a_) - data0, kRounds + 1);
  // 100 at one in 16, plus any its own timers asked for (none are due on an idle connection).
  const uint64_t control = rounds(*control_a_) - control0;
  EXPECT_GE(control, kRounds / 16);
  EXPECT_LE(control, kRounds / 16 + 10) << control << " control rounds in " << kRounds;
  // Control exchanges drive both every round.
  const uint64_t c1 = rounds(*control_a_), d1 = rounds(*data_a_);
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(session_->progress());
  EXPECT_EQ(rounds(*control_a_) - c1, 50u);
  EXPECT_EQ(rounds(*data_a_) - d1, 50u);
}

TEST_F(PerfTwoWireSession, AfterASleepTheNextRoundDrivesTheControlWire) {
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(session_->progress_data());
  const uint64_t c0 = rounds(*control_a_);
  session_->idle();  // --poll sleep with nothing due: sleeps on the data wire (at most 1 ms)
  ASSERT_TRUE(session_->progress_data());
  EXPECT_EQ(rounds(*control_a_) - c0, 1u);
}

TEST_F(PerfTwoWireSession, APeersErrorSentDuringARowIsSeenWithinAFewRounds) {
  ASSERT_TRUE(session_->post_control_recv());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(session_->progress_data());
  const std::string msg =
      encode_control(nlohmann::json{{"type", "error"}, {"error", "the peer's check failed"}});
  engine::Connection* peer = control_b_->endpoint().connection(control_peer_);
  ASSERT_NE(peer, nullptr);
  ASSERT_TRUE(peer->post_send(msg.data(), msg.size(), kTagControl));
  // Counted from the round in which the peer's datagram left (loopback: it is in a's socket when the
  // send returns), so that the peer's own pacing does not count.
  const uint64_t sent_before = control_b_->stats().datagrams_sent;
  int left_at = -1, seen_at = -1;
  for (int i = 0; i < 100000 && seen_at < 0; ++i) {
    if (left_at < 0) {
      ASSERT_TRUE(control_b_->progress());
      if (control_b_->stats().datagrams_sent > sent_before) left_at = i;
    }
    ASSERT_TRUE(session_->progress_data());
    if (!session_->check_peer_abort()) seen_at = i;
  }
  ASSERT_GE(left_at, 0) << "the peer's error never left";
  ASSERT_GE(seen_at, 0) << "the peer's error was never seen";
  // The next control round takes it in: at most 16 rounds of a row later.
  EXPECT_LE(seen_at - left_at, 16) << "left in round " << left_at << ", seen in round " << seen_at;
}

}  // namespace
}  // namespace megascale::perf
