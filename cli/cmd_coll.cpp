// `megascale coll ARGS...`: runs megascale-coll (cli/coll/README.md), the collective benchmark over NCCL,
// with the same arguments. It is a program of its own because it links CUDA and NCCL, which `megascale`
// does not need; it is looked for beside this program, then in its build folder (coll/), then on PATH.
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "commands.h"

namespace megascale::cli {
namespace {

std::string find_coll() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (const std::filesystem::path& p :
         {self.parent_path() / "megascale-coll", self.parent_path() / "coll" / "megascale-coll"}) {
      if (::access(p.c_str(), X_OK) == 0) return p.string();
    }
  }
  return "megascale-coll";  // execvp searches PATH
}

}  // namespace

void add_coll_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "coll",
      "Collective benchmarks over NCCL with nccl-tests' flags, columns and busbw (runs megascale-coll; "
      "`megascale coll --help` lists its flags)");
  cmd->prefix_command();
  cmd->set_help_flag();  // --help goes to megascale-coll
  cmd->callback([cmd] {
    const std::string program = find_coll();
    std::vector<std::string> args = {program};
    for (const std::string& a : cmd->remaining()) args.push_back(a);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    fmt::print(stderr, "megascale coll: cannot run {}: {} (it is built only where CUDA and NCCL are found)\n",
               program, std::strerror(errno));
    exit_code() = kExitUsage;
  });
}

}  // namespace megascale::cli
