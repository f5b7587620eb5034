// Helpers shared by the conformance cases (see harness.h).
#include "harness.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

namespace megascale::nccl::conformance {
namespace {

uint64_t pattern_word(uint64_t seed, uint64_t word) {
  uint64_t x = (word + 1) * 0x9E3779B97F4A7C15ULL ^ (seed * 0xD1B54A32D192ED03ULL + 0x632BE59BD9B4E019ULL);
  x ^= x >> 31;
  return x;
}

// NCCL's contract: setup calls return at once (a NULL comm means "call again"). A call that waits for
// its peer blocks for good or until the plugin's own timeout, far beyond this; the bound leaves room
// for a loaded host, where a thread may wait seconds for a CPU (times time_scale()).
constexpr double kMaxBlockingSeconds = 5.0;

// Resolved from Options::time_scale in each case's process.
double g_time_scale = 1.0;

}  // namespace

void set_time_scale(double scale) {
  if (scale <= 0) {
#if defined(__SANITIZE_THREAD__)
    scale = 5;  // ThreadSanitizer: user code 5-15x slower
#elif defined(__SANITIZE_ADDRESS__)
    scale = 3;  // AddressSanitizer: about 2-3x
#else
    scale = 1;
#endif
    double load[1] = {0};
    if (::getloadavg(load, 1) == 1) scale = scale_for_load(scale, load[0], ::sysconf(_SC_NPROCESSORS_ONLN));
  }
  g_time_scale = scale;
}

double scale_for_load(double scale, double load_average, long cpus) {
  if (cpus <= 0 || !(load_average >= 0)) return scale;
  return scale * std::clamp(load_average / static_cast<double>(cpus), 1.0, 4.0);
}

double time_scale() {
  return g_time_scale;
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void fill_pattern(uint8_t* buf, size_t size, uint64_t seed) {
  for (size_t w = 0; w * 8 < size; ++w) {
    const uint64_t v = pattern_word(seed, w);
    std::memcpy(buf + w * 8, &v, std::min<size_t>(8, size - w * 8));
  }
}

int64_t check_pattern(const uint8_t* buf, size_t size, uint64_t seed) {
  for (size_t w = 0; w * 8 < size; ++w) {
    const uint64_t v = pattern_word(seed, w);
    if (std::memcmp(buf + w * 8, &v, std::min<size_t>(8, size - w * 8)) != 0)
      return static_cast<int64_t>(w * 8);
  }
  return -1;
}

__attribute__((no_sanitize("thread"))) int64_t poll_pattern(const uint8_t* buf, size_t size, uint64_t seed) {
  const volatile uint8_t* bytes = buf;
  for (size_t w = 0; w * 8 < size; ++w) {
    const uint64_t v = pattern_word(seed, w);
    const size_t n = std::min<size_t>(8, size - w * 8);
    for (size_t i = 0; i < n; ++i) {
      if (bytes[w * 8 + i] != static_cast<uint8_t>(v >> (8 * i))) return static_cast<int64_t>(w * 8);
    }
  }
  return -1;
}

Context::~Context() {
  (void)finalize();
}

Status Context::init() {
  MS_CALL(net_.init(&ctx_));
  MS_REQUIRE(ctx_ != nullptr || net_.version() < 11, "init returned ncclSuccess but no context");
  live_ = true;
  return {};
}

Status Context::finalize() {
  if (!live_) return {};
  live_ = false;
  MS_CALL(net_.finalize(ctx_));
  return {};
}

Pair::~Pair() {
  (void)close();
}

Status Pair::connect(const Deadline& deadline) {
  uint8_t handle[2 * abi::kNetHandleMaxBytes];
  std::memset(handle, 0xA5, sizeof handle);
  auto t0 = Clock::now();
  MS_CALL(net_.listen(ctx_, dev_, handle, &listen_comm));
  MS_REQUIRE(seconds_since(t0) < kMaxBlockingSeconds * time_scale(),
             "listen blocked for " + std::to_string(seconds_since(t0)) + " s");
  MS_REQUIRE(listen_comm != nullptr, "listen returned ncclSuccess with a NULL listen comm");
  for (size_t i = abi::kNetHandleMaxBytes; i < sizeof handle; ++i) {
    MS_REQUIRE(handle[i] == 0xA5, "listen wrote past the 128-byte handle (byte " + std::to_string(i) + ")");
  }
  // NCCL ships exactly NCCL_NET_HANDLE_MAXSIZE bytes to the peer and calls connect with that copy.
  uint8_t remote[abi::kNetHandleMaxBytes];
  std::memcpy(remote, handle, sizeof remote);
  note_stage("connect and accept until both comms are ready");
  int rounds = 0;
  while (send_comm == nullptr || recv_comm == nullptr) {
    if (deadline.passed()) {
      return make_error("connect/accept alternated on one thread did not complete in " +
                        std::to_string(deadline.seconds()) + " s (" + std::to_string(rounds) +
                        " rounds; send comm " + (send_comm ? "ready" : "NULL") + ", recv comm " +
                        (recv_comm ? "ready" : "NULL") + ")");
    }
    if (send_comm == nullptr) {
      t0 = Clock::now();
      MS_CALL(net_.connect(ctx_, dev_, remote, &send_comm));
      MS_REQUIRE(seconds_since(t0) < kMaxBlockingSeconds * time_scale(),
                 "connect blocked for " + std::to_string(seconds_since(t0)) +
                     " s (it must return NULL until ready)");
    }
    if (recv_comm == nullptr) {
      t0 = Clock::now();
      MS_CALL(net_.accept(listen_comm, &recv_comm));
      MS_REQUIRE(
          seconds_since(t0) < kMaxBlockingSeconds * time_scale(),
          "accept blocked for " + std::to_string(seconds_since(t0)) + " s (it must return NULL until ready)");
    }
    ++rounds;
  }
  return {};
}

Status Pair::register_buffers(size_t bytes) {
  send_buf.assign(std::max<size_t>(bytes, 8), 0);
  recv_buf.assign(std::max<size_t>(bytes, 8), 0);
  MS_CALL(net_.reg_mr(send_comm, send_buf.data(), send_buf.size(), mem_type_, &send_mr));
  MS_CALL(net_.reg_mr(recv_comm, recv_buf.data(), recv_buf.size(), mem_type_, &recv_mr));
  return {};
}

Status Pair::close() {
  Status first;
  auto note = [&](NetResult r, const char* what) {
    if (r != abi::kNetSuccess && first) first = make_error(std::string(what) + " returned " + result_name(r));
  };
  if (send_mr) note(net_.dereg_mr(send_comm, send_mr), "deregMr(send)");
  if (recv_mr) note(net_.dereg_mr(recv_comm, recv_mr), "deregMr(recv)");
  send_mr = recv_mr = nullptr;
  if (send_comm) note(net_.close_send(send_comm), "closeSend");
  if (recv_comm) note(net_.close_recv(recv_comm), "closeRecv");
  if (listen_comm) note(net_.close_listen(listen_comm), "closeListen");
  send_comm = recv_comm = listen_comm = nullptr;
  return first;
}

Status isend_retrying(Net& net, Pair& pair, void* data, size_t size, int tag, const Deadline& deadline,
                      void** request) {
  *request = nullptr;
  while (*request == nullptr) {
    MS_CALL(net.isend(pair.send_comm, data, size, tag, pair.send_mr, request));
    MS_REQUIRE(!deadline.passed(), "isend kept returning NULL");
  }
  return {};
}

Status wait_request(Net& net, void* request, int* sizes, const Deadline& deadline, const char* what,
                    void* other, bool* other_done) {
  MS_REQUIRE(request != nullptr, std::string(what) + ": no request to wait for");
  for (;;) {
    int done = 0;
    const NetResult r = net.test(request, &done, sizes);
    if (r != abi::kNetSuccess) return make_error(std::string(what) + ": test returned " + result_name(r));
    if (done) return {};
    if (other != nullptr && !*other_done) {
      int sent = 0;
      const NetResult o = net.test(other, &sent, nullptr);
      if (o != abi::kNetSuccess)
        return make_error(std::string(what) + ": the send tested meanwhile returned " + result_name(o));
      *other_done = sent != 0;
    }
    if (deadline.passed()) return make_error(std::string(what) + ": not done within the deadline");
  }
}

Status stream(Net& net, Pair& pair, size_t bytes, int inflight, int count, int tag, const Deadline& deadline,
              uint64_t seed, size_t recv_extra, bool touch_data) {
  const size_t rstride = bytes + recv_extra;
  MS_REQUIRE(pair.send_buf.size() >= bytes * static_cast<size_t>(inflight) &&
                 pair.recv_buf.size() >= rstride * static_cast<size_t>(inflight),
             "stream: pair buffers too small");
  struct Slot {
    void* req = nullptr;
    int msg = -1;
  };
  std::vector<Slot> sends(static_cast<size_t>(inflight)), recvs(static_cast<size_t>(inflight));
  int next_send = 0, next_recv = 0, sends_done = 0, recvs_done = 0;
  auto progress_text = [&] {
    return std::to_string(sends_done) + "/" + std::to_string(count) + " sends and " +
           std::to_string(recvs_done) + "/" + std::to_string(count) + " receives done";
  };
  const std::string what = "stream of " + std::to_string(count) + " x " + std::to_string(bytes) + " B, " +
                           std::to_string(inflight) + " in flight";
  note_stage(what);
  auto noted = Clock::now();
  while (sends_done < count || recvs_done < count) {
    if (seconds_since(noted) >= 0.5) {
      note_stage(what + ": " + progress_text());
      noted = Clock::now();
    }
    if (deadline.passed()) {
      return make_error("stream of " + std::to_string(count) + " x " + std::to_string(bytes) +
                        " B timed out: " + progress_text());
    }
    // Post in order into the ring of slots, as NCCL posts steps.
    while (next_recv < count) {
      Slot& s = recvs[static_cast<size_t>(next_recv % inflight)];
      if (s.req != nullptr) break;
      void* data = pair.recv_buf.data() + rstride * static_cast<size_t>(next_recv % inflight);
      size_t size = rstride;
      int t = tag;
      void* mh = pair.recv_mr;
      void* req = nullptr;
      MS_CALL(net.irecv(pair.recv_comm, 1, &data, &size, &t, &mh, &req));
      if (req == nullptr) break;  // retry later
      s.req = req;
      s.msg = next_recv++;
    }
    while (next_send < count) {
      Slot& s = sends[static_cast<size_t>(next_send % inflight)];
      if (s.req != nullptr) break;
      uint8_t* data = pair.send_buf.data() + bytes * static_cast<size_t>(next_send % inflight);
      if (touch_data) fill_pattern(data, bytes, seed + static_cast<uint64_t>(next_send));
      void* req = nullptr;
      MS_CALL(net.isend(pair.send_comm, data, bytes, tag, pair.send_mr, &req));
      if (req == nullptr) break;
      s.req = req;
      s.msg = next_send++;
    }
    for (size_t i = 0; i < sends.size(); ++i) {
      Slot& s = sends[i];
      if (s.req == nullptr) continue;
      int done = 0, size = -1;
      const NetResult r = net.test(s.req, &done, &size);
      if (r != abi::kNetSuccess)
        return make_error("test(send " + std::to_string(s.msg) + ") returned " + result_name(r));
      if (!done) continue;
      MS_REQUIRE(size == static_cast<int>(bytes), "send " + std::to_string(s.msg) + " reported " +
                                                      std::to_string(size) + " bytes, sent " +
                                                      std::to_string(bytes));
      s.req = nullptr;
      ++sends_done;
    }
    for (size_t i = 0; i < recvs.size(); ++i) {
      Slot& s = recvs[i];
      if (s.req == nullptr) continue;
      int done = 0;
      int sizes[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
      const NetResult r = net.test(s.req, &done, sizes);
      if (r != abi::kNetSuccess)
        return make_error("test(recv " + std::to_string(s.msg) + ") returned " + result_name(r));
      if (!done) continue;
      MS_REQUIRE(sizes[0] == static_cast<int>(bytes), "receive " + std::to_string(s.msg) + " reported " +
                                                          std::to_string(sizes[0]) + " bytes, sent " +
                                                          std::to_string(bytes));
      const int64_t bad = touch_data ? check_pattern(pair.recv_buf.data() + rstride * i, bytes,
                                                     seed + static_cast<uint64_t>(s.msg))
                                     : -1;
      MS_REQUIRE(bad < 0, "receive " + std::to_string(s.msg) + ": wrong data at byte " + std::to_string(bad) +
                              " of " + std::to_string(bytes));
      s.req = nullptr;
      ++recvs_done;
    }
  }
  return {};
}

}  // namespace megascale::nccl::conformance
