// EngineConfig validation.
#include "megascale/engine/config.h"

#include <string>

#include "megascale/congestion/config.h"
#include "megascale/engine/packet.h"

namespace megascale::engine {
namespace {

Error bad(const char* field, const std::string& value, const char* why) {
  return make_error(std::string("engine config: ") + field + " = " + value + ": " + why);
}

bool is_pow2(uint32_t v) {
  return v != 0 && (v & (v - 1)) == 0;
}

}  // namespace

Status validate_engine_config(const EngineConfig& c) {
  if (c.segment_bytes == 0 || c.segment_bytes > kMaxSegmentPayload) {
    return bad("segment_bytes", std::to_string(c.segment_bytes), "must be 1..65000");
  }
  if (c.lanes == 0 || c.lanes > kMaxLanes) return bad("lanes", std::to_string(c.lanes), "must be 1..64");
  if (!is_pow2(c.window_segments) || c.window_segments < 16 || c.window_segments > (1U << 20)) {
    return bad("window_segments", std::to_string(c.window_segments), "must be a power of two in 16..2^20");
  }
  if (c.max_posted_recvs == 0 || c.max_posted_recvs > (1U << 20)) {
    return bad("max_posted_recvs", std::to_string(c.max_posted_recvs), "must be 1..2^20");
  }
  if (c.max_posted_sends == 0 || c.max_posted_sends > (1U << 20)) {
    return bad("max_posted_sends", std::to_string(c.max_posted_sends), "must be 1..2^20");
  }
  if (c.dupthresh == 0) return bad("dupthresh", "0", "must be >= 1");
  if (c.reo_wnd_ns < 0) return bad("reo_wnd_ns", std::to_string(c.reo_wnd_ns), "must be >= 0");
  if (c.ack_every_segments == 0 || c.ack_every_segments > 64) {
    return bad("ack_every_segments", std::to_string(c.ack_every_segments), "must be 1..64");
  }
  if (c.ack_delay_ns < 0) return bad("ack_delay_ns", std::to_string(c.ack_delay_ns), "must be >= 0");
  if (c.floor_stall_ns < 0) return bad("floor_stall_ns", std::to_string(c.floor_stall_ns), "must be >= 0");
  if (c.tail_probe_min_ns < 0) {
    return bad("tail_probe_min_ns", std::to_string(c.tail_probe_min_ns), "must be >= 0");
  }
  if (c.keepalive_interval_ns <= 0) {
    return bad("keepalive_interval_ns", std::to_string(c.keepalive_interval_ns), "must be > 0");
  }
  if (c.port_closed_fail_ns < 0) {
    return bad("port_closed_fail_ns", std::to_string(c.port_closed_fail_ns), "must be >= 0 (0 = off)");
  }
  if (c.ack_every_segments > 1 && c.ack_delay_ns == 0) {
    return bad("ack_delay_ns", "0",
               "must be > 0 when ack_every_segments > 1 (a partial batch would wait forever)");
  }
  if (c.connect_timeout_ns <= 0) {
    return bad("connect_timeout_ns", std::to_string(c.connect_timeout_ns), "must be > 0");
  }
  if (c.rst_interval_ns < 0) return bad("rst_interval_ns", std::to_string(c.rst_interval_ns), "must be >= 0");
  if (c.max_connections == 0) return bad("max_connections", "0", "must be >= 1");
  if (c.version_min == 0 || c.version_min > c.version_max) {
    return bad("version_min..version_max",
               std::to_string(c.version_min) + ".." + std::to_string(c.version_max),
               "must be a non-empty range starting at >= 1");
  }
  if (!c.payload_crc && c.version_max < 2) {
    return bad("payload_crc", "false",
               "needs version_max >= 2 (version 1 has no segments without a payload CRC)");
  }
  if (Status s = cc::validate_cc_config(c.cc, "engine config cc"); !s) return s.error();
  const cc::RtoParams& r = c.cc.rto;
  if (r.initial_rto_ns <= 0 || r.min_rto_ns <= 0 || r.max_rto_ns < r.min_rto_ns || r.retry_budget_ns <= 0) {
    return bad("cc.rto", std::to_string(r.min_rto_ns) + ".." + std::to_string(r.max_rto_ns),
               "timeouts and retry budget must be positive with min <= max");
  }
  if (!(c.cc.flow.line_rate_bps > 0)) {
    return bad("cc.flow.line_rate_bps", std::to_string(c.cc.flow.line_rate_bps), "must be > 0");
  }
  return {};
}

}  // namespace megascale::engine
