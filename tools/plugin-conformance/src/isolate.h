// Each conformance case runs in a child process of its own (fork), so that a plugin that crashes,
// aborts or hangs in any call fails that case, by name, instead of taking the harness down with it.
//
// The child tells the parent which plugin call each of its threads is in through a CallBoard, a page
// of shared memory: Net wraps every call into the plugin in an InCall, which marks the calling thread's
// slot with the call for the call's duration. A fatal signal in the child is recorded there too, with
// the call the faulting thread was in, before the signal takes its usual course (a sanitizer's report,
// a core dump). The parent reads the board when the child dies or overruns its time:
//
//   ChildOutcome o = run_in_child(options, &info);   // or nullptr: load and probe the plugin only
//   // o.failure: "" or e.g. "killed by SIGSEGV in isend", "init did not return within 30 s"
//
// Results, the plugin's log lines and its device facts come back through a pipe as they happen, so
// that what the plugin logged before it crashed is still reported.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cases.h"

namespace megascale::nccl::conformance {

// The plugin's functions, named as in NCCL's ncclNet_t tables (plus dlopen, which runs the plugin's
// static constructors).
enum class Call : uint32_t {
  kNone = 0,
  kDlopen,
  kInit,
  kFinalize,
  kDevices,
  kGetProperties,
  kListen,
  kConnect,
  kAccept,
  kRegMr,
  kDeregMr,
  kIsend,
  kIrecv,
  kIflush,
  kTest,
  kCloseSend,
  kCloseRecv,
  kCloseListen,
  kIrecvConsumed,
  kCount,
};
const char* call_name(Call c);

// Shared between a case's child (writer) and the harness (reader). Lock-free atomics of 32 bits are
// address-free, so they work across the two processes' mappings of the same page.
struct CallBoard {
  static constexpr int kSlots = 64;  // threads beyond the 64th share the last slot
  std::atomic<uint32_t> slot[kSlots];
  std::atomic<int> threads;          // slots handed out
  std::atomic<int> crash_signal;     // the first fatal signal the child took, or 0
  std::atomic<uint32_t> crash_call;  // the call its thread was in (Call)
  std::atomic<int> crash_in_call;    // 1 when that thread was inside a plugin call
};

// Marks the calling thread as inside `call` while alive (no-op outside a case's child).
class InCall {
 public:
  explicit InCall(Call call);
  ~InCall();
  InCall(const InCall&) = delete;
  InCall& operator=(const InCall&) = delete;

 private:
  std::atomic<uint32_t>* slot_;
  uint32_t previous_ = 0;
};

struct ChildOutcome {
  // Facts the child reported from its probe (load, init, devices, properties).
  std::string plugin_name;
  int abi_version = 0;
  int devices = 0;
  int device_index = -1;
  std::string device_name;
  bool probed = false;     // the probe went through
  std::string load_error;  // the plugin did not load, or its probe failed (an error code, not a crash)
  // The case's own verdict, when it got that far: 'P' passed, 'F' failed, 'S' skipped, 0 none.
  char verdict = 0;
  std::string detail;
  std::vector<Measurement> measurements;
  std::string stage;   // what the case last said it waits for (note_stage)
  double seconds = 0;  // the case's own time, or the child's whole time if it did not report one
  // Non-empty when the child crashed, exited early or overran its time: what happened, in which call.
  std::string failure;
  std::vector<std::string> log;       // every line the plugin logged, oldest first
  std::vector<std::string> warnings;  // the WARN lines logged after the probe (during the case)
};

// Forks a child that loads the plugin, probes it and runs `info` (nullptr: the probe alone), waits for
// it at most options.case_timeout_s, and kills its process group (the child and any peer process it
// started) when it overruns. `progress` (if set) hears at the start and every
// options.progress_interval_s while the child runs. Call from a thread-free point of the program: the
// child is a fork, not an exec, of the caller.
ChildOutcome run_in_child(const Options& options, const CaseInfo* info,
                          const std::function<void(const Progress&)>& progress = {});

}  // namespace megascale::nccl::conformance
