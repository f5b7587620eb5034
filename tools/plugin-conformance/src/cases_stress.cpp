// Conformance cases: many comms on many threads, closes with requests outstanding, throughput.
#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "cases.h"

namespace megascale::nccl::conformance {

Status case_many_comms_threads(Env& env) {
  const int threads = std::max(1, env.options.threads);
  const int pairs = std::max(1, env.options.comms_per_thread);
  std::vector<Status> results(static_cast<size_t>(threads));
  std::atomic<int> ready{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      Status& out = results[static_cast<size_t>(t)];
      // Each thread is a communicator of its own (its own context with v11, v12), as in a process that runs
      // several NCCL communicators at once.
      Context ctx(env.net);
      if (!(out = ctx.init())) return;
      std::vector<std::unique_ptr<Pair>> ps;
      for (int p = 0; p < pairs; ++p) {
        ps.push_back(std::make_unique<Pair>(env.net, ctx.get(), env.dev, env.options.mem_type));
        if (!(out = ps.back()->connect(Deadline(30)))) return;
        if (!(out = ps.back()->register_buffers(8 * (64 << 10)))) return;
      }
      ready.fetch_add(1);
      while (ready.load() < threads) std::this_thread::yield();  // all threads transfer at once
      for (int round = 0; round < 4; ++round) {
        for (int p = 0; p < pairs; ++p) {
          const uint64_t seed = 100000 + static_cast<uint64_t>((t * pairs + p) * 16 + round);
          if (!(out = stream(env.net, *ps[static_cast<size_t>(p)], 64 << 10, 8, 16, t, Deadline(60), seed)))
            return;
        }
      }
      for (auto& p : ps) {
        if (!(out = p->close())) return;
      }
      out = ctx.finalize();
    });
  }
  for (auto& w : workers) w.join();
  for (int t = 0; t < threads; ++t) {
    if (!results[static_cast<size_t>(t)]) {
      return make_error("thread " + std::to_string(t) + ": " +
                        results[static_cast<size_t>(t)].error().message);
    }
  }
  env.detail = std::to_string(threads) + " threads x " + std::to_string(pairs) + " connection pairs";
  measure(env, "threads", threads);
  measure(env, "pairs_per_thread", pairs);
  return {};
}

Status case_close_with_requests(Env& env) {
  Context ctx(env.net);
  MS_TRY(ctx.init());
  constexpr size_t kMsg = 1 << 20;
  {
    // Receives that no send will ever match.
    Pair a(env.net, ctx.get(), env.dev, env.options.mem_type);
    MS_TRY(a.connect(Deadline(15)));
    MS_TRY(a.register_buffers(8 * kMsg));
    for (int i = 0; i < 8; ++i) {
      void* data = a.recv_buf.data() + kMsg * static_cast<size_t>(i);
      size_t size = kMsg;
      int tag = 1;
      void* mh = a.recv_mr;
      void* req = nullptr;
      MS_CALL(env.net.irecv(a.recv_comm, 1, &data, &size, &tag, &mh, &req));
    }
    // Sends that no receive will ever match (they wait for the receiver).
    Pair b(env.net, ctx.get(), env.dev, env.options.mem_type);
    MS_TRY(b.connect(Deadline(15)));
    MS_TRY(b.register_buffers(8 * kMsg));
    for (int i = 0; i < 8; ++i) {
      void* req = nullptr;
      MS_CALL(env.net.isend(b.send_comm, b.send_buf.data() + kMsg * static_cast<size_t>(i), kMsg, 1,
                            b.send_mr, &req));
    }
    // Both sides busy mid-transfer.
    Pair c(env.net, ctx.get(), env.dev, env.options.mem_type);
    MS_TRY(c.connect(Deadline(15)));
    MS_TRY(c.register_buffers(8 * kMsg));
    for (int i = 0; i < 8; ++i) {
      void* data = c.recv_buf.data() + kMsg * static_cast<size_t>(i);
      size_t size = kMsg;
      int tag = 2;
      void* mh = c.recv_mr;
      void* rreq = nullptr;
      void* sreq = nullptr;
      MS_CALL(env.net.irecv(c.recv_comm, 1, &data, &size, &tag, &mh, &rreq));
      MS_CALL(env.net.isend(c.send_comm, c.send_buf.data() + kMsg * static_cast<size_t>(i), kMsg, 2,
                            c.send_mr, &sreq));
    }
    // Close everything with those requests outstanding, and time it: close must not wait for them.
    const auto t0 = Clock::now();
    MS_TRY(a.close());
    MS_TRY(b.close());
    MS_TRY(c.close());
    const double took = seconds_since(t0);
    MS_REQUIRE(took < 5.0, "closing comms with requests outstanding took " + std::to_string(took) + " s");
    env.detail = "3 pairs with 8 requests each closed in " + std::to_string(took * 1e3) + " ms";
    measure(env, "close_ms", took * 1e3);
  }
  // The plugin still works afterwards.
  Pair d(env.net, ctx.get(), env.dev, env.options.mem_type);
  MS_TRY(d.connect(Deadline(15)));
  MS_TRY(d.register_buffers(8 * 4096));
  MS_TRY(stream(env.net, d, 4096, 8, 32, 3, Deadline(30), 123));
  MS_TRY(d.close());
  return ctx.finalize();
}

