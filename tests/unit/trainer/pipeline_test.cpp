// Pipeline schedules as specifications: every pass once, each micro-batch's forward before its
// backward, the in-flight bound, Megatron-Core's interleaved order, and the bubble of Narayanan et al.
// (SC '21 §2.2): (pp - 1) / m for 1F1B, (pp - 1) / (vpp * m) interleaved, measured by replaying all ranks.
#include "megascale/trainer/pipeline.h"

#include <gtest/gtest.h>

#include <string>

namespace megascale::trainer {
namespace {

std::string joined(const std::vector<Pass>& passes) {
  std::string s;
  for (const Pass& p : passes) s += (s.empty() ? "" : " ") + to_string(p);
  return s;
}

TEST(OneFOneB, WarmsUpByDistanceToTheLastStageThenAlternates) {
  // 4 stages, 6 micro-batches.
  EXPECT_EQ(joined(one_f_one_b(4, 0, 6)), "F0.0 F1.0 F2.0 F3.0 B0.0 F4.0 B1.0 F5.0 B2.0 B3.0 B4.0 B5.0");
  EXPECT_EQ(joined(one_f_one_b(4, 2, 6)), "F0.0 F1.0 B0.0 F2.0 B1.0 F3.0 B2.0 F4.0 B3.0 F5.0 B4.0 B5.0");
  EXPECT_EQ(joined(one_f_one_b(4, 3, 6)), "F0.0 B0.0 F1.0 B1.0 F2.0 B2.0 F3.0 B3.0 F4.0 B4.0 F5.0 B5.0");
  // Fewer micro-batches than stages: the warm-up is cut to m.
  EXPECT_EQ(joined(one_f_one_b(4, 0, 2)), "F0.0 F1.0 B0.0 B1.0");
  // One stage: forward and backward in turn (plain gradient accumulation).
  EXPECT_EQ(joined(one_f_one_b(1, 0, 3)), "F0.0 B0.0 F1.0 B1.0 F2.0 B2.0");
}

TEST(OneFOneB, HoldsAtMostStagesToGoMicroBatches) {
  for (int pp = 1; pp <= 8; ++pp) {
    for (int m = 1; m <= 20; ++m) {
      for (int s = 0; s < pp; ++s) {
        EXPECT_EQ(max_in_flight(one_f_one_b(pp, s, m)), std::min(pp - s, m)) << pp << " " << s << " " << m;
      }
    }
  }
}

TEST(InterleavedOneFOneB, FollowsMegatronCoresOrder) {
  // pp 2, vpp 2, m 4: forwards go micro-batches 0,1 through chunk 0, then 0,1 through chunk 1, then 2,3
  // through chunk 0, ...; warm-up (2 - s - 1) * 2 + (2 - 1) * 2 forwards.
  auto s0 = interleaved_one_f_one_b(2, 2, 0, 4);
  ASSERT_TRUE(s0) << s0.error().message;
  EXPECT_EQ(joined(*s0), "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0");
  auto s1 = interleaved_one_f_one_b(2, 2, 1, 4);
  ASSERT_TRUE(s1);
  EXPECT_EQ(joined(*s1), "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0");
  // m == pp: every forward first, on every rank (Megatron-Core does the same).
  auto all = interleaved_one_f_one_b(2, 2, 1, 2);
  ASSERT_TRUE(all);
  EXPECT_EQ(joined(*all), "F0.0 F1.0 F0.1 F1.1 B0.1 B1.1 B0.0 B1.0");
}

TEST(InterleavedOneFOneB, RefusesWhatMegatronCoreRefuses) {
  auto odd = interleaved_one_f_one_b(4, 2, 0, 6);
  ASSERT_FALSE(odd);
  EXPECT_EQ(odd.error().message, "interleaved 1F1B: 6 micro-batches: must be a positive multiple of pp (4)");
  EXPECT_FALSE(interleaved_one_f_one_b(1, 2, 0, 4));
  EXPECT_FALSE(interleaved_one_f_one_b(2, 1, 0, 4));
  EXPECT_FALSE(pipeline_schedule(ParallelLayout{.pp = 2}, 2, 4));
  EXPECT_FALSE(pipeline_schedule(ParallelLayout{.pp = 2}, 0, 0));
}

// Every layout the issue names and more: each schedule is complete, its forwards precede its backwards,
// the ranks never deadlock, in-flight stays within Megatron's bound (warm-up + 1), and the replayed
// bubble is the paper's.
TEST(PipelineReplay, BubbleIsThePapersForEveryShape) {
  for (int pp : {2, 3, 4, 8}) {
    for (int vpp : {1, 2, 3}) {
      for (int groups : {1, 2, 3, 4}) {
        const int m = groups * pp;
        const ParallelLayout l{.pp = pp, .vpp = vpp};
        for (PassTimes t : {PassTimes{1, 2}, PassTimes{1, 1}, PassTimes{3, 5}}) {
          auto r = replay_pipeline(l, m, t);
          ASSERT_TRUE(r) << describe(l) << " m " << m << ": " << r.error().message;
          const double paper = static_cast<double>(pp - 1) / (vpp * m);
          if (vpp == 1 || m > pp) {
            EXPECT_NEAR(r->bubble_ratio, paper, 1e-12) << describe(l) << " m " << m;
          } else {
            // m == pp interleaved runs every forward first (GPipe order): no better than the paper.
            EXPECT_GE(r->bubble_ratio, paper - 1e-12) << describe(l) << " m " << m;
          }
          for (int s = 0; s < pp; ++s) {
            const int warmup =
                vpp == 1 ? std::min(pp - s - 1, m)
                         : (m == pp ? m * vpp : std::min((pp - s - 1) * 2 + (vpp - 1) * pp, m * vpp));
            EXPECT_LE(r->in_flight[s], std::min(warmup + 1, m * vpp)) << describe(l) << " stage " << s;
          }
        }
      }
    }
  }
}

TEST(PipelineReplay, OneFOneBUsesTheFewestActivationsOfTheSameBubble) {
  // GPipe (all forwards, then all backwards) has the same bubble but holds all m micro-batches.
  const ParallelLayout l{.pp = 4};
  const int m = 8;
  std::vector<std::vector<Pass>> gpipe(4);
  for (int s = 0; s < 4; ++s) {
    for (int i = 0; i < m; ++i) gpipe[s].push_back({PassKind::kForward, i, 0});
    for (int i = 0; i < m; ++i) gpipe[s].push_back({PassKind::kBackward, i, 0});
  }
  auto g = replay_pipeline(l, m, gpipe, {1, 2});
  auto f = replay_pipeline(l, m, {1, 2});
  ASSERT_TRUE(g && f);
  EXPECT_NEAR(g->bubble_ratio, f->bubble_ratio, 1e-12);
  EXPECT_EQ(g->in_flight[0], 8);
  EXPECT_EQ(f->in_flight[0], 4);
}

TEST(PipelineReplay, NamesAMissingPassABackwardTooEarlyAndADeadlock) {
  const ParallelLayout l{.pp = 2};
  std::vector<std::vector<Pass>> s = {one_f_one_b(2, 0, 2), one_f_one_b(2, 1, 2)};
  s[1].pop_back();
  auto missing = replay_pipeline(l, 2, s, {});
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().message, "stage 1: pass B1.0 is missing");

