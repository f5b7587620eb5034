// megascale_config_doc: prints the plugin's knob tables as docs/CONFIG.md holds them, rendered from the
// schema (collectives/nccl/src/config_schema.h), or with `--write FILE` puts them between FILE's markers.
//
//   build/collectives/nccl/megascale_config_doc --write docs/CONFIG.md
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "config_schema.h"

int main(int argc, char** argv) {
  namespace schema = megascale::nccl::schema;
  std::string write_path;
  CLI::App app{"Prints the plugin's knob tables as docs/CONFIG.md holds them (rendered from the schema)",
               "megascale_config_doc"};
  app.add_option("--write", write_path, "Put the tables between FILE's generated-text markers instead")
      ->type_name("FILE");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  const std::string table = schema::render_markdown();
  if (write_path.empty()) {
    std::fputs(table.c_str(), stdout);
    return 0;
  }
  std::ifstream in(write_path);
  if (!in) {
    std::fprintf(stderr, "%s: cannot open\n", write_path.c_str());
    return 1;
  }
  std::stringstream text;
  text << in.rdbuf();
  auto out = schema::splice_generated(text.str(), table);
  if (!out) {
    std::fprintf(stderr, "%s: %s\n", write_path.c_str(), out.error().message.c_str());
    return 1;
  }
  std::ofstream(write_path) << *out;
  return 0;
}
