// Paths of the hwloc XML fixtures (fixtures/ next to this header; gen_fixtures.py there describes them)
// and of the NCCL topology XML fixtures (fixtures/nccl/: what NCCL and `megascale topo --xml` write).
#pragma once

#include <string>

#include "../../../support/source_path.h"

namespace megascale::topo::host::testing {

inline std::string fixture(const std::string& name) {
  return megascale::test::source_path("tests/unit/topology/host/fixtures/") + name;
}

inline std::string nccl_fixture_dir() {
  return fixture("nccl");
}
inline std::string nccl_fixture(const std::string& name) {
  return nccl_fixture_dir() + "/" + name;
}

}  // namespace megascale::topo::host::testing
