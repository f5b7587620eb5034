// Conformance harness for NCCL net plugins: loads any plugin .so exactly as NCCL does (dlopen with
// RTLD_NOW | RTLD_LOCAL, dlsym ncclNetPlugin_v12, then v11 .. v8; init with a logger) and drives it
// through NCCL's call patterns on host memory: connect and accept progressed alternately on one thread,
// 8 steps in flight per connection, grouped receives with tags, receives larger than the send, zero-byte
// messages, 32 requests per comm, many comms on many threads, closes with requests outstanding, and a
// peer process killed or stopped mid-transfer (test must then fail within the retry budget, not hang).
// Runs on the CPU. Used by tests/unit/nccl/nccl_conformance_test.cpp and `megascale plugin-check PATH`.
//
// The plugin never runs in the calling process: a child process (fork) loads and probes it, then each
// case runs in a child of its own, in its own process group. A case whose process crashes, aborts, exits
// or overruns case_timeout_s fails with what happened and the plugin call it happened in ("killed by
// SIGSEGV in isend", "init did not return within 30 s"); the harness kills the process group and goes
// on with the next case. Call run() from a point of the program with no other threads running.
//
//   conformance::Options opt;
//   opt.plugin_path = "build/collectives/nccl/libnccl-net-megascale.so";
//   conformance::Report rep = conformance::run(opt, [](const conformance::CaseResult& c) { print(c); });
//   return rep.passed() ? 0 : 1;
//
// The peer cases re-execute the running program (/proc/self/exe) as the peer; a static
// initializer in this library recognises the peer's environment and runs the peer instead of main().
// Any program linking the harness therefore works as its own peer.
//
// The device: Options::dev, an index into the plugin's device list; by default (-1) the one named "lo",
// so that the cases' traffic stays on this host. MegaScale lists loopback only when nothing else is up;
// it is asked to list it: with dev -1, MEGASCALE_IFNAME unset and lo up, the cases' processes run with
// MEGASCALE_IFNAME==lo. A plugin that lists no "lo" runs on device 0;
// Report::device_index and device_name say which device the cases used.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "megascale/common/result.h"

namespace megascale::nccl::conformance {

struct Options {
  std::string plugin_path;         // the .so to load (absolute or relative path, or a name dlopen finds)
  int abi_version = 0;             // 0: the newest the plugin exports (NCCL's order); else exactly 8..12
  int dev = -1;                    // device index to use; -1: the one named "lo" (see above), else 0
  std::vector<std::string> cases;  // empty: all cases
  // Retry budget the plugin is asked to use in the cases that take a peer away (MEGASCALE_RETRY_BUDGET_S
  // in their processes, when unset); bounds how long they may take to see an error. The other cases keep
  // the plugin's own budget: there, a short one only turns a starved host into a false "peer gone".
  double retry_budget_s = 2.0;
  // A case's process (the plugin's load and probe included) that runs longer is killed and the case
  // fails, naming the plugin calls still in progress; so is the first, probing process.
  double case_timeout_s = 60.0;
  // Factor on the deadlines inside the cases (a connection's setup, a stream of messages, the slack
  // after a peer is gone); not on case_timeout_s. 0: 1 in a plain build, 3 under AddressSanitizer, 5
  // under ThreadSanitizer, times the host's load (1-minute load average per CPU, from 1 to 4) when the
  // case starts.
  double time_scale = 0;
  int threads = 4;           // many-comms case: threads ...
  int comms_per_thread = 4;  // ... and connection pairs per thread
  bool verbose = false;      // plugin log lines to stderr as they come
  // The type every buffer is registered as (regMr): NCCL_PTR_HOST (1), or NCCL_PTR_CUDA (2) to drive a
  // plugin's GPU-buffer path with host memory where the plugin can take it so (MegaScale with
  // MEGASCALE_GDR_COPY=emulate). The buffers are host memory either way.
  int mem_type = 1;
  // How often Observer::progress hears about a case (or the probe) still running, after the first
  // report at its start.
  double progress_interval_s = 2.0;
};

// One number a case measured, its unit in its name ("bandwidth_gbps", "latency_us", "message_bytes";
// a bare count such as "messages" has none).
struct Measurement {
  std::string name;
  double value = 0;
};

struct CaseResult {
  std::string name;
  bool passed = false;
  bool skipped = false;  // the plugin lacks what the case needs (e.g. maxRecvs == 1): not a failure
  std::string detail;    // why it failed or was skipped, or what it measured (as text)
  double seconds = 0;
  std::vector<Measurement> measurements;  // what it measured, as numbers (informational cases mostly)
  std::vector<std::string> warnings;      // WARN lines the plugin logged during the case
};

struct Report {
  std::string plugin_path;
  std::string plugin_name;  // the table's name field
  int abi_version = 0;      // the table the harness used
  int devices = 0;
  int device_index = -1;    // the device the cases ran on (index into the plugin's list) ...
  std::string device_name;  // ... and its name
  std::vector<CaseResult> cases;
  // Non-empty when the plugin could not be loaded or probed (init, devices, properties): an error it
  // returned, a NULL table entry, or its process crashing or hanging (then no case ran).
  std::string load_error;
  std::vector<std::string> log;  // the plugin's last log lines (WARN and INFO), oldest first

  bool passed() const;
};

// A case (or the probe, case_name "") still running: its time so far, what it said it waits for, and
// the plugin calls its threads are in ("test (2 threads) and isend"; "" when none).
struct Progress {
  std::string case_name;
  double elapsed_s = 0;
  std::string stage;  // e.g. "stream of 32 x 4194304 B: 12/32 sends and 10/32 receives done"
  std::string calls;
};

// What run() tells its caller as it goes: the probe's facts (before any case runs), each case's result
// as it finishes, and progress (at each start, then every Options::progress_interval_s).
struct Observer {
  std::function<void(const Report&)> probed;
  std::function<void(const CaseResult&)> case_done;
  std::function<void(const Progress&)> progress;
};

// Names of every case, in run order, with a one-line description each.
std::vector<std::pair<std::string, std::string>> case_list();

// Probes the plugin and runs the selected cases, each in a process of its own; `on_case` sees each
// result as it finishes.
Report run(const Options& options, const std::function<void(const CaseResult&)>& on_case = {});
Report run(const Options& options, const Observer& observer);

}  // namespace megascale::nccl::conformance
