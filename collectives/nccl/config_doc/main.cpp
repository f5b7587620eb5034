// megascale_config_doc: prints the plugin's knob tables as docs/CONFIG.md holds them, rendered from the
// schema (collectives/nccl/src/config_schema.h), or with `--write FILE` puts them between FILE's markers.
//
//   build/collectives/nccl/megascale_config_doc --write docs/CONFIG.md
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "config_schema.h"

int main(int argc, char** argv) {
  namespace schema = megascale::nccl::schema;
  const std::string table = schema::render_markdown();
  if (argc == 1) {
    std::fputs(table.c_str(), stdout);
    return 0;
  }
  if (argc != 3 || std::strcmp(argv[1], "--write") != 0) {
    std::fprintf(stderr, "usage: %s [--write docs/CONFIG.md]\n", argv[0]);
    return 2;
  }
  std::ifstream in(argv[2]);
  if (!in) {
    std::fprintf(stderr, "%s: cannot open\n", argv[2]);
    return 1;
  }
  std::stringstream text;
  text << in.rdbuf();
  auto out = schema::splice_generated(text.str(), table);
  if (!out) {
    std::fprintf(stderr, "%s: %s\n", argv[2], out.error().message.c_str());
    return 1;
  }
  std::ofstream(argv[2]) << *out;
  return 0;
}
