// perf's --wire: names parse, the verbs-only flags are refused on udp, the parameter exchange carries
// the wire and refuses a mismatch, and --wire verbs-* without a usable RDMA device is a usage error (exit
// 2) naming the problem, before any wire opens. Moving data over verbs runs in the Soft-RoCE guest
// (scripts/rxe).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "../../../cli/perf/src/flows.h"
#include "megascale/congestion/config.h"
#include "megascale/engine/packet.h"
#include "megascale/perf/options.h"
#include "megascale/perf/protocol.h"
#include "megascale/perf/run.h"

namespace megascale::perf {
namespace {

namespace fs = std::filesystem;

TEST(PerfWire, VerbsRcDefaultsToTheLargestSegment) {
  // One RDMA write a packet: the NIC cuts it into MTU-sized packets itself.
  EXPECT_EQ(default_segment_bytes(PerfWire::kVerbsRc, true, 1), engine::kMaxSegmentPayload);
  EXPECT_EQ(default_segment_bytes(PerfWire::kVerbsRc, false, 4), engine::kMaxSegmentPayload);
  EXPECT_EQ(default_segment_bytes(PerfWire::kUdp, true, 1), 60000u);
  EXPECT_EQ(default_segment_bytes(PerfWire::kUdp, true, 4), 16384u);
  EXPECT_EQ(default_segment_bytes(PerfWire::kVerbsUd, true, 1), 16384u);  // lowered to the MTU when it opens
  EXPECT_EQ(default_segment_bytes(PerfWire::kUdp, false, 1), PerfOptions{}.segment_bytes);
}

TEST(PerfWire, NamesParseAndUnknownOnesAreNamed) {
  EXPECT_EQ(*parse_perf_wire("udp"), PerfWire::kUdp);
  EXPECT_EQ(*parse_perf_wire("verbs-ud"), PerfWire::kVerbsUd);
  EXPECT_EQ(*parse_perf_wire("verbs-rc"), PerfWire::kVerbsRc);
  for (PerfWire w : {PerfWire::kUdp, PerfWire::kVerbsUd, PerfWire::kVerbsRc}) {
    EXPECT_EQ(*parse_perf_wire(to_string(w)), w);
  }
  auto bad = parse_perf_wire("rdma");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("--wire rdma: must be udp, verbs-ud or verbs-rc"), std::string::npos);
}

TEST(PerfWire, VerbsOnlyFlagsAreRefusedOnUdpAndUdpOnlyOnesOnVerbs) {
  PerfOptions o;
  o.loopback = true;
  o.gid_index = 1;
  Status s = validate_perf_options(o);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("-x: the RDMA port and GID apply to --wire verbs"), std::string::npos);
  o.gid_index.reset();
  o.ib_port = 2;
  s = validate_perf_options(o);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("-i:"), std::string::npos) << s.error().message;

  PerfOptions v;
  v.loopback = true;
  v.wire = PerfWire::kVerbsUd;
  v.gid_index = 1;
  v.ib_port = 1;
  EXPECT_TRUE(validate_perf_options(v));
  v.io_threads = 2;
  s = validate_perf_options(v);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("--wire verbs-ud with --io-threads"), std::string::npos);
  v.io_threads = 0;
  v.source_ports = {5000, 5001, 5002, 5003};
  s = validate_perf_options(v);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("lanes are QPs there"), std::string::npos) << s.error().message;
}

TEST(PerfWire, TheExchangeCarriesTheWireAndAMismatchIsRefusedNamingBoth) {
  PerfOptions client;
  client.wire = PerfWire::kVerbsRc;
  const PerfParams p = params_from(client, "builtin:hybrid");
  auto back = params_from_json(nlohmann::json::parse(to_json(p).dump()));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->wire, PerfWire::kVerbsRc);

  // The server's wires are open before a client comes: --wire must agree even when not explicit.
  PerfOptions server;
  Status s = check_agreement(server, "builtin:hybrid", *back);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("--wire: udp on the server, verbs-rc on the client"), std::string::npos)
      << s.error().message;
  server.wire = PerfWire::kVerbsRc;
  EXPECT_TRUE(check_agreement(server, "builtin:hybrid", *back));

  nlohmann::json bad = to_json(p);
  bad["wire"] = "tcp";
  auto refused = params_from_json(bad);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("--wire tcp"), std::string::npos);
}

TEST(PerfWire, AnOlderPeersParametersAreRefusedNamingBothVersions) {
  nlohmann::json old = to_json(params_from(PerfOptions{}, "builtin:hybrid"));
  old["version"] = 3;
  old.erase("wire");
  auto r = params_from_json(old);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find(
                fmt::format("perf protocol version 3 from the peer, this side speaks {}", kProtocolVersion)),
            std::string::npos)
      << r.error().message;
}

