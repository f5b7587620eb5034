// Scripted replay: feeds one controller a timed list of signals from a YAML scenario and records its
// state after each, to see exactly how a preset answers an RTT ramp, ECN marks, CNPs or losses.
//
//   Result<Scenario> s = load_scenario("configs/scenarios/ecn-before-delay.yaml");
//   if (!s) { fmt::print(stderr, "{}\n", s.error().message); return 2; }
//   std::unique_ptr<cc::Controller> cc = cc::make_controller(preset, flow);
//   for (const ReplayRow& row : replay(*s, *cc, ReplayOptions{.flow = flow}))
//     fmt::print("{} {} {}\n", row.t_ns, row.event, row.state.cwnd_bytes);
//
// A scenario file:
//   description: what the scenario shows     # optional, printed above the table
//   events:                                  # in time order
//     - {t_us: 0, send_bytes: 65536}         # on_send, one call per MSS segment
//     - {t_us: 10, rtt_us: 12}               # on_ack of one segment with a 12 us RTT sample
//     - {t_us: 11, rtt_us: 14, acked_packets: 4, ecn: true}   # four segments, CE echoed
//     - {t_us: 20, cnp: true}                # on_cnp
//     - {t_us: 30, loss: true}               # on_fast_recovery (a SACK hole)
//     - {t_us: 40, rto: true}                # on_rto
//     - {t_us: 50, timer: true}              # on_timer only: lets timers (DCQCN's) run
//     - {t_us: 60, rtt_us: 30, repeat: 20, every_us: 2}   # the same event 20 times, 2 us apart
// Each event has t_us and exactly one of rtt_us, cnp, loss, rto, send_bytes, timer. An `ecn: true`
// ACK reaches the controller the way the fluid model delivers ECN (EcnFeedback): as the ACK's echo,
// or for DCQCN through the receiver's CNP pacer, so one scenario means the same to every controller.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "megascale/common/result.h"
#include "megascale/common/units.h"
#include "megascale/congestion/controller.h"
#include "megascale/sim/fluid.h"

namespace megascale::sim {

enum class ScenarioEventKind : uint8_t { kAck, kCnp, kLoss, kRto, kSend, kTimer };

struct ScenarioEvent {
  TimeNs t_ns = 0;
  ScenarioEventKind kind = ScenarioEventKind::kAck;
  TimeNs rtt_ns = 0;           // kAck: the RTT sample
  uint32_t acked_packets = 1;  // kAck: segments acknowledged (acked_bytes = acked_packets * MSS)
  bool ecn = false;            // kAck: the acknowledged segments were CE-marked
  uint64_t send_bytes = 0;     // kSend
  int line = 0;                // 1-based line of the event in the scenario file
};

struct Scenario {
  std::string source;                 // file path (or what the text was called), for messages
  std::string description;            // the file's `description`, empty if none
  std::vector<ScenarioEvent> events;  // in time order, repeats expanded
};

// Parses scenario YAML; `source` names it in errors, which read "<source>:<line>: <problem>" and name
// the offending key and value.
Result<Scenario> parse_scenario(std::string_view yaml_text, std::string_view source);

// Reads and parses a scenario file.
Result<Scenario> load_scenario(const std::string& path);

// A short label for an event, e.g. "ack rtt=12.0us x4 ecn", "cnp", "send 65536B".
std::string describe_event(const ScenarioEvent& event);

struct ReplayOptions {
  cc::FlowParams flow;                            // MSS turns packets into bytes and bytes into segments
  EcnFeedback ecn_feedback = EcnFeedback::kAuto;  // how an `ecn: true` ACK reaches the controller
  TimeNs cnp_interval_ns = 50'000;                // the receiver CNP pacer's interval
};

// The controller's state right after one event.
struct ReplayRow {
  TimeNs t_ns = 0;
  std::string event;      // describe_event(), plus " +cnp" when the receiver sent a CNP for it
  bool cnp_sent = false;  // an ECN-marked ACK made the receiver's CNP pacer send a CNP
  cc::ControllerState state;
};

// Applies every event in order to `controller` and returns one row per event.
std::vector<ReplayRow> replay(const Scenario& scenario, cc::Controller& controller,
                              const ReplayOptions& options);

}  // namespace megascale::sim
