// PathMap: lane i of a connection gets socket i (so explicit source ports map lane i to port i), ids
// keep their socket while in use, a repathed lane moves to another socket; idle ids are forgotten.
#include "../../../collectives/wire/udp/src/path_map.h"

#include <gtest/gtest.h>

#include <set>

namespace megascale::wire::detail {
namespace {

TEST(PathMap, LaneIGetsSocketIWhateverTheOrderAndIds) {
  PathMap paths(4);
  // Path ids that collide modulo 4 (all multiples of 4), lanes first seen out of order.
  const uint32_t ids[4] = {4, 8, 12, 16};
  for (uint32_t lane : {2u, 0u, 3u, 1u}) EXPECT_EQ(paths.socket_for(ids[lane], 7, lane, 0), lane);
  for (uint32_t s = 0; s < 4; ++s) EXPECT_EQ(paths.live(s), 1u);
  // A second connection's lanes take the same sockets, lane for lane.
  for (uint32_t lane : {3u, 1u, 0u, 2u}) EXPECT_EQ(paths.socket_for(100 + lane, 9, lane, 1), lane);
  for (uint32_t s = 0; s < 4; ++s) EXPECT_EQ(paths.live(s), 2u);
}

TEST(PathMap, StableWhileInUse) {
  PathMap paths(8);
  const uint32_t a = paths.socket_for(0xDEADBEEF, 1, 5, 0);
  EXPECT_EQ(a, 5u);
  paths.socket_for(7, 1, 0, 1);
  paths.socket_for(9, 1, 1, 2);
  for (TimeNs t = 3; t < 100; ++t) EXPECT_EQ(paths.socket_for(0xDEADBEEF, 1, 5, t), a);
}

TEST(PathMap, RepathedLaneMovesToAnotherSocket) {
  PathMap paths(4);
  const uint32_t a = paths.socket_for(100, 1, 0, 0);
  const uint32_t b = paths.socket_for(200, 1, 1, 0);
  // Lane 0 repaths: its new id must not share its old (still live) port, nor lane 1's.
  const uint32_t c = paths.socket_for(300, 1, 0, 1);
  EXPECT_NE(c, a);
  EXPECT_NE(c, b);
}

TEST(PathMap, RepathWithEverySocketTakenSharesAnotherLanesPort) {
  PathMap paths(3);
  for (uint32_t lane = 0; lane < 3; ++lane) paths.socket_for(10 + lane, 1, lane, 0);
  const uint32_t moved = paths.socket_for(99, 1, 2, 1);  // lane 2 repaths
  EXPECT_NE(moved, 2u);
  EXPECT_EQ(paths.live(moved), 2u);
}

TEST(PathMap, MoreLanesThanSocketsSpreadEvenly) {
  PathMap paths(3);
  for (uint32_t lane = 0; lane < 9; ++lane) EXPECT_EQ(paths.socket_for(lane * 3 + 3, 1, lane, 0), lane % 3);
  for (uint32_t s = 0; s < 3; ++s) EXPECT_EQ(paths.live(s), 3u);
}

TEST(PathMap, SweepForgetsIdleIds) {
  PathMap paths(2);
  paths.socket_for(1, 1, 0, 0);
  const uint32_t busy = paths.socket_for(2, 1, 1, 0);
  paths.socket_for(2, 1, 1, 5 * kNsPerSec);  // id 2 used recently, id 1 not
  paths.sweep(5 * kNsPerSec, 2 * kNsPerSec);
  EXPECT_EQ(paths.size(), 1u);
  EXPECT_EQ(paths.live(busy), 1u);
  EXPECT_EQ(paths.live(1 - busy), 0u);
  EXPECT_EQ(paths.socket_for(2, 1, 1, 6 * kNsPerSec), busy);  // the survivor kept its socket
  // Lane 0's id was forgotten: its next id is a first id again and takes lane 0's socket.
  EXPECT_EQ(paths.socket_for(3, 1, 0, 6 * kNsPerSec), 0u);
}

}  // namespace
}  // namespace megascale::wire::detail
