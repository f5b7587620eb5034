// megascale ceiling: the kernel-only loopback runs move every byte they send, intact and in order (the
// receivers check each payload's sequence number and CRC32C), account their CPU, and reject bad options.
#include "megascale/perf/ceiling.h"

#include <gtest/gtest.h>

namespace megascale::perf {
namespace {

CeilingOptions short_run(CeilingProto proto) {
  CeilingOptions o;
  o.proto = proto;
  o.pairs = 2;
  o.seconds = 0.3;
  o.crc = true;
  o.copy = true;
  return o;
}

TEST(Ceiling, UdpDeliversEveryDatagramIntactWithinTheWindow) {
  CeilingOptions o = short_run(CeilingProto::kUdp);
  o.window = 8;    // less than two batches: the sender waits on the receivers' count
  o.bytes = 8192;  // the window fits any receive buffer, root or not
  const CeilingResult r = run_ceiling(o);
  ASSERT_EQ(r.error, "");
  EXPECT_GT(r.messages_received, 100u);
  EXPECT_EQ(r.messages_received, r.messages_sent);
  EXPECT_EQ(r.lost, 0u);
  EXPECT_EQ(r.bytes_received, r.messages_received * o.bytes);
  EXPECT_EQ(r.bytes_received, r.bytes_sent);
  EXPECT_EQ(r.crc_errors, 0u);
  EXPECT_EQ(r.out_of_order, 0u);
  EXPECT_GT(r.sender_cpu_seconds, 0);
  EXPECT_GT(r.receiver_cpu_seconds, 0);
  EXPECT_GT(r.seconds, 0.25);
  EXPECT_GT(r.gbps(), 0);
  EXPECT_GT(r.rcvbuf_bytes, 0u);
}

TEST(Ceiling, TcpDeliversEveryMessageIntact) {
  CeilingOptions o = short_run(CeilingProto::kTcp);
  o.bytes = 100000;  // not a power of two: recv() returns pieces that straddle messages
  const CeilingResult r = run_ceiling(o);
  ASSERT_EQ(r.error, "");
  EXPECT_GT(r.messages_received, 10u);
  EXPECT_EQ(r.messages_received, r.messages_sent);
  EXPECT_EQ(r.bytes_received, r.bytes_sent);
  EXPECT_EQ(r.crc_errors, 0u);
  EXPECT_EQ(r.out_of_order, 0u);
  EXPECT_GT(r.bytes_per_cpu_second(), 0);
}

TEST(Ceiling, BadOptionsAreNamed) {
  CeilingOptions o;
  o.bytes = 65508;
  EXPECT_NE(validate(o).find("65507"), std::string::npos);
  EXPECT_NE(run_ceiling(o).error.find("65507"), std::string::npos);
  o.proto = CeilingProto::kTcp;
  EXPECT_EQ(validate(o), "");
  const struct {
    void (*spoil)(CeilingOptions&);
    const char* named;
  } cases[] = {
      {[](CeilingOptions& c) { c.pairs = 0; }, "pairs"},
      {[](CeilingOptions& c) { c.bytes = 8; }, "16 bytes"},
      {[](CeilingOptions& c) { c.seconds = 0; }, "duration"},
      {[](CeilingOptions& c) { c.batch = 0; }, "batch"},
      {[](CeilingOptions& c) { c.window = 0; }, "window"},
  };
  for (const auto& k : cases) {
    CeilingOptions bad;
    k.spoil(bad);
    EXPECT_NE(validate(bad).find(k.named), std::string::npos) << k.named;
  }
}

TEST(Ceiling, RowNamesRoundTrip) {
  for (const char* name : {"udp", "tcp", "udp+copy", "udp+crc", "udp+copy+crc", "tcp+crc"}) {
    CeilingOptions o;
    ASSERT_EQ(parse_row(name, o), "") << name;
    EXPECT_EQ(row_name(o), name);
  }
  CeilingOptions o;
  EXPECT_NE(parse_row("sctp", o).find("udp or tcp"), std::string::npos);
  EXPECT_NE(parse_row("udp+zerocopy", o).find("zerocopy"), std::string::npos);
  EXPECT_NE(parse_row("", o), "");
}

}  // namespace
}  // namespace megascale::perf
