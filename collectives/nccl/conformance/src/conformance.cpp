// The case table and the runner (see conformance.h).
#include "megascale/nccl/conformance.h"

#include <cstdlib>
#include <future>
#include <thread>

#include "cases.h"

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
       case_peer_killed_while_sending},
      {"peer_killed_while_receiving",
       "the sending peer process is SIGKILLed: irecv/test fail within the retry budget",
       case_peer_killed_while_receiving},
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

// Runs one case on a thread of its own so that a plugin that hangs fails the case instead of the run.
// A case that times out leaves its thread behind (detached): the plugin is stuck and the process
// should exit after reporting.
CaseResult run_case(const CaseInfo& info, Env env) {
  CaseResult result;
  result.name = info.name;
  LogCapture::get().mark();
  const auto t0 = Clock::now();
  auto task = std::make_shared<std::packaged_task<std::pair<Status, std::string>()>>([info, env]() mutable {
    Status s = info.fn(env);
    return std::make_pair(std::move(s), env.detail);
  });
  std::future<std::pair<Status, std::string>> done = task->get_future();
  std::thread([task] { (*task)(); }).detach();
  const auto wait = std::chrono::duration<double>(env.options.case_timeout_s);
  if (done.wait_for(wait) != std::future_status::ready) {
    result.detail =
        "HANG: the case did not finish within " + std::to_string(env.options.case_timeout_s) + " s";
  } else {
    auto [status, detail] = done.get();
    if (status) {
      result.passed = true;
      result.detail = detail;
    } else if (status.error().message.rfind("SKIP: ", 0) == 0) {
      result.skipped = true;
      result.detail = status.error().message.substr(6);
    } else {
      result.detail = status.error().message;
    }
  }
  result.seconds = seconds_since(t0);
  result.warnings = LogCapture::get().warnings_since_mark();
  return result;
}

}  // namespace

Report run(const Options& options, const std::function<void(const CaseResult&)>& on_case) {
  Report report;
  report.plugin_path = options.plugin_path;
  // The plugin reads its knobs once, at its first init: set the short budget before it loads.
  const std::string budget = std::to_string(options.retry_budget_s);
  ::setenv("MEGASCALE_RETRY_BUDGET_S", budget.c_str(), /*overwrite=*/0);
  LogCapture::get().set_verbose(options.verbose);

  auto loaded = Net::load(options.plugin_path, options.abi_version);
  if (!loaded) {
    report.load_error = loaded.error().message;
    return report;
  }
  std::shared_ptr<Net> net = std::move(*loaded);
  struct LogOnReturn {
    Report& r;
    ~LogOnReturn() {
      if (r.log.empty()) r.log = LogCapture::get().tail(200);
    }
  } log_on_return{report};
  report.plugin_name = net->name();
  report.abi_version = net->version();

  Env env{net, *net, options, 0, {}, {}};
  {
    Context ctx(env.net);
    if (Status s = ctx.init(); !s) {
      report.load_error = "init failed: " + s.error().message;
      for (const std::string& l : LogCapture::get().tail(3)) report.load_error += "\n  " + l;
      return report;
    }
    int n = 0;
    if (env.net.devices(&n) != abi::kNetSuccess || n < 1) {
      report.load_error = "devices() failed or reported no device";
      return report;
    }
    report.devices = n;
    env.dev = options.dev >= 0 ? options.dev : 0;
    if (options.dev < 0) {
      for (int d = 0; d < n; ++d) {
        DeviceProps p;
        if (env.net.properties(d, &p) == abi::kNetSuccess && p.name == "lo") env.dev = d;
      }
    }
    if (env.dev >= n || env.net.properties(env.dev, &env.props) != abi::kNetSuccess) {
      report.load_error =
          "device " + std::to_string(env.dev) + " is not usable (" + std::to_string(n) + " devices)";
      return report;
    }
    report.device_name = env.props.name;
    (void)ctx.finalize();
  }

  bool hung = false;
  for (const CaseInfo& info : all_cases()) {
    bool selected = options.cases.empty();
    for (const std::string& c : options.cases) selected = selected || c == info.name;
    if (!selected) continue;
    report.cases.push_back(run_case(info, env));
    if (hung)
      report.cases.back().detail += " (after an earlier case hung: its thread may still hold the plugin)";
    hung = hung || report.cases.back().detail.rfind("HANG:", 0) == 0;
    if (on_case) on_case(report.cases.back());
  }
  report.log = LogCapture::get().tail(200);
  return report;
}

}  // namespace megascale::nccl::conformance
