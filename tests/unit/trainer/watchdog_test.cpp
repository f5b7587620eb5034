// The hang detector: a step past its deadline and a communicator's asynchronous error each fail the job
// once with a message naming them; nothing fails between steps or within the deadline; the thread calls
// the failure callback by itself.
#include "megascale/trainer/watchdog.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>

namespace megascale::trainer {
namespace {

constexpr TimeNs kSec = 1'000'000'000;

TEST(Watchdog, AStepPastItsDeadlineFailsNamingTheStep) {
  Watchdog dog({.step_timeout_s = 5, .period_s = 3600}, {}, [](const std::string&) {});
  const TimeNs t0 = Watchdog::now_ns();
  EXPECT_FALSE(dog.check(t0 + 100 * kSec)) << "no step in progress";
  dog.step_begin(12);
  EXPECT_FALSE(dog.check(t0 + 4 * kSec));
  const std::optional<std::string> late = dog.check(t0 + 7 * kSec);
  ASSERT_TRUE(late);
  EXPECT_NE(late->find("step 12 has run 7 s, past --step-timeout 5 s"), std::string::npos) << *late;
  dog.step_end();
  EXPECT_FALSE(dog.check(t0 + 100 * kSec)) << "the step ended";
}

TEST(Watchdog, ACommunicatorsErrorFailsAtOnceAndATimeoutOfZeroIsOff) {
  std::string error;
  Watchdog dog(
      {.step_timeout_s = 0, .period_s = 3600}, [&] { return error; }, [](const std::string&) {});
  dog.step_begin(3);
  EXPECT_FALSE(dog.check(Watchdog::now_ns() + 1000 * kSec)) << "no step deadline with 0";
  error = "communicator 'dp': ncclRemoteError";
  const std::optional<std::string> failed = dog.check(Watchdog::now_ns());
  ASSERT_TRUE(failed);
  EXPECT_EQ(*failed, error);
}

TEST(Watchdog, TheThreadReportsAHungStepOnce) {
  std::promise<std::string> reported;
  int calls = 0;
  {
    Watchdog dog({.step_timeout_s = 0.05, .period_s = 0.01}, {}, [&](const std::string& why) {
      ++calls;
      reported.set_value(why);
    });
    dog.step_begin(7);
    std::future<std::string> why = reported.get_future();
    ASSERT_EQ(why.wait_for(std::chrono::seconds(20)), std::future_status::ready);
    EXPECT_NE(why.get().find("step 7 has run"), std::string::npos);
  }
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace megascale::trainer
