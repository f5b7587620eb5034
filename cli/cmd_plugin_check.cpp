// `megascale plugin-check PATH`: check that an NCCL net plugin behaves as NCCL needs, on this CPU,
// before a job depends on it.
//
//   megascale plugin-check build/collectives/nccl/libnccl-net-megascale.so
//   megascale plugin-check /opt/aws-ofi-nccl/lib/libnccl-net.so --abi 9 --case steps_in_flight -v
//   megascale plugin-check libnccl-net-megascale.so --json check.json --budget 5s
//   megascale plugin-check --list
//
// Loads the plugin exactly as NCCL does (dlopen RTLD_NOW|RTLD_LOCAL, ncclNetPlugin_v12 then v11..v8,
// init with a logger) and runs the conformance cases (tools/plugin-conformance): setup progressed on
// one thread, 8 steps in flight, grouped receives, sizes 0 B .. 8 MiB, 32 requests per comm, many comms
// on many threads, closes with requests outstanding, and a peer process killed or stopped mid-transfer.
// The plugin runs only in child processes, one per case: a crash, an abort or a hang in any call fails
// that case, naming the call, within --timeout, and the check goes on. The cases run on the plugin's
// device named lo unless --dev says otherwise (conformance.h); the first line names the device. Prints
// one line per case and a summary, progress on stderr while a case runs (not with --quiet), and with
// --json a document of every case's verdict and measurements (docs/CLI.md). Exit status 0 when every
// case passed or was skipped, 1 when one failed, 2 on bad arguments or a plugin that does not load (its
// probe failed, crashed or hung: then no case runs).
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "megascale/nccl/conformance.h"
#include "vocab.h"

