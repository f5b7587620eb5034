// nccl_check: NCCL collectives through whatever net NCCL loads (the MegaScale plugin, Socket, IB),
// every result checked element by element on the host against an exact expected value, with
// nccl-tests-like columns (size, count, type, redop, root, time, algbw, busbw, #wrong).
//
// One process per rank (scripts/check-nccl-plugin.sh starts them); rank 0 writes the NCCL unique id to
// --id-file and the others read it, so no MPI is needed:
//
//   nccl_check --rank 0 --nranks 2 --id-file /tmp/id --gpu 0 &
//   nccl_check --rank 1 --nranks 2 --id-file /tmp/id --gpu 1
//   options: --ops allreduce,allgather,reducescatter,alltoall,broadcast,sendrecv  --types float,bfloat16
//            --min-bytes 0 --max-bytes 1G --factor 4 -n,--iters 5 --warmup 2 --csv rows.csv --no-check
//            --exact-sizes --gap-us 0 --timeout 0 (nccl_check --help describes each)
//
// Sizes run from 0 B to --max-bytes (x --factor per step, plus the maximum itself); element counts are
// odd, so that a chunk boundary never falls on a round count, unless --exact-sizes takes them from the
// sizes as nccl-tests does (a 256 MiB row is then 268435456 B, not 268435460). Inputs are integers 1..5, so
// sums over up to 51 ranks are exact in fp32 and bf16 (see nccl_check_data.h). All-to-all and the send/recv
// ring are grouped ncclSend/ncclRecv. Bus bandwidth uses nccl-tests' factors. Exit status: 0 if every element
// of every result was right, 1 if not, 2 on errors (bad arguments, a CUDA or NCCL call that failed), 3 when
// NCCL reported an asynchronous error, 4 on --timeout.
// --gap-us N leaves the stream idle for N us before each timed iteration (as a training step's compute
// would: the net goes quiet between collectives) and times each iteration on its own; the time column is
// then their mean, the gaps excluded.
//
// Waiting never hangs on a failed net: instead of cudaStreamSynchronize, every wait polls the stream and
// ncclCommGetAsyncError (as PyTorch's NCCL watchdog does). When NCCL reports an asynchronous error (a net
// plugin's test() failing, say, because a peer died), the rank prints it with ncclGetLastError, aborts the
// communicator and exits with status 3. --timeout N (default 0: none) does the same, with status 4, when
// one wait lasts N seconds with no error reported, and a watchdog thread exits with status 4 when the main
// thread has been inside one CUDA or NCCL call for N seconds (a pageable cudaMemcpy waiting for a kernel
// that waits for the net, say). Either way the rank first prints what it was doing and every thread's
// stack (thread_stacks.h): a hang says where each thread was.
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "nccl_check_data.h"
#include "thread_stacks.h"
#include "vocab.h"

namespace megascale::gpucheck {
namespace {

#define CUDA_CHECK(call)                                                                                 \
  do {                                                                                                   \
    const cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                             \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(2);                                                                                      \
    }                                                                                                    \
  } while (0)

#define NCCL_CHECK(call)                                                                                     \
  do {                                                                                                       \
    const ncclResult_t r_ = (call);                                                                          \
    if (r_ != ncclSuccess) {                                                                                 \
      std::fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__, #call, ncclGetErrorString(r_), \
                   ncclGetLastError(nullptr));                                                               \
      std::exit(2);                                                                                          \
    }                                                                                                        \
  } while (0)

struct Args {
  int rank = -1;
  int nranks = 0;
  int gpu = -1;  // default: rank % visible GPUs
  std::string id_file;
  std::vector<Op> ops = {Op::kAllReduce, Op::kAllGather, Op::kReduceScatter,
                         Op::kAlltoAll,  Op::kBroadcast, Op::kSendRecv};
  std::vector<DataType> types = {DataType::kFloat32, DataType::kBf16};
  size_t min_bytes = 0;
  size_t max_bytes = size_t{1} << 30;
  size_t factor = 4;
  int iters = 5;
  int warmup = 2;
  int gap_us = 0;
  double timeout_s = 0;  // 0: wait as long as it takes
  bool check = true;
  bool odd_counts = true;  // false: --exact-sizes
  std::string csv;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "nccl_check: %s\n(nccl_check --help lists the options)\n", why);
  std::exit(2);
}

