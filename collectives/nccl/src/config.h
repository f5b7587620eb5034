// The plugin's knobs: every one a MEGASCALE_* environment variable (NCCL's convention), read once at
// the first init, validated, and echoed once at INFO. A bad value fails init with a WARN that names
// the variable and the value, so NCCL either falls back to another net or, with NCCL_NET=MegaScale,
// fails loudly. The knobs are one table, config_schema.h; docs/CONFIG.md ("NCCL plugin") is rendered
// from it.
//
//   auto cfg = load_plugin_config([](const char* n) { return std::getenv(n); });
//   if (!cfg) { MS_WARN("%s", cfg.error().message.c_str()); return abi::kNetInvalidArgument; }
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gpu_copy.h"
#include "layout.h"
#include "megascale/common/env.h"
#include "megascale/common/result.h"
#include "megascale/common/units.h"
#include "megascale/congestion/params.h"
#include "megascale/wire/fault.h"
#if MEGASCALE_NCCL_VERBS
#include "megascale/wire/verbs/gid.h"
#endif

namespace megascale::nccl {

// MEGASCALE_LOCAL_RANKS and the launchers' counts are taken in 1..kMaxLocalRanks.
inline constexpr long kMaxLocalRanks = 4096;

// MEGASCALE_WIRE: the wire under the engine (wire_choice.h decides auto from the RDMA devices).
enum class WireKind : uint8_t { kAuto, kUdp, kVerbsUd, kVerbsRc };
std::string_view to_string(WireKind k);  // "auto", "udp", "verbs-ud", "verbs-rc"
inline bool is_verbs(WireKind k) {
  return k == WireKind::kVerbsUd || k == WireKind::kVerbsRc;
}
// MEGASCALE_WIRE's value: unset or empty is auto; anything but the four words is an error naming it.
Result<WireKind> parse_wire_kind(const char* text);

// One knob as resolved: what the INFO echo prints ("NAME=value (note) (source)") and the stats files
// record, in the schema's order (config_schema.h).
struct Setting {
  std::string name;    // "MEGASCALE_LAYOUT"
  std::string value;   // the resolved value in the knob's own syntax: "wires=4,io_threads=0,..."
  std::string source;  // "environment" (the variable is set) or "default"
  std::string note;  // what the value means here, e.g. "auto: 6 usable CPUs / 1 local rank ..."; may be empty
};

// "MEGASCALE_TC=96 (DSCP 24) (environment)": one INFO line.
std::string echo_line(const Setting& s);

struct PluginConfig {
  WireKind wire = WireKind::kAuto;  // MEGASCALE_WIRE
#if MEGASCALE_NCCL_VERBS
  wire::verbs::GidSelector gid_selector;  // MEGASCALE_IB_*
#endif
  std::string cc_source = "hybrid";  // MEGASCALE_CC as given: a preset name or a YAML path
  cc::CcConfig cc;                   // the resolved preset (retry budget already applied)
  // MEGASCALE_LAYOUT: wires per device, I/O threads per wire, lanes per connection, stripes per comm and
  // their part size (layout.h).
  Layout layout;
  uint32_t segment_bytes = 0;               // MEGASCALE_SEGMENT_BYTES: payload per segment; 0 = from the MTU
  TimeNs retry_budget_ns = 30 * kNsPerSec;  // MEGASCALE_RETRY_BUDGET_S: fail a silent peer after this
  // MEGASCALE_PORT_CLOSED_MS: a peer whose port answers ICMP port unreachable this long, with nothing
  // heard from it since, fails its connections (EngineConfig::port_closed_fail_ns); 0 = off.
  TimeNs port_closed_fail_ns = 200 * kNsPerMs;
  // MEGASCALE_RTO_FLOOR_US: no retransmission timeout is shorter (the wire's min_rto_floor_ns); at most
  // the preset's max_rto.
  TimeNs rto_floor_ns = 5 * kNsPerMs;
  // MEGASCALE_TAIL_PROBE: a lost last segment is probed for after 2 * SRTT instead of waiting for the
  // RTO (EngineConfig::tail_probe).
  bool tail_probe = true;
  // MEGASCALE_PAYLOAD_CRC: CRC32C over every payload this rank sends (EngineConfig::payload_crc). 0 sends
  // payloads unchecked on connections whose peer speaks protocol version 2.
  bool payload_crc = true;
  // MEGASCALE_TAIL_PROBE_MIN_US: the probe timeout is at least this (EngineConfig::tail_probe_min_ns).
  // 0 leaves 2 * SRTT alone, which probes at every ACK stall of a busy host and sends duplicates.
  TimeNs tail_probe_min_ns = kNsPerMs;
  int traffic_class = -1;  // MEGASCALE_TC: IP traffic class byte 0..255; -1 = NCCL's config or 0
  std::string ifname;      // MEGASCALE_IFNAME: interface selection (see interfaces.h)
  std::string stats_dir;   // MEGASCALE_STATS_DIR: where counters go; empty = none
  // MEGASCALE_TRACE_FILE, with %h and %p expanded: the request timeline (TraceWriter); empty = none.
  std::string trace_file;
  TimeNs stats_interval_ns = 5 * kNsPerSec;  // MEGASCALE_STATS_INTERVAL_S
  // MEGASCALE_STATS_KEEP_PROM: at exit, leave the textfile marked megascale_nccl_up 0 instead of removing it.
  bool stats_keep_prom = false;
  // MEGASCALE_LATE_ACK_WARN_S: the window in which each wire counts segments that arrived twice, and
  // warns when there were many (StallWatch); 0 = no warning.
  TimeNs late_ack_window_ns = 5 * kNsPerSec;
  // MEGASCALE_SOURCE_PORTS: the UDP source ports of every device's wire (one per lane; lane i sends from
  // port i), e.g. as `megascale topo ports` prints them for one destination; empty = ephemeral ports.
  // Needs MEGASCALE_LAYOUT wires=1 (one wire per device, whose pool every connection shares).
  std::vector<uint16_t> source_ports;
  bool busy_poll = false;  // MEGASCALE_BUSY_POLL: wire threads spin instead of sleeping
  // MEGASCALE_IDLE_POLL_US: how long a wire's threads keep polling after their last packet before they
  // sleep in epoll (UdpConfig::idle_poll_ns).
  TimeNs idle_poll_ns = 50 * kNsPerUs;
  // MEGASCALE_PENDING_POLL_US: the same while NCCL has requests outstanding on the wire
  // (UdpConfig::pending_poll_ns).
  TimeNs pending_poll_ns = 1 * kNsPerMs;
  // MEGASCALE_TEST_PROGRESS_US: test() runs a wire round on NCCL's thread when the wire's own thread
  // has finished none for this long (UdpConfig::help_after_ns); 0 = off.
  TimeNs help_after_ns = 50 * kNsPerUs;
  // MEGASCALE_STALL_US: an I/O thread away from its loop this long is taken as stalled and the others
  // do its sends and receives until it is back (UdpConfig::stall_ns); 0 = off.
  TimeNs stall_ns = 300 * kNsPerUs;
  wire::FaultConfig fault;  // MEGASCALE_FAULT_* (the wire's fault injection)
  // MEGASCALE_GDR_COPY: 1 advertises NCCL_PTR_CUDA and moves NCCL's GPU buffers through pinned host
  // shadows with the GPU's copy engines (gpu_copy.h); "emulate" does the same with the CPU on host
  // memory, for the conformance harness; 0 (default) takes host memory only.
  GdrCopyMode gdr_copy = GdrCopyMode::kOff;
  // What a comm's copier gives up on (gpu_copy.h, CopyLimits): MEGASCALE_GDR_COPY_TIMEOUT_MS, a copy still
  // not done this long after it was queued fails its comm (ncclUnhandledCudaError, a WARN naming the
  // likely cause) instead of leaving NCCL to wait forever, 0 = wait forever; MEGASCALE_FAULT_COPY_STALL=N
  // (fault injection), every copy after the first N held back as if stuck, 0 = off.
  CopyLimits gdr_copy_limits;

