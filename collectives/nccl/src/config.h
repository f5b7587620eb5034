// The plugin's knobs: every one a MEGASCALE_* environment variable (NCCL's convention), read once at
// the first init, validated, and echoed once at INFO. A bad value fails init with a WARN that names
// the variable and the value, so NCCL either falls back to another net or, with NCCL_NET=MegaScale,
// fails loudly. docs/CONFIG.md ("NCCL plugin") and collectives/nccl/README.md list them all.
//
//   auto cfg = load_plugin_config([](const char* n) { return std::getenv(n); });
//   if (!cfg) { MS_WARN("%s", cfg.error().message.c_str()); return abi::kNetInvalidArgument; }
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpu_copy.h"
#include "megascale/common/result.h"
#include "megascale/common/units.h"
#include "megascale/congestion/params.h"
#include "megascale/wire/fault.h"

namespace megascale::nccl {

// The default thread layout (thread_layout): NCCL's busy threads per rank left out of its CPU share,
// and the most I/O threads per wire and wires per device it picks.
inline constexpr unsigned kNcclBusyThreads = 2;
inline constexpr uint32_t kMaxDefaultIoThreads = 4;
// Where two wires of (1 + kWideIoThreads) fit the share, that many I/O threads (and, with
// MEGASCALE_LANES unset, as many lanes): on 2 x H200 (16 CPUs a rank) 2 x (1 + 6) with 6 lanes gave
// 1.06-1.19x the bus bandwidth of 2 x (1 + 4) with 4 (medians of rows paired by round) in each of four
// calls of the fifteenth to eighteenth sessions (docs/PERFORMANCE.md)...
inline constexpr uint32_t kWideIoThreads = 6;
// ... but only where that leaves this many CPUs of the share idle beside NCCL's two. On 2 x H200 (16
// CPUs a rank) 2 x (1 + 6) filled every CPU of the host with busy threads: back-to-back collectives of
// 32 KiB - 1 MiB took 1.5-5.6x the time of 2 x (1 + 4) (thousands of tail probes, 0.6-2.2 CPUs of
// hypervisor steal on its runs against 0.01-0.03), and with 0.24 CPUs of steal its all-reduce fell to
// 0.35-1.00x of 2 x (1 + 4), whose bandwidth held in every round; on a quiet host it gave 1.04x
// (all-reduce) and 1.16x (all-gather). docs/PERFORMANCE.md, twentieth session.
inline constexpr unsigned kWideHeadroomCpus = 2;
inline constexpr uint32_t kDefaultLanes = 4;
inline constexpr uint32_t kMinDefaultWires = 2;  // without I/O threads
inline constexpr uint32_t kMaxDefaultWires = 4;  // without I/O threads, and without stripes
// Without I/O threads and with room for this many wires, that many, each comm over kDefaultStripes.
inline constexpr uint32_t kStripedDefaultWires = 6;
inline constexpr uint32_t kDefaultStripes = 4;
// With I/O threads, at most this many wires, however large the share: on 4 x H200 (64 CPUs) with 2
// ranks, 4 x (1 + 6) moved half the bus bandwidth of 2 x (1 + 6) and made 32 KiB - 4 MiB collectives
// 3-10x slower (thousands of tail probes where 2 wires had none), with 32 CPUs a rank to hold them
// (docs/PERFORMANCE.md, sixteenth session).
inline constexpr uint32_t kMaxDefaultWiresWithIoThreads = 2;
// With at least kHalfShareRanks ranks on the host and a share of at least kHalfShareMinCpus, the default
// spins on half the share: two wires of 1 + (share / 4 - 1) I/O threads, a lane each. On three 4 x
// H200 hosts (64 CPUs, 4 ranks, 16 CPUs each) 2 x (1 + 6) collapsed to 1.0-5.2 GB/s with thousands of
// tail probes while 2 x (1 + 3) moved 5.9-7.9 with none. docs/PERFORMANCE.md, sixteenth session.
inline constexpr unsigned kHalfShareRanks = 3;
inline constexpr unsigned kHalfShareMinCpus = 16;
// MEGASCALE_LOCAL_RANKS and the launchers' counts are taken in 1..kMaxLocalRanks.
inline constexpr long kMaxLocalRanks = 4096;

// The message MEGASCALE_STRIPE_BYTES's default cuts even over the stripes: NCCL's Simple protocol
// step at its default NCCL_BUFFSIZE (4 MiB over NCCL_STEPS 8, two steps a slice for ring collectives).
inline constexpr uint64_t kStripedMessageBytes = 1 << 20;

struct PluginConfig {
  std::string cc_source = "hybrid";  // MEGASCALE_CC as given: a preset name or a YAML path
  cc::CcConfig cc;                   // the resolved preset (retry budget already applied)
  // MEGASCALE_LANES: lanes (UDP source ports) per connection. Unset: kDefaultLanes, or one per I/O
  // thread where the layout has more (thread_layout).
  uint32_t lanes = kDefaultLanes;
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
  // At 0 (2 * SRTT alone) a calm H100 host sent ~650-880 duplicate probes per bandwidth run; at 1 ms,
  // 0-16, and small collectives under 1% loss still recovered 2-3x sooner than without probes.
  TimeNs tail_probe_min_ns = kNsPerMs;
  int traffic_class = -1;  // MEGASCALE_TC: IP traffic class byte 0..255; -1 = NCCL's config or 0
  std::string ifname;      // MEGASCALE_IFNAME: interface selection (see interfaces.h)
  std::string stats_dir;   // MEGASCALE_STATS_DIR: where counters go; empty = none
  // MEGASCALE_TRACE_FILE, with %h and %p expanded: the request timeline (TraceWriter); empty = none.
  std::string trace_file;
  TimeNs stats_interval_ns = 5 * kNsPerSec;  // MEGASCALE_STATS_INTERVAL_S
  // MEGASCALE_LATE_ACK_WARN_S: the window in which each wire counts segments that arrived twice, and
  // warns when there were many (StallWatch); 0 = no warning.
  TimeNs late_ack_window_ns = 5 * kNsPerSec;
  uint32_t threads_per_device = 4;  // MEGASCALE_NTHREADS: UDP wires (progress threads) per device
  // MEGASCALE_IO_THREADS: I/O threads per wire (UdpConfig::io_threads). Unset (both): thread_layout.
  uint32_t io_threads = 0;
  // MEGASCALE_SOURCE_PORTS: the UDP source ports of every device's wire (one per lane; lane i sends from
  // port i), e.g. as `megascale topo ports` prints them for one destination; empty = ephemeral ports.
  // Needs MEGASCALE_NTHREADS=1 (one wire per device, whose pool every connection shares).
  std::vector<uint16_t> source_ports;
  // MEGASCALE_STRIPES: connections each comm runs over, each on its own wire (distinct while it is at most
  // MEGASCALE_NTHREADS), 1..kMaxStripes (handle.h). A message is cut into one part per stripe so that
  // that many wire threads carry it at once, as NCCL's Socket net spreads one over its sockets.
  uint32_t stripes = 1;
  // MEGASCALE_STRIPE_BYTES: each stripe's part of a message but the last stripe's, which takes the rest
  // (CommBase::part). Unset: kStripedMessageBytes / stripes, rounded up to 4 KiB.
  uint64_t stripe_bytes = kStripedMessageBytes;
  bool busy_poll = false;  // MEGASCALE_BUSY_POLL: wire threads spin instead of sleeping
  // MEGASCALE_IDLE_POLL_US: how long a wire's threads keep polling after their last packet before they
  // sleep in epoll (UdpConfig::idle_poll_ns).
  TimeNs idle_poll_ns = 50 * kNsPerUs;
  // MEGASCALE_PENDING_POLL_US: the same while NCCL has requests outstanding on the wire
  // (UdpConfig::pending_poll_ns).
  TimeNs pending_poll_ns = 1 * kNsPerMs;
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