  s = {one_f_one_b(2, 0, 2), {{PassKind::kBackward, 0, 0}, {PassKind::kForward, 0, 0}}};
  auto early = replay_pipeline(l, 1, {one_f_one_b(2, 0, 1), s[1]}, {});
  ASSERT_FALSE(early);
  EXPECT_EQ(early.error().message, "stage 1: pass B0.0 runs before its forward");

  // Stage 1 runs micro-batch 1's forward before micro-batch 0's backward, which stage 0 needs before
  // it sends micro-batch 1's forward: a cycle, though each rank's own order is valid.
  std::vector<std::vector<Pass>> cycle = {{{PassKind::kForward, 0, 0},
                                           {PassKind::kBackward, 0, 0},
                                           {PassKind::kForward, 1, 0},
                                           {PassKind::kBackward, 1, 0}},
                                          {{PassKind::kForward, 0, 0},
                                           {PassKind::kForward, 1, 0},
                                           {PassKind::kBackward, 0, 0},
                                           {PassKind::kBackward, 1, 0}}};
  auto dead = replay_pipeline(l, 2, cycle, {});
  ASSERT_FALSE(dead);
  EXPECT_EQ(dead.error().message, "the pipeline deadlocks: stage 0 at B0.0, stage 1 at F1.0");
}

}  // namespace
}  // namespace megascale::trainer

