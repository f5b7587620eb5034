// `megascale topo`'s RDMA section (cmd_topo_rdma.cpp): every RDMA device under a sysfs-like root, its
// ports and GIDs, and the GID the verbs wire would pick under the MEGASCALE_IB_* settings.
//
//   Result<nlohmann::json> rdma = print_rdma(stdout, "/sys/class/infiniband", std::getenv);
//   doc["rdma"] = *rdma;   // docs/CLI.md, `topo` document, `rdma`
#pragma once

#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "megascale/common/env.h"
#include "megascale/common/result.h"

namespace megascale::cli {

// Prints the section to `out` and returns it as the `rdma` JSON object. An absent or empty root is a
// host without RDMA devices (one line, an empty `devices`); bad entries under it are listed with the
// reason they were skipped. Only a root that cannot be read is an error. Without the verbs wire in the
// build the section says so and `devices` is empty.
Result<nlohmann::json> print_rdma(std::FILE* out, const std::string& root,
                                  const EnvLookup& getenv);

}  // namespace megascale::cli
