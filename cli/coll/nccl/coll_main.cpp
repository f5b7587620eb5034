// megascale-coll: collective benchmarks over NCCL with nccl-tests' flags, table and JSON (cli/coll/),
// one process per rank: forked here with --nproc N (no MPI; ranks may share GPUs: start MPS, each rank
// gets its own NCCL_HOSTID), or started by mpirun, srun or a torchrun-style launcher (common/launch.h).
//
//   megascale-coll all_reduce -b 8 -e 128M -f 2 --nproc 8
//   NCCL_NET=MegaScale NCCL_NET_PLUGIN=libnccl-net-megascale.so megascale-coll all_gather -b 1M -e 1G -f 4
//
// Timing follows nccl-tests: after a barrier, the host clock around `iters` launches of `agg_iters`
// operations and the stream's completion, per operation; each rank's own time is kept (the straggler,
// --json-lines) and the table's is their mean, or rank 0's, min or max with -a. The data check fills
// every rank's send buffer with data.h's pattern, runs the operation once more and compares every
// element of the receive buffer on the host. Over the megascale plugin, each row also gets what the
// transport saw (transport.h): the plugin's counters read before and after the row on every rank.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <fmt/format.h>
#include <link.h>
#include <nccl.h>
#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "megascale/coll/analysis.h"
#include "megascale/coll/busbw_plot.h"
#include "megascale/coll/coll.h"
#include "megascale/coll/compare.h"
#include "megascale/coll/data.h"
#include "megascale/coll/options.h"
#include "megascale/coll/report.h"
#include "megascale/coll/table.h"
#include "megascale/coll/transport.h"
#include "megascale/common/env.h"
#include "megascale/common/launch.h"
#if MEGASCALE_COLL_HAVE_TOPOLOGY
#include "megascale/topology/host.h"
#include "megascale/topology/rails.h"
#endif

