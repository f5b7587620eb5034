// to_net_result: the one mapping from a failure's kind (megascale/common/result.h) to the ncclResult_t
// the plugin returns, written out here from NCCL's meaning of each code; and Error's default kind.
#include "../../../collectives/nccl/src/net_result.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace megascale::nccl {
namespace {

TEST(NetResult, EveryErrorCodeMapsToTheNcclResultOfItsMeaning) {
  struct Row {
    ErrorCode code;
    abi::NetResult expected;
  };
  const Row table[] = {
      {ErrorCode::kInvalidArgument, abi::kNetInvalidArgument},
      {ErrorCode::kInvalidUsage, abi::kNetInvalidUsage},
      {ErrorCode::kSystem, abi::kNetSystemError},   // NCCL's advice for network and system failures
      {ErrorCode::kRemote, abi::kNetRemoteError},   // the peer reset, refused or closed
      {ErrorCode::kTimeout, abi::kNetRemoteError},  // the peer stopped answering (the retry budget)
      {ErrorCode::kDevice, abi::kNetUnhandledCudaError},
      {ErrorCode::kUnsupported, abi::kNetInternalError},  // NCCL has no "unsupported"
      {ErrorCode::kInternal, abi::kNetInternalError},
  };
  std::set<ErrorCode> seen;
  for (const Row& row : table) {
    EXPECT_EQ(to_net_result(row.code), row.expected) << to_string(row.code);
    EXPECT_NE(to_net_result(row.code), abi::kNetSuccess);  // a failure is never success
    seen.insert(row.code);
  }
  // Every code is in the table: one added to the enum without a row here fails.
  EXPECT_EQ(seen.size(), static_cast<size_t>(ErrorCode::kInternal) + 1);
}

TEST(NetResult, ErrorsAreInvalidArgumentsUnlessTheirMakerSaysOtherwise) {
  const Error plain{"bad value"};
  EXPECT_EQ(plain.code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(make_error("bad value").code, ErrorCode::kInvalidArgument);
  const Error sys = make_error(ErrorCode::kSystem, "bind: Address already in use");
  EXPECT_EQ(sys.code, ErrorCode::kSystem);
  EXPECT_EQ(sys.message, "bind: Address already in use");
  const Status s = sys;  // a Status carries the code on
  ASSERT_FALSE(s);
  EXPECT_EQ(to_net_result(s.error().code), abi::kNetSystemError);
}

TEST(NetResult, EveryCodeHasItsOwnName) {
  std::set<std::string> names;
  for (int c = 0; c <= static_cast<int>(ErrorCode::kInternal); ++c) {
    names.emplace(to_string(static_cast<ErrorCode>(c)));
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(ErrorCode::kInternal) + 1);
  EXPECT_EQ(names.count("unknown"), 0u);
  EXPECT_EQ(to_string(ErrorCode::kTimeout), "timeout");
}

}  // namespace
}  // namespace megascale::nccl
