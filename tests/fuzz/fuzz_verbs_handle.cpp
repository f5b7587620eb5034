// libFuzzer target: the verbs wire's connection handle decoder (decode_handle) on arbitrary bytes. It
// must never read outside the input, crash or hang (ASan/UBSan watch); whatever it accepts must encode
// again to the very same bytes (the layout has no field the decoder ignores), and every refusal must
// carry a message.
//
//   fuzz_verbs_handle -max_total_time=60 corpus/ tests/fuzz/corpus/fuzz_verbs_handle/
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "megascale/wire/verbs/handle.h"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_verbs_handle: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace megascale::wire::verbs;
  megascale::Result<ConnHandle> h = decode_handle(data, size);
  if (!h) {
    if (h.error().message.empty()) fail("a refusal without a message");
    return 0;
  }
  uint8_t out[kMaxHandleBytes];
  megascale::Result<size_t> n = encode_handle(*h, out);
  if (!n) fail("a decoded handle does not encode again");
  if (*n != size || std::memcmp(out, data, size) != 0) fail("encode(decode(x)) != x");
  return 0;
}
