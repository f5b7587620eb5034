// --compare's settings, arguments and table (compare.h).
#include "megascale/coll/compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <tuple>

namespace megascale::coll {

Result<Setting> parse_setting(const std::string& text) {
  auto refused = [&](const std::string& why) {
    return make_error(ErrorCode::kInvalidArgument, fmt::format("--compare setting '{}': {}", text, why));
  };
  if (text.empty()) return refused("empty");
  if (text.find('=') == std::string::npos) return Setting{{"NCCL_NET", text}};
  Setting out;
  size_t from = 0;
  while (from <= text.size()) {
    const size_t comma = std::min(text.find(',', from), text.size());
    const std::string item = text.substr(from, comma - from);
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) return refused(fmt::format("'{}' is not VAR=VALUE", item));
    const std::string var = item.substr(0, eq);
    const bool valid = (std::isalpha(static_cast<unsigned char>(var[0])) != 0 || var[0] == '_') &&
                       std::all_of(var.begin(), var.end(), [](char c) {
                         return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
                       });
    if (!valid) return refused(fmt::format("'{}' is not a variable name", var));
    out.emplace_back(var, item.substr(eq + 1));
    from = comma + 1;
  }
  return out;
}

std::vector<std::string> argv_for_setting(const std::vector<std::string>& argv,
                                          const std::string& json_lines_path) {
  std::vector<std::string> out;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "--compare") {
      i += 2;
      continue;
    }
    if (a == "--rounds" || a == "--json-lines") {
      ++i;
      continue;
    }
    if (a.rfind("--compare=", 0) == 0 || a.rfind("--rounds=", 0) == 0 || a.rfind("--json-lines=", 0) == 0)
      continue;
    out.push_back(a);
  }
  out.push_back("--json-lines");
  out.push_back(json_lines_path);
  return out;
}

namespace {

using Key = std::tuple<std::string, uint64_t, std::string, std::string, int>;

Key key_of(const nlohmann::json& r) {
  return {r.value("collective", ""), r.value("size", uint64_t{0}), r.value("type", ""), r.value("redop", ""),
          r.value("root", -1)};
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2;
}

struct Side {
  std::vector<double> bus, time;
};

std::map<Key, Side> by_key(const std::vector<nlohmann::json>& rows) {
  std::map<Key, Side> out;
  for (const nlohmann::json& r : rows) {
    const nlohmann::json& p = r.value("out_of_place", nlohmann::json::object());
    Side& s = out[key_of(r)];
    s.bus.push_back(p.value("busbw_gbs", 0.0));
    s.time.push_back(p.value("time_us", 0.0));
  }
  return out;
}

}  // namespace

std::string compare_table(const std::string& a_name, const std::vector<nlohmann::json>& a_rows,
                          const std::string& b_name, const std::vector<nlohmann::json>& b_rows) {
  const std::map<Key, Side> a = by_key(a_rows), b = by_key(b_rows);
  std::string out = fmt::format("# compare: {} (a) against {} (b), out of place, medians over the rounds\n",
                                a_name, b_name);
  out += fmt::format("# {:>14}  {:>12}  {:>8}  {:>6}  {:>9}  {:>9}  {:>9}  {:>9}  {:>6}  {}\n", "collective",
                     "size(B)", "type", "redop", "a us", "b us", "a busbw", "b busbw", "b/a", "rounds");
  for (const auto& [key, sa] : a) {
    const auto& [coll, size, type, op, root] = key;
    const auto it = b.find(key);
    if (it == b.end()) {
      out += fmt::format("  {:>14}  {:>12}  {:>8}  {:>6}  (no row under {})\n", coll, size, type, op, b_name);
      continue;
    }
    const Side& sb = it->second;
    const double ta = median(sa.time), tb = median(sb.time), ba = median(sa.bus), bb = median(sb.bus);
    // Small messages are latency: the ratio of times (a / b); large ones bandwidth (b / a).
    const double ratio = size < 65536 ? (tb > 0 ? ta / tb : 0) : (ba > 0 ? bb / ba : 0);
    out += fmt::format(
        "  {:>14}  {:>12}  {:>8}  {:>6}  {:>9.2f}  {:>9.2f}  {:>9.2f}  {:>9.2f}  {:>6.2f}  {}/{}\n", coll,
        size, type, op, ta, tb, ba, bb, ratio, sa.time.size(), sb.time.size());
  }
  for (const auto& [key, sb] : b) {
    if (a.count(key) != 0) continue;
    const auto& [coll, size, type, op, root] = key;
    out += fmt::format("  {:>14}  {:>12}  {:>8}  {:>6}  (no row under {})\n", coll, size, type, op, a_name);
  }
  return out;
}

}  // namespace megascale::coll