namespace megascale::trainer {
namespace {

std::string ops_of(const CoupledStep& s) {
  std::string out;
  for (const P2pOp& op : s.ops) {
    if (!out.empty()) out += ' ';
    out += to_string(op);
  }
  return out;
}

// The coupled baseline: each send held back to go in one group with the next pass's receive.
TEST(CoupledPipeline, SendsGoWithTheNextReceive) {
  const ParallelLayout l{.tp = 1, .pp = 2, .dp = 1, .vpp = 1};
  // Stage 0 of 2, 3 micro-batches: F0 F1 B0 F2 B1 B2 (one warm-up forward).
  auto first = coupled_schedule(l, 0, 3);
  ASSERT_TRUE(first) << first.error().message;
  std::vector<std::string> got;
  for (const CoupledStep& s : *first) got.push_back(ops_of(s) + " | " + (s.pass ? to_string(*s.pass) : "-"));
  EXPECT_EQ(got, (std::vector<std::string>{" | F0.0", "sendA0.0 | F1.0", "sendA1.0 recvG0.0 | B0.0",
                                           " | F2.0", "sendA2.0 recvG1.0 | B1.0", "recvG2.0 | B2.0"}));
  // Stage 1 (the last): every forward receives, every backward sends back, the last send alone.
  auto last = coupled_schedule(l, 1, 3);
  ASSERT_TRUE(last) << last.error().message;
  got.clear();
  for (const CoupledStep& s : *last) got.push_back(ops_of(s) + " | " + (s.pass ? to_string(*s.pass) : "-"));
  EXPECT_EQ(got,
            (std::vector<std::string>{"recvA0.0 | F0.0", " | B0.0", "sendG0.0 recvA1.0 | F1.0", " | B1.0",
                                      "sendG1.0 recvA2.0 | F2.0", " | B2.0", "sendG2.0 | -"}));
}

// Every 1F1B shape replays without deadlock, each exchange meeting the right micro-batch and chunk.
TEST(CoupledPipeline, OneFOneBNeverDeadlocks) {
  for (int pp = 2; pp <= 8; ++pp) {
    for (int m : {1, 2, pp - 1, pp, pp + 1, 2 * pp, 3 * pp + 1}) {
      if (m < 1) continue;
      const ParallelLayout l{.tp = 1, .pp = pp, .dp = 1, .vpp = 1};
      const Status s = check_coupled(l, m);
      EXPECT_TRUE(s) << s.error().message;
    }
  }
}

// Held-back sends are not enough for the interleaved order: the check finds the deadlock, naming every
// rank's waiting group (so `--pp-coupled` is refused with vpp > 1; Megatron-Core pairs four operations
// there).
TEST(CoupledPipeline, InterleavedSchedulesDeadlockAndTheCheckSaysWhere) {
  const Status s = check_coupled({.tp = 1, .pp = 2, .dp = 1, .vpp = 2}, 4);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message,
            "pp 2 vpp 2, 4 micro-batches: the coupled exchanges deadlock: rank 0 in {sendG0.1}; rank 1 in "
            "{sendG1.1 recvA2.0}");
  for (int pp : {2, 4}) {
    for (int vpp : {2, 3}) EXPECT_FALSE(check_coupled({.tp = 1, .pp = pp, .dp = 1, .vpp = vpp}, 2 * pp));
  }
}

}  // namespace
}  // namespace megascale::trainer
