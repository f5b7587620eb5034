// libFuzzer target: the NCCL topology XML reader (topo::host::parse_nccl_topo_xml) on arbitrary text,
// the file a user hands to `megascale topo --nccl-xml` or that NCCL dumps (NCCL_TOPO_DUMP_FILE). It
// must never crash, hang, leak or throw (ASan/UBSan watch); each refusal names the source and, where
// the text was parsed, the line. Whatever it accepts must survive the writer: nccl_topo_xml's text
// reads back, and written again is the same text (nothing lost or invented on the second pass).
// Inputs above 64 KiB are skipped (env_lines.h).
//
//   fuzz_nccl_xml -max_total_time=60 -dict=tests/fuzz/fuzz_nccl_xml.dict corpus/
//   tests/fuzz/corpus/fuzz_nccl_xml/
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "env_lines.h"
#include "megascale/topology/nccl_xml.h"

namespace {

using namespace megascale;

constexpr std::string_view kSource = "fuzz-topo.xml";

[[noreturn]] void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_nccl_xml: %s: %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > fuzz::kMaxInputBytes) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  Result<topo::host::HostTopology> host = topo::host::parse_nccl_topo_xml(text, kSource);
  if (!host) {
    if (host.error().message.rfind(std::string(kSource) + ": ", 0) != 0)
      fail("an error that does not start with the source", host.error().message);
    return 0;
  }
  const std::string written = topo::host::nccl_topo_xml(*host);
  Result<topo::host::HostTopology> back = topo::host::parse_nccl_topo_xml(written, "written");
  if (!back) fail("the written file does not read back", back.error().message + "\n" + written);
  const std::string again = topo::host::nccl_topo_xml(*back);
  if (again != written) fail("written twice, the file differs", written + "\n---\n" + again);
  return 0;
}