namespace megascale::coll {
namespace {

[[noreturn]] void die(int rank, const std::string& what) {
  fmt::print(stderr, "megascale-coll: rank {}: {}\n", rank, what);
  std::exit(2);
}

ncclDataType_t nccl_type(DataType t) {
  switch (t) {
    case DataType::kInt8:
      return ncclInt8;
    case DataType::kUint8:
      return ncclUint8;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kUint32:
      return ncclUint32;
    case DataType::kInt64:
      return ncclInt64;
    case DataType::kUint64:
      return ncclUint64;
    case DataType::kHalf:
      return ncclFloat16;
    case DataType::kFloat:
      return ncclFloat32;
    case DataType::kDouble:
      return ncclFloat64;
    case DataType::kBfloat16:
      return ncclBfloat16;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(RedOp op) {
  switch (op) {
    case RedOp::kSum:
      return ncclSum;
    case RedOp::kProd:
      return ncclProd;
    case RedOp::kMax:
      return ncclMax;
    case RedOp::kMin:
      return ncclMin;
    case RedOp::kAvg:
      return ncclAvg;
  }
  return ncclSum;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Rank {
  int rank = 0, nranks = 1;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int timeout_s = 0;
  void check(ncclResult_t r, const char* call) const {
    if (r != ncclSuccess && r != ncclInProgress) {
      die(rank, fmt::format("{}: {} ({})", call, ncclGetErrorString(r), ncclGetLastError(comm)));
    }
  }
  void check(cudaError_t e, const char* call) const {
    if (e != cudaSuccess) die(rank, fmt::format("{}: {}", call, cudaGetErrorString(e)));
  }
  // Waits for the stream; with -T, an operation past the deadline (or a communicator's asynchronous
  // error) aborts the communicator and ends this rank with an error naming it and what it waited for.
  void wait(const std::string& what) const {
    const double start = now_s();
    for (;;) {
      const cudaError_t q = cudaStreamQuery(stream);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) check(q, "cudaStreamQuery");
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm, &async);
      const bool late = timeout_s > 0 && now_s() - start > timeout_s;
      if ((async != ncclSuccess && async != ncclInProgress) || late) {
        const std::string why =
            late ? fmt::format("did not finish within -T {} s: a rank stopped or vanished", timeout_s)
                 : fmt::format("failed: {}", ncclGetErrorString(async));
        fmt::print(stderr, "megascale-coll: rank {} of {}: {} {}; aborting\n", rank, nranks, what, why);
        std::fflush(stderr);
        megascale::exit_after(
            std::chrono::seconds(10), 3,
            fmt::format("megascale-coll: rank {}: ncclCommAbort did not return within 10 s; "
                        "exiting without it",
                        rank));
        ncclCommAbort(comm);
        std::_Exit(3);
      }
      std::this_thread::yield();  // nccl-tests' wait: a sleep would add its own wake-up to every row
    }
  }
};

// The megascale plugin's counters function when NCCL has loaded the plugin and uses it (NCCL_NET unset
// or MegaScale), else null. NCCL loads plugins RTLD_LOCAL, so the loaded objects are asked one by one.
megascaleNetCounters_v1_fn plugin_counters() {
  const char* net = std::getenv("NCCL_NET");
  if (net != nullptr && ::strcasecmp(net, "MegaScale") != 0) return nullptr;
  std::vector<std::string> loaded;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        if (info->dlpi_name != nullptr && info->dlpi_name[0] != '\0') {
          static_cast<std::vector<std::string>*>(out)->emplace_back(info->dlpi_name);
        }
        return 0;
      },
      &loaded);
  for (const std::string& path : loaded) {
    void* lib = ::dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
    if (lib == nullptr) continue;
    void* fn = ::dlsym(lib, MEGASCALE_NET_COUNTERS_V1);
    ::dlclose(lib);  // NOLOAD took a reference; NCCL's keeps the library loaded
    if (fn != nullptr) return reinterpret_cast<megascaleNetCounters_v1_fn>(fn);
  }
  return nullptr;
}

megascaleNetCounters_v1_t read_counters(megascaleNetCounters_v1_fn fn) {
  megascaleNetCounters_v1_t c{};
  if (fn != nullptr) fn(&c);
  return c;
}

struct Buffers {
  char* send = nullptr;
  char* recv = nullptr;
  char* scratch = nullptr;  // a barrier's and the rank exchanges' device memory
  size_t bytes = 0;
};

// One operation of collective c on `count` (param_count) elements.
void launch(const Rank& r, Collective c, const void* send, void* recv, uint64_t count, DataType t, RedOp op,
            int root) {
  const ncclDataType_t type = nccl_type(t);
  switch (c) {
    case Collective::kAllReduce:
      return r.check(ncclAllReduce(send, recv, count, type, nccl_op(op), r.comm, r.stream), "ncclAllReduce");
    case Collective::kAllGather:
      return r.check(ncclAllGather(send, recv, count, type, r.comm, r.stream), "ncclAllGather");
    case Collective::kReduceScatter:
      return r.check(ncclReduceScatter(send, recv, count, type, nccl_op(op), r.comm, r.stream),
                     "ncclReduceScatter");
    case Collective::kBroadcast:
      return r.check(ncclBroadcast(send, recv, count, type, root, r.comm, r.stream), "ncclBroadcast");
    case Collective::kReduce:
      return r.check(ncclReduce(send, recv, count, type, nccl_op(op), root, r.comm, r.stream), "ncclReduce");
    case Collective::kAlltoAll: {
      const size_t chunk = count * type_size(t);
      r.check(ncclGroupStart(), "ncclGroupStart");
      for (int p = 0; p < r.nranks; ++p) {
        r.check(ncclSend(static_cast<const char*>(send) + p * chunk, count, type, p, r.comm, r.stream),
                "ncclSend");
        r.check(ncclRecv(static_cast<char*>(recv) + p * chunk, count, type, p, r.comm, r.stream), "ncclRecv");
      }
      return r.check(ncclGroupEnd(), "ncclGroupEnd");
    }
    case Collective::kSendRecv:
      r.check(ncclGroupStart(), "ncclGroupStart");
      r.check(ncclSend(send, count, type, (r.rank + 1) % r.nranks, r.comm, r.stream), "ncclSend");
      r.check(ncclRecv(recv, count, type, (r.rank + r.nranks - 1) % r.nranks, r.comm, r.stream), "ncclRecv");
      return r.check(ncclGroupEnd(), "ncclGroupEnd");
  }
}

void barrier(const Rank& r, const Buffers& b) {
  r.check(ncclAllReduce(b.scratch, b.scratch, 1, ncclFloat32, ncclSum, r.comm, r.stream),
          "ncclAllReduce (barrier)");
  r.wait("a barrier");
}

// Every rank's `value`, in rank order.
std::vector<double> all_values(const Rank& r, const Buffers& b, double value) {
  auto* d = reinterpret_cast<double*>(b.scratch) + 8;
  r.check(cudaMemcpyAsync(d + r.rank, &value, sizeof(double), cudaMemcpyHostToDevice, r.stream),
          "cudaMemcpyAsync");
  r.check(ncclAllGather(d + r.rank, d, 1, ncclFloat64, r.comm, r.stream), "ncclAllGather (times)");
  std::vector<double> out(static_cast<size_t>(r.nranks));
  r.check(cudaMemcpyAsync(out.data(), d, out.size() * sizeof(double), cudaMemcpyDeviceToHost, r.stream),
          "cudaMemcpyAsync");
  r.wait("the ranks' times");
  return out;
}

// Every rank's `mine` (the same length on each), in rank order.
std::vector<std::vector<double>> all_vectors(const Rank& r, const std::vector<double>& mine) {
  const size_t n = mine.size();
  double* d = nullptr;
  r.check(cudaMalloc(&d, n * static_cast<size_t>(r.nranks) * sizeof(double)), "cudaMalloc");
  r.check(cudaMemcpyAsync(d + n * static_cast<size_t>(r.rank), mine.data(), n * sizeof(double),
                          cudaMemcpyHostToDevice, r.stream),
          "cudaMemcpyAsync");
  r.check(ncclAllGather(d + n * static_cast<size_t>(r.rank), d, n, ncclFloat64, r.comm, r.stream),
          "ncclAllGather (per-iteration times)");
  std::vector<double> flat(n * static_cast<size_t>(r.nranks));
  r.check(cudaMemcpyAsync(flat.data(), d, flat.size() * sizeof(double), cudaMemcpyDeviceToHost, r.stream),
          "cudaMemcpyAsync");
  r.wait("the ranks' per-iteration times");
  cudaFree(d);
  std::vector<std::vector<double>> out;
  for (int k = 0; k < r.nranks; ++k) {
    out.emplace_back(flat.begin() + static_cast<std::ptrdiff_t>(n * static_cast<size_t>(k)),
                     flat.begin() + static_cast<std::ptrdiff_t>(n * static_cast<size_t>(k + 1)));
  }
  return out;
}

struct Timing {
  Placement shown;
  std::vector<double> rank_us;
};

// The timed iterations of one placement: -m operations per iteration, -z 1 waiting after each; with -I
// a CUDA event before each iteration and after the last (each iteration's time in `iter_us`, per
// operation); with -G captured once in a CUDA graph that is then replayed -G times. Returns this rank's
// mean time per operation in microseconds.
double timed_iterations(const Rank& r, const Buffers& b, const CollOptions& o, Collective c, const Shape& s,
                        DataType t, RedOp op, int root, const char* send, char* result,
                        const std::string& what, std::vector<double>& iter_us) {
  std::vector<cudaEvent_t> events(o.per_iter_timing != 0 ? static_cast<size_t>(o.iters) + 1 : 0);
  for (cudaEvent_t& e : events) r.check(cudaEventCreate(&e), "cudaEventCreate");
  const bool graph = o.cuda_graph > 0;
  cudaGraph_t captured = nullptr;
  cudaGraphExec_t exec = nullptr;
  barrier(r, b);
  if (graph)
    r.check(cudaStreamBeginCapture(r.stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  double t0 = now_s();
  for (int i = 0; i < o.iters; ++i) {
    if (!events.empty())
      r.check(cudaEventRecord(events[static_cast<size_t>(i)], r.stream), "cudaEventRecord");
    if (o.agg_iters > 1) r.check(ncclGroupStart(), "ncclGroupStart");
    for (int a = 0; a < o.agg_iters; ++a) launch(r, c, send, result, s.param_count, t, op, root);
    if (o.agg_iters > 1) r.check(ncclGroupEnd(), "ncclGroupEnd");
    if (o.blocking != 0) r.wait(what);  // -z 1: each iteration (its group of -m operations) finished first
  }
  if (!events.empty()) r.check(cudaEventRecord(events.back(), r.stream), "cudaEventRecord");
  if (graph) {
    r.check(cudaStreamEndCapture(r.stream, &captured), "cudaStreamEndCapture");
    r.check(cudaGraphInstantiate(&exec, captured, 0), "cudaGraphInstantiate");
    barrier(r, b);
    t0 = now_s();
    for (int g = 0; g < o.cuda_graph; ++g) r.check(cudaGraphLaunch(exec, r.stream), "cudaGraphLaunch");
  }
  r.wait(what);
  const double ops = static_cast<double>(o.iters) * o.agg_iters * std::max(o.cuda_graph, 1);
  const double mine_us = (now_s() - t0) / ops * 1e6;
  iter_us.clear();
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    float ms = 0;
    r.check(cudaEventElapsedTime(&ms, events[i], events[i + 1]), "cudaEventElapsedTime");
    iter_us.push_back(static_cast<double>(ms) * 1e3 / o.agg_iters);
  }
  for (cudaEvent_t e : events) cudaEventDestroy(e);
  if (graph) {
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(captured);
  }
  return mine_us;
}

// One placement (out of place, or in place) of one row: its time, its bandwidth, its check.
Timing run_placement(const Rank& r, const Buffers& b, const CollOptions& o, Collective c, const Shape& s,
                     DataType t, RedOp op, int root, bool in_place, const std::string& what) {
  const size_t ts = type_size(t);
  char* recv = b.recv;
  const char* send = b.send;
  if (in_place) {
    send = recv + s.send_inplace_stride * ts * static_cast<size_t>(r.rank);
  }
  char* result = in_place ? recv + s.recv_inplace_stride * ts * static_cast<size_t>(r.rank) : recv;
  std::vector<double> iter_us;
  const double mine_us = timed_iterations(r, b, o, c, s, t, op, root, send, result, what, iter_us);
  Timing out;
  out.rank_us = all_values(r, b, mine_us);
  if (o.per_iter_timing != 0) out.shown.per_iter = iter_stats(all_vectors(r, iter_us), o.per_iter_skip);
  switch (o.average) {
    case 0:
      out.shown.time_us = out.rank_us[0];
      break;
    case 2:
      out.shown.time_us = *std::min_element(out.rank_us.begin(), out.rank_us.end());
      break;
    case 3:
      out.shown.time_us = *std::max_element(out.rank_us.begin(), out.rank_us.end());
      break;
    default: {
      double sum = 0;
      for (double v : out.rank_us) sum += v;
      out.shown.time_us = sum / static_cast<double>(out.rank_us.size());
    }
  }
  const Bandwidth bw = bandwidth(c, s.param_count, ts, out.shown.time_us / 1e6, r.nranks);
  out.shown.alg_gbs = bw.alg_gbs;
  out.shown.bus_gbs = bw.bus_gbs;
  // In place, alltoall and sendrecv read and write the same buffer: their results are not checked, as
  // in nccl-tests.
  if (o.check == 0 || (in_place && (c == Collective::kAlltoAll || c == Collective::kSendRecv))) return out;
  int64_t wrong = 0;
  for (int k = 0; k < o.check; ++k) {
    const std::vector<unsigned char> data = send_data(c, t, op, r.rank, s);
    r.check(cudaMemsetAsync(recv, 0, std::max(s.send_count, s.recv_count) * ts, r.stream), "cudaMemsetAsync");
    r.check(
        cudaMemcpyAsync(const_cast<char*>(send), data.data(), data.size(), cudaMemcpyHostToDevice, r.stream),
        "cudaMemcpyAsync");
    launch(r, c, send, result, s.param_count, t, op, root);
    const std::vector<unsigned char> want = expected_data(c, t, op, root, r.rank, r.nranks, s);
    std::vector<unsigned char> got(want.size());
    if (!got.empty()) {
      r.check(cudaMemcpyAsync(got.data(), result, got.size(), cudaMemcpyDeviceToHost, r.stream),
              "cudaMemcpyAsync");
    }
    r.wait(what + " (check)");
    wrong += count_wrong(t, op, got.data(), want.data(), want.size() / ts);
  }
  const std::vector<double> all = all_values(r, b, static_cast<double>(wrong));
  double total = 0;
  for (double v : all) total += v;
  out.shown.wrong = static_cast<int64_t>(total);
  return out;
}

// --pairs: every pair of ranks in turn on a two-rank communicator split from the job's, the first
// collective at the largest size, each pair's busbw gathered to every rank; rank 0 prints the matrix,
// the slow pairs and the suspect ranks (analysis.h).
void run_pairs(const Rank& r, const Buffers& b, const CollOptions& o, const CollPlan& plan) {
  const Collective c = plan.collectives.front();
  const DataType t = plan.types.front();
  const RedOp op = plan.ops.front();
  std::vector<PairResult> pairs = all_pairs(r.nranks);
  for (PairResult& p : pairs) {
    const bool in = r.rank == p.a || r.rank == p.b;
    ncclComm_t pc = nullptr;
    r.check(ncclCommSplit(r.comm, in ? 0 : NCCL_SPLIT_NOCOLOR, r.rank, &pc, nullptr), "ncclCommSplit (pair)");
    double bus = 0;
    if (in) {
      Rank pr = r;
      pr.rank = r.rank == p.a ? 0 : 1;
      pr.nranks = 2;
      pr.comm = pc;
      const Shape s = shape_of(c, plan.sizes.back(), type_size(t), 2);
      for (int w = 0; w < o.warmup_iters; ++w) launch(pr, c, b.send, b.recv, s.param_count, t, op, 0);
      pr.wait("a pair's warm-up");
      CollOptions unchecked = o;
      unchecked.check = 0;
      unchecked.per_iter_timing = 0;
      const Timing timing = run_placement(pr, b, unchecked, c, s, t, op, 0, false,
                                          fmt::format("{} between ranks {} and {}", name(c), p.a, p.b));
      bus = timing.shown.bus_gbs;
      ncclCommDestroy(pc);
    }
    const std::vector<double> all = all_values(r, b, bus);
    p.bus_gbs = *std::max_element(all.begin(), all.end());
  }
  if (r.rank != 0) return;
  const PairFindings f = pair_outliers(pairs, r.nranks, o.pairs_threshold);
  fmt::print("# pairs: {} of {} B ({}), {} iterations, every pair of {} ranks in turn\n", name(c),
             shape_of(c, plan.sizes.back(), type_size(t), 2).bytes(type_size(t)), name(t), o.iters, r.nranks);
  fmt::print("{}", pair_matrix(pairs, r.nranks, f));
}

// This rank's line of the header: nccl-tests' "#  Rank R Group G Pid P on HOST device D [BUS] NAME", then
// the NIC its GPU's rail takes and the PCIe path between them (topology/: map_rails), and the net NCCL
// was asked for.
std::string rank_line(const Rank& r, int group, int device, const char* host) {
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, device);
  char bus[32] = {};  // for topology/ (domain:bus:device.function); the line prints nccl-tests' form
  cudaDeviceGetPCIBusId(bus, sizeof(bus), device);
  std::string nic = "NIC unknown (built without hwloc)";
#if MEGASCALE_COLL_HAVE_TOPOLOGY
  if (auto topo = topo::host::discover_host()) {
    const topo::host::RailMap rails = topo::host::map_rails(*topo);
    auto id = topo::host::normalize_bus_id(bus);
    nic = "NIC none found";
    for (const topo::host::Rail& rail : rails.rails) {
      if (!id || topo->gpus[static_cast<size_t>(rail.gpu)].pci.bus_id != *id || rail.nic < 0) continue;
      nic = fmt::format("NIC {} ({})", topo->nics[static_cast<size_t>(rail.nic)].name(),
                        topo::host::to_string(rail.path));
    }
  } else {
    nic = "NIC unknown (" + topo.error().message + ")";
  }
#endif
  const char* net = std::getenv("NCCL_NET");
  const char* plugin = std::getenv("NCCL_NET_PLUGIN");
  return fmt::format(
      "#  Rank {:2} Group {:2} Pid {:6} on {:>10} device {:2} [{:04x}:{:02x}:{:02x}] {} | {} | net {}{}",
      r.rank, group, ::getpid(), host, device, prop.pciDomainID, prop.pciBusID, prop.pciDeviceID, prop.name,
      nic, net != nullptr ? net : "(NCCL's choice)",
      plugin != nullptr ? fmt::format(" (plugin {})", plugin) : "");
}

// Every rank's header line, in rank order, on every rank.
std::vector<std::string> all_lines(const Rank& r, const std::string& mine) {
  constexpr size_t kLine = 512;
  char* d = nullptr;
  r.check(cudaMalloc(&d, kLine * static_cast<size_t>(r.nranks)), "cudaMalloc");
  std::vector<char> line(kLine, 0);
  std::copy_n(mine.data(), std::min(mine.size(), kLine - 1), line.data());
  r.check(cudaMemcpyAsync(d + kLine * static_cast<size_t>(r.rank), line.data(), kLine, cudaMemcpyHostToDevice,
                          r.stream),
          "cudaMemcpyAsync");
  r.check(ncclAllGather(d + kLine * static_cast<size_t>(r.rank), d, kLine, ncclChar, r.comm, r.stream),
          "ncclAllGather (header)");
  std::vector<char> all(kLine * static_cast<size_t>(r.nranks));
  r.check(cudaMemcpyAsync(all.data(), d, all.size(), cudaMemcpyDeviceToHost, r.stream), "cudaMemcpyAsync");
  r.wait("the header");
  cudaFree(d);
  std::vector<std::string> out;
  for (int k = 0; k < r.nranks; ++k) out.emplace_back(all.data() + kLine * static_cast<size_t>(k));
  return out;
}

int run(const CollOptions& o, const CollPlan& plan, const LaunchEnv& env) {
  Rank r;
  r.rank = env.rank;
  r.nranks = env.world_size;
  r.timeout_s = o.timeout_s;
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < 1) die(r.rank, "no CUDA device");
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  auto device = plan_device(env, gpus, host);
  if (!device) die(r.rank, device.error().message);
  if (!device->nccl_hostid.empty() && std::getenv("NCCL_HOSTID") == nullptr) {
    ::setenv("NCCL_HOSTID", device->nccl_hostid.c_str(), 1);
  }
  r.check(cudaSetDevice(device->device), "cudaSetDevice");
  if (r.nranks > 1) ::setenv("NCCL_COMM_ID", nccl_comm_id(env, getenv_lookup()).c_str(), 0);
  ncclUniqueId id;
  r.check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  r.check(ncclCommInitRank(&r.comm, r.nranks, id, r.rank), "ncclCommInitRank");
  r.check(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking), "cudaStreamCreate");
  Buffers b;
  b.bytes = std::max<size_t>(plan.sizes.back(), 64) + 4096;
  r.check(cudaMalloc(&b.send, b.bytes), "cudaMalloc");
  r.check(cudaMalloc(&b.recv, b.bytes), "cudaMalloc");
  r.check(cudaMalloc(&b.scratch, (8 + static_cast<size_t>(r.nranks)) * sizeof(double)), "cudaMalloc");
  r.check(cudaMemset(b.scratch, 0, (8 + static_cast<size_t>(r.nranks)) * sizeof(double)), "cudaMemset");
  const bool lead = r.rank == 0;
  // --split's colour is nccl-tests' Group.
  const int host_index = env.local_world_size > 0 ? env.rank / env.local_world_size : 0;
  const int color = split_color(plan.split, env.rank, env.local_rank, host_index);
  const std::vector<std::string> header = all_lines(r, rank_line(r, color, device->device, host));
  if (lead) {
    // nccl-tests' own lines, as its util.cu prints them (a sweep by factor or by bytes; no -u here).
    const bool by_factor = o.step_factor > 1;
    const Result<uint64_t> step_bytes = parse_size(o.step_bytes);  // plan_coll has checked it
    fmt::print("# megascale-coll: {} ranks ({})\n", r.nranks, env.source);
    fmt::print(
        "# nThread 1 nGpus 1 minBytes {} maxBytes {} step: {}({}) warmup iters: {} iters: {} agg iters: {} "
        "validation: {} graph: {} unalign: 0\n",
        plan.sizes.front(), plan.sizes.back(), by_factor ? o.step_factor : (step_bytes ? *step_bytes : 0),
        by_factor ? "factor" : "bytes", o.warmup_iters, o.iters, o.agg_iters, o.check, o.cuda_graph);
    if (o.per_iter_timing != 0) {
      fmt::print(
          "# Per-Iteration Report: CUDA event timing; i_* uses max over process rows{} \n",
          o.per_iter_skip > 0 ? fmt::format("; summary skips first {} iterations", o.per_iter_skip) : "");
    }
    fmt::print("#\n# Using devices\n");
    for (const std::string& l : header) fmt::print("{}\n", l);
    std::fflush(stdout);
  }
  // The transport's counters per row, when every rank's NCCL runs over the plugin.
  megascaleNetCounters_v1_fn counters = plugin_counters();
  {
    const std::vector<double> found = all_values(r, b, counters != nullptr ? 1.0 : 0.0);
    if (std::find(found.begin(), found.end(), 0.0) != found.end()) counters = nullptr;
  }
  if (o.pairs) {
    if (r.nranks < 2) die(r.rank, "--pairs needs at least two ranks");
    run_pairs(r, b, o, plan);
    ncclCommDestroy(r.comm);
    return 0;
  }
  // --split: the groups run at once, each on its own communicator; the table is group 0's (world rank
  // 0 leads it), and a line after each row gives the spread of every group's busbw.
  const Rank world = r;
  const bool split = plan.split.kind != Split::Kind::kNone;
  if (split) {
    r.check(ncclCommSplit(world.comm, color, env.rank, &r.comm, nullptr), "ncclCommSplit (--split)");
    r.check(ncclCommCount(r.comm, &r.nranks), "ncclCommCount");
    r.check(ncclCommUserRank(r.comm, &r.rank), "ncclCommUserRank");
    const std::vector<double> colors = all_values(world, b, color);
    if (lead) {
      fmt::print("# --split {}: groups by colour:", o.split);
      for (size_t k = 0; k < colors.size(); ++k) fmt::print(" {}:{}", k, static_cast<int>(colors[k]));
      fmt::print(" (rank:colour); the table is group {}'s\n", static_cast<int>(colors[0]));
    }
  }
  std::unique_ptr<std::ofstream> lines;
  if (lead && !o.json_lines_path.empty() && o.json_lines_path != "-") {
    lines = std::make_unique<std::ofstream>(o.json_lines_path, std::ios::trunc);
  }
  nlohmann::json results = nlohmann::json::array();
  std::vector<nlohmann::json> plotted;  // --plot: every row's JSON line
  int failed = 0;
  std::optional<Straggler> worst;
  std::string worst_row;
  for (Collective c : plan.collectives) {
    Summary summary;
    double bus_sum = 0;
    int bus_count = 0;
    if (lead) {
      fmt::print("# megascale coll {}: {} ranks ({})\n", name(c), r.nranks, env.source);
      fmt::print("{}", table_header(false, o.per_iter_timing != 0));
    }
    const std::vector<RedOp> ops = has_op(c) ? plan.ops : std::vector<RedOp>{RedOp::kSum};
    std::vector<int> roots = plan.roots;
    if (plan.all_roots) {
      roots.clear();
      for (int k = 0; k < r.nranks; ++k) roots.push_back(k);
    }
    if (!has_root(c)) roots = {-1};
    for (int cycle = 0; o.run_cycles == 0 || cycle < o.run_cycles; ++cycle) {
      for (DataType t : plan.types) {
        for (RedOp op : ops) {
          for (int root : roots) {
            if (root >= r.nranks) die(r.rank, fmt::format("-r {}: the job has {} ranks", root, r.nranks));
            // Warm-up at the largest and smallest sizes.
            for (uint64_t size : {plan.sizes.back(), plan.sizes.front()}) {
              const Shape s = shape_of(c, size, type_size(t), r.nranks);
              for (int w = 0; w < o.warmup_iters; ++w)
                launch(r, c, b.send, b.recv, s.param_count, t, op, std::max(root, 0));
              r.wait("the warm-up");
            }
            for (uint64_t size : plan.sizes) {
              const Shape s = shape_of(c, size, type_size(t), r.nranks);
              const std::string what = fmt::format("{} of {} B", name(c), s.bytes(type_size(t)));
              const int at = std::max(root, 0);
              const megascaleNetCounters_v1_t before = read_counters(counters);
              const Timing oop = run_placement(r, b, o, c, s, t, op, at, false, what);
              const Timing ip = run_placement(r, b, o, c, s, t, op, at, true, what);
              std::optional<TransportRow> transport;
              if (counters != nullptr) {
                const TransportDelta mine = transport_delta(before, read_counters(counters));
                transport = transport_row(all_vectors(r, mine.values()));
              }
              Row row{.bytes = s.bytes(type_size(t)),
                      .count = s.param_count,
                      .type = t,
                      .op = has_op(c) ? std::optional<RedOp>(op) : std::nullopt,
                      .root = root,
                      .out_of_place = oop.shown,
                      .in_place = ip.shown};
              for (const Placement& p : {row.out_of_place, row.in_place}) {
                bus_sum += p.bus_gbs;
                ++bus_count;
                if (p.wrong && *p.wrong > 0) ++summary.failed_checks;
              }
              std::vector<double> group_bus;
              if (split) group_bus = all_values(world, b, r.rank == 0 ? oop.shown.bus_gbs : -1.0);
              if (!lead) continue;
              fmt::print("{}", table_row(row));
              if (transport) fmt::print("{}", transport_line(*transport));
              if (split) {
                std::erase_if(group_bus, [](double v) { return v < 0; });
                const auto [lo, hi] = std::minmax_element(group_bus.begin(), group_bus.end());
                fmt::print("#   groups: {} at once, out-of-place busbw {:.2f} .. {:.2f} GB/s\n",
                           group_bus.size(), *lo, *hi);
              }
              std::fflush(stdout);
              results.push_back(result_json(row, std::string(name(c)), o.iters));
              RowExtras x{.collective = c,
                          .nranks = r.nranks,
                          .net = "",
                          .rank_time_us = oop.rank_us,
                          .transport = transport ? transport_json(*transport) : nlohmann::json(nullptr)};
              if (const char* net = std::getenv("NCCL_NET")) x.net = net;
              const nlohmann::json line = json_line(row, x);
              if (o.json_lines_path == "-") fmt::print("{}\n", line.dump());
              if (lines) *lines << line.dump() << "\n";
              if (!o.plot_path.empty()) plotted.push_back(line);
              if (const std::optional<Straggler> st = straggler(oop.rank_us);
                  st && (!worst || st->ratio > worst->ratio)) {
                worst = st;
                worst_row = what;
              }
            }
          }
        }
      }
    }
    summary.average_bus_gbs = bus_count > 0 ? bus_sum / bus_count : 0;
    if (const char* min = std::getenv("NCCL_TESTS_MIN_BW")) summary.minimum_bus_gbs = std::atof(min);
    if (summary.failed_checks > 0 || !summary.bandwidth_ok()) ++failed;
    if (lead) fmt::print("{}", table_footer(summary, std::string(name(c))));
  }
  if (lead && worst) fmt::print("# {} ({})\n", describe(*worst), worst_row);
  if (lead && !o.plot_path.empty()) {
    const char* net = std::getenv("NCCL_NET");
    const cli::PlotSpec spec =
        busbw_plot(plotted, o.plot_path,
                   fmt::format("busbw, {} ranks, {}", r.nranks, net != nullptr ? net : "NCCL's net"));
    if (Status st = cli::render_png(spec); !st) {
      fmt::print(stderr, "megascale-coll: --plot: {}\n", st.error().message);
      ++failed;
    } else {
      fmt::print("# plot: {}\n", o.plot_path);
    }
  }
  if (lead && !o.json_path.empty()) {
    nlohmann::json doc = {
        {"version", 1}, {"program", "megascale-coll"}, {"ranks", r.nranks}, {"results", results}};
    std::ofstream(o.json_path) << doc.dump(2) << "\n";
  }
  if (split) ncclCommDestroy(r.comm);
  cudaFree(b.send);
  cudaFree(b.recv);
  cudaFree(b.scratch);
  ncclCommDestroy(world.comm);
  return failed == 0 ? 0 : 1;
}