Status case_latency(Env& env) {
  return with_pair(env, 4096, [&](Pair& pair) -> Status {
    // One 8-byte message at a time: post the receive, then the send, wait for both (NCCL's small steps).
    MS_TRY(stream(env.net, pair, 8, 1, 50, 0, Deadline(30), 3));  // warm up
    const int count = 1000;
    const auto t0 = Clock::now();
    MS_TRY(stream(env.net, pair, 8, 1, count, 0, Deadline(60), 4));
    const double us_per = seconds_since(t0) * 1e6 / count;
    char text[128];
    std::snprintf(text, sizeof text, "%.1f us per 8-byte message, one at a time (%d messages)", us_per,
                  count);
    env.detail = text;
    measure(env, "latency_us", us_per);
    measure(env, "messages", count);
    measure(env, "message_bytes", 8);
    return {};
  });
}

namespace {

// One 1 MiB message at a time (an NCCL step at the default NCCL_BUFFSIZE) on each of `npairs` pairs of
// one context, all stepping at once; each timed from its own isend to its receive being done, the
// receives tested in turn as NCCL's proxy thread tests its connections. The sends' completions (their
// ACKs) are waited for afterwards, untimed, as NCCL goes on with its next step meanwhile. Data not
// touched (NCCL's proxy never touches it either).
Status time_steps(Env& env, size_t npairs, const char* what) {
  constexpr size_t kMsg = 1 << 20;
  Context ctx(env.net);
  MS_TRY(ctx.init());
  std::vector<std::unique_ptr<Pair>> pairs;
  for (size_t d = 0; d < npairs; ++d) {
    pairs.push_back(std::make_unique<Pair>(env.net, ctx.get(), env.dev, env.options.mem_type));
    MS_TRY(pairs.back()->connect(Deadline(15)));
    MS_TRY(pairs.back()->register_buffers(2 * kMsg));
  }
  std::vector<double> us;
  std::vector<void*> rreq(npairs), sreq(npairs);
  std::vector<Clock::time_point> t0(npairs);
  std::vector<double> took(npairs);
  const auto t_start = Clock::now();
  for (int i = 0; i < 2000 && (i < 60 || seconds_since(t_start) < 1.0); ++i) {
    const Deadline deadline(30);
    if (i % 16 == 0)
      note_stage("1 MiB steps on " + std::to_string(npairs) + " pair(s): " + std::to_string(i) + " done");
    const size_t half = kMsg * static_cast<size_t>(i % 2);
    for (size_t d = 0; d < npairs; ++d) {
      void* data = pairs[d]->recv_buf.data() + half;
      size_t size = kMsg;
      int tag = 7;
      void* mh = pairs[d]->recv_mr;
      rreq[d] = nullptr;
      MS_CALL(env.net.irecv(pairs[d]->recv_comm, 1, &data, &size, &tag, &mh, &rreq[d]));
      MS_REQUIRE(rreq[d] != nullptr, "irecv returned NULL with no request outstanding");
    }
    for (size_t d = 0; d < npairs; ++d) {
      t0[d] = Clock::now();
      took[d] = -1;
      MS_TRY(
          isend_retrying(env.net, *pairs[d], pairs[d]->send_buf.data() + half, kMsg, 7, deadline, &sreq[d]));
    }
    // The receives are timed; the sends are tested between looks, as NCCL's proxy tests every request
    // it has out.
    std::vector<bool> sent(npairs, false);
    for (size_t left = npairs; left > 0;) {
      for (size_t d = 0; d < npairs; ++d) {
        if (!sent[d]) {
          int done = 0;
          const NetResult r = env.net.test(sreq[d], &done, nullptr);
          MS_REQUIRE(r == abi::kNetSuccess, std::string("step send: test returned ") + result_name(r));
          sent[d] = done != 0;
        }
        if (took[d] >= 0) continue;
        int done = 0, got = -1;
        const NetResult r = env.net.test(rreq[d], &done, &got);
        MS_REQUIRE(r == abi::kNetSuccess, std::string("step receive: test returned ") + result_name(r));
        if (!done) continue;
        took[d] = seconds_since(t0[d]) * 1e6;
        --left;
        MS_REQUIRE(got == static_cast<int>(kMsg),
                   "a 1 MiB receive reported " + std::to_string(got) + " bytes");
      }
      MS_REQUIRE(left == 0 || !deadline.passed(), "step receive: not done within the deadline");
    }
    for (size_t d = 0; d < npairs; ++d) {
      if (!sent[d]) MS_TRY(wait_request(env.net, sreq[d], nullptr, deadline, "step send"));
    }
    if (i >= 10) us.insert(us.end(), took.begin(), took.end());  // after a warm-up
  }
  for (auto& p : pairs) MS_TRY(p->close());
  MS_TRY(ctx.finalize());
  std::sort(us.begin(), us.end());
  char text[200];
  std::snprintf(
      text, sizeof text,
      "%.1f us median, %.1f us p90 per 1 MiB message from isend to its receive done%s (%zu messages)",
      us[us.size() / 2], us[us.size() * 9 / 10], what, us.size());
  env.detail = text;
  measure(env, "step_median_us", us[us.size() / 2]);
  measure(env, "step_p90_us", us[us.size() * 9 / 10]);
  measure(env, "messages", static_cast<double>(us.size()));
  measure(env, "message_bytes", kMsg);
  return {};
}

}  // namespace

