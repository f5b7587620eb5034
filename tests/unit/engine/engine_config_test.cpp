// EngineConfig validation: defaults are valid; each bad value is named in the error; the endpoint
// refuses a bad config.
#include <gtest/gtest.h>

#include "megascale/engine/config.h"
#include "megascale/engine/endpoint.h"

namespace megascale::engine {
namespace {

TEST(EngineConfig, DefaultsAreValid) {
  EXPECT_TRUE(validate_engine_config(EngineConfig{}).ok());
}

TEST(EngineConfig, BadValuesAreNamed) {
  struct Case {
    const char* field;
    void (*edit)(EngineConfig&);
  };
  const Case cases[] = {
      {"segment_bytes", [](EngineConfig& c) { c.segment_bytes = 0; }},
      {"segment_bytes", [](EngineConfig& c) { c.segment_bytes = 70'000; }},
      {"lanes", [](EngineConfig& c) { c.lanes = 65; }},
      {"lanes", [](EngineConfig& c) { c.lanes = 0; }},
      {"window_segments", [](EngineConfig& c) { c.window_segments = 1000; }},
      {"window_segments", [](EngineConfig& c) { c.window_segments = 8; }},
      {"max_posted_recvs", [](EngineConfig& c) { c.max_posted_recvs = 0; }},
      {"dupthresh", [](EngineConfig& c) { c.dupthresh = 0; }},
      {"ack_every_segments", [](EngineConfig& c) { c.ack_every_segments = 0; }},
      {"ack_delay_ns",
       [](EngineConfig& c) {
         c.ack_every_segments = 4;
         c.ack_delay_ns = 0;
       }},
      {"keepalive_interval_ns", [](EngineConfig& c) { c.keepalive_interval_ns = 0; }},
      {"port_closed_fail_ns", [](EngineConfig& c) { c.port_closed_fail_ns = -1; }},
      {"tail_probe_min_ns", [](EngineConfig& c) { c.tail_probe_min_ns = -1; }},
      {"version_min",
       [](EngineConfig& c) {
         c.version_min = 2;
         c.version_max = 1;
       }},
      {"engine config cc", [](EngineConfig& c) { c.cc.rto.min_rto_ns = -1; }},
  };
  for (const Case& k : cases) {
    EngineConfig c;
    k.edit(c);
    Status s = validate_engine_config(c);
    ASSERT_FALSE(s.ok()) << k.field;
    EXPECT_NE(s.error().message.find(k.field), std::string::npos) << s.error().message;
    auto ep = Endpoint::create(c);
    EXPECT_FALSE(ep.ok()) << k.field;
  }
}

}  // namespace
}  // namespace megascale::engine
