// A main() for the fuzz targets in builds without libFuzzer (gcc, the sanitizer build): runs
// LLVMFuzzerTestOneInput once on every file given, or on every file in each directory given, so ctest
// replays the committed seed corpus and every past crash on every build.
//
//   fuzz_packet_replay tests/fuzz/corpus/fuzz_packet crash-1234
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

int replay(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", file.c_str());
    return 1;
  }
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Like libFuzzer, hand over a buffer of exactly the input's size, so reading past it is an error.
  std::vector<uint8_t> exact(bytes);
  LLVMFuzzerTestOneInput(exact.data(), exact.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int files = 0, errors = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path arg = argv[i];
    if (std::filesystem::is_directory(arg)) {
      for (const auto& entry : std::filesystem::directory_iterator(arg)) {
        if (!entry.is_regular_file()) continue;
        errors += replay(entry.path());
        ++files;
      }
    } else {
      errors += replay(arg);
      ++files;
    }
  }
  std::printf("replayed %d inputs\n", files);
  return errors == 0 && files > 0 ? 0 : 1;
}
