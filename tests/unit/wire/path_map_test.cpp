// PathMap: lanes' path ids get distinct sockets while there are enough, keep them while in use, and a
// repathed lane moves to another socket; idle ids are forgotten.
#include "../../../collectives/wire/udp/src/path_map.h"

#include <gtest/gtest.h>

#include <set>

namespace megascale::wire::detail {
namespace {

TEST(PathMap, DistinctSocketsForAsManyLanesAsSockets) {
  PathMap paths(4);
  std::set<uint32_t> used;
  // Path ids that collide modulo 4 (all multiples of 4) still spread.
  for (uint32_t id : {4u, 8u, 12u, 16u}) used.insert(paths.socket_for(id, 0));
  EXPECT_EQ(used.size(), 4u);
  for (uint32_t s = 0; s < 4; ++s) EXPECT_EQ(paths.live(s), 1u);
}

TEST(PathMap, StableWhileInUse) {
  PathMap paths(8);
  const uint32_t a = paths.socket_for(0xDEADBEEF, 0);
  paths.socket_for(7, 1);
  paths.socket_for(9, 2);
  for (TimeNs t = 3; t < 100; ++t) EXPECT_EQ(paths.socket_for(0xDEADBEEF, t), a);
}

TEST(PathMap, RepathedLaneMovesToAnotherSocket) {
  PathMap paths(4);
  const uint32_t a = paths.socket_for(100, 0);
  const uint32_t b = paths.socket_for(200, 0);
  // Lane A repaths: its new id must not share A's (still live) port, nor B's.
  const uint32_t c = paths.socket_for(300, 1);
  EXPECT_NE(c, a);
  EXPECT_NE(c, b);
}

TEST(PathMap, MoreLanesThanSocketsSpreadEvenly) {
  PathMap paths(3);
  for (uint32_t id = 1; id <= 9; ++id) paths.socket_for(id * 3, 0);
  for (uint32_t s = 0; s < 3; ++s) EXPECT_EQ(paths.live(s), 3u);
}

TEST(PathMap, SweepForgetsIdleIds) {
  PathMap paths(2);
  paths.socket_for(1, 0);
  const uint32_t busy = paths.socket_for(2, 0);
  paths.socket_for(2, 5 * kNsPerSec);  // id 2 used recently, id 1 not
  paths.sweep(5 * kNsPerSec, 2 * kNsPerSec);
  EXPECT_EQ(paths.size(), 1u);
  EXPECT_EQ(paths.live(busy), 1u);
  EXPECT_EQ(paths.live(1 - busy), 0u);
  EXPECT_EQ(paths.socket_for(2, 6 * kNsPerSec), busy);      // the survivor kept its socket
  EXPECT_EQ(paths.socket_for(3, 6 * kNsPerSec), 1 - busy);  // a new id takes the freed one
}

}  // namespace
}  // namespace megascale::wire::detail
