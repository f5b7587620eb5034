// How a process of a multi-rank job (megascale-train, megascale coll) learns its place in the job, and
// how `--nproc N` starts N of them on one host.
//
// A rank reads the variables the launcher set (launch_env): torchrun's RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; Open MPI's OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,
// LOCAL_SIZE}; Slurm's SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and SLURM_NTASKS_PER_NODE (or the first
// count of SLURM_TASKS_PER_NODE), first found first. NCCL's bootstrap root is NCCL_COMM_ID when set,
// else MASTER_ADDR:MASTER_PORT (nccl_comm_id): with it set in every rank, each calls ncclGetUniqueId and
// rank 0's ncclCommInitRank listens there, so no other channel carries the id.
//
//   Result<LaunchEnv> env = launch_env(getenv_lookup());
//   DevicePlan dev = plan_device(*env, gpu_count);  // shared GPU: a distinct NCCL_HOSTID per rank
//
// run_local_ranks forks the ranks of one host, each with torchrun's variables set, waits for them, and
// when one fails stops the others (SIGTERM, then SIGKILL after a grace period): a rank that dies never
// leaves the rest blocked in a collective.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "megascale/common/env.h"
#include "megascale/common/result.h"

namespace megascale {


struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr;  // "" when the launcher gave none
  int master_port = 0;      // 0 when the launcher gave none
  std::string source;       // "torchrun", "Open MPI", "Slurm", or "single process" (no variables set)
};

// Reads the first launcher's variables found. Refused, naming the variable and its value: a value that
// is not a whole number, rank outside [0, world_size), local_rank outside [0, local_world_size), a port
// outside [1, 65535], and, with world_size > 1, no bootstrap address (neither NCCL_COMM_ID nor both
// MASTER_ADDR and MASTER_PORT).
Result<LaunchEnv> launch_env(const EnvLookup& env);

// NCCL's bootstrap root as NCCL_COMM_ID takes it: the variable's own value when set, else
// "MASTER_ADDR:MASTER_PORT" ("[addr]:port" for an IPv6 address); "" for a single process.
std::string nccl_comm_id(const LaunchEnv& launch, const EnvLookup& env);

struct DevicePlan {
  int device = 0;
  // More local ranks than GPUs: ranks share GPUs (MPS makes them run at once) and each needs its own
  // NCCL_HOSTID so NCCL sees separate hosts and moves every byte through the net; "" otherwise.
  std::string nccl_hostid;
};
// device = local_rank % gpu_count. Refused when gpu_count < 1.
Result<DevicePlan> plan_device(const LaunchEnv& launch, int gpu_count, const std::string& hostname);

struct LocalLaunch {
  int nproc = 1;
  std::vector<std::string> argv;  // the rank's program and arguments; argv[0] is the path run
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: a free TCP port on master_addr, picked here
  std::chrono::milliseconds grace{5000};  // SIGTERM to SIGKILL when stopping the others
};

struct RankExit {
  int rank = 0;
  int exit_code = 0;        // when it exited
  int signal = 0;           // when a signal ended it
  bool stopped_by_us = false;  // ended by run_local_ranks after another rank failed
  bool was_stopped = false;    // it was stopped (SIGSTOP, a debugger) when another rank failed: most
                               // likely the rank the others were waiting for
};

// "rank 1 exited with status 3", "rank 0 was killed by signal 15 (Terminated) after another rank
// failed", and for a rank that was stopped then "...; it was stopped (SIGSTOP or a debugger) when
// another rank failed, so the others were likely waiting for it".
std::string describe(const RankExit& exit);

// Forks nproc ranks with torchrun's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (= nproc),
// MASTER_ADDR and MASTER_PORT set, and waits for all. Every rank's exit comes back,
// in rank order; the first failure (a non-zero status or a signal) stops the others. Ranks never outlive
// the launcher: SIGTERM, SIGINT or SIGHUP to it stops them (SIGTERM, then SIGKILL after the grace) and
// returns an error naming the signal, and each rank gets SIGTERM if the launcher dies anyway
// (PR_SET_PDEATHSIG). Refused: nproc < 1, an empty argv, a port that cannot be had, a fork that fails
// (the ranks started are stopped).
Result<std::vector<RankExit>> run_local_ranks(const LocalLaunch& launch);

// `--nproc N` for a program that is its own rank: forks N ranks of this very program
// (/proc/self/exe) with `argv` (argv[0] is replaced by the program's path) through run_local_ranks,
// and prints each failed rank's exit to standard error after `who` ("megascale-train: rank 1 exited
// with status 3"). Returns 0 when every rank exited 0, 1 when one failed, 2 when the ranks could not
// be started (the reason printed after "--nproc: ").
int run_self_ranks(int nproc, std::vector<std::string> argv, const std::string& who);

// Ends this process with `code` after `after` unless it has ended by then, printing `why` first: the
// bound on a clean-up that can block for ever. ncclCommAbort joins the communicator's threads, and one
// of them may be stuck on the very peer the abort is meant to give up on.
void exit_after(std::chrono::milliseconds after, int code, std::string why);

}  // namespace megascale