// The verbs flow with UDP wires standing in for the verbs ones (the flow sees only UdpWire): the
// control connections on one pair of wires, the data connection on the other, found through the
// server's accept (data_address). The rows' every byte is checked and the data moves on the data wires.
TEST(PerfWire, TheDataConnectionGoesToTheAddressTheServerAccepts) {
  PerfOptions o;
  o.wire = PerfWire::kVerbsUd;
  o.test = PerfTest::kBoth;
  o.size_bytes = 65536;
  o.iterations = 64;
  o.check = true;
  o.loopback = true;
  o.lanes = 2;
  o.cc = "loopback";
  o.timeout_s = 60;
  o.explicit_flags = {std::string(flag::kSize), std::string(flag::kIters)};
  auto cc = cc::resolve_cc_config(o.cc);
  ASSERT_TRUE(cc) << cc.error().message;
  auto open = [&](PerfRole side) {
    auto w = wire::UdpWire::create(wire_config_for(o, side, *cc, wire::FaultConfig{}));
    EXPECT_TRUE(w) << w.error().message;
    return w ? std::move(*w) : nullptr;
  };
  auto server_ctl = open(PerfRole::kServer), server_data = open(PerfRole::kServer);
  auto client_ctl = open(PerfRole::kClient), client_data = open(PerfRole::kClient);
  ASSERT_TRUE(server_ctl && server_data && client_ctl && client_data);
  PerfRun server_run;
  std::thread server([&] {
    server_run = detail::run_server_on(*server_ctl, server_data.get(), o, cc->name, PerfSink{}, nullptr);
  });
  const detail::ClientSetup setup{cc->name, wire::FaultConfig{}, {}};
  const PerfRun run = detail::run_client_on(*client_ctl, client_data.get(), "127.0.0.1",
                                            server_ctl->local_port(), o, setup, PerfSink{});
  server.join();
  ASSERT_EQ(run.status, PerfStatus::kOk) << run.error;
  ASSERT_EQ(server_run.status, PerfStatus::kOk) << server_run.error;
  ASSERT_EQ(run.report.bw.size(), 1u);
  ASSERT_EQ(run.report.lat.size(), 1u);
  EXPECT_EQ(run.report.bw[0].verified_messages, 64u);
  EXPECT_EQ(run.report.config["wire"], "verbs-ud");
  // 64 bw messages of 64 KiB and 64 round trips went over the data wires, not the control ones.
  const uint64_t data_bytes = 64 * 65536 + 2 * 64 * 65536;
  EXPECT_GT(client_data->datagrams_moved(), data_bytes / 65536);
  EXPECT_GT(client_data->datagrams_moved(), 10 * client_ctl->datagrams_moved());
}

class PerfVerbsDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("perf_verbs_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  // A device with one ACTIVE Ethernet port and its RoCE v2 IPv4 GID at index 1.
  void add_device(const std::string& name) {
    const fs::path port = root_ / name / "ports" / "1";
    fs::create_directories(port / "gids");
    fs::create_directories(port / "gid_attrs" / "types");
    std::ofstream(port / "state") << "4: ACTIVE\n";
    std::ofstream(port / "link_layer") << "Ethernet\n";
    std::ofstream(port / "gids" / "1") << "0000:0000:0000:0000:0000:ffff:0a00:0002\n";
    std::ofstream(port / "gid_attrs" / "types" / "1") << "RoCE v2\n";
  }
  PerfRun run(PerfOptions o) {
    o.loopback = true;
    o.sysfs_root = root_.string();
    return run_perf(o, PerfSink{});
  }
  fs::path root_;
};

TEST_F(PerfVerbsDevice, NoDeviceTreeIsAUsageErrorNamingIt) {
  PerfOptions o;
  o.wire = PerfWire::kVerbsUd;
  const PerfRun r = run(o);
  EXPECT_EQ(r.status, PerfStatus::kUsage);
  EXPECT_EQ(r.error, "verbs-ud: no RDMA device (no " + root_.string() + ")");
}

TEST_F(PerfVerbsDevice, AnEmptyDeviceTreeIsAUsageErrorNamingIt) {
  fs::create_directories(root_);
  PerfOptions o;
  o.wire = PerfWire::kVerbsRc;
  const PerfRun r = run(o);
  EXPECT_EQ(r.status, PerfStatus::kUsage);
  EXPECT_EQ(r.error, "verbs-rc: no RDMA device (none under " + root_.string() + ")");
}

TEST_F(PerfVerbsDevice, AnUnknownDeviceOrPortIsNamedWithTheDevicesThatExist) {
  add_device("rxe0");
  PerfOptions o;
  o.wire = PerfWire::kVerbsUd;
  o.device = "mlx5_9";
  PerfRun r = run(o);
  EXPECT_EQ(r.status, PerfStatus::kUsage);
  EXPECT_EQ(r.error, "verbs-ud: -d mlx5_9: no such RDMA device (here: rxe0)");
  o.device = "rxe0";
  o.ib_port = 3;
  r = run(o);
  EXPECT_EQ(r.status, PerfStatus::kUsage);
  EXPECT_EQ(r.error, "verbs-ud: -i 3: rxe0 has no such port");
}

}  // namespace
}  // namespace megascale::perf
