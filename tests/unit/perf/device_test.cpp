// perf's -d: an interface name becomes the address a side binds, and a wrong name is refused with the
// names that exist.
#include "megascale/perf/device.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace megascale::perf {
namespace {

bool has_interface(const std::string& name) {
  const std::vector<std::string> names = interface_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

TEST(PerfDevice, LoopbackInterfaceGivesTheLoopbackAddress) {
  if (!has_interface("lo")) GTEST_SKIP() << "no interface named lo here";
  auto v4 = interface_address("lo", false);
  ASSERT_TRUE(v4) << v4.error().message;
  EXPECT_EQ(*v4, "127.0.0.1");
}

TEST(PerfDevice, NamesAreSortedOnce) {
  const std::vector<std::string> names = interface_names();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end());
}

TEST(PerfDevice, UnknownInterfaceIsRefusedListingThoseThatExist) {
  auto r = interface_address("no-such-if0", false);
  ASSERT_FALSE(r);
  const std::string& m = r.error().message;
  EXPECT_NE(m.find("-d no-such-if0: no such interface (here: "), std::string::npos) << m;
  for (const std::string& name : interface_names()) EXPECT_NE(m.find(name), std::string::npos) << m;
}

}  // namespace
}  // namespace megascale::perf
