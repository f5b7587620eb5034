// megascale topo: skeleton (issue 5 in progress): attaches the fabric subcommands.
#include "commands.h"

namespace megascale::cli {

void add_topo_command(CLI::App& app) {
  CLI::App* topo = app.add_subcommand("topo", "host topology, rails, NCCL topology XML, fabric model");
  add_topo_fabric_commands(*topo);
}

}  // namespace megascale::cli
