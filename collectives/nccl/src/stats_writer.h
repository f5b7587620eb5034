// Per-connection counters as JSON lines and a Prometheus textfile, when MEGASCALE_STATS_DIR is set.
//
//   <dir>/megascale-nccl-<host>-<id>.jsonl  a log, appended: each process's part opens with its
//                                           "settings" record (with its pid), then one JSON object per
//                                           connection per snapshot: "periodic" every
//                                           MEGASCALE_STATS_INTERVAL_S, and "close" when NCCL closes
//                                           the comm; per UDP wire, "wire_periodic" with each snapshot
//                                           and "wire" when the wires stop (the last context
//                                           finalized): its datagrams, system calls, GSO/GRO
//                                           messages, drops and sleeps so far (a verbs wire's
//                                           port counters under "port"). Never removed.
//   <dir>/megascale-nccl-<host>-<id>.prom   the process's metrics now, for node_exporter's textfile
//                                           collector: counters per open connection plus the sums
//                                           over closed ones (conn="closed"), histograms per
//                                           (ifname, role) over every connection, and each running
//                                           wire's counters (megascale_nccl_wire_*, a verbs wire's
//                                           port counters as megascale_nccl_wire_port_*); rewritten
//                                           atomically (tmp + rename), removed when the writer is
//                                           destroyed (library unload, process exit), or with
//                                           MEGASCALE_STATS_KEEP_PROM=1 left with megascale_nccl_up 0.
//
// <id> names the process without its pid, so that a rank's file keeps its name from run to run:
// "rank<N>" from the launcher's global rank (stats_identity), else "proc<K>", K the smallest number no
// live process on the host holds. Each process holds a lock (flock) on its .jsonl while it lives; a
// second live process with the same rank takes "rank<N>-1", and so on.
//
// Every metric is megascale_nccl_<thing>, counters end in _total, times are in seconds. RTT, fabric
// delay, receive delay, message time (request latency) and its phases are Prometheus histograms with
// fixed buckets (prom_bucket_edges_ns), so that they add up across ranks; the .jsonl keeps each
// connection's percentiles.
//
// Both files also say how the plugin was set up, for scripts and dashboards that must not read its log:
// the .jsonl part opens with one "settings" record (every knob's value and where it came from, and the
// thread layout), and the .prom carries megascale_nccl_setting_info{name,value,source} per knob and
// megascale_nccl_layout_info{wires,io_threads,lanes,stripes,stripe_bytes,source}, each of value 1.
//
//   StatsWriter w;
//   w.configure(cfg.stats_dir, cfg.stats_interval_ns, settings_of(cfg), stats_identity(getenv_fn));
// Snapshots are taken from NCCL's proxy threads (the data path calls tick(), which does work only when
// a snapshot is due) and on close; each takes the connection's wire lock briefly.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "config.h"
#include "megascale/common/env.h"
#include "megascale/common/units.h"
#include "megascale/engine/stats.h"

