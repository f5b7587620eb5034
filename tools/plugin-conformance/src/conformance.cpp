// The case table and the runner (see conformance.h).
#include "megascale/nccl/conformance.h"

#include <cstdlib>

#include "cases.h"
#include "isolate.h"

namespace megascale::nccl::conformance {

const std::vector<CaseInfo>& all_cases() {
  static const std::vector<CaseInfo> cases = {
      {"load", "name, init, devices and properties as NCCL checks them; nothing printed to stdout",
       case_load},
      {"connect_accept_one_thread",
       "listen, then connect and accept alternated on one thread until both are ready",
       case_connect_accept_one_thread},
      {"steps_in_flight", "8 isends and 8 irecvs in flight per connection, rolling, data checked",
       case_steps_in_flight},
      {"message_sizes", "1 B .. 8 MiB + 1 around segment boundaries", case_message_sizes},
      {"receive_larger_than_send", "receive buffers larger than the message report the message's size",
       case_receive_larger_than_send},
      {"zero_byte", "zero-byte messages into zero-byte and larger buffers", case_zero_byte},
      {"grouped_receive", "one irecv of maxRecvs tagged buffers, sends matched by tag", case_grouped_receive},
      {"max_requests", "32 irecvs (x maxRecvs buffers) and 32 x maxRecvs isends outstanding on one comm pair",
       case_max_requests},
      {"iflush", "iflush of host memory: NULL request or one that completes", case_iflush},
      {"optional_recv_completion",
       "irecv with NCCL_NET_OPTIONAL_RECV_COMPLETION in *request, then irecvConsumed",
       case_optional_recv_completion},
      {"many_comms_threads", "many contexts and connection pairs transferring on many threads at once",
       case_many_comms_threads},
      {"close_with_requests",
       "closeSend/closeRecv with requests outstanding return promptly; the plugin goes on",
       case_close_with_requests},
      {"peer_killed_while_sending",
       "the receiving peer process is SIGKILLed: isend/test fail within the retry budget",
       case_peer_killed_while_sending, true},
      {"peer_killed_while_receiving",
       "the sending peer process is SIGKILLed: irecv/test fail within the retry budget",
       case_peer_killed_while_receiving, true},
      {"peer_stopped_while_sending",
       "the receiving peer process is stopped (SIGSTOP, alive but silent): isend/test fail within the "
       "retry budget",
       case_peer_stopped_while_sending, true},
      {"peer_stopped_while_receiving",
       "the sending peer process is stopped (SIGSTOP, alive but silent): irecv/test fail within the "
       "retry budget",
       case_peer_stopped_while_receiving, true},
      {"latency", "one 8-byte message at a time: microseconds per message (informational)", case_latency},
      {"step_time",
       "one 1 MiB message at a time: microseconds from isend to its receive done (informational)",
       case_step_time},
      {"steps_both_ways",
       "one 1 MiB message at a time each way on two pairs at once, as a ring's rank sends and receives: "
       "microseconds from isend to its receive done (informational)",
       case_steps_both_ways},
      {"throughput", "one connection, 4 MiB messages, 8 in flight: GB/s (informational)", case_throughput},
  };
  return cases;
}

std::vector<std::pair<std::string, std::string>> case_list() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const CaseInfo& c : all_cases()) out.emplace_back(c.name, c.description);
  return out;
}

bool Report::passed() const {
  if (!load_error.empty()) return false;
  for (const CaseResult& c : cases) {
    if (!c.passed && !c.skipped) return false;
  }
  return true;
}

namespace {

// Keeps the newest `n` lines of `lines`.
void keep_tail(std::vector<std::string>& lines, size_t n) {
  if (lines.size() > n) lines.erase(lines.begin(), lines.end() - static_cast<std::ptrdiff_t>(n));
}

CaseResult to_case_result(const CaseInfo& info, ChildOutcome& o) {
  CaseResult result;
  result.name = info.name;
  result.seconds = o.seconds;
  result.warnings = std::move(o.warnings);
  result.measurements = std::move(o.measurements);
  if (!o.failure.empty()) {
    // A crash or hang says so first; what the case had found by then (if anything) follows.
    result.detail = o.failure;
    if (o.verdict == 'F' || (o.verdict == 0 && !o.detail.empty()))
      result.detail += " (the case: " + o.detail + ")";
  } else if (!o.load_error.empty()) {
    result.detail = "the plugin did not load in the case's process: " + o.load_error;
  } else if (o.verdict == 'P') {
    result.passed = true;
    result.detail = o.detail;
  } else if (o.verdict == 'S') {
    result.skipped = true;
    result.detail = o.detail;
  } else {
    result.detail = o.detail;
  }
  return result;
}

}  // namespace

Report run(const Options& options, const std::function<void(const CaseResult&)>& on_case) {
  Observer observer;
  observer.case_done = on_case;
  return run(options, observer);
}

Report run(const Options& options, const Observer& observer) {
  Report report;
  report.plugin_path = options.plugin_path;
  // The plugin is loaded only in child processes, one to probe it and one per case: whatever it does
  // (crash, abort, hang, exit) ends that process and is reported; this one never runs its code.
  ChildOutcome probe = run_in_child(options, nullptr, observer.progress);
  report.plugin_name = probe.plugin_name;
  report.abi_version = probe.abi_version;
  report.devices = probe.devices;
  report.device_index = probe.device_index;
  report.device_name = probe.device_name;
  report.log = std::move(probe.log);
  if (!probe.failure.empty() || !probe.load_error.empty()) {
    report.load_error = !probe.failure.empty() ? probe.failure : probe.load_error;
    keep_tail(report.log, 200);
    return report;
  }
  if (observer.probed) observer.probed(report);

  for (const CaseInfo& info : all_cases()) {
    bool selected = options.cases.empty();
    for (const std::string& c : options.cases) selected = selected || c == info.name;
    if (!selected) continue;
    ChildOutcome o = run_in_child(options, &info, observer.progress);
    report.log.insert(report.log.end(), o.log.begin(), o.log.end());
    keep_tail(report.log, 200);
    report.cases.push_back(to_case_result(info, o));
    if (observer.case_done) observer.case_done(report.cases.back());
  }
  return report;
}

}  // namespace megascale::nccl::conformance
