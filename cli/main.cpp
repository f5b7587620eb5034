// megascale: network-and-collective performance tuning for RoCE GPU clusters. See README.md.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "commands.h"

namespace megascale::cli {
int& exit_code() {
  static int code = kExitOk;
  return code;
}
}  // namespace megascale::cli

int main(int argc, char** argv) {
  CLI::App app{"megascale: transport, congestion-control and collective tuning for RoCE GPU clusters"};
  app.set_version_flag("--version", std::string("megascale ") + MEGASCALE_VERSION);
  app.require_subcommand(1);
  megascale::cli::add_cc_command(app);
  megascale::cli::add_coll_command(app);
#ifdef MEGASCALE_HAVE_PERF
  megascale::cli::add_perf_command(app);
  megascale::cli::add_ceiling_command(app);
#endif
#ifdef MEGASCALE_HAVE_PLUGIN_CHECK
  megascale::cli::add_plugin_check_command(app);
#endif
#ifdef MEGASCALE_HAVE_SIM_NET
  megascale::cli::add_sim_command(app);
#endif
  megascale::cli::add_topo_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : megascale::cli::kExitUsage;
  }
  return megascale::cli::exit_code();
}