namespace megascale::nccl {

struct CommBase;
class DeviceWire;

// One knob as resolved: its name, the value in force as the INFO echo writes it, and "environment" or
// "default".
// The thread layout in force. `source` is "environment" when the user set it, else "auto: " and the
// rule's reason ("auto: 6 usable CPUs / 1 local rank = 6 each, ..."); the Prometheus label keeps the
// part before the colon.
struct LayoutRecord {
  uint32_t wires = 0;       // UDP wires (progress threads) per device
  uint32_t io_threads = 0;  // I/O threads per wire
  uint32_t lanes = 0;       // lanes (UDP source ports) per connection
  uint32_t stripes = 0;     // wires each comm's messages are cut over
  uint64_t stripe_bytes = 0;
  std::string source;
};

struct PluginSettings {
  std::vector<Setting> settings;  // in the plugin table's order
  LayoutRecord layout;
};

// The resolved settings and layout of `config`, as the stats files record them. This is the one place
// that knows how PluginConfig holds them.
PluginSettings settings_of(const PluginConfig& config);

// The .prom lines of the wires' packet-port counters (UdpWireStats::port; verbs wires only): per counter
// `megascale_nccl_wire_port_<counter>_total` (characters outside [A-Za-z0-9] as '_'), one sample per
// wire given as (label set "{ifname=...}", counters); counters sorted by name, "" when none.
std::string port_metrics_prom(
    const std::vector<std::pair<std::string, std::vector<std::pair<std::string, uint64_t>>>>& wires);

// The process's name in the stats files: "rank<N>" from the first of RANK (torchrun), OMPI_COMM_WORLD_RANK
// (Open MPI), PMI_RANK (MPICH/Hydra), PMIX_RANK, SLURM_PROCID that holds a whole number; "proc" when none
// does (NCCL tells a net plugin no rank).
std::string stats_identity(const EnvLookup& getenv_fn);

// The histograms' bucket edges (Prometheus "le", inclusive) in ns: 2^k - 1 for k = 7 .. 34, 127 ns to
// 17.2 s, one per octave. Each is the upper edge of an engine::RttHistogram bucket, so the cumulative
// counts are exact; "+Inf" follows.
const std::vector<TimeNs>& prom_bucket_edges_ns();

class StatsWriter {
 public:
  StatsWriter() = default;
  StatsWriter(const StatsWriter&) = delete;
  StatsWriter& operator=(const StatsWriter&) = delete;
  // Removes the .prom, or with keep_prom marks it megascale_nccl_up 0 (only in the process that
  // configured it: a forked child leaves its parent's), and lets go of the .jsonl's lock.
  ~StatsWriter();

  // Empty dir: disabled (every call returns at once). Otherwise picks the files' names from `identity`
  // (stats_identity's answer; "proc" or "rank<N>"), appends the "settings" record to the .jsonl and
  // writes the .prom with `settings` in it.
  // With keep_prom the destructor leaves the .prom, rewritten with megascale_nccl_up 0.
  void configure(const std::string& dir, TimeNs interval_ns, const PluginSettings& settings = {},
                 const std::string& identity = "proc", bool keep_prom = false);
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }

  // Every comm opened and closed passes through here, enabled or not: the process's totals below count
  // them all.
  void add(CommBase* comm);
  // Folds the comm's counters into the closed totals, and when enabled writes its "close" record.
  void remove(CommBase* comm);
  // Every connection this process has opened, open or closed, its engine counters added up (the
  // exported megascaleNetCounters_v1); `connections` gets how many. Kept whether or not the files are.
  engine::ConnectionStats totals(uint64_t* connections = nullptr);
  // A wire joins the snapshots when it starts; remove_wire writes its "wire" record (its counters over
  // its life) and forgets it: call it just before the wire stops.
  void add_wire(DeviceWire* wire, const std::string& ifname);
  void remove_wire(DeviceWire* wire);
  // Writes a periodic snapshot when one is due; cheap otherwise.
  void tick(TimeNs now);
  // Writes a snapshot of every open connection now (tests, finalize).
  void flush(TimeNs now);

  std::string jsonl_path() const { return jsonl_path_; }
  std::string prom_path() const { return prom_path_; }

 private:
  void write_prom_locked();

  std::atomic<bool> enabled_{false};
  std::atomic<TimeNs> next_ns_{0};
  TimeNs interval_ns_ = 0;
  std::string jsonl_path_;
  std::string prom_path_;
  std::string settings_prom_;  // the info lines, written at the top of every .prom
  int lock_fd_ = -1;           // the .jsonl, open and flock'ed while this writer lives
  int owner_pid_ = 0;          // the process that configured the files
  bool keep_prom_ = false;
  std::string last_prom_;  // the .prom as last written
  std::mutex mu_;          // guards everything below and the files
  std::set<CommBase*> comms_;  // the open comms the files report (when enabled)
  std::set<CommBase*> live_;   // every open comm
  engine::ConnectionStats closed_stats_;  // every closed comm's counters, added up
  uint64_t opened_ = 0;
  std::map<DeviceWire*, std::string> wires_;  // running wires and their interface names
  // Sums over closed connections, per (metric, ifname, role).
  std::map<std::string, double> closed_totals_;
  // Their distributions, per (histogram, ifname, role, phase).
  std::map<std::string, engine::RttHistogram> closed_hists_;
};

}  // namespace megascale::nccl
