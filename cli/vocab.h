// The CLI's one vocabulary: every subcommand spells the same idea with the same flag, parsed the same
// way (docs/CLI.md lists them). Subcommands attach these instead of calling add_option themselves, so a
// duration takes units everywhere and `--json -` means standard output everywhere.
//
//   vocab::duration(cmd, "-D,--duration", o.duration_s, "Time per row");   // 2, 2s, 500ms, 250us
//   vocab::json(cmd, f->json_path);                                          // --json FILE, '-' = stdout
//   vocab::renamed(cmd, "--timeout-s", "--timeout");                         // refused, naming the new one
//   ...
//   if (auto s = vocab::write_json(f->json_path, doc); !s) { ... s.error().message ... }
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "megascale/common/result.h"

namespace megascale::cli::vocab {

// The flags every subcommand spells the same way.
inline constexpr const char* kDurationFlag = "-D,--duration";  // seconds, units accepted
inline constexpr const char* kIterationsFlag = "-n,--iters";   // perftest's and nccl-tests' -n
inline constexpr const char* kSizeFlag = "-s,--size";          // bytes, K/M/G (binary) accepted
inline constexpr const char* kSeedFlag = "--seed";
inline constexpr const char* kTimeoutFlag = "--timeout";  // seconds, units accepted
inline constexpr const char* kOutFlag = "-o,--out";       // a folder of result files
inline constexpr const char* kJsonFlag = "--json";        // a file, '-' = standard output
inline constexpr const char* kCcFlag = "--cc";            // a congestion-control preset or YAML file

// A time in seconds: "2", "2s", "500ms", "250us", "10ns". Rejects negative values.
CLI::Option* duration(CLI::App* cmd, const std::string& names, double& seconds, const std::string& help);
// --timeout: like duration(); 0 is allowed where the help says it means "never".
CLI::Option* timeout(CLI::App* cmd, double& seconds, const std::string& help);
// A byte count: "65536", "64K", "64KiB", "1M", "2G" (powers of 1024). Rejects 0 unless allow_zero.
CLI::Option* size(CLI::App* cmd, const std::string& names, std::uint64_t& bytes, const std::string& help,
                  bool allow_zero = false);
// -n,--iters: a count of at least 1.
CLI::Option* iterations(CLI::App* cmd, std::uint64_t& count, const std::string& help);
// --seed N.
CLI::Option* seed(CLI::App* cmd, std::uint64_t& seed, const std::string& help);
// -o,--out DIR.
CLI::Option* out_dir(CLI::App* cmd, std::string& dir, const std::string& help);
// --json FILE ('-' = standard output; human text then goes to standard error).
CLI::Option* json(CLI::App* cmd, std::string& path, const std::string& help = "");
// --cc NAME|FILE, once.
CLI::Option* cc(CLI::App* cmd, std::string& preset, const std::string& help);
// --cc NAME|FILE, repeatable.
CLI::Option* cc(CLI::App* cmd, std::vector<std::string>& presets, const std::string& help);

// An old spelling, hidden from --help: giving it (with or without a value) fails the parse with
// "OLD was renamed: use NEW" (NEW may carry a hint, e.g. "--duration 5ms").
void renamed(CLI::App* cmd, const std::string& old_names, const std::string& new_name);

// Writes `doc` (indented, one trailing newline) to `path`, or to standard output for "-". The error
// names the file and why it could not be written.
Status write_json(const std::string& path, const nlohmann::json& doc);

// Where a command prints its tables: standard error when its JSON goes to standard output (so stdout
// parses), standard output otherwise.
std::FILE* human_stream(const std::string& json_path);

// The fields every JSON document the CLI writes starts with: {"command": NAME, "schema_version": N}.
// A field's name carries its unit (`_bytes`, `_s`, `_us`, `_gbps`); docs/CLI.md documents each schema.
nlohmann::json json_document(const std::string& command, int schema_version = 1);

}  // namespace megascale::cli::vocab