  // "NAME=value (source)" for every knob, in table order, for the INFO echo.
  std::vector<std::string> echo;
  // Settings that are valid but likely to hurt, each a sentence naming the variable, logged at WARN.
  std::vector<std::string> warnings;
};

using GetEnvFn = wire::GetEnv;

// Reads and validates every MEGASCALE_* variable through `getenv_fn`. The error names the variable,
// the value and what is allowed: "MEGASCALE_LANES=0: must be an integer in 1..64". `set_names` are
// the names of the variables the environment holds (megascale_env_names): each MEGASCALE_* one that is
// not a knob gets a warning naming the closest knob ("MEGASCALE_FAULT_DROPP is not a knob ...; did you
// mean MEGASCALE_FAULT_DROP?"). The knobs are exactly the names read through `getenv_fn`, so the list
// cannot drift from the code.
Result<PluginConfig> load_plugin_config(const GetEnvFn& getenv_fn,
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
LocalRanks local_ranks_from_env(const GetEnvFn& getenv_fn,
                                const std::string& pci_devices_dir = "/sys/bus/pci/devices");
// NVIDIA display and 3D controllers (vendor 0x10de, class 0x0300 / 0x0302) under a sysfs PCI directory.
unsigned count_nvidia_gpus(const std::string& pci_devices_dir);

// The wires per device and I/O threads per wire, from the rank's share of the CPUs (usable CPUs /
// local ranks) less kNcclBusyThreads:
//  - with room for two wires of (1 + kWideIoThreads), and MEGASCALE_LANES unset or above
//    kMaxDefaultIoThreads: an I/O thread per lane socket, up to kWideIoThreads;
//  - else with room for two wires of one thread and an I/O thread per lane socket (at most
//    kMaxDefaultIoThreads), that many on kMaxDefaultWiresWithIoThreads wires;
//  - with less room, no I/O threads and a wire per CPU of the room (kMinDefaultWires..
//    kMaxDefaultWires), whose threads sleep when idle; with room for kStripedDefaultWires, that many,
//    each comm cut over kDefaultStripes of them (MEGASCALE_STRIPES);
//  - but with kHalfShareRanks or more local ranks and a share of kHalfShareMinCpus or more, two wires
//    spinning on half the share (above).
// `lanes_set` is MEGASCALE_LANES (< 0: unset). A value the user set (wires_set / io_set >= 0) is kept
// and the other fitted around it. Measured on 2 ranks sharing 16 CPUs (a room of 6): on one H100 in the
// fifth session 1 x (1 + 4) threads gave 4.5-4.9 GB/s all-reduce, 4 x (1 + 0) 3.4-4.0 and the former
// 4 x (1 + 2) 1.6; on one H200 in the twenty-ninth, with the code of then, 4 x (1 + 0) gave 1.13x the
// bus bandwidth of 1 x (1 + 4) paired and 0.83x the time of its small collectives, and in a second
// call 1.23x tuned Socket's all-reduce against 1.13x, 0.80x its small collectives' time against 1.07x
// (docs/PERFORMANCE.md), so that room now gets 4 x (1 + 0). `usable_cpus` is
// wire::cpu_budget().usable; `cpus_note` (its note(), e.g. a cgroup quota that limits it) goes into the
// echoed text. default_lanes() gives the lanes for a layout when MEGASCALE_LANES is unset.
struct ThreadLayout {
  uint32_t wires = kMaxDefaultWires;
  uint32_t io_threads = 0;
  uint32_t stripes = 1;             // MEGASCALE_STRIPES when unset
  bool lane_per_io_thread = false;  // MEGASCALE_LANES unset: as many lanes as I/O threads (default_lanes)
  unsigned cpu_share = 1;           // usable CPUs / local ranks
  std::string share_text;           // "16 usable CPUs / 2 local ranks"
  std::string why;                  // the echo: share, what NCCL keeps, the layout
};
ThreadLayout thread_layout(unsigned usable_cpus, unsigned local_ranks, int lanes_set, int wires_set,
                           int io_set, const std::string& cpus_note = {});
// MEGASCALE_LANES unset: kDefaultLanes, or one per I/O thread where a wire has more.
uint32_t default_lanes(const ThreadLayout& layout);

// This host's name (gethostname), or "host" when it cannot be read: for file names and records.
std::string host_name();

// A file name pattern as NCCL_DEBUG_FILE takes it: %h becomes the host name, %p the process id, %% a
// percent sign; any other % sequence is kept as it is.
std::string expand_file_pattern(const std::string& pattern, const std::string& host, long pid);

// The engine segment size for an interface MTU when MEGASCALE_SEGMENT_BYTES is not set: the largest
// payload whose datagram (IP + UDP + engine header) fits the MTU, capped at kMaxDefaultSegmentBytes, and
// at least 512. Jumbo frames give 8900 B; loopback (MTU 64 KiB) gets the cap: on one host every segment
// costs a system call's share and a wakeup, so fewer, larger ones move more (1.8 vs 1.5 GB/s
// all-reduce at 32 KiB against 4 KiB; on 2 x H200, 60 KiB gave 1.05-1.07x the bus bandwidth of 32 KiB in
// two calls, docs/PERFORMANCE.md). 60 KiB and its header stay below a UDP datagram's 64 KiB limit.
inline constexpr uint32_t kMaxDefaultSegmentBytes = 60 * 1024;
uint32_t default_segment_bytes(int mtu_bytes, bool ipv6);

}  // namespace megascale::nccl
