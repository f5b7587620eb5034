// --plot's figure (busbw_plot.h).
#include "megascale/coll/busbw_plot.h"

#include <fmt/format.h>

#include <map>
#include <set>

namespace megascale::coll {

std::string size_label(uint64_t bytes) {
  constexpr const char* kUnits[] = {"", "K", "M", "G", "T"};
  int unit = 0;
  while (unit < 4 && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return fmt::format("{}{}", bytes, kUnits[unit]);
}

cli::PlotSpec busbw_plot(const std::vector<nlohmann::json>& rows, const std::string& png_path,
                         const std::string& title) {
  std::set<uint64_t> sizes;
  std::map<std::string, std::map<uint64_t, double>> series;  // name -> size -> busbw
  std::set<std::string> kinds;
  for (const nlohmann::json& r : rows) kinds.insert(r.value("type", "") + "/" + r.value("redop", ""));
  for (const nlohmann::json& r : rows) {
    const uint64_t size = r.value("size", uint64_t{0});
    std::string name = r.value("collective", "?");
    if (kinds.size() > 1) name += fmt::format(" {} {}", r.value("type", ""), r.value("redop", ""));
    sizes.insert(size);
    series[name][size] = r.value("out_of_place", nlohmann::json::object()).value("busbw_gbs", 0.0);
  }
  cli::PlotSpec spec;
  spec.title = title;
  spec.xlabel = "size (bytes)";
  spec.png_path = png_path;
  cli::PlotPanel panel;
  panel.ylabel = "busbw (GB/s)";
  std::string csv = "x";
  for (const auto& [name, values] : series) csv += "," + name;
  csv += "\n";
  int x = 1;
  for (uint64_t size : sizes) {
    spec.x_tics.emplace_back(x, size_label(size));
    csv += std::to_string(x);
    for (const auto& [name, values] : series) {
      const auto it = values.find(size);
      csv += it == values.end() ? "," : fmt::format(",{}", it->second);
    }
    csv += "\n";
    ++x;
  }
  int column = 2;
  for (const auto& [name, values] : series) panel.series.push_back({.title = name, .column = column++});
  spec.panels.push_back(panel);
  spec.csv_text = csv;
  return spec;
}

}  // namespace megascale::coll