namespace megascale::cli {
namespace {

namespace conf = nccl::conformance;

struct PluginCheckOptions {
  conf::Options harness;
  bool list = false;
  bool quiet = false;
  std::string json_path;
};

const char* verdict_of(const conf::CaseResult& c) {
  return c.skipped ? "skip" : c.passed ? "pass" : "fail";
}

// The --json document (docs/CLI.md, "megascale plugin-check", documents every field).
nlohmann::json report_json(const conf::Report& report, double elapsed_s) {
  nlohmann::json j = vocab::json_document("plugin-check");
  j["plugin"] = report.plugin_path;
  j["name"] = report.plugin_name;
  j["abi_version"] = report.abi_version;
  j["device_count"] = report.devices;
  j["device_index"] = report.device_index;
  j["device_name"] = report.device_name;
  j["load_error"] = report.load_error;
  j["passed"] = report.passed();
  int passed = 0, failed = 0, skipped = 0;
  j["cases"] = nlohmann::json::array();
  for (const conf::CaseResult& c : report.cases) {
    (c.skipped ? skipped : c.passed ? passed : failed) += 1;
    nlohmann::json m = nlohmann::json::object();
    for (const conf::Measurement& x : c.measurements) {
      // Counts and byte sizes as integers, times and rates as they come.
      const bool whole = std::floor(x.value) == x.value && std::fabs(x.value) < 9e15;
      if (whole) {
        m[x.name] = static_cast<std::int64_t>(x.value);
      } else {
        m[x.name] = x.value;
      }
    }
    j["cases"].push_back({{"name", c.name},
                          {"verdict", verdict_of(c)},
                          {"passed", c.passed},
                          {"skipped", c.skipped},
                          {"elapsed_s", c.seconds},
                          {"detail", c.detail},
                          {"warnings", c.warnings},
                          {"measurements", m}});
  }
  j["passed_cases"] = passed;
  j["failed_cases"] = failed;
  j["skipped_cases"] = skipped;
  j["elapsed_s"] = elapsed_s;
  return j;
}

// Progress on stderr: at once when the plugin is being probed, then for a case (or probe) still running
// every Options::progress_interval_s: its name, its time so far, what it waits for and the plugin calls
// in progress.
void print_progress(const conf::Progress& p) {
  if (p.elapsed_s < 0.5) {
    if (p.case_name.empty())
      fmt::print(stderr, "plugin-check: loading the plugin (dlopen, init, devices, properties)\n");
    return;
  }
  std::string what = p.stage;
  if (!p.calls.empty()) what += (what.empty() ? "in " : "; in ") + p.calls;
  fmt::print(stderr, "  ...  {:<28} {:>5.0f} s  {}\n", p.case_name.empty() ? "(loading)" : p.case_name,
             p.elapsed_s, what.empty() ? "running" : what);
  std::fflush(stderr);
}

int run_plugin_check(PluginCheckOptions& o) {
  if (o.list) {
    for (const auto& [name, description] : conf::case_list()) fmt::print("{:<28} {}\n", name, description);
    return kExitOk;
  }
  if (o.harness.plugin_path.empty()) {
    fmt::print(stderr, "plugin-check: give the plugin's path (or --list)\n");
    return kExitUsage;
  }
  for (const std::string& c : o.harness.cases) {
    bool known = false;
    for (const auto& [name, description] : conf::case_list()) known = known || name == c;
    if (!known) {
      fmt::print(stderr, "plugin-check: unknown case '{}' (see --list)\n", c);
      return kExitUsage;
    }
  }
  if (o.harness.case_timeout_s <= 0) {
    fmt::print(stderr, "plugin-check: --timeout must be more than 0\n");
    return kExitUsage;
  }
  std::FILE* out = vocab::human_stream(o.json_path);
  const auto t0 = std::chrono::steady_clock::now();
  int passed = 0, failed = 0, skipped = 0;
  conf::Observer observer;
  observer.probed = [&](const conf::Report& r) {
    const bool asked_lo = o.harness.dev < 0;
    fmt::print(out, "plugin-check {}: {} (ncclNetPlugin_v{}), cases on device {} ({}) of {}{}\n",
               r.plugin_path, r.plugin_name, r.abi_version, r.device_index, r.device_name, r.devices,
               asked_lo && r.device_name != "lo" ? ": the plugin lists no device named lo" : "");
    std::fflush(out);
  };
  observer.case_done = [&](const conf::CaseResult& c) {
    const char* verdict = c.skipped ? "SKIP" : c.passed ? "PASS" : "FAIL";
    (c.skipped ? skipped : c.passed ? passed : failed) += 1;
    fmt::print(out, "  {:<4} {:<28} {:>7.2f} s  {}\n", verdict, c.name, c.seconds, c.detail);
    if (!c.passed && !c.skipped) {
      for (const std::string& w : c.warnings) fmt::print(out, "         plugin: {}\n", w);
    }
    std::fflush(out);
  };
  if (!o.quiet) observer.progress = print_progress;
  const conf::Report report = conf::run(o.harness, observer);
  const double elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int status = failed > 0 ? kExitFailure : kExitOk;
  if (!report.load_error.empty()) {
    fmt::print(out, "plugin-check {}\n  FAIL {:<28} {}\n", report.plugin_path, "load", report.load_error);
    for (const std::string& l : report.log) {
      if (l.rfind("WARN", 0) == 0 && report.load_error.find(l) == std::string::npos)
        fmt::print(out, "         plugin: {}\n", l);
    }
    fmt::print(out, "plugin-check: the plugin did not load: no case ran\n");
    status = kExitUsage;
  } else {
    fmt::print(out, "{} (ncclNetPlugin_v{}), cases on device {} ({}): {} passed, {} failed, {} skipped\n",
               report.plugin_name, report.abi_version, report.device_index, report.device_name, passed,
               failed, skipped);
  }
  std::fflush(out);
  if (!o.json_path.empty()) {
    if (auto s = vocab::write_json(o.json_path, report_json(report, elapsed_s)); !s) {
      fmt::print(stderr, "plugin-check: {}\n", s.error().message);
      return kExitUsage;
    }
  }
  return status;
}

}  // namespace

void add_plugin_check_command(CLI::App& app) {
  auto o = std::make_shared<PluginCheckOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plugin-check",
      "Check an NCCL net plugin (.so) against NCCL's call patterns, on the CPU, without NCCL. The plugin "
      "runs only in child processes, one per case: a crash, abort or hang in any call (init included) "
      "fails that case, naming the call, and the check goes on");
  cmd->add_option("plugin", o->harness.plugin_path, "Path of the plugin .so (as for NCCL_NET_PLUGIN)");
  cmd->add_flag("--list", o->list, "List the cases and exit");
  cmd->add_option("--case", o->harness.cases, "Run only this case (repeatable; default: all)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--abi", o->harness.abi_version, "ABI version to use: 8..12 (default: the newest exported)")
      ->check(CLI::IsMember({0, 8, 9, 10, 11, 12}));
  cmd->add_option("--dev", o->harness.dev,
                  "Device index in the plugin's list (default: its device named lo, MegaScale being asked "
                  "to list it through MEGASCALE_IFNAME==lo when that is unset; else device 0). The first "
                  "line names the device used")
      ->check(CLI::Range(-1, 1 << 20));
  vocab::duration(cmd, "--budget", o->harness.retry_budget_s,
                  "Retry budget asked of the plugin in the peer-killed and peer-stopped cases "
                  "(MEGASCALE_RETRY_BUDGET_S, if unset), which it bounds; the other cases keep the "
                  "plugin's own")
      ->check(CLI::Range(0.1, 600.0))
      ->capture_default_str();
  vocab::timeout(cmd, o->harness.case_timeout_s,
                 "A case whose process runs longer is killed and fails, naming the plugin calls in "
                 "progress (the plugin's load and init likewise)")
      ->check(CLI::Range(0.1, 36000.0))
      ->capture_default_str();
  cmd->add_option("--threads", o->harness.threads, "many_comms_threads: threads")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--comms-per-thread", o->harness.comms_per_thread, "many_comms_threads: pairs per thread")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--mem", o->harness.mem_type,
                  "Register buffers as host (NCCL_PTR_HOST) or cuda (NCCL_PTR_CUDA; they are host memory: "
                  "for a plugin that takes them so, e.g. MegaScale with MEGASCALE_GDR_COPY=emulate)")
      ->transform(CLI::CheckedTransformer(std::map<std::string, int>{{"host", 1}, {"cuda", 2}}))
      ->default_str("host");
  cmd->add_flag("-v,--verbose", o->harness.verbose, "Print the plugin's log lines (stderr)");
  cmd->add_flag("-q,--quiet", o->quiet, "No progress lines on stderr while a case runs");
  vocab::json(cmd, o->json_path);
  vocab::renamed(cmd, "--timeout-s", "--timeout");
  vocab::renamed(cmd, "--budget-s", "--budget");
  cmd->callback([o] { exit_code() = run_plugin_check(*o); });
}

}  // namespace megascale::cli
