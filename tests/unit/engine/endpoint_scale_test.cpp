// An endpoint with thousands of connections, a few of them busy (an incast receiver): every connection
// with work is served, round-robin, and the endpoint only looks at connections that had something
// happen to them (EndpointStats::connections_polled), not at all of them on every call. Also the
// ready set and deadline heap (collectives/engine/src/conn_schedule.h) against brute force.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "../../../collectives/engine/src/conn_schedule.h"
#include "test_net.h"

namespace megascale::engine::testing {
namespace {

constexpr size_t kConnections = 2000;

EngineConfig scale_config(uint64_t seed) {
  EngineConfig c = test_config(seed);
  c.grow_connection_state = true;  // 2,000 whole connections would take ~1 GiB
  c.max_posted_recvs = 16;
  c.max_posted_sends = 16;
  return c;
}

// A connects kConnections times to B; returns A's and B's connections, index k on both sides the same.
struct Mesh {
  std::vector<Connection*> a, b;
};

Mesh connect_many(TestNet& net) {
  Mesh m;
  std::map<ConnId, size_t> index_by_id;  // A's id -> k
  for (size_t k = 0; k < kConnections; ++k) {
    auto id = net.ep[0]->connect(net.now, kPeerB);
    EXPECT_TRUE(id.ok());
    if (!id.ok()) return m;
    m.a.push_back(net.ep[0]->connection(*id));
    index_by_id[*id] = k;
  }
  m.b.assign(kConnections, nullptr);
  size_t accepted = 0;
  const bool ok = net.run_until(
      [&] {
        while (auto acc = net.ep[1]->accept()) {
          Connection* c = net.ep[1]->connection(*acc);
          m.b[index_by_id.at(c->remote_id())] = c;
          ++accepted;
        }
        if (accepted < kConnections) return false;
        return std::all_of(m.a.begin(), m.a.end(),
                           [](Connection* c) { return c->state() == ConnectionState::kEstablished; });
      },
      net.now + 1'000'000'000);
  EXPECT_TRUE(ok) << accepted << " of " << kConnections << " accepted";
  return m;
}

// A few busy connections among 2,000, both ways, with loss (the RTO and fast retransmit run on the
// deadline heap): every message arrives intact, and the endpoints ask a handful of connections per
// packet for work instead of all 2,000.
TEST(EndpointScale, FewBusyAmongThousandsAllComplete) {
  TestNet net(scale_config(1), scale_config(2));
  net.keep_trace = false;
  uint64_t seen = 0;
  net.rule = [&](const Sent& s) {
    Fate f;
    f.drop = s.is_data() && s.copy == 0 && (++seen % 41) == 0;
    return f;
  };
  Mesh m = connect_many(net);
  ASSERT_EQ(m.b.size(), kConnections);
  ASSERT_TRUE(std::none_of(m.b.begin(), m.b.end(), [](Connection* c) { return c == nullptr; }));

  // Releasing idle connections moves the others' indices: the schedule is rebuilt.
  // The rebuild marks every connection ready once (release is O(n) anyway); their RSTs reach B.
  for (size_t k = 1500; k < 1510; ++k) net.ep[0]->release(m.a[k]->id());
  net.run_for(1'000'000);
  EXPECT_EQ(m.b[1505]->state(), ConnectionState::kFailed);

  const std::vector<size_t> busy = {0, 3, 777, 1499, 1510, 1999};
  const EndpointStats before_a = net.ep[0]->stats();
  const EndpointStats before_b = net.ep[1]->stats();
  std::vector<Batch> ab, ba;
  for (size_t j = 0; j < busy.size(); ++j) {
    ab.emplace_back(std::vector<uint64_t>{5'000, 40'000, 1'234}, 10 + j);
    ba.emplace_back(std::vector<uint64_t>{20'000, 7}, 50 + j);
  }
  for (size_t j = 0; j < busy.size(); ++j) {
    ab[j].post_recvs(m.b[busy[j]]);
    ba[j].post_recvs(m.a[busy[j]]);
    ab[j].post_sends(m.a[busy[j]]);
    ba[j].post_sends(m.b[busy[j]]);
  }
  for (size_t j = 0; j < busy.size(); ++j) {
    EXPECT_TRUE(ab[j].run(net, m.a[busy[j]], m.b[busy[j]])) << "A->B on connection " << busy[j];
    EXPECT_TRUE(ba[j].run(net, m.b[busy[j]], m.a[busy[j]])) << "B->A on connection " << busy[j];
    ab[j].expect_intact(m.b[busy[j]]);
    ba[j].expect_intact(m.a[busy[j]]);
  }
  uint64_t retransmits = 0;
  for (const size_t k : busy) retransmits += m.a[k]->stats().retransmits() + m.b[k]->stats().retransmits();
  EXPECT_GT(retransmits, 0u) << "the drop rule should have forced loss recovery";

  for (int side = 0; side < 2; ++side) {
    const EndpointStats& before = side == 0 ? before_a : before_b;
    const EndpointStats& after = net.ep[side]->stats();
    const uint64_t polled = after.connections_polled - before.connections_polled;
    const uint64_t events =
        (after.packets_sent - before.packets_sent) + (after.packets_received - before.packets_received);
    ASSERT_GT(events, 0u);
    // One poll per packet sent plus one per connection that had an event (a packet, a post, a timer)
    // and then nothing to send; a scan of every connection costs ~2,000 per call instead.
    EXPECT_LE(polled, 3 * events + 100)
        << "side " << side << ": " << polled << " polls for " << events << " packets in and out";
  }
  // The idle connections are still established: nothing touched them.
  EXPECT_EQ(m.a[1000]->state(), ConnectionState::kEstablished);
  EXPECT_EQ(m.b[1000]->state(), ConnectionState::kEstablished);
}

// Eight connections among 2,000 get work at the same instant: poll_tx serves them round-robin, one
// packet each per round, none skipped, and then finds nothing without asking the 1,992 idle ones.
TEST(EndpointScale, BusyConnectionsAreServedRoundRobin) {
  TestNet net(scale_config(3), scale_config(4));
  net.keep_trace = false;
  Mesh m = connect_many(net);
  ASSERT_EQ(m.b.size(), kConnections);
  const std::vector<size_t> busy = {5, 250, 251, 900, 1200, 1600, 1800, 1998};
  // Receives on B first: A must hold B's credits before its sends can leave.
  std::vector<std::vector<uint8_t>> bufs(busy.size(), std::vector<uint8_t>(20'000));
  std::vector<std::vector<uint8_t>> data;
  std::vector<RequestId> recv_ids, send_ids;
  for (size_t j = 0; j < busy.size(); ++j) {
    data.push_back(pattern(9 + j, 20'000));
    auto r = m.b[busy[j]]->post_recv(bufs[j].data(), 20'000, 1);
    ASSERT_TRUE(r.ok());
    recv_ids.push_back(*r);
  }
  net.run_for(1'000'000);  // credits arrive and are acknowledged; nothing else is pending
  TxPacket tx;
  ASSERT_FALSE(net.ep[0]->poll_tx(net.now, tx));

  for (size_t j = 0; j < busy.size(); ++j) {
    auto r = m.a[busy[j]]->post_send(data[j].data(), 20'000, 1);
    ASSERT_TRUE(r.ok());
    send_ids.push_back(*r);
  }
  const uint64_t polled_before = net.ep[0]->stats().connections_polled;
  std::vector<ConnId> order;
  constexpr size_t kRounds = 4;  // 20 segments each: all still have data after 4 rounds
  for (size_t p = 0; p < kRounds * busy.size(); ++p) {
    ASSERT_TRUE(net.ep[0]->poll_tx(net.now, tx)) << "packet " << p;
    order.push_back(tx.conn_id);
  }
  std::set<ConnId> busy_ids;
  for (const size_t k : busy) busy_ids.insert(m.a[k]->id());
  for (size_t r = 0; r < kRounds; ++r) {
    std::set<ConnId> round(order.begin() + static_cast<std::ptrdiff_t>(r * busy.size()),
                           order.begin() + static_cast<std::ptrdiff_t>((r + 1) * busy.size()));
    EXPECT_EQ(round, busy_ids) << "round " << r << " did not serve each busy connection once";
  }
  // Each poll served a busy connection: no idle one was asked.
  EXPECT_EQ(net.ep[0]->stats().connections_polled - polled_before, kRounds * busy.size());
  // The packets taken here never reach B: loss recovery (RTO on the deadline heap) delivers them.
  for (size_t j = 0; j < busy.size(); ++j) {
    Completion rc, sc;
    ASSERT_TRUE(wait_done(net, m.b[busy[j]], recv_ids[j], &rc)) << "connection " << busy[j];
    ASSERT_TRUE(wait_done(net, m.a[busy[j]], send_ids[j], &sc)) << "connection " << busy[j];
    EXPECT_TRUE(rc.ok && sc.ok) << rc.error << sc.error;
    EXPECT_EQ(rc.bytes, 20'000u);
    EXPECT_EQ(bufs[j], data[j]) << "connection " << busy[j];
    EXPECT_GT(m.a[busy[j]]->stats().retransmits(), 0u);
  }
}

// The ready set against a std::set under random set/clear/find and growth.
TEST(EndpointScale, ReadySetMatchesBruteForce) {
  std::mt19937_64 rng(5);
  detail::ReadySet s;
  std::set<size_t> ref;
  size_t n = 10;
  s.resize(n);
  for (int step = 0; step < 200'000; ++step) {
    const uint64_t op = rng() % 100;
    if (op == 0 && n < 300'000) {
      n = n * 3 + 1;  // crosses several summary levels
      s.resize(n);
      continue;
    }
    const size_t i = rng() % n;
    if (op < 45) {
      s.set(i);
      ref.insert(i);
    } else if (op < 85) {
      s.clear(i);
      ref.erase(i);
    } else {
      auto it = ref.lower_bound(i);
      if (it == ref.end()) it = ref.begin();
      const size_t want = it == ref.end() ? detail::ReadySet::kNone : *it;
      ASSERT_EQ(s.find_cyclic(i), want) << "step " << step << " from " << i << " n " << n;
    }
  }
  EXPECT_EQ(s.empty(), ref.empty());
}

// The deadline heap against a map: top, update (earlier, later, removal) and the due walk.
TEST(EndpointScale, DeadlineHeapMatchesBruteForce) {
  std::mt19937_64 rng(6);
  constexpr uint32_t kN = 500;
  detail::DeadlineHeap h;
  h.resize(kN);
  std::vector<TimeNs> ref(kN, kNever);
  for (int step = 0; step < 100'000; ++step) {
    const auto i = static_cast<uint32_t>(rng() % kN);
    const TimeNs t = rng() % 5 == 0 ? kNever : static_cast<TimeNs>(rng() % 1000);
    h.update(i, t);
    ref[i] = t;
    const TimeNs want = *std::min_element(ref.begin(), ref.end());
    ASSERT_EQ(h.top_time(), want) << "step " << step;
    if (step % 100 == 0) {
      const TimeNs now = static_cast<TimeNs>(rng() % 1000);
      std::set<uint32_t> due, want_due;
      h.for_each_due(now, [&](uint32_t k) { EXPECT_TRUE(due.insert(k).second) << "twice: " << k; });
      for (uint32_t k = 0; k < kN; ++k) {
        if (ref[k] <= now) want_due.insert(k);
      }
      ASSERT_EQ(due, want_due) << "step " << step;
    }
  }
  // Popping yields (time, index) order.
  std::vector<std::pair<TimeNs, uint32_t>> want;
  for (uint32_t k = 0; k < kN; ++k) {
    if (ref[k] != kNever) want.emplace_back(ref[k], k);
  }
  std::sort(want.begin(), want.end());
  std::vector<std::pair<TimeNs, uint32_t>> got;
  while (!h.empty()) {
    got.emplace_back(h.top_time(), h.top_index());
    h.pop();
  }
  EXPECT_EQ(got, want);
}

// Small endpoints scan their connections (cheaper than the schedule up to 16 of them); the schedule is
// built when the 17th connection comes and dropped when releases bring it back to 16 or fewer. Traffic
// in flight across both switches completes intact.
TEST(EndpointScale, CrossingTheScanThresholdBothWaysKeepsServing) {
  TestNet net(test_config(3), test_config(4));
  net.keep_trace = false;
  std::vector<std::pair<Connection*, Connection*>> pairs;
  auto add = [&](size_t n) {
    for (size_t k = 0; k < n; ++k) {
      auto [a, b] = net.connect_pair();
      ASSERT_TRUE(a && b);
      pairs.emplace_back(a, b);
    }
  };
  // Every live pair carries one message each way, posted while the connection count changes.
  auto transfer_all = [&](uint64_t seed) {
    std::vector<std::vector<uint8_t>> out, in;
    std::vector<std::pair<RequestId, RequestId>> reqs;
    for (size_t k = 0; k < pairs.size(); ++k) {
      out.push_back(pattern(seed + k, 20'000 + k));
      in.emplace_back(out.back().size());
      auto r = pairs[k].second->post_recv(in.back().data(), in.back().size(), 1);
      auto s = pairs[k].first->post_send(out.back().data(), out.back().size(), 1);
      ASSERT_TRUE(r.ok() && s.ok());
      reqs.emplace_back(*s, *r);
    }
    const bool done = net.run_until(
        [&] {
          for (size_t k = 0; k < pairs.size(); ++k) {
            if (!pairs[k].first->test(reqs[k].first).done || !pairs[k].second->test(reqs[k].second).done)
              return false;
          }
          return true;
        },
        net.now + 2'000'000'000);
    ASSERT_TRUE(done);
    for (size_t k = 0; k < pairs.size(); ++k) EXPECT_EQ(in[k], out[k]) << "pair " << k;
  };
  add(12);
  ASSERT_NO_FATAL_FAILURE(transfer_all(100));  // scanning
  add(10);                                     // 22 > 16: scheduled from here
  ASSERT_NO_FATAL_FAILURE(transfer_all(200));
  for (size_t k = 0; k < 10; ++k) {
    net.ep[0]->release(pairs.back().first->id());
    net.ep[1]->release(pairs.back().second->id());
    pairs.pop_back();
  }
  ASSERT_NO_FATAL_FAILURE(transfer_all(300));  // 12 again: scanning
}

}  // namespace
}  // namespace megascale::engine::testing
