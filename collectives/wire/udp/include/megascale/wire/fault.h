// Fault injection for the UDP wire: drop, duplicate, reorder, delay, corrupt and CE-mark datagrams with
// given probabilities, from a seeded PRNG, so that loss recovery can be tested on a loopback that never
// loses anything by itself.
//
//   auto cfg = fault_config_from_env(FaultConfig{});   // MEGASCALE_FAULT_DROP=0.01 ...
//   if (!cfg) { fmt::print(stderr, "{}\n", cfg.error().message); return 2; }
//   UdpConfig udp;  udp.fault = *cfg;                  // the wire owns a FaultInjector
//
// Where faults apply: on the RECEIVE path, to each datagram after GRO has been split into segments and
// before the engine sees it. The send path stays zero-copy and GSO batches stay intact; each wire injects
// faults into what it receives, so both directions (data and ACKs) see them when both wires enable them.
//
// Per datagram, in this order, each with its own draw from the PRNG (all six draws happen for every
// datagram, so a seed fixes the whole fault sequence for a given arrival sequence):
//   drop      the datagram vanishes (nothing else applies);
//   corrupt   one uniformly chosen bit of the datagram (header or payload) is flipped;
//   mark_ce   the ECN CE bit is reported set;
//   duplicate the datagram is delivered twice;
//   delay     held for `delay_ns`, then delivered (held datagrams keep their order among themselves);
//   reorder   (when not delayed) held until `reorder_depth` later datagrams have been delivered, or
//             kReorderMaxHoldNs has passed, whichever comes first.
// Held datagrams are copies, so the receive buffers can be reused at once.
//
// Configuration: YAML `fault:` section (parse_fault_config) and/or MEGASCALE_FAULT_* environment
// variables (fault_config_from_env), which override the YAML. Off by default.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "megascale/common/env.h"
#include "megascale/common/result.h"
#include "megascale/common/units.h"

namespace megascale::wire {

struct FaultConfig {
  // Probabilities in [0, 1] per datagram.
  double drop = 0.0;
  double duplicate = 0.0;
  double reorder = 0.0;
  double delay = 0.0;
  double corrupt = 0.0;
  double mark_ce = 0.0;
  TimeNs delay_ns = 0;         // how long a delayed datagram is held
  uint32_t reorder_depth = 8;  // later datagrams that overtake a reordered one (>= 1)
  uint64_t seed = 1;           // PRNG seed; the same seed and arrivals give the same faults

  // True when any fault has a non-zero probability.
  bool enabled() const;
};

// What was injected, and how many datagrams were looked at.
struct FaultCounters {
  uint64_t datagrams = 0;  // datagrams offered to the injector
  uint64_t dropped = 0;
  uint64_t duplicated = 0;
  uint64_t reordered = 0;
  uint64_t delayed = 0;
  uint64_t corrupted = 0;
  uint64_t ce_marked = 0;
};

// Longest time a reordered datagram is held when fewer than reorder_depth datagrams follow it.
inline constexpr TimeNs kReorderMaxHoldNs = 1 * kNsPerMs;
// Most datagrams held at once; beyond it, a datagram chosen for delay/reorder is delivered at once.
inline constexpr size_t kMaxHeldDatagrams = 1 << 16;

// Checks ranges; `source` names the configuration in the message ("fault.yaml", "environment").
Status validate_fault_config(const FaultConfig& config, std::string_view source);

// Reads the `fault:` section of a YAML document (absent section: faults off). Keys: drop, duplicate,
// reorder, reorder_depth, delay, delay_us, corrupt, mark_ce, seed. An unknown key, a value that is not a
// number or a probability outside [0, 1] is an error naming `source`, the key and the value. A
// `delay_us` without a `delay` probability delays every datagram.
Result<FaultConfig> parse_fault_config(std::string_view yaml_text, std::string_view source);

// Reads a YAML file and parses its `fault:` section; errors name the path.
Result<FaultConfig> load_fault_config(const std::string& path);


// Overrides `base` with MEGASCALE_FAULT_DROP, _DUP, _REORDER, _REORDER_DEPTH, _DELAY (probability),
// _DELAY_US, _CORRUPT, _CE and _SEED. Probabilities accept "0.01" or "1%". MEGASCALE_FAULT_DELAY_US
// without MEGASCALE_FAULT_DELAY delays every datagram. A bad value is an error naming the variable and
// the value: "MEGASCALE_FAULT_DROP=1.5: a probability must be in [0, 1]".
Result<FaultConfig> fault_config_from_env(const FaultConfig& base, const EnvLookup& getenv_fn);
Result<FaultConfig> fault_config_from_env(const FaultConfig& base);  // the process environment

// A datagram the injector held and now releases.
struct HeldDatagram {
  std::vector<uint8_t> bytes;
  uint32_t peer = 0;
  bool ce = false;
};

// Decides the fate of each arriving datagram. Single-threaded: the wire's progress loop owns it.
class FaultInjector {
 public:
  enum class Action {
    kDeliver,  // deliver the (possibly corrupted) bytes now; `copies` times
    kDrop,     // deliver nothing
    kHold,     // the injector kept a copy; pop_ready() releases it later
  };
  struct Verdict {
    Action action = Action::kDeliver;
    int copies = 1;  // 2 when duplicated
  };

  explicit FaultInjector(const FaultConfig& config);

  // Applies the faults to one datagram. Corruption is done in place in `datagram`; CE marking sets `ce`.
  Verdict apply(TimeNs now, uint32_t peer, std::span<uint8_t> datagram, bool& ce);

  // Moves one held datagram whose time has come into `out`; false when none is due.
  bool pop_ready(TimeNs now, HeldDatagram& out);

  // When the next held datagram becomes due (kNever when none is held).
  TimeNs next_deadline() const;

  size_t held() const { return delayed_.size() + reordered_.size(); }
  const FaultCounters& counters() const { return counters_; }
  const FaultConfig& config() const { return config_; }

 private:
  struct Held {
    HeldDatagram datagram;
    TimeNs release_ns = kNever;
    uint64_t release_after = 0;  // reorder: release once `delivered_` reaches this
    int copies = 1;
  };

  double uniform();  // [0, 1)
  uint64_t next_u64();

  FaultConfig config_;
  uint64_t rng_state_;
  uint64_t delivered_ = 0;  // datagrams delivered directly (what overtakes reordered ones)
  std::deque<Held> delayed_;
  std::deque<Held> reordered_;
  FaultCounters counters_;
  int pending_copies_ = 0;  // second copy of a duplicated held datagram still to hand out
  HeldDatagram pending_copy_;
};

}  // namespace megascale::wire
