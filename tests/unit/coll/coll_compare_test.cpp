// --compare's host side: settings parsed (a net name, or variables) and refused naming the problem, the
// job's arguments for one setting's run, and the table of both settings' medians and their ratio (of
// times below 64 KiB, of busbw above).
#include <gtest/gtest.h>

#include "megascale/coll/compare.h"

namespace megascale::coll {
namespace {

TEST(CollCompare, SettingsAreANetOrVariables) {
  auto net = parse_setting("MegaScale");
  ASSERT_TRUE(net) << net.error().message;
  EXPECT_EQ(*net, (Setting{{"NCCL_NET", "MegaScale"}}));
  auto vars = parse_setting("NCCL_NET=Socket,NCCL_SOCKET_NTHREADS=4,NCCL_NSOCKS_PERTHREAD=4");
  ASSERT_TRUE(vars) << vars.error().message;
  EXPECT_EQ(vars->size(), 3u);
  EXPECT_EQ((*vars)[1], (std::pair<std::string, std::string>{"NCCL_SOCKET_NTHREADS", "4"}));
  for (const char* bad : {"", "=x", "A=1,,B=2", "1X=2", "NCCL NET=Socket"}) {
    auto s = parse_setting(bad);
    ASSERT_FALSE(s) << bad;
    EXPECT_NE(s.error().message.find(std::string("--compare setting '") + bad + "'"), std::string::npos)
        << s.error().message;
  }
}

TEST(CollCompare, EachRunGetsTheArgumentsWithoutTheComparison) {
  const std::vector<std::string> argv = {
      "megascale-coll",       "all_reduce", "--compare", "Socket", "MegaScale", "-b", "8", "--rounds", "3",
      "--json-lines=x.jsonl", "--nproc",    "4"};
  EXPECT_EQ(argv_for_setting(argv, "/tmp/a.jsonl"),
            (std::vector<std::string>{"megascale-coll", "all_reduce", "-b", "8", "--nproc", "4",
                                      "--json-lines", "/tmp/a.jsonl"}));
}

TEST(CollCompare, MediansAndRatiosPerRow) {
  auto row = [](uint64_t size, double time_us, double bus) {
    return nlohmann::json{{"collective", "all_reduce"},
                          {"size", size},
                          {"type", "float"},
                          {"redop", "sum"},
                          {"root", -1},
                          {"out_of_place", {{"time_us", time_us}, {"busbw_gbs", bus}}}};
  };
  // Three rounds each; medians a: 100 us / 10 GB/s, b: 50 us / 15 GB/s.
  const std::vector<nlohmann::json> a = {row(8, 100, 0),      row(8, 90, 0),      row(8, 120, 0),
                                         row(1 << 20, 0, 10), row(1 << 20, 0, 9), row(1 << 20, 0, 11)};
  const std::vector<nlohmann::json> b = {row(8, 50, 0),       row(8, 40, 0),       row(8, 60, 0),
                                         row(1 << 20, 0, 15), row(1 << 20, 0, 14), row(1 << 20, 0, 16),
                                         row(1 << 30, 0, 1)};
  const std::string t = compare_table("Socket", a, "MegaScale", b);
  EXPECT_NE(t.find("# compare: Socket (a) against MegaScale (b)"), std::string::npos) << t;
  EXPECT_NE(t.find("      all_reduce             8     float     sum     100.00      50.00       0.00       "
                   "0.00    2.00  3/3"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("1.50  3/3"), std::string::npos) << "15 / 10 at 1 MiB: " << t;
  EXPECT_NE(t.find("(no row under Socket)"), std::string::npos) << t;
}

}  // namespace
}  // namespace megascale::coll
