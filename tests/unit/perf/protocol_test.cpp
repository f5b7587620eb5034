// perf's parameter exchange: the client's proposal survives JSON, the server adopts it, explicit flags
// that differ are refused with the flag named, and control messages decode or explain why not.
#include "megascale/perf/protocol.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>

namespace megascale::perf {
namespace {

PerfParams sample_params() {
  PerfOptions o;
  o.test = PerfTest::kBw;
  o.size_bytes = 4096;
  o.iterations = 100;
  o.window = 32;
  o.check = true;
  o.lanes = 2;
  o.segment_bytes = 8192;
  o.dscp = 26;
  return params_from(o, "builtin:swift");
}

TEST(PerfParams, RoundTripThroughJson) {
  const PerfParams p = sample_params();
  auto back = params_from_json(nlohmann::json::parse(to_json(p).dump()));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->test, PerfTest::kBw);
  EXPECT_EQ(back->size_bytes, 4096u);
  EXPECT_EQ(back->iterations, 100u);
  EXPECT_EQ(back->window, 32u);
  EXPECT_TRUE(back->check);
  EXPECT_EQ(back->lanes, 2u);
  EXPECT_EQ(back->cc, "builtin:swift");
  EXPECT_EQ(back->segment_bytes, 8192u);
  EXPECT_EQ(back->dscp, 26);
}

TEST(PerfParams, MalformedOrOutOfRangeOrOtherVersionIsRefused) {
  nlohmann::json j = to_json(sample_params());
  j.erase("window");
  auto missing = params_from_json(j);
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("malformed"), std::string::npos);

  nlohmann::json big = to_json(sample_params());
  big["window"] = 100000;
  auto range = params_from_json(big);
  ASSERT_FALSE(range);
  EXPECT_NE(range.error().message.find("--window 100000"), std::string::npos);

  nlohmann::json other = to_json(sample_params());
  other["version"] = kProtocolVersion + 1;
  auto version = params_from_json(other);
  ASSERT_FALSE(version);
  EXPECT_NE(version.error().message.find(fmt::format("version {}", kProtocolVersion + 1)), std::string::npos);

  // Version 1 peers knew no -b: a proposal without it is malformed, not silently one-way.
  nlohmann::json old = to_json(sample_params());
  old.erase("bidirectional");
  EXPECT_FALSE(params_from_json(old));
  nlohmann::json lat_b = to_json(sample_params());
  lat_b["test"] = "lat";
  lat_b["bidirectional"] = true;
  auto lat = params_from_json(lat_b);
  ASSERT_FALSE(lat);
  EXPECT_NE(lat.error().message.find("-b with --test lat"), std::string::npos) << lat.error().message;
}

TEST(PerfAgreement, ServerWithOnlyAPortAcceptsAnything) {
  PerfOptions server;  // no explicit flags
  server.size_bytes = 1;
  EXPECT_TRUE(check_agreement(server, "builtin:hybrid", sample_params()));
}

TEST(PerfAgreement, SameFlagsOnBothSidesAgree) {
  PerfOptions server;
  server.test = PerfTest::kBw;
  server.size_bytes = 4096;
  server.window = 32;
  server.lanes = 2;
  for (auto f : {flag::kTest, flag::kSize, flag::kWindow, flag::kLanes, flag::kCc}) {
    server.explicit_flags.insert(std::string(f));
  }
  EXPECT_TRUE(check_agreement(server, "builtin:swift", sample_params()));
}

TEST(PerfAgreement, EachDifferingExplicitFlagIsNamedWithBothValues) {
  PerfOptions server;
  server.size_bytes = 1024;
  server.lanes = 4;
  server.explicit_flags = {std::string(flag::kSize), std::string(flag::kLanes), std::string(flag::kCc)};
  Status s = check_agreement(server, "builtin:hybrid", sample_params());
  ASSERT_FALSE(s);
  const std::string& m = s.error().message;
  EXPECT_NE(m.find("-s 1024 on the server, -s 4096 on the client"), std::string::npos) << m;
  EXPECT_NE(m.find("--lanes: 4 on the server, 2 on the client"), std::string::npos) << m;
  EXPECT_NE(m.find("--cc: builtin:hybrid on the server, builtin:swift on the client"), std::string::npos)
      << m;
}

TEST(PerfAgreement, BidirectionalIsAdoptedOrMustAgree) {
  PerfParams client = sample_params();
  client.bidirectional = true;
  auto back = params_from_json(nlohmann::json::parse(to_json(client).dump()));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_TRUE(back->bidirectional);
  // A server with only -p adopts the client's -b; one given -b itself needs the client's.
  PerfOptions plain;
  EXPECT_TRUE(check_agreement(plain, "x", client));
  EXPECT_TRUE(adopt_params(plain, client).bidirectional);
  PerfOptions with_b;
  with_b.bidirectional = true;
  with_b.explicit_flags = {std::string(flag::kBidirectional)};
  EXPECT_TRUE(check_agreement(with_b, "x", client));
  Status s = check_agreement(with_b, "x", sample_params());
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("-b: on on the server, off on the client"), std::string::npos)
      << s.error().message;
}

