// megascale topo fabric / ports: skeleton (issue 5 in progress).
#include "commands.h"

namespace megascale::cli {

void add_topo_fabric_commands(CLI::App& topo) {
  (void)topo;
}

}  // namespace megascale::cli