// Flags spell the CLI's vocabulary (cli/vocab.h): sizes take K/M/G, --timeout takes units, -n,--iters.
// A bad flag prints CLI11's message on stderr and exits 2; --help prints the options and exits 0.
Args parse(int argc, char** argv) {
  namespace vocab = megascale::cli::vocab;
  Args a;
  CLI::App app{"NCCL collectives through whatever net NCCL loads, every result checked", "nccl_check"};
  app.add_option("--rank", a.rank, "This process's rank")->required();
  app.add_option("--nranks", a.nranks, "Ranks in all (at most 51: larger sums are not exact in bf16)")
      ->required()
      ->check(CLI::Range(1, 51));
  app.add_option("--id-file", a.id_file, "Where rank 0 writes NCCL's unique id and the others read it")
      ->required();
  app.add_option("--gpu", a.gpu, "CUDA device (default: rank % visible GPUs)");
  std::vector<std::string> ops, types;
  app.add_option("--ops", ops, "Collectives, comma-separated (default: all)")
      ->delimiter(',')
      ->check(
          CLI::IsMember({"allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "sendrecv"}));
  app.add_option("--types", types, "Data types, comma-separated: float (fp32), bfloat16 (bf16)")
      ->delimiter(',')
      ->check(CLI::IsMember({"float", "fp32", "bfloat16", "bf16"}));
  uint64_t min_bytes = a.min_bytes, max_bytes = a.max_bytes, iters = static_cast<uint64_t>(a.iters);
  vocab::size(&app, "--min-bytes", min_bytes, "Smallest size (64K, 1M)", true)->capture_default_str();
  vocab::size(&app, "--max-bytes", max_bytes, "Largest size (64K, 1G)", true)->capture_default_str();
  app.add_option("--factor", a.factor, "Size step, x per row")
      ->capture_default_str()
      ->check(CLI::Range(2, 1 << 20));
  vocab::iterations(&app, iters, "Timed iterations per row")->capture_default_str();
  app.add_option("--warmup", a.warmup, "Untimed iterations per row")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--csv", a.csv, "Also write the rows to FILE (rank 0)")->type_name("FILE");
  app.add_option("--gap-us", a.gap_us, "Idle stream time before each timed iteration, us")
      ->capture_default_str()
      ->check(CLI::Range(0, 10'000'000));
  vocab::timeout(&app, a.timeout_s, "Give up when one wait lasts this long, exit 4 (0: never)")
      ->capture_default_str();
  app.add_flag(
      "--no-check", [&a](int64_t) { a.check = false; }, "Skip checking the results");
  app.add_flag(
      "--exact-sizes", [&a](int64_t) { a.odd_counts = false; },
      "Element counts from the sizes as nccl-tests does (not odd)");
  vocab::renamed(&app, "--timeout-s", "--timeout");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e) == 0 ? 0 : 2);
  }
  a.min_bytes = min_bytes;
  a.max_bytes = max_bytes;
  a.iters = static_cast<int>(std::min<uint64_t>(iters, 1'000'000'000));
  if (!ops.empty()) {
    a.ops.clear();
    const std::vector<std::pair<std::string, Op>> names = {
        {"allreduce", Op::kAllReduce}, {"allgather", Op::kAllGather}, {"reducescatter", Op::kReduceScatter},
        {"alltoall", Op::kAlltoAll},   {"broadcast", Op::kBroadcast}, {"sendrecv", Op::kSendRecv}};
    for (const std::string& o : ops)
      for (const auto& [name, op] : names)
        if (o == name) a.ops.push_back(op);
  }
  if (!types.empty()) {
    a.types.clear();
    for (const std::string& t : types)
      a.types.push_back(t == "float" || t == "fp32" ? DataType::kFloat32 : DataType::kBf16);
  }
  if (a.rank < 0 || a.rank >= a.nranks) usage("need --rank in 0..nranks-1");
  if (a.timeout_s > 86400) usage("need --timeout of at most 86400 s (0: no limit)");
  return a;
}

// Rank 0 publishes the unique id (written to a temporary name, then renamed: readers never see half).
ncclUniqueId exchange_id(const Args& a) {
  ncclUniqueId id;
  if (a.rank == 0) {
    NCCL_CHECK(ncclGetUniqueId(&id));
    const std::string tmp = a.id_file + ".tmp." + std::to_string(::getpid());
    {
      std::ofstream out(tmp, std::ios::binary);
      out.write(id.internal, sizeof id.internal);
    }
    if (std::rename(tmp.c_str(), a.id_file.c_str()) != 0) usage("cannot write the id file");
    return id;
  }
  for (int tries = 0; tries < 1200; ++tries) {
    std::ifstream in(a.id_file, std::ios::binary);
    if (in.read(id.internal, sizeof id.internal)) return id;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  usage("rank 0 wrote no id file within 60 s");
}

// What the main thread is doing, and since when: the watchdog's view of it (Watchdog, beat()).
std::atomic<const char*> g_doing{"starting"};
std::atomic<int64_t> g_since_ns{0};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The main thread is about to do `what` (a call that may block) or is still waiting, actively, in it.
void beat(const char* what) {
  g_doing.store(what);
  g_since_ns.store(now_ns());
}

// Every thread's stack on stderr, under a line saying why.
void report_hang(int rank, const char* why, double seconds) {
  std::fprintf(stderr, "nccl_check: rank %d: %s %.1f s (--timeout) while %s; every thread's stack follows\n",
               rank, why, seconds, g_doing.load());
  std::fflush(stderr);
  write_thread_stacks(STDERR_FILENO);
}

// Exits the process with status 4 when the main thread has spent `timeout_s` inside one call (its last
// beat() that long ago), after report_hang: a thread blocked in the CUDA driver or in NCCL cannot time
// itself out. Nothing is aborted: ncclCommAbort could wait on the very thread that is stuck.
class Watchdog {
 public:
  Watchdog(int rank, double timeout_s) : rank_(rank), timeout_ns_(static_cast<int64_t>(timeout_s * 1e9)) {
    if (timeout_ns_ > 0) thread_ = std::thread([this] { watch(); });
  }
  ~Watchdog() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  void watch() {
    while (!stop_.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const int64_t stuck = now_ns() - g_since_ns.load();
      if (stuck < timeout_ns_) continue;
      report_hang(rank_, "no return from the main thread's call in", static_cast<double>(stuck) / 1e9);
      std::fflush(stdout);
      std::_Exit(4);
    }
  }
  int rank_;
  int64_t timeout_ns_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Waits for STREAM like cudaStreamSynchronize, but gives up when NCCL reports an asynchronous error on
// COMM (exit 3) or when a.timeout_s passes (exit 4), aborting the communicator first so that no NCCL
// thread is left spinning on a dead peer.
void wait_for(cudaStream_t stream, ncclComm_t comm, const Args& a) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    beat("waiting for the stream");
    const cudaError_t e = cudaStreamQuery(stream);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) {
      std::fprintf(stderr, "nccl_check: rank %d: the stream failed: %s\n", a.rank, cudaGetErrorString(e));
      std::exit(2);
    }
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ncclResult_t async = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(comm, &async));
    if (async != ncclSuccess && async != ncclInProgress) {
      std::fprintf(
          stderr,
          "nccl_check: rank %d: NCCL reported an asynchronous error after %.3f s of waiting: %s (%s); "
          "aborting the communicator\n",
          a.rank, waited, ncclGetErrorString(async), ncclGetLastError(comm));
      ncclCommAbort(comm);
      std::exit(3);
    }
    if (a.timeout_s > 0 && waited >= a.timeout_s) {
      report_hang(a.rank, "no completion and no error in", waited);
      std::fprintf(stderr, "nccl_check: rank %d: aborting the communicator\n", a.rank);
      ncclCommAbort(comm);
      std::exit(4);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

ncclDataType_t nccl_type(DataType t) {
  return t == DataType::kFloat32 ? ncclFloat32 : ncclBfloat16;
}

void launch(Op op, const Shape& s, DataType t, const char* send, char* recv, int rank, int n, ncclComm_t comm,
            cudaStream_t stream) {
  const ncclDataType_t dt = nccl_type(t);
  const size_t chunk = s.count * element_bytes(t);
  switch (op) {
    case Op::kAllReduce:
      NCCL_CHECK(ncclAllReduce(send, recv, s.count, dt, ncclSum, comm, stream));
      break;
    case Op::kAllGather:
      NCCL_CHECK(ncclAllGather(send, recv, s.count, dt, comm, stream));
      break;
    case Op::kReduceScatter:
      NCCL_CHECK(ncclReduceScatter(send, recv, s.count, dt, ncclSum, comm, stream));
      break;
    case Op::kBroadcast:
      NCCL_CHECK(ncclBroadcast(send, recv, s.count, dt, 0, comm, stream));
      break;
    case Op::kAlltoAll:
      NCCL_CHECK(ncclGroupStart());
      for (int p = 0; p < n; ++p) {
        NCCL_CHECK(ncclSend(send + static_cast<size_t>(p) * chunk, s.count, dt, p, comm, stream));
        NCCL_CHECK(ncclRecv(recv + static_cast<size_t>(p) * chunk, s.count, dt, p, comm, stream));
      }
      NCCL_CHECK(ncclGroupEnd());
      break;
    case Op::kSendRecv:
      NCCL_CHECK(ncclGroupStart());
      NCCL_CHECK(ncclSend(send, s.count, dt, (rank + 1) % n, comm, stream));
      NCCL_CHECK(ncclRecv(recv, s.count, dt, (rank - 1 + n) % n, comm, stream));
      NCCL_CHECK(ncclGroupEnd());
      break;
  }
}

std::vector<size_t> sizes_of(const Args& a) {
  std::vector<size_t> out;
  if (a.min_bytes == 0) out.push_back(0);
  for (size_t s = 8; s < a.max_bytes; s *= a.factor) {
    if (s >= a.min_bytes) out.push_back(s);
  }
  if (a.max_bytes > 0) out.push_back(a.max_bytes);
  return out;
}

int run(const Args& a) {
  int ngpus = 0;
  CUDA_CHECK(cudaGetDeviceCount(&ngpus));
  const int gpu = a.gpu >= 0 ? a.gpu : a.rank % ngpus;
  CUDA_CHECK(cudaSetDevice(gpu));
  const ncclUniqueId id = exchange_id(a);
  ncclComm_t comm;
  beat("in ncclCommInitRank");
  const Watchdog watchdog(a.rank, a.timeout_s);
  NCCL_CHECK(ncclCommInitRank(&comm, a.nranks, id, a.rank));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const int n = a.nranks;
  const size_t cap = a.max_bytes + 4096 + static_cast<size_t>(n) * 16;
  char* d_send = nullptr;
  char* d_recv = nullptr;
  CUDA_CHECK(cudaMalloc(&d_send, cap));
  CUDA_CHECK(cudaMalloc(&d_recv, cap));
  int64_t* d_wrong = nullptr;
  double* d_time = nullptr;
  CUDA_CHECK(cudaMalloc(&d_wrong, sizeof *d_wrong));
  CUDA_CHECK(cudaMalloc(&d_time, sizeof *d_time));
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));

  std::FILE* csv = nullptr;
  if (a.rank == 0) {
    int version = 0;
    NCCL_CHECK(ncclGetVersion(&version));
    const char* net = std::getenv("NCCL_NET");
    const char* plugin = std::getenv("NCCL_NET_PLUGIN");
    std::printf("# nccl_check: %d ranks, NCCL %d, NCCL_NET=%s NCCL_NET_PLUGIN=%s, %d iters (+%d warmup)%s\n",
                n, version, net ? net : "(unset)", plugin ? plugin : "(unset)", a.iters, a.warmup,
                a.check ? ", checked" : "");
    if (!a.csv.empty()) {
      csv = std::fopen(a.csv.c_str(), "w");
      if (csv) std::fprintf(csv, "op,type,size_bytes,count,time_us,algbw_gbps,busbw_gbps,wrong\n");
    }
  }
  int64_t total_wrong = 0;
  double busbw_sum = 0;
  int busbw_rows = 0;
  std::vector<uint8_t> out;
  for (Op op : a.ops) {
    if (a.rank == 0) {
      std::printf("#\n# %s\n#%12s %12s %9s %7s %5s %10s %8s %8s %7s\n", to_string(op), "size", "count",
                  "type", "redop", "root", "time", "algbw", "busbw", "#wrong");
      std::printf("#%12s %12s %9s %7s %5s %10s %8s %8s %7s\n", "(B)", "(elements)", "", "", "", "(us)",
                  "(GB/s)", "(GB/s)", "");
      std::fflush(stdout);
    }
    for (DataType t : a.types) {
      for (size_t bytes : sizes_of(a)) {
        const Shape s = shape_for(op, t, bytes, n, a.odd_counts);
        const std::vector<uint8_t> in = make_input(s, t, a.rank);
        beat("copying a row's input to the GPU (cudaMemcpy)");
        CUDA_CHECK(cudaMemcpy(d_send, in.data(), in.size(), cudaMemcpyHostToDevice));
        // Stale or untouched output shows as NaN bytes.
        CUDA_CHECK(cudaMemset(d_recv, 0xFF, s.recv_elems * element_bytes(t)));
        beat("launching the warm-up collectives");
        for (int w = 0; w < a.warmup; ++w) launch(op, s, t, d_send, d_recv, a.rank, n, comm, stream);
        wait_for(stream, comm, a);
        float ms = 0;
        if (a.gap_us == 0) {
          beat("launching the timed collectives");
          CUDA_CHECK(cudaEventRecord(start, stream));
          for (int i = 0; i < a.iters; ++i) launch(op, s, t, d_send, d_recv, a.rank, n, comm, stream);
          CUDA_CHECK(cudaEventRecord(stop, stream));
          wait_for(stream, comm, a);
          CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
        } else {
          for (int i = 0; i < a.iters; ++i) {
            std::this_thread::sleep_for(std::chrono::microseconds(a.gap_us));
            beat("launching a timed collective");
            CUDA_CHECK(cudaEventRecord(start, stream));
            launch(op, s, t, d_send, d_recv, a.rank, n, comm, stream);
            CUDA_CHECK(cudaEventRecord(stop, stream));
            wait_for(stream, comm, a);
            float one = 0;
            CUDA_CHECK(cudaEventElapsedTime(&one, start, stop));
            ms += one;
          }
        }
        int64_t wrong = 0;
        if (a.check) {
          out.resize(s.recv_elems * element_bytes(t));
          beat("copying a row's result to the host (cudaMemcpy)");
          CUDA_CHECK(cudaMemcpy(out.data(), d_recv, out.size(), cudaMemcpyDeviceToHost));
          wrong = static_cast<int64_t>(count_wrong(op, s, t, a.rank, n, out.data()));
        }
        // The slowest rank's time and the sum of wrong elements over ranks.
        double time_us = static_cast<double>(ms) * 1e3 / a.iters;
        beat("summing the ranks' wrong elements and times (8-byte all-reduces, pageable copies)");
        CUDA_CHECK(cudaMemcpy(d_wrong, &wrong, sizeof wrong, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(d_time, &time_us, sizeof time_us, cudaMemcpyHostToDevice));
        NCCL_CHECK(ncclGroupStart());
        NCCL_CHECK(ncclAllReduce(d_wrong, d_wrong, 1, ncclInt64, ncclSum, comm, stream));
        NCCL_CHECK(ncclAllReduce(d_time, d_time, 1, ncclFloat64, ncclMax, comm, stream));
        NCCL_CHECK(ncclGroupEnd());
        CUDA_CHECK(cudaMemcpyAsync(&wrong, d_wrong, sizeof wrong, cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaMemcpyAsync(&time_us, d_time, sizeof time_us, cudaMemcpyDeviceToHost, stream));
        wait_for(stream, comm, a);
        total_wrong += wrong;
        const double algbw =
            time_us > 0 ? static_cast<double>(s.printed_bytes) / (time_us * 1e3) : 0;  // GB/s
        const double busbw = algbw * busbw_factor(op, n);
        if (a.rank == 0) {
          const bool rooted = op == Op::kBroadcast;
          const bool reduces = op == Op::kAllReduce || op == Op::kReduceScatter;
          std::printf(" %12zu %12zu %9s %7s %5s %10.1f %8.3f %8.3f %7lld\n", s.printed_bytes, s.count,
                      to_string(t), reduces ? "sum" : "none", rooted ? "0" : "-1", time_us, algbw, busbw,
                      static_cast<long long>(wrong));
          std::fflush(stdout);
          if (csv) {
            std::fprintf(csv, "%s,%s,%zu,%zu,%.3f,%.4f,%.4f,%lld\n", to_string(op), to_string(t),
                         s.printed_bytes, s.count, time_us, algbw, busbw, static_cast<long long>(wrong));
          }
        }
        if (s.printed_bytes > 0) {
          busbw_sum += busbw;
          ++busbw_rows;
        }
      }
    }
  }
  if (a.rank == 0) {
    std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(total_wrong),
                total_wrong ? "FAILED" : "OK");
    std::printf("# Avg bus bandwidth    : %.3f GB/s\n", busbw_rows ? busbw_sum / busbw_rows : 0.0);
    if (csv) std::fclose(csv);
  }
  CUDA_CHECK(cudaFree(d_send));
  CUDA_CHECK(cudaFree(d_recv));
  CUDA_CHECK(cudaFree(d_wrong));
  CUDA_CHECK(cudaFree(d_time));
  beat("in ncclCommDestroy");
  NCCL_CHECK(ncclCommDestroy(comm));
  return total_wrong == 0 ? 0 : 1;
}

}  // namespace
}  // namespace megascale::gpucheck

int main(int argc, char** argv) {
  return megascale::gpucheck::run(megascale::gpucheck::parse(argc, argv));
}
