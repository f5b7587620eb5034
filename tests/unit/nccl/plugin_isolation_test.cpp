// The conformance harness isolates the plugin under test (tools/plugin-conformance/src/isolate.h):
// foreign plugins that hang in init, have NULL table entries, abort in init, crash in isend or hang in
// test (unit/nccl/foreign_plugin.cpp, one build per misbehaviour) each fail the case and name the
// call, within the case timeout, and the harness goes on with the next case; a v12 device with a bad
// railId fails the load case. (The MegaScale plugin passes every case, the peer-stopped ones included:
// nccl_conformance_test.cpp.) And a preset with a syntax error, which made the MegaScale plugin's init
// abort, fails the load without taking the harness.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "../../support/source_path.h"
#include "megascale/nccl/conformance.h"

namespace megascale::nccl::conformance {
namespace {

std::string foreign(const char* mode) {
  return megascale::test::join_path(MEGASCALE_FOREIGN_PLUGIN_DIR,
                                    "libforeign_plugin_" + std::string(mode) + ".so");
}

// A run of `cases` on the foreign plugin `mode`, with a short case timeout; `took_s` is its wall time.
Report run_foreign(const char* mode, std::vector<std::string> cases, double timeout_s, double* took_s) {
  Options o;
  o.plugin_path = foreign(mode);
  o.cases = std::move(cases);
  o.case_timeout_s = timeout_s;
  const auto t0 = std::chrono::steady_clock::now();
  Report r = run(o);
  *took_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

// Generous: the harness waits for the timeout, then kills and reaps; a loaded 2-core host adds seconds.
constexpr double kSlackS = 30;

TEST(PluginIsolation, AnInitThatNeverReturnsFailsTheLoadWithinTheTimeout) {
  double took = 0;
  const Report r = run_foreign("spin_init", {}, 2, &took);
  EXPECT_EQ(r.load_error, "init did not return within 2 s");
  EXPECT_TRUE(r.cases.empty());
  EXPECT_FALSE(r.passed());
  EXPECT_LT(took, 2 + kSlackS);
}

TEST(PluginIsolation, AnAbortInInitFailsTheLoadNamingTheSignalAndTheCall) {
  double took = 0;
  const Report r = run_foreign("abort_init", {}, 60, &took);
  EXPECT_EQ(r.load_error, "killed by SIGABRT in init");
  EXPECT_TRUE(r.cases.empty());
}

TEST(PluginIsolation, NullTableEntriesFailTheLoadNamingTheFunctions) {
  double took = 0;
  const Report r = run_foreign("null_entries", {}, 60, &took);
  EXPECT_EQ(r.load_error, "ncclNetPlugin_v8 has NULL entries that NCCL calls: isend, test");
  EXPECT_TRUE(r.cases.empty());
}

TEST(PluginIsolation, ACrashInIsendFailsEachCaseThatSendsAndTheOthersStillRun) {
  double took = 0;
  const Report r =
      run_foreign("segv_isend", {"load", "connect_accept_one_thread", "steps_in_flight"}, 60, &took);
  ASSERT_TRUE(r.load_error.empty()) << r.load_error;
  EXPECT_EQ(r.plugin_name, "Foreign");
  EXPECT_EQ(r.abi_version, 8);
  ASSERT_EQ(r.cases.size(), 3u);
  EXPECT_EQ(r.cases[0].name, "load");
  EXPECT_FALSE(r.cases[0].passed);
  EXPECT_EQ(r.cases[0].detail, "killed by SIGSEGV in isend");
  // Its connections do connect: the case that only connects passes, in a process of its own.
  EXPECT_TRUE(r.cases[1].passed) << r.cases[1].detail;
  EXPECT_FALSE(r.cases[2].passed);
  EXPECT_EQ(r.cases[2].detail, "killed by SIGSEGV in isend");
}

TEST(PluginIsolation, ATestThatNeverReturnsFailsTheCaseWithinTheTimeout) {
  double took = 0;
  // Cases run in the table's order: connect_accept_one_thread (no test() call) first.
  const Report r = run_foreign("spin_test", {"connect_accept_one_thread", "steps_in_flight"}, 2, &took);
  ASSERT_TRUE(r.load_error.empty()) << r.load_error;
  ASSERT_EQ(r.cases.size(), 2u);
  EXPECT_TRUE(r.cases[0].passed) << r.cases[0].detail;
  EXPECT_EQ(r.cases[1].name, "steps_in_flight");
  EXPECT_FALSE(r.cases[1].passed);
  EXPECT_EQ(r.cases[1].detail, "test did not return within 2 s");
  EXPECT_LT(took, 2 * 2 + kSlackS);
}

// A plugin that exports v12 is driven through v12 (the newest, as NCCL 2.30 picks it), and a railId that
// is neither NCCL_NET_ID_UNDEF (-1) nor a rail index fails the load case naming the device and the value.
TEST(PluginIsolation, AV12DeviceWithABadRailIdFailsTheLoadCase) {
  double took = 0;
  const Report r = run_foreign("bad_rail", {"load"}, 60, &took);
  ASSERT_TRUE(r.load_error.empty()) << r.load_error;
  EXPECT_EQ(r.abi_version, 12);
  ASSERT_EQ(r.cases.size(), 1u);
  EXPECT_FALSE(r.cases[0].passed);
  EXPECT_EQ(r.cases[0].detail, "device 0 (foreign0): railId -7 must be -1 (unknown) or a rail index >= 0");
}

// The MegaScale plugin given a preset with a syntax error (issue 55: init aborted the host process):
// whether init aborts or fails with an error, the harness reports it as the load's failure and lives.
TEST(PluginIsolation, APresetWithASyntaxErrorFailsTheLoadAndTheHarnessLives) {
  char path[] = "/tmp/megascale-bad-preset-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  const char text[] = "controller: [hybrid\n";
  ASSERT_EQ(::write(fd, text, sizeof text - 1), static_cast<ssize_t>(sizeof text - 1));
  ::close(fd);
  ::setenv("MEGASCALE_IFNAME", "lo", /*overwrite=*/0);
  ::setenv("MEGASCALE_CC", path, 1);
  Options o;
  o.plugin_path = MEGASCALE_NCCL_PLUGIN_PATH;
  o.cases = {"load"};
  o.case_timeout_s = 60;
  const Report r = run(o);
  ::unsetenv("MEGASCALE_CC");
  ::unlink(path);
  EXPECT_TRUE(r.cases.empty());
  const bool aborted = r.load_error == "killed by SIGABRT in init";
  const bool failed = r.load_error.rfind("init failed: ", 0) == 0;
  EXPECT_TRUE(aborted || failed) << r.load_error;
}

}  // namespace
}  // namespace megascale::nccl::conformance
