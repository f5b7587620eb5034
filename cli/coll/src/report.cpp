// `megascale coll`'s JSON (report.h).
#include "megascale/coll/report.h"

#include <fmt/format.h>

namespace megascale::coll {
namespace {

nlohmann::json nccl_tests_placement(const Placement& p) {
  return {{"time", p.time_us},
          {"alg_bw", p.alg_gbs},
          {"bus_bw", p.bus_gbs},
          {"nwrong", p.wrong ? nlohmann::json(static_cast<double>(*p.wrong)) : nlohmann::json(nullptr)}};
}

nlohmann::json placement(const Placement& p) {
  return {{"time_us", p.time_us},
          {"algbw_gbs", p.alg_gbs},
          {"busbw_gbs", p.bus_gbs},
          {"wrong", p.wrong ? nlohmann::json(*p.wrong) : nlohmann::json(nullptr)}};
}

}  // namespace

nlohmann::json result_json(const Row& row, const std::string& experiment, int actual_iterations) {
  return {{"size", row.bytes},
          {"count", row.count},
          {"type", std::string(name(row.type))},
          {"redop", row.op ? std::string(name(*row.op)) : std::string("none")},
          {"root", fmt::format("{:>6}", row.root)},
          {"out_of_place", nccl_tests_placement(row.out_of_place)},
          {"in_place", nccl_tests_placement(row.in_place)},
          {"actual_iterations", actual_iterations},
          {"experiment_name", experiment}};
}

nlohmann::json json_line(const Row& row, const RowExtras& x) {
  nlohmann::json j = {{"collective", std::string(name(x.collective))},
                      {"ranks", x.nranks},
                      {"net", x.net},
                      {"size", row.bytes},
                      {"count", row.count},
                      {"type", std::string(name(row.type))},
                      {"redop", row.op ? std::string(name(*row.op)) : std::string("none")},
                      {"root", row.root},
                      {"out_of_place", placement(row.out_of_place)},
                      {"in_place", placement(row.in_place)},
                      {"rank_time_us", x.rank_time_us},
                      {"straggler", nullptr},
                      {"transport", x.transport}};
  if (const std::optional<Straggler> s = straggler(x.rank_time_us)) {
    j["straggler"] = {
        {"rank", s->rank}, {"time_us", s->time_us}, {"median_us", s->median_us}, {"ratio", s->ratio}};
  }
  return j;
}

}  // namespace megascale::coll
