#include "vocab.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>

namespace megascale::cli::vocab {
namespace {

// "12", "12s", "500ms", "250us", "10ns" -> seconds; an error names the value and the units accepted.
std::string parse_seconds(std::string& value, bool allow_zero) {
  static const std::map<std::string, double> kUnits = {{"", 1.0},    {"s", 1.0},  {"ms", 1e-3}, {"us", 1e-6},
                                                       {"ns", 1e-9}, {"m", 60.0}, {"min", 60.0}};
  std::size_t end = 0;
  double number = 0;
  try {
    number = std::stod(value, &end);
  } catch (const std::exception&) {
    return fmt::format("'{}' is not a time: give a number with an optional unit (s, ms, us, ns, min)", value);
  }
  const auto unit = kUnits.find(value.substr(end));
  if (unit == kUnits.end()) {
    return fmt::format("'{}': unknown time unit '{}' (s, ms, us, ns, min)", value, value.substr(end));
  }
  const double seconds = number * unit->second;
  if (!std::isfinite(seconds) || seconds < 0 || (!allow_zero && seconds == 0)) {
    return fmt::format("'{}' must be {} time", value, allow_zero ? "a non-negative" : "a positive");
  }
  value = fmt::format("{:.12g}", seconds);
  return {};
}

std::string parse_bytes(std::string& value, bool allow_zero) {
  static const std::map<std::string, std::uint64_t> kUnits = {{"", 1},
                                                              {"B", 1},
                                                              {"K", 1ull << 10},
                                                              {"KB", 1ull << 10},
                                                              {"KiB", 1ull << 10},
                                                              {"M", 1ull << 20},
                                                              {"MB", 1ull << 20},
                                                              {"MiB", 1ull << 20},
                                                              {"G", 1ull << 30},
                                                              {"GB", 1ull << 30},
                                                              {"GiB", 1ull << 30}};
  if (value.empty() || value[0] == '-' || value[0] == '+') {
    return fmt::format("'{}' is not a size: give bytes, optionally with K, M or G (powers of 1024)", value);
  }
  errno = 0;
  char* end = nullptr;
  const unsigned long long number = std::strtoull(value.c_str(), &end, 10);
  if (end == value.c_str() || errno == ERANGE) {
    return fmt::format("'{}' is not a size: give bytes, optionally with K, M or G (powers of 1024)", value);
  }
  const auto unit = kUnits.find(std::string(end));
  if (unit == kUnits.end()) {
    return fmt::format("'{}': unknown size unit '{}' (K, M, G or KiB, MiB, GiB)", value, std::string(end));
  }
  if (number > UINT64_MAX / unit->second) return fmt::format("'{}' is too large", value);
  const std::uint64_t bytes = number * unit->second;
  if (bytes == 0 && !allow_zero) return fmt::format("'{}' must be at least 1 byte", value);
  value = std::to_string(bytes);
  return {};
}

}  // namespace

CLI::Option* duration(CLI::App* cmd, const std::string& names, double& seconds, const std::string& help) {
  return cmd->add_option(names, seconds, help)
      ->type_name("TIME")
      ->transform(CLI::Validator([](std::string& v) { return parse_seconds(v, false); }, "", "seconds"));
}

CLI::Option* timeout(CLI::App* cmd, double& seconds, const std::string& help) {
  return cmd->add_option(kTimeoutFlag, seconds, help)
      ->type_name("TIME")
      ->transform(CLI::Validator([](std::string& v) { return parse_seconds(v, true); }, "", "seconds"));
}

CLI::Option* size(CLI::App* cmd, const std::string& names, std::uint64_t& bytes, const std::string& help,
                  bool allow_zero) {
  return cmd->add_option(names, bytes, help)
      ->type_name("BYTES")
      ->transform(
          CLI::Validator([allow_zero](std::string& v) { return parse_bytes(v, allow_zero); }, "", "bytes"));
}

CLI::Option* iterations(CLI::App* cmd, std::uint64_t& count, const std::string& help) {
  return cmd->add_option(kIterationsFlag, count, help)->type_name("N")->check(CLI::PositiveNumber);
}

CLI::Option* seed(CLI::App* cmd, std::uint64_t& seed, const std::string& help) {
  return cmd->add_option(kSeedFlag, seed, help)->type_name("N");
}

CLI::Option* out_dir(CLI::App* cmd, std::string& dir, const std::string& help) {
  return cmd->add_option(kOutFlag, dir, help)->type_name("DIR");
}

CLI::Option* json(CLI::App* cmd, std::string& path, const std::string& help) {
  return cmd
      ->add_option(kJsonFlag, path,
                   help.empty()
                       ? "Also write the results as JSON to FILE ('-': standard output, tables then go "
                         "to standard error); docs/CLI.md has the schema"
                       : help)
      ->type_name("FILE");
}

CLI::Option* cc(CLI::App* cmd, std::string& preset, const std::string& help) {
  return cmd->add_option(kCcFlag, preset, help)->type_name("PRESET|FILE");
}

CLI::Option* cc(CLI::App* cmd, std::vector<std::string>& presets, const std::string& help) {
  return cmd->add_option(kCcFlag, presets, help)->type_name("PRESET|FILE");
}

void renamed(CLI::App* cmd, const std::string& old_names, const std::string& new_name) {
  std::string shown =
      old_names.substr(old_names.rfind(',') == std::string::npos ? 0 : old_names.rfind(',') + 1);
  cmd->add_option_function<std::vector<std::string>>(
         old_names,
         [shown, new_name](const std::vector<std::string>&) {
           throw CLI::ValidationError(shown, fmt::format("{} was renamed: use {}", shown, new_name));
         },
         "")
      ->expected(0, 1)
      ->group("")
      ->trigger_on_parse();
}

Status write_json(const std::string& path, const nlohmann::json& doc) {
  const std::string text = doc.dump(2) + "\n";
  if (path == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    if (std::ferror(stdout)) return make_error("cannot write JSON to standard output");
    return {};
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return make_error(fmt::format("cannot write {}: {}", path, std::strerror(errno)));
  out << text;
  out.close();
  if (!out) return make_error(fmt::format("cannot write {}: {}", path, std::strerror(errno)));
  return {};
}

std::FILE* human_stream(const std::string& json_path) {
  return json_path == "-" ? stderr : stdout;
}

nlohmann::json json_document(const std::string& command, int schema_version) {
  return nlohmann::json{{"command", command}, {"schema_version", schema_version}};
}

}  // namespace megascale::cli::vocab