  // How long a connection with requests pending waits on a silent peer before it probes it
  // (EngineConfig::keepalive_interval_ns): a quarter of the retry budget, within 10 ms..1 s, and with
  // closed-port reports on no longer than their grace. A rank that dies when its peers have nothing of
  // theirs unacknowledged leaves them silent: only a probe draws the ICMP port unreachable from its host,
  // and waiting 1 s for it would make the closed-port check four times slower than it need be.
  TimeNs keepalive_interval_ns() const;

  // Every knob as resolved, in the schema's order (the INFO echo: echo_line).
  std::vector<Setting> settings;
  // Settings that are valid but likely to hurt, each a sentence naming the variable, logged at WARN.
  std::vector<std::string> warnings;
};

// Reads and validates every MEGASCALE_* variable through `getenv_fn`. The error names the variable,
// the value and what is allowed: "MEGASCALE_TC=300: must be an integer in 0..255". The knobs are the
// rows of the schema (config_schema.h), read in its order. `set_names` are the names of the variables
// the environment holds (megascale_env_names): each MEGASCALE_* one that is not a knob gets a warning
// naming the closest knob ("MEGASCALE_FAULT_DROPP is not a knob ...; did you mean
// MEGASCALE_FAULT_DROP?").
Result<PluginConfig> load_plugin_config(const EnvLookup& getenv_fn,
                                        const std::vector<std::string>& set_names = {});

// The names of the MEGASCALE_* variables in `envp` (NAME=value strings, as environ).
std::vector<std::string> megascale_env_names(char** envp);

// The one of `candidates` closest to `name` by edit distance (the first of equals); "" when empty.
std::string closest_name(const std::string& name, const std::vector<std::string>& candidates);

// How many ranks share this host's CPUs: MEGASCALE_LOCAL_RANKS, else a launcher's variable
// (LOCAL_WORLD_SIZE from torchrun, OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS), else the NVIDIA GPUs
// on the PCI bus (one rank per GPU), else 1. `source` says which.
struct LocalRanks {
  unsigned count = 1;
  std::string source;
};
LocalRanks local_ranks_from_env(const EnvLookup& getenv_fn,
                                const std::string& pci_devices_dir = "/sys/bus/pci/devices");
// NVIDIA display and 3D controllers (vendor 0x10de, class 0x0300 / 0x0302) under a sysfs PCI directory.
unsigned count_nvidia_gpus(const std::string& pci_devices_dir);

// This host's name (gethostname), or "host" when it cannot be read: for file names and records.
std::string host_name();

// A file name pattern as NCCL_DEBUG_FILE takes it: %h becomes the host name, %p the process id, %% a
// percent sign; any other % sequence is kept as it is.
std::string expand_file_pattern(const std::string& pattern, const std::string& host, long pid);

// The engine segment size for an interface MTU when MEGASCALE_SEGMENT_BYTES is not set: the largest
// payload whose datagram (IP + UDP + engine header) fits the MTU, capped at kMaxDefaultSegmentBytes, and
// at least 512. Jumbo frames give 8900 B; loopback (MTU 64 KiB) gets the cap: on one host every segment
// costs a system call's share and a wakeup, so fewer, larger ones move more (docs/PERFORMANCE.md). 60 KiB
// and its header stay below a UDP datagram's 64 KiB limit.
inline constexpr uint32_t kMaxDefaultSegmentBytes = 60 * 1024;
uint32_t default_segment_bytes(int mtu_bytes, bool ipv6);

}  // namespace megascale::nccl
