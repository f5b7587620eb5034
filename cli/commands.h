// Subcommand registration for the `megascale` executable. Each cmd_<name>.cpp defines one add_*_command
// that attaches its CLI11 subcommand and sets the callback; main.cpp calls them all.
#pragma once

#include <CLI/CLI.hpp>

namespace megascale::cli {

// Exit codes shared by every subcommand.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the run failed (a check did not pass, a transfer failed)
inline constexpr int kExitUsage = 2;    // bad input: flags, config files, values

void add_cc_command(CLI::App& app);
void add_ceiling_command(CLI::App& app);
void add_coll_command(CLI::App& app);     // cmd_coll.cpp: runs megascale-coll (cli/coll)  // cmd_ceiling.cpp; built with cli/perf (MEGASCALE_HAVE_PERF)
void add_perf_command(CLI::App& app);     // cmd_perf.cpp; built with the UDP wire (MEGASCALE_HAVE_PERF)
void add_plugin_check_command(CLI::App& app);
void add_sim_command(CLI::App& app);  // cmd_sim.cpp; built with sim/net (MEGASCALE_HAVE_SIM_NET)
// cmd_topo.cpp: `megascale topo` (the host table, rails, --xml, --json); it calls
// add_topo_fabric_commands (cmd_topo_fabric.cpp) to attach `topo fabric` and `topo ports`.
void add_topo_command(CLI::App& app);
void add_topo_fabric_commands(CLI::App& topo);

// Set by a subcommand's callback; main returns it.
int& exit_code();

}  // namespace megascale::cli
