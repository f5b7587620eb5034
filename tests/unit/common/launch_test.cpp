// The launcher's variables (torchrun, Open MPI, Slurm), NCCL's bootstrap address, the device plan when
// ranks share GPUs, and the one-host fork launcher with real child processes (/bin/sh).
#include "megascale/common/launch.h"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>
#include <map>
#include <sstream>

#include "../../support/temp_dir.h"

namespace megascale {
namespace {

EnvLookup lookup(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(LaunchEnv, NoVariablesIsOneProcess) {
  auto e = launch_env(lookup({}));
  ASSERT_TRUE(e) << e.error().message;
  EXPECT_EQ(e->source, "single process");
  EXPECT_EQ(e->world_size, 1);
  EXPECT_EQ(nccl_comm_id(*e, lookup({})), "");
}

TEST(LaunchEnv, ReadsTorchrunOpenMpiAndSlurm) {
  auto t = launch_env(lookup({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"},
                              {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}}));
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_EQ(t->source, "torchrun");
  EXPECT_EQ(t->rank, 5);
  EXPECT_EQ(t->world_size, 8);
  EXPECT_EQ(t->local_rank, 1);
  EXPECT_EQ(t->local_world_size, 4);
  EXPECT_EQ(nccl_comm_id(*t, lookup({})), "10.0.0.1:29500");
  EXPECT_EQ(nccl_comm_id(*t, lookup({{"NCCL_COMM_ID", "host7:1234"}})), "host7:1234");

  auto m = launch_env(lookup({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                              {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                              {"NCCL_COMM_ID", "10.0.0.2:5000"}}));
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->source, "Open MPI");
  EXPECT_EQ(m->rank, 3);
  EXPECT_EQ(m->local_world_size, 2);

  auto s = launch_env(lookup({{"SLURM_PROCID", "6"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "2"},
                              {"SLURM_TASKS_PER_NODE", "4(x2)"}, {"MASTER_ADDR", "fd00::1"}, {"MASTER_PORT", "7"}}));
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->source, "Slurm");
  EXPECT_EQ(s->local_rank, 2);
  EXPECT_EQ(s->local_world_size, 4);
  EXPECT_EQ(nccl_comm_id(*s, lookup({})), "[fd00::1]:7");

  // torchrun inside an srun allocation: torchrun's own variables win.
  auto both = launch_env(lookup({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}}));
  ASSERT_TRUE(both);
  EXPECT_EQ(both->source, "torchrun");
}

TEST(LaunchEnv, RefusesNamingTheVariable) {
  auto msg = [](const std::map<std::string, std::string>& vars) {
    auto e = launch_env(lookup(vars));
    return e ? std::string("accepted") : e.error().message;
  };
  EXPECT_EQ(msg({{"RANK", "1"}}), "RANK is set but WORLD_SIZE is not: a torchrun launch sets both");
  EXPECT_EQ(msg({{"RANK", "one"}, {"WORLD_SIZE", "2"}}), "RANK=one: not a whole number");
  EXPECT_EQ(msg({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}}),
            "RANK=2: must be in [0, WORLD_SIZE=2)");
  EXPECT_EQ(msg({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"},
                 {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}}),
            "LOCAL_RANK=2: must be in [0, LOCAL_WORLD_SIZE=2)");
  EXPECT_EQ(msg({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "70000"}}),
            "MASTER_PORT=70000: must be in [1, 65535]");
  EXPECT_EQ(msg({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_TASKS_PER_NODE", "x"}}),
            "SLURM_TASKS_PER_NODE=x: expected a count like 4 or 4(x2)");
  EXPECT_EQ(msg({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}}),
            "2 ranks (Open MPI) but no bootstrap address: set MASTER_ADDR and MASTER_PORT (the host and a free "
            "port of rank 0), or NCCL_COMM_ID");
}

TEST(DevicePlan, RanksShareGpusWithTheirOwnHostIds) {
  LaunchEnv e;
  e.rank = 6;
  e.world_size = 8;
  e.local_rank = 2;
  e.local_world_size = 4;
  auto own = plan_device(e, 4, "node1");
  ASSERT_TRUE(own);
  EXPECT_EQ(own->device, 2);
  EXPECT_EQ(own->nccl_hostid, "");
  auto shared = plan_device(e, 1, "node1");
  ASSERT_TRUE(shared);
  EXPECT_EQ(shared->device, 0);
  EXPECT_EQ(shared->nccl_hostid, "node1-rank6");
  EXPECT_EQ(plan_device(e, 0, "node1").error().message, "rank 6: no CUDA device visible");
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(RunLocalRanks, EachRankSeesTorchrunsVariables) {
  test::TempDir dir;
  LocalLaunch l;
  l.nproc = 3;
  l.argv = {"/bin/sh", "-c",
            "echo \"$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT\" > " + dir.str() +
                "/rank$RANK"};
  auto exits = run_local_ranks(l);
  ASSERT_TRUE(exits) << exits.error().message;
  ASSERT_EQ(exits->size(), 3u);
  std::string port;
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ((*exits)[r].exit_code, 0);
    EXPECT_EQ((*exits)[r].signal, 0);
    std::istringstream in(slurp(dir.file("rank" + std::to_string(r))));
    int rank = -1, world = 0, local = -1, local_world = 0;
    std::string addr, p;
    in >> rank >> world >> local >> local_world >> addr >> p;
    EXPECT_EQ(rank, r);
    EXPECT_EQ(world, 3);
    EXPECT_EQ(local, r);
    EXPECT_EQ(local_world, 3);
    EXPECT_EQ(addr, "127.0.0.1");
    EXPECT_GT(std::stoi(p), 0);
    if (r > 0) {
      EXPECT_EQ(p, port);  // one port for all
    }
    port = p;
  }
}

