// guarded<fn> (collectives/nccl/src/adapters.h), what every exported table entry is: whatever throws
// inside a call becomes one WARN naming the call and ncclInternalError, never an exception crossing
// NCCL's C frames; results and arguments pass through untouched.
#include <gtest/gtest.h>

#include <new>
#include <stdexcept>

#include "adapters.h"
#include "log.h"
#include "warn_capture.h"

namespace megascale::nccl {
namespace {

abi::NetResult throws_runtime_error(int dev, void** out) {
  (void)dev;
  (void)out;
  throw std::runtime_error("the preset went away");
}
abi::NetResult throws_bad_alloc(void* comm) {
  (void)comm;
  throw std::bad_alloc();
}
abi::NetResult throws_an_int() {
  throw 42;
}
abi::NetResult returns_its_argument(int code, int* seen) {
  *seen = code;
  return static_cast<abi::NetResult>(code);
}

class Guarded : public ::testing::Test {
 protected:
  void SetUp() override {
    set_logger(test::warn_logger);
    (void)test::take_warns();
  }
};

TEST_F(Guarded, AStdExceptionIsAWarnNamingTheCallAndAnInternalError) {
  void* out = nullptr;
  EXPECT_EQ(guarded<&throws_runtime_error>(0, &out), abi::kNetInternalError);
  EXPECT_TRUE(test::warned("throws_runtime_error: internal error: the preset went away"));
}

TEST_F(Guarded, OutOfMemoryIsAnInternalError) {
  EXPECT_EQ(guarded<&throws_bad_alloc>(nullptr), abi::kNetInternalError);
  EXPECT_TRUE(test::warned("throws_bad_alloc: internal error: std::bad_alloc"));
}

TEST_F(Guarded, AnythingElseThrownIsAnInternalErrorToo) {
  EXPECT_EQ(guarded<&throws_an_int>(), abi::kNetInternalError);
  EXPECT_TRUE(test::warned("throws_an_int: internal error: an exception that is not a std::exception"));
}

TEST_F(Guarded, ResultsAndArgumentsPassThrough) {
  int seen = -1;
  EXPECT_EQ(guarded<&returns_its_argument>(abi::kNetRemoteError, &seen), abi::kNetRemoteError);
  EXPECT_EQ(seen, abi::kNetRemoteError);
  EXPECT_TRUE(test::take_warns().empty());
}

}  // namespace
}  // namespace megascale::nccl
