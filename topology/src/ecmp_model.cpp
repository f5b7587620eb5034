// Per-tier ECMP models from hash specs (ports.h): the request-building that `megascale topo ports` and
// `megascale perf --fabric` share.
#include <fmt/format.h>

#include "megascale/topology/ports.h"

namespace megascale::topo {

Result<EcmpModel> parse_ecmp_model(std::span<const std::string> specs) {
  if (specs.size() != 1 && specs.size() != 3) {
    return make_error(fmt::format(
        "give one hash (every tier) or three (tor, aggregation/spine, core), not {}", specs.size()));
  }
  EcmpModel m;
  for (size_t t = 0; t < 3; ++t) {
    Result<HashModel> h = parse_hash_model(specs[specs.size() == 1 ? 0 : t]);
    if (!h) return h.error();
    m.tier[t] = *h;
  }
  return m;
}

std::string describe_ecmp_model(const Fabric& fabric, const EcmpModel& model) {
  std::string out;
  for (size_t t = 0; t < (fabric.spec().tiers == 3 ? 3u : 2u); ++t) {
    out += fmt::format("{}{}={}", out.empty() ? "" : ", ", fabric.tier_name(static_cast<Tier>(t + 1)),
                       to_string(model.tier[t]));
  }
  return out;
}

}  // namespace megascale::topo