// Runs the job under each setting in turn, `rounds` times, and prints both settings' rows side by side.
int compare_settings(const CollOptions& o, const std::vector<std::string>& argv) {
  std::vector<Setting> settings;
  for (const std::string& text : o.compare) {
    auto s = parse_setting(text);
    if (!s) {
      fmt::print(stderr, "megascale-coll: {}\n", s.error().message);
      return 2;
    }
    settings.push_back(*s);
  }
  std::error_code ec;
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / fmt::format("megascale-coll-{}", ::getpid());
  std::filesystem::create_directories(dir, ec);
  std::vector<nlohmann::json> rows[2];
  for (int round = 1; round <= o.rounds; ++round) {
    for (size_t k = 0; k < 2; ++k) {
      const std::string path = (dir / fmt::format("{}_{}.jsonl", k, round)).string();
      std::vector<std::pair<std::string, std::optional<std::string>>> saved;
      for (const auto& [var, value] : settings[k]) {
        const char* old = std::getenv(var.c_str());
        saved.emplace_back(var, old != nullptr ? std::optional<std::string>(old) : std::nullopt);
        ::setenv(var.c_str(), value.c_str(), 1);
      }
      fmt::print("# --compare round {} of {}: {}\n", round, o.rounds, o.compare[k]);
      std::fflush(stdout);
      const int rc = run_self_ranks(std::max(o.nproc, 1), argv_for_setting(argv, path),
                                    "megascale-coll: --compare " + o.compare[k]);
      for (const auto& [var, old] : saved) {
        if (old) {
          ::setenv(var.c_str(), old->c_str(), 1);
        } else {
          ::unsetenv(var.c_str());
        }
      }
      if (rc != 0) return rc;
      std::ifstream in(path);
      for (std::string line; std::getline(in, line);) {
        nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
        if (!j.is_discarded()) rows[k].push_back(std::move(j));
      }
    }
  }
  std::filesystem::remove_all(dir, ec);
  fmt::print("{}", compare_table(o.compare[0], rows[0], o.compare[1], rows[1]));
  return 0;
}

}  // namespace
}  // namespace megascale::coll

int main(int argc, char** argv) {
  using namespace megascale;
  using namespace megascale::coll;
  CLI::App app{"megascale-coll: collective benchmarks over NCCL with nccl-tests' flags, table and JSON"};
  CollOptions o;
  add_coll_options(app, o);
  CLI11_PARSE(app, argc, argv);
  auto plan = plan_coll(o);
  if (!plan) {
    fmt::print(stderr, "megascale-coll: {}\n", plan.error().message);
    return 2;
  }
  auto env = launch_env(getenv_lookup());
  if (!env) {
    fmt::print(stderr, "megascale-coll: {}\n", env.error().message);
    return 2;
  }
  if (!o.compare.empty()) {
    if (env->source != "single process") {
      fmt::print(stderr, "megascale-coll: --compare starts its own jobs: give --nproc, not a launcher ({})\n",
                 env->source);
      return 2;
    }
    return compare_settings(o, std::vector<std::string>(argv, argv + argc));
  }
  if (o.nproc > 1 && env->source == "single process") {
    return run_self_ranks(o.nproc, std::vector<std::string>(argv, argv + argc), "megascale-coll");
  }
  return run(o, *plan, *env);
}
