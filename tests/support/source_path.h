// A file of the source tree, for tests that read configs and fixtures: MEGASCALE_SOURCE_DIR (each
// test's compile definition, tests/CMakeLists.txt) joined with a path relative to it.
//
//   load_run_config(test::source_path("configs/train/tiny.yaml"));
//   test::join_path(MEGASCALE_FOREIGN_PLUGIN_DIR, name);   // the same for another directory
//
// Built by appending a run-time string in a function that is not inlined: GCC 12 at -O3 warns
// (-Warray-bounds, an error under MEGASCALE_WERROR) on std::string(LITERAL) + "literal" for some
// lengths of LITERAL, so the same test built in one clone and not in another at a longer path.
#pragma once

#include <string>
#include <string_view>

namespace megascale::test {

// `dir` and `relative` joined by one '/'.
[[gnu::noinline]] inline std::string join_path(std::string_view dir, std::string_view relative) {
  std::string path(dir);
  path += '/';
  path += relative;
  return path;
}

#ifdef MEGASCALE_SOURCE_DIR
inline std::string source_path(std::string_view relative) {
  return join_path(MEGASCALE_SOURCE_DIR, relative);
}
#endif

}  // namespace megascale::test
