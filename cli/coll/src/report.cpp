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

// nccl-tests' "out_of_place_per_iter" / "in_place_per_iter" object.
nlohmann::json per_iter_json(const IterStats& s) {
  nlohmann::json j = {{"skipped_iterations", s.skipped},
                      {"min_us", s.min_us},
                      {"max_us", s.max_us},
                      {"avg_us", s.avg_us},
                      {"p50_us", s.p50_us},
                      {"p95_us", s.p95_us},
                      {"p99_us", s.p99_us},
                      {"stdev_us", s.stdev_us},
                      {"cv_pct", s.cv_pct},
                      {"times_us", s.times_us}};
  if (!s.rank_times_us.empty()) j["per_process_max_times_us"] = s.rank_times_us;
  return j;
}

nlohmann::json placement(const Placement& p) {
  nlohmann::json j = {{"time_us", p.time_us},
                      {"algbw_gbs", p.alg_gbs},
                      {"busbw_gbs", p.bus_gbs},
                      {"wrong", p.wrong ? nlohmann::json(*p.wrong) : nlohmann::json(nullptr)}};
  if (p.per_iter) j["per_iter"] = per_iter_json(*p.per_iter);
  return j;
}

}  // namespace

nlohmann::json result_json(const Row& row, const std::string& experiment, int actual_iterations) {
  nlohmann::json j = {{"size", row.bytes},
                      {"count", row.count},
                      {"type", std::string(name(row.type))},
                      {"redop", row.op ? std::string(name(*row.op)) : std::string("none")},
                      {"root", fmt::format("{:>6}", row.root)},
                      {"out_of_place", nccl_tests_placement(row.out_of_place)},
                      {"in_place", nccl_tests_placement(row.in_place)},
                      {"actual_iterations", actual_iterations},
                      {"experiment_name", experiment}};
  if (row.out_of_place.per_iter) j["out_of_place_per_iter"] = per_iter_json(*row.out_of_place.per_iter);
  if (row.in_place.per_iter) j["in_place_per_iter"] = per_iter_json(*row.in_place.per_iter);
  return j;
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
