// `megascale plugin-check PATH`: check that an NCCL net plugin behaves as NCCL needs, on this CPU,
// before a job depends on it.
//
//   megascale plugin-check build/collectives/nccl/libnccl-net-megascale.so
//   megascale plugin-check /opt/aws-ofi-nccl/lib/libnccl-net.so --abi 9 --case steps_in_flight -v
//   megascale plugin-check libnccl-net-megascale.so --json check.json --budget-s 5
//   megascale plugin-check --list
//
// Loads the plugin exactly as NCCL does (dlopen RTLD_NOW|RTLD_LOCAL, ncclNetPlugin_v11 then v10..v8,
// init with a logger) and runs the conformance cases (tools/plugin-conformance): setup progressed on
// one thread, 8 steps in flight, grouped receives, sizes 0 B .. 8 MiB, 32 requests per comm, many comms
// on many threads, closes with requests outstanding, and a peer process killed or stopped mid-transfer.
// The plugin runs only in child processes, one per case: a crash, an abort or a hang in any call fails
// that case, naming the call, within --timeout-s, and the check goes on. Prints one line per case and a
// summary; exit status 0 when every case passed or was skipped, 1 when one failed, 2 on bad arguments
// or a plugin that does not load (its probe failed, crashed or hung: then no case runs).
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "megascale/nccl/conformance.h"

namespace megascale::cli {
namespace {

namespace conf = nccl::conformance;

struct PluginCheckOptions {
  conf::Options harness;
  bool list = false;
  std::string json_path;
};

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
  fmt::print("plugin-check {}\n", o.harness.plugin_path);
  std::fflush(stdout);
  int passed = 0, failed = 0, skipped = 0;
  const conf::Report report = conf::run(o.harness, [&](const conf::CaseResult& c) {
    const char* verdict = c.skipped ? "SKIP" : c.passed ? "PASS" : "FAIL";
    (c.skipped ? skipped : c.passed ? passed : failed) += 1;
    fmt::print("  {:<4} {:<28} {:>7.2f} s  {}\n", verdict, c.name, c.seconds, c.detail);
    if (!c.passed && !c.skipped) {
      for (const std::string& w : c.warnings) fmt::print("         plugin: {}\n", w);
    }
    std::fflush(stdout);
  });
  if (!report.load_error.empty()) {
    fmt::print("  FAIL {:<28} {}\n", "load", report.load_error);
    for (const std::string& l : report.log) {
      if (l.rfind("WARN", 0) == 0 && report.load_error.find(l) == std::string::npos)
        fmt::print("         plugin: {}\n", l);
    }
    fmt::print("plugin-check: the plugin did not load: no case ran\n");
    return kExitUsage;
  }
  fmt::print("{} (ncclNetPlugin_v{}), {} device(s), cases on device '{}': {} passed, {} failed, {} skipped\n",
             report.plugin_name, report.abi_version, report.devices, report.device_name, passed, failed,
             skipped);
  if (!o.json_path.empty()) {
    nlohmann::json j;
    j["plugin"] = report.plugin_path;
    j["name"] = report.plugin_name;
    j["abi_version"] = report.abi_version;
    j["devices"] = report.devices;
    j["device"] = report.device_name;
    j["passed"] = report.passed();
    for (const conf::CaseResult& c : report.cases) {
      j["cases"].push_back({{"name", c.name},
                            {"passed", c.passed},
                            {"skipped", c.skipped},
                            {"seconds", c.seconds},
                            {"detail", c.detail},
                            {"warnings", c.warnings}});
    }
    std::ofstream out(o.json_path);
    out << j.dump(2) << "\n";
    if (!out) {
      fmt::print(stderr, "plugin-check: cannot write {}\n", o.json_path);
      return kExitUsage;
    }
  }
  return failed > 0 ? kExitFailure : kExitOk;
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
  cmd->add_option("--abi", o->harness.abi_version, "ABI version to use: 8..11 (default: the newest exported)")
      ->check(CLI::IsMember({0, 8, 9, 10, 11}));
  cmd->add_option("--dev", o->harness.dev, "Device index (default: the one named lo, else 0)")
      ->check(CLI::Range(-1, 1 << 20));
  cmd->add_option("--budget-s", o->harness.retry_budget_s,
                  "Retry budget asked of the plugin (MEGASCALE_RETRY_BUDGET_S, if unset); bounds the "
                  "peer-killed and peer-stopped cases")
      ->check(CLI::Range(0.1, 600.0))
      ->capture_default_str();
  cmd->add_option("--timeout-s", o->harness.case_timeout_s,
                  "A case whose process runs longer is killed and fails, naming the plugin calls in "
                  "progress (the plugin's load and init likewise)")
      ->check(CLI::Range(1.0, 3600.0))
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
  cmd->add_option("--json", o->json_path, "Also write the results as JSON to this file");
  cmd->callback([o] { exit_code() = run_plugin_check(*o); });
}

}  // namespace megascale::cli
