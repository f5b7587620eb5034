// Shared helpers of the conformance cases: deadlines, data patterns, connection pairs that close
// themselves, and a streamer that keeps N messages in flight the way NCCL's proxy does.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "megascale/common/result.h"
#include "megascale/nccl/conformance.h"
#include "net.h"

namespace megascale::nccl::conformance {

// Returns the Status of `expr` from the enclosing function if it is an error.
#define MS_TRY(expr)                        \
  do {                                      \
    if (Status s_ = (expr); !s_) return s_; \
  } while (0)
// Fails the enclosing case with a message when a plugin call does not return ncclSuccess.
#define MS_CALL(expr)                                                                                   \
  do {                                                                                                  \
    const NetResult r_ = (expr);                                                                        \
    if (r_ != abi::kNetSuccess) return make_error(std::string(#expr) + " returned " + result_name(r_)); \
  } while (0)
#define MS_REQUIRE(cond, message)            \
  do {                                       \
    if (!(cond)) return make_error(message); \
  } while (0)

using Clock = std::chrono::steady_clock;

// The factor every case's deadline is multiplied by (Options::time_scale resolved: a sanitizer build
// is several times slower, and its deadlines are that much longer). Set once, before a case runs.
void set_time_scale(double scale);
double time_scale();
// `scale` stretched for a host busier than its CPUs: times the load average per CPU, kept within 1..4
// (a CI runner beside other jobs: every thread, the plugin's included, waits that much longer for a CPU).
double scale_for_load(double scale, double load_average, long cpus);

// A deadline `seconds` from now, times time_scale() unless `scaled` is false (the harness's own
// --timeout is the user's and is kept as given).
class Deadline {
 public:
  explicit Deadline(double seconds, bool scaled = true)
      : seconds_(scaled ? seconds * time_scale() : seconds),
        end_(Clock::now() +
             std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds_))) {}
  bool passed() const { return Clock::now() >= end_; }
  double seconds() const { return seconds_; }

 private:
  double seconds_;
  Clock::time_point end_;
};

double seconds_since(Clock::time_point t);

// Everything a case needs (in the case's own process: see isolate.h).
struct Env {
  std::shared_ptr<Net> owner;
  Net& net;
  Options options;
  int dev = 0;
  DeviceProps props;
  std::string detail;                     // what a passing case measured, for the report (text)
  std::vector<Measurement> measurements;  // the same as numbers, units in their names
};

// Records one number the case measured (see Measurement).
inline void measure(Env& env, const std::string& name, double value) {
  env.measurements.push_back({name, value});
}

// Tells the harness what the case now waits for ("connect/accept", "stream of 8 x 4096 B: ..."), shown
// in its progress reports. Cheap; a no-op outside a case's process.
void note_stage(const std::string& stage);

// Deterministic contents of message `seed`: every 8-byte word differs and depends on its offset, so
// a misplaced, truncated or corrupted segment shows.
void fill_pattern(uint8_t* buf, size_t size, uint64_t seed);
// First offset that differs from the pattern, or -1.
int64_t check_pattern(const uint8_t* buf, size_t size, uint64_t seed);
// The same, for a buffer the plugin may still be writing: a receive reported done early under NCCL's
// optional-completion hint, whose bytes the reader watches arrive as NCCL's LL kernels watch their flags.
// That read runs concurrently with the plugin's writes by design, so it is made byte by byte through
// volatile loads and left out of ThreadSanitizer's instrumentation; every other access to the buffer
// (and every other check) is instrumented as usual.
int64_t poll_pattern(const uint8_t* buf, size_t size, uint64_t seed);

// A context (per communicator with v11, v12) that finalizes itself.
class Context {
 public:
  explicit Context(Net& net) : net_(net) {}
  ~Context();
  Status init();
  void* get() const { return ctx_; }
  Status finalize();

 private:
  Net& net_;
  void* ctx_ = nullptr;
  bool live_ = false;
};

// A connected send/recv pair with one registered buffer region on each side; closes what is open.
class Pair {
 public:
  Pair(Net& net, void* ctx, int dev, int mem_type) : net_(net), ctx_(ctx), dev_(dev), mem_type_(mem_type) {}
  ~Pair();
  Pair(const Pair&) = delete;
  Pair& operator=(const Pair&) = delete;

  // listen, then connect and accept alternated on this thread until both return a comm.
  Status connect(const Deadline& deadline);
  // Allocates `bytes` of host memory on each side and registers it as Options::mem_type.
  Status register_buffers(size_t bytes);
  Status close();

  void* send_comm = nullptr;
  void* recv_comm = nullptr;
  void* listen_comm = nullptr;
  std::vector<uint8_t> send_buf;
  std::vector<uint8_t> recv_buf;
  void* send_mr = nullptr;
  void* recv_mr = nullptr;

 private:
  Net& net_;
  void* ctx_;
  int dev_;
  int mem_type_;
};

// The shape of most cases: a fresh context, a connected pair with `buffer_bytes` registered on each
// side, `body(pair)`, then the pair closed and the context finalized. The first error, the body's
// included, is returned; the destructors close whatever it left open.
template <class Body>
Status with_pair(Env& env, size_t buffer_bytes, Body&& body) {
  Context ctx(env.net);
  MS_TRY(ctx.init());
  Pair pair(env.net, ctx.get(), env.dev, env.options.mem_type);
  MS_TRY(pair.connect(Deadline(15)));
  MS_TRY(pair.register_buffers(buffer_bytes));
  MS_TRY(body(pair));
  MS_TRY(pair.close());
  return ctx.finalize();
}

// Streams `count` messages of `bytes` each through `pair` with `inflight` isends and irecvs posted at
// once (NCCL_STEPS = 8), rolling: a completed request is replaced by the next message. Every received
// message is checked byte for byte and by its reported size. recv_extra: receive buffers this much
// larger than the messages. Needs pair buffers of inflight * (bytes + recv_extra). With touch_data false
// the data is neither written nor checked (throughput: NCCL's proxy never touches it either), only sizes.
Status stream(Net& net, Pair& pair, size_t bytes, int inflight, int count, int tag, const Deadline& deadline,
              uint64_t seed, size_t recv_extra = 0, bool touch_data = true);

// isend on `pair` until the plugin takes it (NULL means retry later, and NCCL retries), within `deadline`.
Status isend_retrying(Net& net, Pair& pair, void* data, size_t size, int tag, const Deadline& deadline,
                      void** request);

// Tests `request` until done or the deadline; `sizes` as NCCL passes it (may be null). With `other` (a
// send still out, *other_done false), tests it too between looks, as NCCL's proxy keeps testing every
// request it has out: a plugin may move a send only when it is tested (MegaScale's GPU buffers wait
// there for their copies). *other_done says when it finished; it is not tested after that.
Status wait_request(Net& net, void* request, int* sizes, const Deadline& deadline, const char* what,
                    void* other = nullptr, bool* other_done = nullptr);

}  // namespace megascale::nccl::conformance