Status case_step_time(Env& env) {
  return time_steps(env, 1, "");
}

Status case_steps_both_ways(Env& env) {
  // step_time with a second pair in the other direction: what a ring's rank asks of its wires with
  // NCCL's default buffers, one 1 MiB message in flight each way. Both pairs' ends are in this process, so
  // its wires carry a send and a receive each, as a rank's do.
  return time_steps(env, 2, ", both ways at once");
}

Status case_throughput(Env& env) {
  constexpr size_t kMsg = 4 << 20;
  return with_pair(env, abi::kNcclSteps * kMsg, [&](Pair& pair) -> Status {
    MS_TRY(stream(env.net, pair, kMsg, abi::kNcclSteps, 8, 0, Deadline(30), 1));  // warm up
    // Batches of 32 messages for about a second (fewer on a slow machine or under sanitizers).
    int count = 0;
    const auto t0 = Clock::now();
    while (count < 256 && (count == 0 || seconds_since(t0) < 1.0)) {
      MS_TRY(stream(env.net, pair, kMsg, abi::kNcclSteps, 32, 0, Deadline(60), 2, 0, /*touch_data=*/false));
      count += 32;
    }
    const double s = seconds_since(t0);
    char text[128];
    std::snprintf(text, sizeof text, "%.2f GB/s (%d x 4 MiB, 8 in flight, one connection)",
                  static_cast<double>(kMsg) * count / s / 1e9, count);
    env.detail = text;
    measure(env, "bandwidth_GBps", static_cast<double>(kMsg) * count / s / 1e9);
    measure(env, "bandwidth_gbps", static_cast<double>(kMsg) * count * 8 / s / 1e9);
    measure(env, "messages", count);
    measure(env, "message_bytes", kMsg);
    measure(env, "inflight", abi::kNcclSteps);
    return {};
  });
}

}  // namespace megascale::nccl::conformance