// Rank 1 fails at once; rank 0 would sleep for a minute: it is stopped, not waited for.
TEST(RunLocalRanks, AFailedRankStopsTheOthers) {
  LocalLaunch l;
  l.nproc = 2;
  l.argv = {"/bin/sh", "-c", "if [ \"$RANK\" = 1 ]; then exit 3; fi; exec sleep 60"};
  const auto start = std::chrono::steady_clock::now();
  auto exits = run_local_ranks(l);
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(exits) << exits.error().message;
  EXPECT_LT(took, std::chrono::seconds(30));  // far below the sleep, with room for a loaded machine
  EXPECT_EQ(describe((*exits)[1]), "rank 1 exited with status 3");
  EXPECT_EQ((*exits)[0].signal, SIGTERM);
  EXPECT_TRUE((*exits)[0].stopped_by_us);
  EXPECT_EQ(describe((*exits)[0]), "rank 0 was killed by signal 15 (Terminated) after another rank failed");
}

// A process has ended within `within`: its pid is gone, or it is a zombie (an orphan's adopter, such as
// a container's init, may not reap it).
bool gone_within(pid_t pid, std::chrono::seconds within) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < deadline) {
    if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string pid_field, comm, state;
    if (stat >> pid_field >> comm >> state && state == "Z") return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// Starts a launcher in a child process whose two ranks write their pids and sleep; returns the
// launcher's pid and the ranks' once both have written them.
struct Launched {
  pid_t launcher = 0;
  std::vector<pid_t> ranks;
};
Launched launch_sleepers(const std::string& dir) {
  Launched out;
  out.launcher = ::fork();
  if (out.launcher == 0) {
    LocalLaunch l;
    l.nproc = 2;
    l.grace = std::chrono::milliseconds(500);
    l.argv = {"/bin/sh", "-c", "echo $$ > " + dir + "/pid$RANK.tmp && mv " + dir + "/pid$RANK.tmp " + dir +
                                   "/pid$RANK && exec sleep 60"};
    auto exits = run_local_ranks(l);
    ::_exit(exits ? 0 : 3);  // 3: stopped by a signal, as it should be
  }
  for (int r = 0; r < 2; ++r) {
    const std::string path = dir + "/pid" + std::to_string(r);
    for (int i = 0; i < 1500 && !std::filesystem::exists(path); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::ifstream in(path);
    pid_t pid = 0;
    in >> pid;
    out.ranks.push_back(pid);
  }
  return out;
}

// SIGTERM to the launcher (what timeout(1) and a job scheduler send) stops its ranks, and it says so.
TEST(RunLocalRanks, TermToTheLauncherStopsItsRanks) {
  test::TempDir dir;
  const Launched l = launch_sleepers(dir.str());
  ASSERT_GT(l.ranks[0], 0);
  ASSERT_GT(l.ranks[1], 0);
  ASSERT_EQ(::kill(l.launcher, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(l.launcher, &status, 0), l.launcher);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << "status " << status;
  for (pid_t pid : l.ranks) EXPECT_TRUE(gone_within(pid, std::chrono::seconds(20))) << "rank pid " << pid;
}

// Even a launcher killed outright (SIGKILL: no handler runs) takes its ranks with it.
TEST(RunLocalRanks, RanksDieWithAKilledLauncher) {
  test::TempDir dir;
  const Launched l = launch_sleepers(dir.str());
  ASSERT_GT(l.ranks[0], 0);
  ASSERT_GT(l.ranks[1], 0);
  ASSERT_EQ(::kill(l.launcher, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(l.launcher, &status, 0), l.launcher);
  for (pid_t pid : l.ranks) EXPECT_TRUE(gone_within(pid, std::chrono::seconds(20))) << "rank pid " << pid;
}

// A rank that ignores SIGTERM is killed after the grace period.
TEST(RunLocalRanks, ARankIgnoringTermIsKilled) {
  test::TempDir dir;
  LocalLaunch l;
  l.nproc = 2;
  l.grace = std::chrono::milliseconds(200);
  // Rank 0 dies once rank 1 ignores SIGTERM (the marker file), so the TERM cannot come first.
  const std::string ready = dir.file("ready");
  l.argv = {"/bin/sh", "-c",
            "if [ \"$RANK\" = 0 ]; then while [ ! -e " + ready + " ]; do sleep 0.05; done; kill -9 $$; fi; "
            "trap '' TERM; touch " + ready + "; while :; do sleep 1; done"};
  auto exits = run_local_ranks(l);
  ASSERT_TRUE(exits) << exits.error().message;
  EXPECT_EQ((*exits)[0].signal, SIGKILL);
  EXPECT_FALSE((*exits)[0].stopped_by_us);
  EXPECT_EQ((*exits)[1].signal, SIGKILL);
  EXPECT_TRUE((*exits)[1].stopped_by_us);
}

// A stopped rank (SIGSTOP, a debugger) is resumed to act on its SIGTERM: the job ends long before the
// grace period that would otherwise end in SIGKILL.
TEST(RunLocalRanks, AStoppedRankIsResumedToTakeItsTerm) {
  test::TempDir dir;
  LocalLaunch l;
  l.nproc = 2;
  l.grace = std::chrono::seconds(60);
  const std::string pid_file = dir.file("pid1");
  // Rank 1 stops itself; rank 0 fails once it sees rank 1 stopped (state T in /proc).
  l.argv = {"/bin/sh", "-c",
            "if [ \"$RANK\" = 1 ]; then echo $$ > " + pid_file + ".tmp && mv " + pid_file + ".tmp " + pid_file +
                " && kill -STOP $$; exec sleep 60; fi; "
                "while [ ! -e " + pid_file + " ]; do sleep 0.05; done; "
                "while ! grep -q '^State:[[:space:]]*T' /proc/$(cat " + pid_file + ")/status; do sleep 0.05; done; "
                "exit 3"};
  const auto start = std::chrono::steady_clock::now();
  auto exits = run_local_ranks(l);
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(exits) << exits.error().message;
  EXPECT_LT(took, std::chrono::seconds(40));  // the grace is 60 s
  EXPECT_EQ((*exits)[0].exit_code, 3);
  EXPECT_EQ((*exits)[1].signal, SIGTERM);
  EXPECT_TRUE((*exits)[1].stopped_by_us);
  EXPECT_TRUE((*exits)[1].was_stopped);
  EXPECT_FALSE((*exits)[0].was_stopped);
  EXPECT_EQ(describe((*exits)[1]),
            "rank 1 was killed by signal 15 (Terminated) after another rank failed; it was stopped (SIGSTOP or "
            "a debugger) when another rank failed, so the others were likely waiting for it");
}

// exit_after ends a process that is stuck, with its code and its message.
TEST(ExitAfter, EndsAStuckProcessWithItsCode) {
  EXPECT_EXIT(
      {
        exit_after(std::chrono::milliseconds(100), 7, "gave up waiting");
        std::this_thread::sleep_for(std::chrono::seconds(60));
      },
      ::testing::ExitedWithCode(7), "gave up waiting");
}

TEST(RunLocalRanks, RefusesBadArguments) {
  LocalLaunch l;
  l.nproc = 0;
  l.argv = {"/bin/true"};
  EXPECT_EQ(run_local_ranks(l).error().message, "--nproc 0: must be >= 1");
  l.nproc = 1;
  l.argv.clear();
  EXPECT_FALSE(run_local_ranks(l));
  l.argv = {"/bin/true"};
  l.master_addr = "not-an-address";
  EXPECT_EQ(run_local_ranks(l).error().message, "master address 'not-an-address': not an IPv4 address");
  l.master_addr = "127.0.0.1";
  l.argv = {"/nonexistent/program"};
  auto exits = run_local_ranks(l);
  ASSERT_TRUE(exits);
  EXPECT_EQ((*exits)[0].exit_code, 127);
}

// run_self_ranks forks this very test program: its ranks run this test again, where the variable below
// makes each exit 3 at once; the launcher reports them failed (1). Ranks running no test exit 0 (0).
TEST(RunSelfRanks, ForksThisProgramAndReportsItsRanksExits) {
  if (std::getenv("MEGASCALE_LAUNCH_TEST_RANK") != nullptr) std::_Exit(3);
  ::setenv("MEGASCALE_LAUNCH_TEST_RANK", "1", 1);
  testing::internal::CaptureStderr();
  const int failed =
      run_self_ranks(2, {"", "--gtest_filter=RunSelfRanks.ForksThisProgramAndReportsItsRanksExits"}, "self");
  const std::string err = testing::internal::GetCapturedStderr();
  const int fine = run_self_ranks(2, {"", "--gtest_filter=NoSuchTest.Anywhere"}, "self");
  ::unsetenv("MEGASCALE_LAUNCH_TEST_RANK");
  EXPECT_EQ(failed, 1);
  // Whichever rank the launcher saw exit first failed the job; the other either exited 3 too or was
  // stopped by the launcher before it could (a loaded host decides which).
  EXPECT_TRUE(err.find("self: rank 0 exited with status 3") != std::string::npos ||
              err.find("self: rank 1 exited with status 3") != std::string::npos)
      << err;
  EXPECT_NE(err.find("self: rank 0 "), std::string::npos) << err;
  EXPECT_NE(err.find("self: rank 1 "), std::string::npos) << err;
  EXPECT_EQ(fine, 0);
  EXPECT_EQ(run_self_ranks(0, {""}, "self"), 2) << "--nproc 0 is refused";
}

}  // namespace
}  // namespace megascale
