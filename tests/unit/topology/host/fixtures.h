// Paths of the hwloc XML fixtures (fixtures/ next to this header; gen_fixtures.py there describes them).
#pragma once

#include <string>

namespace megascale::topo::host::testing {

inline std::string fixture(const std::string& name) {
  return std::string(MEGASCALE_SOURCE_DIR) + "/tests/unit/topology/host/fixtures/" + name;
}

}  // namespace megascale::topo::host::testing