TEST(PerfAgreement, SweepAgainstSizeDiffers) {
  PerfOptions server;
  server.all_sizes = true;
  server.explicit_flags = {std::string(flag::kAll)};
  Status s = check_agreement(server, "x", sample_params());
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("-a on the server, -s 4096 on the client"), std::string::npos);
}

TEST(PerfAgreement, ClientSizesMustFitTheServersBufferBudget) {
  PerfOptions server;
  server.buffer_budget_bytes = 1u << 20;
  PerfOptions client;
  client.test = PerfTest::kBw;
  client.size_bytes = 8u << 20;
  Status s = check_agreement(server, "x", params_from(client, "x"));
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("server: --buffer-mib 1: one bw message of 8388608 B needs 8 MiB"),
            std::string::npos)
      << s.error().message;
  server.buffer_budget_bytes = 8u << 20;
  EXPECT_TRUE(check_agreement(server, "x", params_from(client, "x")));
}

TEST(PerfAgreement, AdoptedOptionsAreTheClientsTestWithTheServersLimits) {
  PerfOptions server;
  server.buffer_budget_bytes = 64u << 20;
  server.timeout_s = 5;
  const PerfOptions eff = adopt_params(server, sample_params());
  EXPECT_EQ(eff.test, PerfTest::kBw);
  EXPECT_EQ(eff.size_bytes, 4096u);
  EXPECT_EQ(eff.window, 32u);
  EXPECT_TRUE(eff.check);
  EXPECT_EQ(eff.buffer_budget_bytes, 64u << 20);
  EXPECT_EQ(eff.timeout_s, 5);
}

TEST(PerfControl, DecodeChecksTypeAndCarriesThePeersError) {
  auto ok = decode_control(encode_control({{"type", "ready"}}), "ready");
  ASSERT_TRUE(ok);
  auto any = decode_control(encode_control({{"type", "row"}, {"size", 8}}), "");
  ASSERT_TRUE(any);
  EXPECT_EQ((*any)["size"], 8);
  auto wrong = decode_control(encode_control({{"type", "done"}}), "ready");
  ASSERT_FALSE(wrong);
  EXPECT_NE(wrong.error().message.find("expected a 'ready'"), std::string::npos);
  auto err =
      decode_control(encode_control({{"type", "error"}, {"error", "data check: message 3"}}), "result");
  ASSERT_FALSE(err);
  EXPECT_EQ(err.error().message, "data check: message 3");
  auto refuse = decode_control(encode_control({{"type", "refuse"}, {"error", "flags differ"}}), "accept");
  ASSERT_FALSE(refuse);
  EXPECT_EQ(refuse.error().message, "flags differ");
  EXPECT_FALSE(decode_control("not json", "ready"));
  EXPECT_FALSE(decode_control("[1,2]", "ready"));
}

TEST(PerfControl, SideCountersRoundTripIncludingRttBuckets) {
  SideCounters c;
  c.retransmits_fast = 3;
  c.retransmits_rto = 1;
  c.timeouts = 1;
  c.ecn_marks = 9;
  c.cnps_received = 2;
  c.repaths = 1;
  c.sends_posted = 500;
  c.sends_waited_for_credit = 17;
  c.send_syscalls = 1234;
  c.gso_messages = 77;
  c.rx_stolen = 12;
  c.tx_rerouted = 34;
  c.tx_stolen = 56;
  c.kernel.ok = true;
  c.kernel.rcvbuf_errors = 5;
  c.kernel.socket_drops = 4;
  c.rtt[10] = 100;
  c.rtt[40] = 2;
  c.rtt_max_ns = 123456;
  const SideCounters back = side_counters_from_json(nlohmann::json::parse(to_json(c).dump()));
  EXPECT_EQ(back.retransmits_fast, 3u);
  EXPECT_EQ(back.retransmits_rto, 1u);
  EXPECT_EQ(back.ecn_marks, 9u);
  EXPECT_EQ(back.cnps_received, 2u);
  EXPECT_EQ(back.repaths, 1u);
  EXPECT_EQ(back.sends_posted, 500u);
  EXPECT_EQ(back.sends_waited_for_credit, 17u);
  EXPECT_EQ(back.send_syscalls, 1234u);
  EXPECT_EQ(back.gso_messages, 77u);
  EXPECT_EQ(back.rx_stolen, 12u);
  EXPECT_EQ(back.tx_rerouted, 34u);
  EXPECT_EQ(back.tx_stolen, 56u);
  EXPECT_TRUE(back.kernel.ok);
  EXPECT_EQ(back.kernel.rcvbuf_errors, 5u);
  EXPECT_EQ(back.kernel.socket_drops, 4u);
  EXPECT_EQ(back.rtt, c.rtt);
  EXPECT_EQ(back.rtt_max_ns, 123456);
}

}  // namespace
}  // namespace megascale::perf
